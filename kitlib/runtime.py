"""The torch-side runtime detector: TPU (torch_xla), CUDA GPUs, or CPU (torch_xla on PJRT CPU).

``detect_runtime()`` looks without touching any device, so the caller can still launch one
process/thread per device afterwards. ``launch()`` starts ``fn(index, *args)`` on every device:

=======  =====================================================  ==========================
kind     how replicas run                                       rank / world size from
=======  =====================================================  ==========================
tpu      ``torch_xla.launch`` (v5e: one process per chip;       ``torch_xla.runtime``
         v2/v3: threads)
cpu      ``torch_xla.launch`` with ``PJRT_DEVICE=CPU`` and       ``torch_xla.runtime``
         ``CPU_NUM_DEVICES=N``: N threads of one process
cuda     ``torch.multiprocessing.start_processes``, one          the process index / nprocs
         process per GPU (``torch.distributed``: nccl)
cpu      with ``collectives=True`` and N > 1: N processes over   the process index / nprocs
         ``torch.distributed`` gloo (training)
cpu      with ``processes=True``: N processes, each one PJRT     the process index / nprocs
         CPU device (inference: no GIL shared between replicas)
=======  =====================================================  ==========================

torch_xla 2.9's CPU thread mode deadlocks on collectives (all-reduce of gradients), so
training on N > 1 CPU replicas asks for ``collectives=True`` and gets real processes over gloo.

The start method is ``fork`` (a Kaggle notebook: ``fn`` may be defined anywhere) or ``spawn``
(Colab, scripts: ``fn`` must be importable, which is why every ``_mp_fn`` lives in ``kitlib``).
"""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from typing import Callable

from . import compat

START_METHODS = ("fork", "spawn")


@dataclass(frozen=True)
class Runtime:
    """Where replicas run.

    Attributes:
        kind: ``"tpu"``, ``"cuda"`` or ``"cpu"``.
        num_devices: replicas that :func:`launch` starts (the world size on one host).
        xla: True when replicas are driven by torch_xla (PJRT), False for plain CUDA.
        reason: one line saying what was found.
        processes: CPU only: one process per PJRT CPU device instead of one thread per device.
            Threads share one Python interpreter lock, and torch_xla traces every step in
            Python, so on a CPU threads barely scale; processes do. Replicas then take their
            rank from the process index, and cannot run collectives (inference only).
    """

    kind: str
    num_devices: int
    xla: bool
    reason: str
    processes: bool = False

    @property
    def dist_backend(self) -> str:
        """How replicas talk: ``"xla"`` (torch_xla), ``"nccl"`` (CUDA) or ``"gloo"`` (CPU processes)."""
        return "xla" if self.xla else ("nccl" if self.kind == "cuda" else "gloo")

    def describe(self) -> str:
        how = "torch_xla/PJRT" if self.xla else "torch.multiprocessing"
        if self.xla and self.processes:
            how = "torch_xla/PJRT, one process per device"
        return f"runtime: {self.kind} x{self.num_devices} ({how}): {self.reason}"


def _tpu_present() -> str | None:
    """Evidence of a TPU on this host without initialising it, or None."""
    if os.environ.get("PJRT_DEVICE", "").upper() == "TPU":
        return "PJRT_DEVICE=TPU"
    for var in ("TPU_ACCELERATOR_TYPE", "TPU_NAME", "COLAB_TPU_ADDR"):
        if os.environ.get(var):
            return f"{var}={os.environ[var]}"
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return "TPU device files in /dev"
    return None


def _tpu_chips() -> int | None:
    try:
        from torch_xla._internal import tpu

        return int(tpu.num_available_devices())
    except Exception:  # older/newer torch_xla or not a TPU VM: launch uses every device anyway
        return None


def detect_runtime(num_devices: int | None = None, prefer: str = "auto", collectives: bool = False, cpu_processes: bool = False) -> Runtime:
    """Find the accelerator without touching it.

    Args:
        num_devices: replicas to use; None means every device found (on CPU: one PJRT CPU
            device per core, at most 8).
        prefer: ``"auto"``, or force ``"tpu"``, ``"cuda"`` or ``"cpu"``.
        collectives: the replicas exchange data (training). On CPU with more than one replica
            this gives N processes over ``torch.distributed`` gloo instead of torch_xla threads.
        cpu_processes: on CPU, run the N PJRT CPU devices as N processes rather than N threads
            of one process (see :attr:`Runtime.processes`); ignored on TPU and CUDA.

    Returns:
        A :class:`Runtime`.

    Raises:
        RuntimeError: ``prefer`` names an accelerator that is not there, a TPU is present but
            torch_xla is not installed, or more CUDA devices are asked for than exist.
        ValueError: ``prefer`` is not one of the names above, or ``num_devices < 1``.
    """
    if prefer not in ("auto", "tpu", "cuda", "cpu"):
        raise ValueError(f"prefer must be auto, tpu, cuda or cpu, not {prefer!r}")
    if num_devices is not None and num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, not {num_devices}")
    tpu = _tpu_present() if prefer in ("auto", "tpu") else None
    if tpu:
        if not compat.has_torch_xla():
            raise RuntimeError(f"a TPU is present ({tpu}) but torch_xla is not installed: pip install torch_xla[tpu]")
        chips = _tpu_chips()
        return Runtime("tpu", num_devices or chips or 8, True, f"{tpu}; {chips or 'unknown'} TPU device(s)")
    if prefer == "tpu":
        raise RuntimeError("prefer='tpu' but no TPU was found (no PJRT_DEVICE=TPU, TPU_* variable or /dev/accel*)")
    if prefer in ("auto", "cuda"):
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n:
            if num_devices and num_devices > n:
                raise RuntimeError(f"{num_devices} CUDA devices asked for, {n} present")
            return Runtime("cuda", num_devices or n, False, f"{n} CUDA device(s): {torch.cuda.get_device_name(0)}")
        if prefer == "cuda":
            raise RuntimeError("prefer='cuda' but torch sees no CUDA device")
    n = num_devices or max(1, min(os.cpu_count() or 1, 8))
    if collectives and n > 1:
        return Runtime("cpu", n, False, f"no accelerator; {n} CPU processes over torch.distributed gloo")
    if not compat.has_torch_xla():
        raise RuntimeError("CPU runs use torch_xla with PJRT_DEVICE=CPU: pip install torch_xla")
    if cpu_processes:
        return Runtime("cpu", n, True, f"no accelerator; {n} PJRT CPU device(s), one process each", processes=True)
    return Runtime("cpu", n, True, f"no accelerator; {n} PJRT CPU device(s) as threads of one process")


def configure_env(rt: Runtime) -> None:
    """Set the environment variables the replicas need; call in the parent before :func:`launch`.

    CPU: ``PJRT_DEVICE=CPU``, ``CPU_NUM_DEVICES=N``, ``PJRT_CPU_ASYNC_CLIENT=false`` and
    ``XLA_THREAD_POOL_SIZE>=N`` (torch_xla 2.9 runs the N devices as threads; collectives need
    the last two). TPU: ``PJRT_DEVICE=TPU``.
    """
    if rt.kind == "cpu":
        os.environ["PJRT_DEVICE"] = "CPU"
        os.environ["CPU_NUM_DEVICES"] = "1" if rt.processes else str(rt.num_devices)
        os.environ.setdefault("PJRT_CPU_ASYNC_CLIENT", "false")
        if int(os.environ.get("XLA_THREAD_POOL_SIZE", "0")) < rt.num_devices:
            os.environ["XLA_THREAD_POOL_SIZE"] = str(max(rt.num_devices, os.cpu_count() or 1))
    elif rt.kind == "tpu":
        os.environ["PJRT_DEVICE"] = "TPU"


def _process_entry(index: int, fn: Callable, args: tuple, cuda: bool, cpu_threads: int) -> None:
    import torch

    if cuda:
        torch.cuda.set_device(index)
    # Share the cores between replicas. A forked child must also stay off the OpenMP pool its
    # parent may have started: GNU libgomp is not fork-safe, and the child's first parallel
    # tensor op then waits forever at a barrier (seen here: model.to(xla) after fork).
    torch.set_num_threads(cpu_threads)
    fn(index, *args)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(fn: Callable, args: tuple, rt: Runtime, start_method: str = "fork") -> None:
    """Run ``fn(index, *args)`` once per device of ``rt`` and wait for all of them.

    Args:
        fn: the per-replica function (``_mp_fn``). With ``spawn`` it must be importable from a
            module (a function defined in a notebook cell fails: "Can't get attribute '_mp_fn'
            on <module '__main__'>").
        args: picklable arguments passed after the index.
        rt: from :func:`detect_runtime`.
        start_method: ``"fork"`` or ``"spawn"`` (Python ``multiprocessing`` start methods).

    Raises:
        ValueError: unknown start method, or ``spawn`` with a function defined in ``__main__``.
        RuntimeError: the XLA runtime was touched in this process before launch (see
            :func:`kitlib.compat.xla_runtime_touched`); restart the kernel and launch first.
    """
    if start_method not in START_METHODS:
        raise ValueError(f"start_method must be one of {START_METHODS}, not {start_method!r}")
    if start_method == "spawn" and getattr(fn, "__module__", None) == "__main__":
        raise ValueError(
            f"start_method='spawn' needs an importable function; {fn.__name__} is defined in __main__ "
            "(a notebook cell). Use a kitlib template or start_method='fork'."
        )
    if rt.xla:
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
        if not rt.processes:
            compat.xla_launch(fn, args, start_method)
            return
    # one process per replica: CUDA, gloo CPU (training), or PJRT CPU with processes=True
    import torch.multiprocessing as tmp

    # torch.distributed's env:// rendezvous for the replicas: a fresh local port per launch
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    cpu_threads = 1 if start_method == "fork" else max(1, (os.cpu_count() or 1) // rt.num_devices)
    tmp.start_processes(
        _process_entry,
        args=(fn, args, rt.kind == "cuda", cpu_threads),
        nprocs=rt.num_devices,
        start_method=start_method,
        join=True,
    )
