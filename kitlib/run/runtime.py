"""Where replicas run: the runtime detector, the table of launch modes, and ``launch``.

``detect_runtime()`` looks at the machine without touching any device (:mod:`kitlib.run.hardware`)
and returns a :class:`Runtime`: a launch mode (a row of :data:`MODES`), how many replicas, and
why. ``launch(fn, job, rt)`` starts the replicas and calls ``fn(replica, job)`` in each, where
``replica`` is a :class:`kitlib.run.replica.Replica` (device, rank, world size, collectives, precision). Job
configs describe the job only; everything about where it runs comes from here.

:data:`MODES` maps each mode's name to its backend (:mod:`kitlib.run.backends`), built from three
parts: how its replicas start (a launcher), the device (an accelerator) and the collectives:

==================  ===========================================  ==================================  ===========
mode                replicas start                               rank and world size from            collectives
==================  ===========================================  ==================================  ===========
tpu                 ``torch_xla.launch``: one process per chip   ``torch_xla.runtime``               xla
tpu-pod             the same, on every host of a pod slice       ``torch_xla.runtime``               xla
cuda                one process per GPU                          host x replicas + index             nccl
cuda-torchrun       by torchrun: this process is one replica     torchrun's ``RANK``/``WORLD_SIZE``  nccl
cpu                 eager torch; one replica in this process,    host x replicas + index             gloo
                    or N processes with their share of cores
cpu-torchrun        by torchrun: this process is one replica     torchrun's ``RANK``/``WORLD_SIZE``  gloo
xla-cpu             ``torch_xla.launch`` on PJRT CPU: N devices  ``torch_xla.runtime``               xla
                    as threads of one process (TPU rehearsal)
xla-cpu-processes   N processes, one PJRT CPU device each        host x replicas + index             none
==================  ===========================================  ==================================  ===========

The ``accelerator`` a user names (:data:`ACCELERATORS`) picks the hardware; the torchrun and
TPU-pod rows are what :func:`detect_runtime` finds when torchrun started this process or the TPU
host belongs to a multi-host slice. With no accelerator the default is ``cpu`` (eager torch is faster
than XLA:CPU for these models); ``xla-cpu`` rehearses the TPU code path by name.

``launch`` owns what it starts (:func:`kitlib.run.backends.base.owning_replicas`). The start method is
``fork`` (a Kaggle notebook) or ``spawn`` (Colab, scripts: ``fn`` must be importable, which is why every
replica program lives in ``kitlib``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from .. import compat
from . import hardware
from .backends import accelerators, collectives, launchers
from .backends.base import Backend, ReplicaError, owning_replicas, patch_environment
from .backends.precision import Precision
from .backends.xla_threads import ThreadedXla

__all__ = ["MODES", "ACCELERATORS", "Runtime", "ReplicaError", "detect_runtime", "launch", "holds_global_rank0"]
START_METHODS = ("fork", "spawn")


MODES: dict[str, Backend] = {b.name: b for b in (
    Backend("tpu", launchers.XlaLaunch(), accelerators.Xla("TPU"), collectives.Xla,
            "torch_xla.launch, one process per TPU chip"),
    Backend("tpu-pod", launchers.XlaLaunch(started_by="tpu-pod"), accelerators.Xla("TPU"), collectives.Xla,
            "torch_xla.launch on every host of a TPU pod slice, one process per chip"),
    Backend("cuda", launchers.Processes(), accelerators.Cuda(), collectives.Nccl, "one process per GPU, nccl"),
    Backend("cuda-torchrun", launchers.Torchrun(), accelerators.Cuda(), collectives.Nccl,
            "one process per GPU, started by torchrun, nccl"),
    Backend("cpu", launchers.HereOrProcesses(), accelerators.Cpu(), collectives.TorchDistributed,
            "eager torch on the CPU, gloo"),
    Backend("cpu-torchrun", launchers.Torchrun(), accelerators.Cpu(), collectives.TorchDistributed,
            "eager torch on the CPU, started by torchrun, gloo"),
    Backend("xla-cpu", launchers.XlaLaunch(threads_share_process=True), accelerators.Xla("CPU"), ThreadedXla,
            "torch_xla on PJRT CPU, devices as threads of one process (a rehearsal of the TPU path)"),
    Backend("xla-cpu-processes", launchers.Processes(), accelerators.Xla("CPU", devices_per_process="one"),
            collectives.NoCollectives, "torch_xla on PJRT CPU, one process per device, no collectives"),
)}
# what a user may name (accelerator= / prefer=): the modes the kit starts itself
ACCELERATORS = ("auto", *[name for name, b in MODES.items() if b.started_by == "kit"])
CORES_PER_CPU_REPLICA = 4  # eager CPU default: one replica per 4 cores (at least 1), each with its share


@dataclass(frozen=True)
class Runtime:
    """Where the replicas of one job run (built by :func:`detect_runtime`).

    Attributes:
        mode: a key of :data:`MODES`.
        num_replicas: replicas on this host; 0 means "every TPU chip", counted by torch_xla at launch.
        reason: one line saying what was found.
        threads: CPU threads each replica uses (``torch.set_num_threads``).
        num_hosts, host: the hosts of a multi-host run and this host's index (0-based).
    """

    mode: str
    num_replicas: int
    reason: str
    threads: int = 1
    num_hosts: int = 1
    host: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown launch mode {self.mode!r}; one of {', '.join(MODES)}")

    @property
    def backend(self) -> Backend:
        """The :data:`MODES` row of this runtime: its backend."""
        return MODES[self.mode]

    @property
    def started_by(self) -> str:
        """``"kit"``, ``"torchrun"`` or ``"tpu-pod"``: the backend's (a column of the table, not a second axis)."""
        return self.backend.started_by

    @property
    def multi_host(self) -> bool:
        """True when every host runs the same program (torchrun, a TPU pod, or several hosts)."""
        return self.backend.multi_host(self)

    @property
    def world_size(self) -> int | None:
        """Replicas over all hosts, or None when torch_xla counts the TPU chips at launch."""
        return self.num_replicas * self.num_hosts if self.num_replicas else None

    def describe(self) -> str:
        """One line, e.g. ``runtime: cpu, 1 replica x 2 threads (eager torch on the CPU, gloo): ...``."""
        n = self.backend.describe_replicas(self)
        if self.num_hosts > 1:
            world = f"world {self.world_size}" if self.world_size else "world = every chip of every host"
            n = f"host {self.host + 1} of {self.num_hosts}, {n} on this host, {world}"
        return f"runtime: {self.mode}, {n} ({self.backend.summary}): {self.reason}"


def _torchrun_env() -> dict[str, int] | None:
    """torchrun's variables (torch.distributed.run docs), or None when not started by torchrun."""
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    if not all(k in os.environ for k in keys) or "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    env = {k: int(os.environ[k]) for k in keys}
    env["GROUP_RANK"] = int(os.environ.get("GROUP_RANK", env["RANK"] // max(1, env["LOCAL_WORLD_SIZE"])))
    return env


def detect_runtime(num_devices: int | None = None, prefer: str = "auto") -> Runtime:
    """Find where replicas can run, touching no device.

    Args:
        num_devices: replicas on this host; None means the default for what is found: every TPU
            chip, every GPU, or one eager CPU replica per :data:`CORES_PER_CPU_REPLICA` cores.
        prefer: ``"auto"``; or ``"tpu"``, ``"cuda"``, ``"cpu"`` (eager torch) to insist on one; or
            ``"xla-cpu"`` / ``"xla-cpu-processes"`` for torch_xla on PJRT CPU (see :data:`MODES`).

    Returns:
        A :class:`Runtime`.

    Raises:
        ValueError: unknown ``prefer``; ``num_devices < 1``; on a TPU, ``num_devices`` other than
            the chip count (``torch_xla.launch`` always runs every chip); with torchrun,
            ``num_devices`` other than torchrun's ``LOCAL_WORLD_SIZE``.
        RuntimeError: ``prefer`` names an accelerator that is not there, torch_xla is missing
            where it is needed, or more GPUs are asked for than exist.
    """
    compat.keep_accelerate_off_xla()
    if prefer not in ACCELERATORS:
        raise ValueError(f"accelerator/prefer must be one of {', '.join(ACCELERATORS)}, not {prefer!r}")
    if num_devices is not None and num_devices < 1:
        raise ValueError(f"num_devices must be >= 1 (or 0/None for every device), not {num_devices}")
    cores = hardware.cpu_cores()
    tr = _torchrun_env()

    tpu = hardware.tpu_evidence() if prefer in ("auto", "tpu") else None
    if tpu:
        return _tpu_runtime(tpu, num_devices)
    if prefer == "tpu":
        raise RuntimeError("accelerator='tpu' but no TPU was found (no PJRT_DEVICE=TPU, TPU_* variable or /dev/accel*)")

    if prefer in ("auto", "cuda"):
        gpus = hardware.cuda_device_count()
        if gpus:
            if tr:
                return _from_torchrun("cuda", tr, num_devices, 1, f"{gpus} CUDA device(s) on this host (NVML)")
            if num_devices and num_devices > gpus:
                raise RuntimeError(f"{num_devices} CUDA devices asked for, {gpus} present")
            return Runtime("cuda", num_devices or gpus, f"{gpus} CUDA device(s), counted through NVML (CUDA not initialised)")
        if prefer == "cuda":
            raise RuntimeError("accelerator='cuda' but torch sees no CUDA device")

    if prefer in ("auto", "cpu"):
        if tr:
            return _from_torchrun("cpu", tr, num_devices, max(1, cores // tr["LOCAL_WORLD_SIZE"]), "no accelerator")
        n = num_devices or max(1, cores // CORES_PER_CPU_REPLICA)
        return Runtime("cpu", n, f"no accelerator; {cores} CPU core(s)", threads=max(1, cores // n))

    if not compat.has_torch_xla():
        raise RuntimeError(f"accelerator={prefer!r} runs torch_xla on PJRT CPU: pip install torch_xla")
    n = num_devices or max(1, min(cores, 8))
    return Runtime(prefer, n, f"{n} PJRT CPU device(s) on {cores} core(s), by request", threads=max(1, cores // n))


def _tpu_runtime(tpu: str, num_devices: int | None) -> Runtime:
    """The TPU's runtime (``tpu``: the evidence one is there): every chip of this host, and the
    pod's host count and this host's index."""
    if not compat.has_torch_xla():
        raise RuntimeError(f"a TPU is present ({tpu}) but torch_xla is not installed: pip install torch_xla[tpu]")
    chips = hardware.tpu_chip_count()
    if num_devices is not None and num_devices != chips:
        raise ValueError(
            f"num_devices={num_devices}, but torch_xla.launch runs one replica on every TPU chip of this "
            f"host ({chips or 'count unknown'}); it cannot run a subset. Set num_devices=0 (every chip)."
        )
    hosts, host = hardware.tpu_hosts()
    return Runtime("tpu-pod" if hosts > 1 else "tpu", chips or 0, f"{tpu}; {chips or 'unknown number of'} TPU chip(s)",
                   num_hosts=hosts, host=host)


def _from_torchrun(mode: str, tr: dict[str, int], num_devices: int | None, threads: int, found: str) -> Runtime:
    local = tr["LOCAL_WORLD_SIZE"]
    if num_devices is not None and num_devices != local:
        raise ValueError(f"num_devices={num_devices}, but torchrun started {local} process(es) per host (--nproc-per-node)")
    hosts = max(1, tr["WORLD_SIZE"] // local)
    return Runtime(f"{mode}-torchrun", local, f"{found}; started by torchrun (rank {tr['RANK']} of {tr['WORLD_SIZE']})",
                   threads=threads, num_hosts=hosts, host=tr["GROUP_RANK"])


def holds_global_rank0(rt: Runtime) -> bool:
    """True in the process that runs (or, as the parent, started) the replica of global rank 0.

    The process that merges shards and reads results back after :func:`launch`: any process of a
    one-host run, torchrun's ``RANK=0`` worker, host 0 of a TPU pod (its chips hold ordinals
    ``0 .. n-1``).
    """
    return rt.backend.holds_global_rank0(rt)


def launch(fn: Callable, job, rt: Runtime, start_method: str = "fork", precision: str | Precision = "auto") -> None:
    """Run ``fn(replica, job)`` once per replica of ``rt`` and wait for all of them.

    Args:
        fn: the replica program (an ``_mp_fn``), called with a :class:`kitlib.run.replica.Replica` and
            ``job``. With ``spawn`` it must be importable from a module.
        job: the job config, or the plan made from it (picklable: training hands every replica its
            :class:`kitlib.training.plan.Plan`).
        rt: from :func:`detect_runtime`.
        start_method: ``"fork"`` or ``"spawn"`` (Python ``multiprocessing`` start methods).
        precision: the compute precision asked for (:data:`kitlib.run.backends.precision.PRECISIONS`),
            resolved here once; or a :class:`kitlib.run.backends.precision.Precision` resolved already, taken
            as it is. Every replica holds the result as ``replica.precision``.

    The backend's variables (:meth:`kitlib.run.backends.base.Backend.env`) are set for the launch and
    restored after. On any exception here, KeyboardInterrupt included, every replica process is
    terminated and joined before it leaves.

    Raises:
        ReplicaError: a replica raised; names its rank and the original exception, and carries its
            traceback (``.traceback``). The other replicas are stopped.
        ValueError: unknown start method or precision, or ``spawn`` with a function defined in ``__main__``.
        RuntimeError: torch_xla cannot start: the XLA runtime was already touched in this process,
            or TensorFlow was imported before torch_xla.
    """
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, not {start_method!r}")
    if start_method == "spawn" and getattr(fn, "__module__", None) == "__main__":
        raise ValueError(
            f"start_method='spawn' needs an importable function; {fn.__name__} is defined in __main__ "
            "(a notebook cell). Use a kitlib replica program or start_method='fork'."
        )
    backend = rt.backend
    resolved = precision if isinstance(precision, Precision) else backend.resolve_precision(precision)
    backend.check_parent(rt)
    with patch_environment(backend.env(rt)), owning_replicas():
        backend.launch(fn, job, rt, start_method, resolved)
