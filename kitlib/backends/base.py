"""What every backend is asked, and what they share (the global rank, the launch environment, owning replicas).

A backend (one per launch mode, a row of :data:`kitlib.runtime.MODES`) answers, for its mode:

* in the calling process: :meth:`Backend.env` (the variables the launch needs; set for the launch
  only and restored afterwards, as Accelerate's ``patch_environment`` does), :meth:`Backend.check_parent`
  (what must not have happened in this process), :meth:`Backend.check_training` and
  :meth:`Backend.launch` (start every replica of this host, run :func:`run_replica` in each, wait);
* in each replica: :meth:`Backend.open` (rank, world size, device, threads, process group) and
  :meth:`Backend.close`; the collectives; the training step (:meth:`Backend.wrap_model`,
  :meth:`Backend.optimizer_step`); the precision (:mod:`kitlib.backends.precision`) and autocast;
  the device loader and step context; compile counts.

Replica programs never see a backend directly: :class:`kitlib.replica.Replica` is a thin handle
that passes each call to its backend with itself.

Adding a mode: one module with one :class:`Backend` subclass, and one row in ``MODES``.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import traceback as tb_module
from typing import TYPE_CHECKING, Callable

from . import precision as prec

if TYPE_CHECKING:
    from ..replica import Replica
    from ..runtime import Runtime


class PeerFailed(RuntimeError):
    """Another rank failed (inside :meth:`kitlib.replica.Replica.together`, or before a graph thread
    replicas launch in turn); this rank stops without an error of its own."""


class ReplicaError(RuntimeError):
    """A replica raised; raised in the calling process by :func:`kitlib.runtime.launch`.

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

    In the main thread, SIGINT (``kill -INT`` to this process alone, or a notebook's interrupt)
    stops the children first and then raises KeyboardInterrupt: a launcher blocked in a wait that
    does not return on an exception (``concurrent.futures``' shutdown, used by ``torch_xla.launch``)
    would otherwise wait for the replicas to finish.
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


def run_replica(index: int, fn: Callable, job, rt: "Runtime", start_method: str, errors_dir: str | None = None) -> None:
    """What every replica runs: open its :class:`~kitlib.replica.Replica`, call ``fn``, report a failure.

    A failure is raised as :class:`ReplicaError` (rank, message, whole traceback). With
    ``errors_dir`` it is also written to ``<errors_dir>/index-<index>.pkl``, for a launcher that only
    gets text back from its processes. Another rank's failure (:class:`~kitlib.replica.PeerFailed`)
    ends this replica quietly: the one error reported is the original.
    """
    replica = rt.backend.open(index, rt, start_method)
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
        rt.backend.close(replica)


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


class OptimizerStep:
    """``backward``, the gradient exchange and the optimizer step of one replica, as one call.

    Under fp16 the loss is scaled by ``scaler`` (a ``torch.amp.GradScaler``) before ``backward``
    and the step goes through ``scaler.step`` / ``scaler.update`` (:mod:`kitlib.backends.precision`);
    the gradients are exchanged before ``scaler.step``, so every replica sees the same gradients and
    skips the same steps.

    ``step=None`` calls ``optimizer.step()`` looked up at each call, not a bound method kept from
    construction: a learning-rate scheduler built afterwards wraps ``optimizer.step`` to see that the
    optimizer stepped first (torch's "lr_scheduler.step() before optimizer.step()" warning otherwise).
    """

    def __init__(self, optimizer, sync: Callable[[], None] | None, step: Callable[[], None] | None = None, scaler=None):
        self.optimizer, self.sync, self.scaler = optimizer, sync, scaler
        self.step = step if step is not None else (lambda: self.optimizer.step())

    def __call__(self, loss) -> None:
        """Backward of ``loss`` (a float32 scalar tensor), then the exchange and the step."""
        if self.scaler is None:
            loss.backward()
            if self.sync:
                self.sync()
            self.step()
            return
        self.scaler.scale(loss).backward()
        if self.sync:
            self.sync()
        self.scaler.step(self.optimizer)
        self.scaler.update()


class Backend:
    """One launch mode's behaviour. Subclasses set the attributes and override what differs.

    Attributes:
        name: the mode's name (its key in :data:`kitlib.runtime.MODES`).
        device: the torch device type replicas compute on: ``"xla"``, ``"cuda"`` or ``"cpu"``.
        hardware: ``"tpu"``, ``"cuda"`` or ``"cpu"``: what the replicas compute on.
        precision_of: the hardware whose precision ``"auto"`` follows: the mode's own, or for a
            rehearsal its target's (``xla-cpu`` rehearses the TPU: :mod:`kitlib.backends.precision`).
        collectives: ``"xla"``, ``"nccl"``, ``"gloo"``, or None (replicas cannot exchange data).
        started_by: ``"kit"`` (:func:`kitlib.runtime.launch` starts the replicas), ``"torchrun"``
            (this process is one replica) or ``"tpu-pod"`` (every TPU VM host runs the program).
        starts: how replicas start, in words (the table in :mod:`kitlib.runtime`).
        summary: one line for :meth:`kitlib.runtime.Runtime.describe`.
    """

    name = ""
    device = "cpu"
    hardware = "cpu"
    precision_of = "cpu"
    collectives: str | None = None
    started_by = "kit"
    starts = ""
    summary = ""
    threaded = False  # replicas are threads of one process (per-process counters are shared)

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    # ------------------------------------------------------------ in the calling process

    def env(self, rt: "Runtime") -> dict[str, str | None]:
        """Variables the launch needs: a string sets one, None removes it; restored after the launch."""
        return {}

    def check_parent(self, rt: "Runtime") -> None:
        """Raise RuntimeError if this process can no longer start this mode's replicas."""

    def check_training(self, rt: "Runtime", precision: str) -> None:
        """Raise ValueError if this mode cannot train (no collectives for several replicas; an fp16 it cannot scale)."""
        if self.collectives is None and (rt.world_size or 2) > 1:
            raise ValueError(f"launch mode {self.name!r} has no collectives ({self.summary}); "
                             "train with accelerator='cpu' (gloo) or 'xla-cpu'")
        prec.check_training(self.resolve_precision(precision))

    def launch(self, fn: Callable, job, rt: "Runtime", start_method: str) -> None:
        """Start every replica of this host, run :func:`run_replica` in each, and wait for all."""
        raise NotImplementedError

    def holds_global_rank0(self, rt: "Runtime") -> bool:
        """True in the process that runs (or started) the replica of global rank 0."""
        return rt.host == 0

    def multi_host(self, rt: "Runtime") -> bool:
        """True when every host runs the same program (the replicas must agree across hosts)."""
        return rt.num_hosts > 1 or self.started_by != "kit"

    def describe_replicas(self, rt: "Runtime") -> str:
        """E.g. ``"2 replica(s) x 4 thread(s)"``, for :meth:`kitlib.runtime.Runtime.describe`."""
        n = f"{rt.num_replicas} replica(s)" if rt.num_replicas else "one replica per TPU chip"
        return f"{n} x {rt.threads} thread(s)" if self.device == "cpu" else n

    # ------------------------------------------------------------ in each replica

    def open(self, index: int, rt: "Runtime", start_method: str) -> "Replica":
        """Build the replica with launcher index ``index`` (called inside it)."""
        raise NotImplementedError

    def close(self, replica: "Replica") -> None:
        """Leave what :meth:`open` joined (a process group), give back what it took (threads)."""

    def _no_collectives(self, replica: "Replica", what: str) -> None:
        raise RuntimeError(f"{what} needs collectives, which launch mode {self.name!r} does not have "
                           f"({self.summary}); use accelerator='cpu' or 'xla-cpu' for training")

    def all_reduce_sum(self, replica: "Replica", tensor):
        self._no_collectives(replica, "all_reduce_sum")

    def all_gather(self, replica: "Replica", tensor):
        self._no_collectives(replica, "all_gather")

    def barrier(self, replica: "Replica", tag: str) -> None:
        self._no_collectives(replica, "barrier")

    def step(self, replica: "Replica"):
        """Context around one training step (nothing, off XLA)."""
        return contextlib.nullcontext()

    def after_step(self, replica: "Replica", fn: Callable, args: tuple) -> None:
        """Call ``fn(*args)`` once the step's results can be read (at once, off XLA)."""
        fn(*args)

    def loader(self, replica: "Replica", loader):
        return loader

    def to_device(self, replica: "Replica", batch):
        if isinstance(batch, dict):
            return {k: v.to(replica.device, non_blocking=True) for k, v in batch.items()}
        if isinstance(batch, (list, tuple)):
            return type(batch)(v.to(replica.device, non_blocking=True) for v in batch)
        return batch.to(replica.device, non_blocking=True)

    def resolve_precision(self, requested: str) -> prec.Precision:
        """The :class:`~kitlib.backends.precision.Precision` for ``requested`` on this mode's hardware
        (:func:`kitlib.backends.precision.resolve`; the hardware is probed without touching a device)."""
        from ..hardware import precision_hardware

        return prec.resolve(requested, precision_hardware(self.precision_of), self.device)

    def precision(self, requested: str) -> str:
        """The compute precision's name for ``requested`` (:meth:`resolve_precision`)."""
        return self.resolve_precision(requested).name

    def autocast(self, requested: str):
        return self.resolve_precision(requested).autocast()

    def wrap_model(self, replica: "Replica", model, pattern: str):
        """The module to call: ``model``, or ``DistributedDataParallel(model)`` for ``pattern="ddp"``
        where there is something to average."""
        return model

    def optimizer_step(self, replica: "Replica", optimizer, model, net, requested: str) -> OptimizerStep:
        """The :class:`OptimizerStep` for ``optimizer`` over ``model`` (``net``: what :meth:`wrap_model` gave)."""
        return OptimizerStep(optimizer, None, None, self.resolve_precision(requested).grad_scaler())

    def use_compile_cache(self, replica: "Replica", root: str) -> None:
        """Use a persistent compilation cache under ``root`` (XLA only; nothing elsewhere)."""

    def compile_count(self, replica: "Replica") -> int | None:
        """Graphs compiled so far (XLA), or None where nothing is compiled."""
        return None

    def compile_stats(self, replica: "Replica") -> dict:
        return {}

    def device_name(self, replica: "Replica") -> str:
        """What the replica computes on, read inside it."""
        return str(replica.device)
