"""A launch mode's backend, built from its parts, and what every mode shares (the global rank, the
launch environment, owning replicas, running a replica).

A backend (one per launch mode, a row of :data:`kitlib.run.runtime.MODES`) is three parts, each a small
class that is asked, never branched on (Lightning's accelerator / strategy / precision split):

* a **launcher** (:mod:`kitlib.run.backends.launchers`): how replicas start (processes, one in this
  process, ``torch_xla.launch``, torchrun) and where their rank and world size come from;
* an **accelerator** (:mod:`kitlib.run.backends.accelerators`): the device (CPU, CUDA, XLA), its loader,
  step, compile counts, and the hardware the precision rule follows;
* a **collectives** class (:mod:`kitlib.run.backends.collectives`): one object per replica holding what
  it joined (a process group, a turnstile), the reductions, DDP, the gradient exchange.

In the calling process a backend answers :meth:`Backend.env`, :meth:`Backend.check_parent`,
:meth:`Backend.check_training`, :meth:`Backend.resolve_precision` and :meth:`Backend.launch`; in each
replica :meth:`Backend.open` builds the :class:`kitlib.run.replica.Replica` the replica program is handed.

Adding a mode: one row in ``MODES``, from the parts (a new part only for a new way of starting,
a new device or new collectives).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import traceback as tb_module
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..replica import PeerFailed, Replica
from . import precision as prec

if TYPE_CHECKING:
    from ..runtime import Runtime


class ReplicaError(RuntimeError):
    """A replica raised; raised in the calling process by :func:`kitlib.run.runtime.launch`.

    Attributes:
        rank: the failing replica's global rank.
        original: ``"ExceptionType: message"`` of the replica's exception.
        traceback: the replica's whole traceback, as text (empty if none came back).

    ``str()`` shows the traceback when it crossed a process boundary (there is no Python
    ``__cause__`` to print it); a replica in the calling process chains its exception instead.
    """

    def __init__(self, rank: int, message: str, traceback: str = ""):
        super().__init__(f"replica rank {rank} failed: {message}")
        self.rank = rank
        self.original = message
        self.traceback = traceback

    def __str__(self) -> str:
        head = super().__str__()
        if not self.traceback or self.__cause__ is not None:
            return head
        return f"{head}\n\n--- replica rank {self.rank}'s traceback ---\n{self.traceback.rstrip()}"

    def __reduce__(self):  # travels back from torch_xla.launch's worker processes
        return (ReplicaError, (self.rank, self.original, self.traceback))


def global_rank(rt: "Runtime", index: int) -> int:
    """Global rank of the replica with launcher index ``index`` on this host (0-based).

    ``host * replicas_per_host + index``: the replicas of one host hold consecutive ranks. The one
    place this formula lives (backends whose ranks come from torchrun or torch_xla read them there).
    """
    return rt.host * rt.num_replicas + index


@contextlib.contextmanager
def patch_environment(changes: dict[str, str | None]):
    """Set (a string) or remove (None) variables of ``os.environ`` for the block, then restore them."""
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for k, v in changes.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


STOP_GRACE_S = 10.0  # a terminated replica gets this long to exit before it is killed


def stop_processes(procs) -> None:
    """Terminate every live process of ``procs`` (``multiprocessing.Process``), then join all of them
    (SIGKILL to any still alive after :data:`STOP_GRACE_S`)."""
    import time

    live = [p for p in procs if p.is_alive()]
    for p in live:
        p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in live:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in live:
        if p.is_alive():
            p.kill()
            p.join()


@contextlib.contextmanager
def owning_replicas():
    """Own every child process started in the block: on any exception (KeyboardInterrupt included)
    terminate and join each before the exception leaves, so nothing a run started outlives it.

    In the main thread, SIGINT stops the children first and then raises KeyboardInterrupt (a launcher
    blocked in ``concurrent.futures``' shutdown would otherwise wait for the replicas to finish).
    """
    import multiprocessing as mp

    before = {p.pid for p in mp.active_children()}

    def started():
        return [p for p in mp.active_children() if p.pid not in before]

    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_sigint(signum, frame):
            stop_processes(started())
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    except BaseException:
        stop_processes(started())
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_replica(index: int, fn: Callable, job, rt: "Runtime", start_method: str, precision: prec.Precision,
                errors_dir: str | None = None) -> None:
    """What every replica runs: open its :class:`~kitlib.run.replica.Replica`, call ``fn``, report a failure.

    ``precision`` is the launch's, resolved once in the calling process (:meth:`Backend.resolve_precision`).

    A failure is raised as :class:`ReplicaError` (rank, message, whole traceback). With
    ``errors_dir`` it is also written to ``<errors_dir>/index-<index>.pkl``, for a launcher that only
    gets text back from its processes. Another rank's failure (:class:`~kitlib.run.replica.PeerFailed`)
    ends this replica quietly: the one error reported is the original.
    """
    replica = rt.backend.open(index, rt, start_method, precision)
    try:
        fn(replica, job)
    except PeerFailed:
        pass
    except BaseException as e:
        if isinstance(e, ReplicaError):
            err = e
        else:
            err = ReplicaError(replica.rank, f"{type(e).__name__}: {e}", tb_module.format_exc())
        if errors_dir is not None:
            import pickle

            with open(os.path.join(errors_dir, f"index-{index}.pkl"), "wb") as f:
                pickle.dump((err.rank, err.original, err.traceback), f)
        if err is e:
            raise
        raise err from e
    finally:
        replica.close()


def quiet_unless_master(master: bool) -> None:
    """Only the master shows transformers' progress bars ("Loading weights") and info logs."""
    if master:
        return
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass




@dataclass(frozen=True)
class Backend:
    """One launch mode: a row of :data:`kitlib.run.runtime.MODES`, built from its parts (module doc).

    Attributes:
        name: the mode's name (its key in ``MODES``).
        launcher: how replicas start (:mod:`kitlib.run.backends.launchers`).
        accelerator: the device part (:mod:`kitlib.run.backends.accelerators`).
        collectives_class: the collectives each replica holds one of (:mod:`kitlib.run.backends.collectives`).
        summary: one line for :meth:`kitlib.run.runtime.Runtime.describe`.
    """

    name: str
    launcher: object
    accelerator: object
    collectives_class: type
    summary: str

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    @property
    def device(self) -> str:
        """The torch device type replicas compute on: ``"xla"``, ``"cuda"`` or ``"cpu"``."""
        return self.accelerator.device_type

    @property
    def hardware(self) -> str:
        """What the replicas compute on: ``"tpu"``, ``"cuda"`` or ``"cpu"`` (PJRT CPU is the CPU)."""
        return self.accelerator.kind

    @property
    def collectives(self) -> str | None:
        """``"xla"``, ``"nccl"``, ``"gloo"``, or None (replicas cannot exchange data)."""
        return self.collectives_class.name

    @property
    def started_by(self) -> str:
        """``"kit"`` (:func:`kitlib.run.runtime.launch` starts the replicas), ``"torchrun"`` (this process is
        one replica) or ``"tpu-pod"`` (every TPU VM host runs the program)."""
        return self.launcher.started_by

    @property
    def threaded(self) -> bool:
        """Replicas are threads of one process (per-process counters are shared)."""
        return self.launcher.threads_share_process

    @property
    def static_shapes(self) -> bool:
        """Every model call should be one of a few fixed shapes (XLA compiles one graph per shape)."""
        return self.accelerator.static_shapes

    # ------------------------------------------------------------ in the calling process

    def env(self, rt: "Runtime") -> dict[str, str | None]:
        """Variables the launch needs: a string sets one, None removes it; restored after the launch."""
        return {**self.launcher.env(rt), **self.accelerator.env(rt), **self.collectives_class.env(rt, self.launcher)}

    def check_parent(self, rt: "Runtime") -> None:
        """Raise RuntimeError if this process can no longer start this mode's replicas."""
        self.accelerator.check_parent(rt)

    def resolve_precision(self, requested: str) -> prec.Precision:
        """The :class:`~kitlib.run.backends.precision.Precision` for ``requested`` on this mode's hardware
        (:func:`kitlib.run.backends.precision.resolve`; the hardware is probed without touching a device).

        Raises:
            ValueError: ``requested`` is not one of :data:`kitlib.run.backends.precision.PRECISIONS`.
        """
        from ..hardware import precision_hardware

        return prec.resolve(requested, precision_hardware(self.accelerator.precision_of), self.device)

    def precision(self, requested: str) -> str:
        """The compute precision's name for ``requested`` (:meth:`resolve_precision`)."""
        return self.resolve_precision(requested).name

    def check_training(self, rt: "Runtime", precision: prec.Precision) -> None:
        """Raise ValueError if this mode cannot train (no collectives for several replicas; an fp16 it cannot
        scale). ``precision``: the run's, already resolved (:meth:`resolve_precision`, once per run)."""
        if self.collectives is None and (rt.world_size or 2) > 1:
            raise ValueError(f"launch mode {self.name!r} has no collectives ({self.summary}); "
                             "train with accelerator='cpu' (gloo) or 'xla-cpu'")
        prec.check_training(precision)

    def launch(self, fn: Callable, job, rt: "Runtime", start_method: str, precision: prec.Precision) -> None:
        """Start every replica of this host, run :func:`run_replica` in each, and wait for all."""
        self.launcher.launch(fn, job, rt, start_method, precision)

    def holds_global_rank0(self, rt: "Runtime") -> bool:
        """True in the process that runs (or started) the replica of global rank 0."""
        return self.launcher.holds_global_rank0(rt)

    def multi_host(self, rt: "Runtime") -> bool:
        """True when every host runs the same program (the replicas must agree across hosts)."""
        return rt.num_hosts > 1 or self.started_by != "kit"

    def describe_replicas(self, rt: "Runtime") -> str:
        """E.g. ``"2 replica(s) x 4 thread(s)"``, for :meth:`kitlib.run.runtime.Runtime.describe`."""
        n = f"{rt.num_replicas} replica(s)" if rt.num_replicas else "one replica per TPU chip"
        return f"{n} x {rt.threads} thread(s)" if self.device == "cpu" else n

    # ------------------------------------------------------------ in each replica

    def open(self, index: int, rt: "Runtime", start_method: str, precision: prec.Precision) -> Replica:
        """Build the :class:`~kitlib.run.replica.Replica` with launcher index ``index`` (called inside it):
        its rank and world size, device, threads, precision, and its own collectives object, opened.

        The collectives object comes first (thread replicas import transformers there, under one lock:
        :mod:`kitlib.run.backends.xla_threads`). A failure after that tells the other replicas
        (:meth:`Collectives.abandon`), so none waits for this one."""
        rank, world = self.launcher.rank_and_world(index, rt)
        collectives = self.collectives_class.for_replica(world)
        try:
            quiet_unless_master(index == 0 and rt.host == 0)
            device = self.accelerator.device(index)
            threads, restore = self.launcher.threads(rt, start_method)
            import torch

            if threads is not None:
                torch.set_num_threads(threads)
            replica = Replica(rank=rank, world_size=world, local_rank=index, host=rt.host, num_hosts=rt.num_hosts,
                              threads=torch.get_num_threads(), device=device, precision=precision, mode=self,
                              accelerator=self.accelerator, collectives=collectives,
                              threaded=self.threaded, restore_threads=restore)
            collectives.open(replica)
        except BaseException:
            collectives.abandon(rank)
            raise
        return replica
