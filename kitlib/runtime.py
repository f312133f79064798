"""Where replicas run: the runtime detector, the table of launch modes, and ``launch``.

``detect_runtime()`` looks at the machine without touching any device (:mod:`kitlib.hardware`)
and returns a :class:`Runtime`: a launch mode (a row of :data:`MODES`), how many replicas, and
why. ``launch(fn, job, rt)`` starts the replicas and calls ``fn(replica, job)`` in each, where
``replica`` is a :class:`kitlib.replica.Replica` (device, rank, world size, collectives). Job
configs describe the job only; everything about where it runs comes from here.

==================  ==========================  ==================================  ===========
mode                replicas start as            rank and world size from            collectives
==================  ==========================  ==================================  ===========
tpu                 ``torch_xla.launch``: one    ``torch_xla.runtime``               xla
                    process per TPU chip
cuda                one process per GPU          the process index (or torchrun's    nccl
                    (``torch.multiprocessing``)  ``RANK``/``WORLD_SIZE``)
cpu                 eager torch; one replica     the process index (or torchrun's)   gloo
                    in this process, or N
                    processes with their share
                    of the cores
xla-cpu             ``torch_xla.launch`` on      ``torch_xla.runtime``               xla
                    PJRT CPU: N devices as
                    threads of one process
                    (a rehearsal of the TPU path)
xla-cpu-processes   N processes, one PJRT CPU    the process index                   none
                    device each (inference)
==================  ==========================  ==================================  ===========

With no accelerator the default is ``cpu``: eager torch is faster than XLA:CPU for these models
(1.5-1.7x the whole-job time measured on 2 cores), and on a few cores one replica with every
thread beats several. ``xla-cpu`` stays available by name, to rehearse the TPU code path
(fixed shapes, compile counts) on a laptop.

Multi-host: a process started by ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``) is one replica; ``launch`` runs ``fn`` in it, with the global
rank and world size torchrun gave. On a TPU pod slice every host runs the same program and
``torch_xla.launch`` starts that host's chips; the global ordinal comes from torch_xla, the host
as torch_xla finds it (:func:`kitlib.hardware.tpu_hosts`: ``TPU_WORKER_HOSTNAMES`` /
``TPU_WORKER_ID``, or the Cloud TPU VM metadata).

The start method is ``fork`` (a Kaggle notebook) or ``spawn`` (Colab, scripts: ``fn`` must be
importable, which is why every replica program lives in ``kitlib``).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

from . import compat, hardware

START_METHODS = ("fork", "spawn")


@dataclass(frozen=True)
class LaunchMode:
    """One row of :data:`MODES`.

    Attributes:
        name: the mode's name (the key in :data:`MODES`).
        device: the torch device type replicas compute on: ``"xla"``, ``"cuda"`` or ``"cpu"``.
        start: ``"torch_xla.launch"`` or ``"processes"`` (``torch.multiprocessing``; one replica on
            the CPU runs in the calling process).
        collectives: ``"xla"``, ``"nccl"``, ``"gloo"``, or None (replicas cannot exchange data:
            inference only, or one replica).
        summary: one line for :meth:`Runtime.describe`.
    """

    name: str
    device: str
    start: str
    collectives: str | None
    summary: str


MODES: dict[str, LaunchMode] = {
    m.name: m
    for m in (
        LaunchMode("tpu", "xla", "torch_xla.launch", "xla", "torch_xla.launch, one process per TPU chip"),
        LaunchMode("cuda", "cuda", "processes", "nccl", "one process per GPU, nccl"),
        LaunchMode("cpu", "cpu", "processes", "gloo", "eager torch on the CPU, gloo"),
        LaunchMode("xla-cpu", "xla", "torch_xla.launch", "xla",
                   "torch_xla on PJRT CPU, devices as threads of one process (a rehearsal of the TPU path)"),
        LaunchMode("xla-cpu-processes", "xla", "processes", None,
                   "torch_xla on PJRT CPU, one process per device, no collectives"),
    )
}
ACCELERATORS = ("auto", "tpu", "cuda", "cpu", *[m for m in MODES if m.startswith("xla-")])
CORES_PER_CPU_REPLICA = 4  # eager CPU default: one replica per 4 cores (at least 1), each with its share


class ReplicaError(RuntimeError):
    """A replica raised: names its rank and the original exception (raised in the parent by :func:`launch`)."""

    def __init__(self, rank: int, message: str):
        super().__init__(f"replica rank {rank} failed: {message}")
        self.rank = rank
        self.original = message

    def __reduce__(self):  # travels back from torch_xla.launch's worker processes
        return (ReplicaError, (self.rank, self.original))


@dataclass(frozen=True)
class Runtime:
    """Where the replicas of one job run (built by :func:`detect_runtime`).

    Attributes:
        mode: a key of :data:`MODES`.
        num_replicas: replicas on this host; 0 means "every TPU chip", counted by torch_xla at launch.
        reason: one line saying what was found.
        threads: CPU threads each replica uses (``torch.set_num_threads``).
        num_hosts, host: the hosts of a multi-host run and this host's index (0-based).
        started_by: ``"kit"`` (:func:`launch` starts the replicas), ``"torchrun"`` (this process is
            one replica, started by torchrun) or ``"tpu-pod"`` (every TPU VM host runs this program).
    """

    mode: str
    num_replicas: int
    reason: str
    threads: int = 1
    num_hosts: int = 1
    host: int = 0
    started_by: str = "kit"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown launch mode {self.mode!r}; one of {', '.join(MODES)}")

    @property
    def launch_mode(self) -> LaunchMode:
        """The :data:`MODES` row of this runtime."""
        return MODES[self.mode]

    @property
    def world_size(self) -> int | None:
        """Replicas over all hosts, or None when torch_xla counts the TPU chips at launch."""
        return self.num_replicas * self.num_hosts if self.num_replicas else None

    def describe(self) -> str:
        """One line, e.g. ``runtime: cpu, 1 replica x 2 threads (eager torch on the CPU, gloo): ...``."""
        n = f"{self.num_replicas} replica(s)" if self.num_replicas else "one replica per TPU chip"
        if self.launch_mode.device == "cpu":
            n += f" x {self.threads} thread(s)"
        if self.num_hosts > 1:
            world = f"world {self.world_size}" if self.world_size else "world = every chip of every host"
            n = f"host {self.host + 1} of {self.num_hosts}, {n} on this host, {world}"
        return f"runtime: {self.mode}, {n} ({self.launch_mode.summary}): {self.reason}"


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
    if prefer not in ACCELERATORS:
        raise ValueError(f"accelerator/prefer must be one of {', '.join(ACCELERATORS)}, not {prefer!r}")
    if num_devices is not None and num_devices < 1:
        raise ValueError(f"num_devices must be >= 1 (or 0/None for every device), not {num_devices}")
    cores = hardware.cpu_cores()
    tr = _torchrun_env()

    tpu = hardware.tpu_evidence() if prefer in ("auto", "tpu") else None
    if tpu:
        if not compat.has_torch_xla():
            raise RuntimeError(f"a TPU is present ({tpu}) but torch_xla is not installed: pip install torch_xla[tpu]")
        chips = hardware.tpu_chip_count()
        if num_devices is not None and num_devices != chips:
            raise ValueError(
                f"num_devices={num_devices}, but torch_xla.launch runs one replica on every TPU chip of this "
                f"host ({chips or 'count unknown'}); it cannot run a subset. Set num_devices=0 (every chip)."
            )
        hosts, host = hardware.tpu_hosts()
        return Runtime("tpu", chips or 0, f"{tpu}; {chips or 'unknown number of'} TPU chip(s)",
                       num_hosts=hosts, host=host, started_by="tpu-pod" if hosts > 1 else "kit")
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


def _from_torchrun(mode: str, tr: dict[str, int], num_devices: int | None, threads: int, found: str) -> Runtime:
    local = tr["LOCAL_WORLD_SIZE"]
    if num_devices is not None and num_devices != local:
        raise ValueError(f"num_devices={num_devices}, but torchrun started {local} process(es) per host (--nproc-per-node)")
    hosts = max(1, tr["WORLD_SIZE"] // local)
    return Runtime(mode, local, f"{found}; started by torchrun (rank {tr['RANK']} of {tr['WORLD_SIZE']})",
                   threads=threads, num_hosts=hosts, host=tr["GROUP_RANK"], started_by="torchrun")


def holds_global_rank0(rt: Runtime) -> bool:
    """True in the process that runs (or, as the parent, started) the replica of global rank 0.

    The process that merges shards and reads results back after :func:`launch`: any process of a
    one-host run, torchrun's ``RANK=0`` worker, host 0 of a TPU pod (its chips hold ordinals
    ``0 .. n-1``).
    """
    if rt.started_by == "torchrun":
        return int(os.environ["RANK"]) == 0
    return rt.host == 0


def configure_env(rt: Runtime) -> None:
    """Set the environment the replicas need; :func:`launch` calls it before starting them.

    PJRT CPU: ``PJRT_DEVICE=CPU``, ``CPU_NUM_DEVICES`` (N threads, or 1 per process),
    ``PJRT_CPU_ASYNC_CLIENT=false`` and ``XLA_THREAD_POOL_SIZE >= N`` (collectives between
    thread replicas need the last two). TPU: ``PJRT_DEVICE=TPU``.
    """
    if rt.mode.startswith("xla-cpu"):
        os.environ["PJRT_DEVICE"] = "CPU"
        os.environ["CPU_NUM_DEVICES"] = "1" if rt.mode == "xla-cpu-processes" else str(rt.num_replicas)
        os.environ.setdefault("PJRT_CPU_ASYNC_CLIENT", "false")
        if int(os.environ.get("XLA_THREAD_POOL_SIZE", "0")) < rt.num_replicas:
            os.environ["XLA_THREAD_POOL_SIZE"] = str(max(rt.num_replicas, hardware.cpu_cores()))
    elif rt.mode == "tpu":
        os.environ["PJRT_DEVICE"] = "TPU"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _replica_main(index: int, fn: Callable, job, rt: Runtime, start_method: str) -> None:
    """What every replica runs: build its :class:`~kitlib.replica.Replica`, call ``fn``, report failures."""
    from .replica import PeerFailed, start_replica

    replica = start_replica(index, rt, start_method)
    try:
        fn(replica, job)
    except PeerFailed:  # another rank raised and says so itself; this one stops quietly
        pass
    except ReplicaError:
        raise
    except BaseException as e:
        raise ReplicaError(replica.rank, f"{type(e).__name__}: {e}") from e
    finally:
        replica.close()


def _process_start(rt: Runtime, start_method: str, fn: Callable) -> str:
    """The start method for eager CPU processes: ``fork`` leaves the parent's OpenMP pool unusable.

    A forked child of a parent that ran a parallel torch op hangs at its first multi-threaded op
    (GNU libgomp is not fork-safe; seen here). Replicas with more than one thread are therefore
    spawned when ``fn`` is importable; otherwise they keep ``fork`` and run single-threaded.
    """
    if start_method == "fork" and rt.mode == "cpu" and rt.threads > 1 and getattr(fn, "__module__", "__main__") != "__main__":
        return "spawn"
    return start_method


def launch(fn: Callable, job, rt: Runtime, start_method: str = "fork") -> None:
    """Run ``fn(replica, job)`` once per replica of ``rt`` and wait for all of them.

    Args:
        fn: the replica program (an ``_mp_fn``), called with a :class:`kitlib.replica.Replica` and
            ``job``. With ``spawn`` it must be importable from a module (a function defined in a
            notebook cell fails: "Can't get attribute '_mp_fn' on <module '__main__'>").
        job: the job config (picklable).
        rt: from :func:`detect_runtime`.
        start_method: ``"fork"`` or ``"spawn"`` (Python ``multiprocessing`` start methods).

    Raises:
        ReplicaError: a replica raised; names its rank and the original exception. The other
            replicas are stopped (processes are terminated by ``torch.multiprocessing``; replicas
            waiting in a collective learn of the failure through
            :meth:`kitlib.replica.Replica.together` and return).
        ValueError: unknown start method, or ``spawn`` with a function defined in ``__main__``.
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
    mode = rt.launch_mode
    if mode.device == "xla":
        if "tensorflow" in sys.modules and "torch_xla" not in sys.modules:
            raise RuntimeError(
                "TensorFlow is imported in this process and torch_xla is not: importing torch_xla now "
                "aborts the process ('LLVM ERROR: inconsistency in registered CommandLine options'). "
                "Restart the kernel and import torch_xla (or run this launch) before TensorFlow."
            )
        why = compat.xla_runtime_touched()
        if why:
            raise RuntimeError(
                f"cannot launch replicas: {why}. Restart the kernel and call kitlib launch before "
                "anything touches the XLA device (torch_xla.device(), xm.xla_device(), .to(device), "
                "torch_xla.runtime.world_size())."
            )
    configure_env(rt)
    if mode.start == "torch_xla.launch":
        compat.xla_launch(_replica_main, (fn, job, rt, start_method), start_method)
        return
    if rt.started_by == "torchrun":
        _replica_main(int(os.environ["LOCAL_RANK"]), fn, job, rt, start_method)
        return
    if rt.num_replicas == 1 and mode.device == "cpu":  # one eager CPU replica: no process to start
        _replica_main(0, fn, job, rt, start_method)
        return
    import torch.multiprocessing as tmp

    os.environ["MASTER_ADDR"] = "127.0.0.1"  # torch.distributed env:// rendezvous on a fresh local port
    os.environ["MASTER_PORT"] = str(_free_port())
    method = _process_start(rt, start_method, fn)
    try:
        tmp.start_processes(_replica_main, args=(fn, job, rt, method), nprocs=rt.num_replicas,
                            start_method=method, join=True)
    except tmp.ProcessRaisedException as e:
        last = [line for line in str(e).strip().splitlines() if line.strip()][-1]
        prefix = "kitlib.runtime.ReplicaError: "
        if last.startswith(prefix) and "replica rank " in last:
            rank, _, message = last[len(prefix) + len("replica rank "):].partition(" failed: ")
            raise ReplicaError(int(rank), message) from None
        raise ReplicaError(rt.host * rt.num_replicas + e.error_index, last) from None
    except tmp.ProcessExitedException as e:
        raise ReplicaError(rt.host * rt.num_replicas + e.error_index,
                           f"process exited with code {e.exit_code} (killed? out of memory?)") from None
