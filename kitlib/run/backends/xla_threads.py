"""``xla-cpu``: torch_xla on PJRT CPU, N devices as threads of one process: a rehearsal of the TPU path.

It runs the TPU code path (fixed shapes, compile counts, XLA collectives, DDP over ``xla://``) where
no TPU is. Nothing else in the kit knows replicas can be threads. Delete this module (and its row in
``kitlib.run.runtime.MODES``) when PJRT CPU runs one process per device with collectives between them,
or when the TPU path is tested on a TPU in CI.

What threads need, that processes do not:

* **Graphs launched in turn.** XLA's CPU collectives match the replicas' calls by the compiled
  module: two threads that cut the same graph at once compile it twice and wait in two different
  rendezvous until XLA ends the process. The replicas of one process therefore share a
  :class:`_Turnstile`: every graph a replica cuts is launched when all threads have reached it, rank 0
  first, then each rank in turn (finding rank 0's executable in the cache). A result is read only after
  the turn is passed on.
* **A per-thread process group** for DDP over ``xla://`` (torch's ``multi_threaded_pg``), its broadcasts and
  all-gathers handed to the turnstile (:func:`_install_thread_process_groups`). Gradients as bucket views are
  never averaged on thread replicas (pytorch/xla#8841): each gradient keeps its own copy.
* **transformers imported before the threads load models** (its lazy import is not thread-safe):
  :func:`import_model_classes`, under a lock.
* One compile counter per process, and no persistent compilation cache
  (:attr:`kitlib.run.replica.Replica.threaded`).
"""
from __future__ import annotations

import contextlib
import threading
import time

from ... import compat
from ..replica import PeerFailed
from .collectives import Xla

TURN_TIMEOUT_S = 1800.0  # longest wait for the other thread replicas at one launch (rank 0 may be compiling)


class _Turnstile:
    """Launches graphs of thread replicas one rank at a time, in rank order (see the module doc).

    Each rank counts the graphs it launches through :meth:`launch`. Rank 0 launches its
    ``k``-th when every rank has arrived at its ``k``-th; rank ``r > 0`` when rank ``r - 1``
    has launched its ``k``-th. A rank that leaves (:meth:`leave`, from :meth:`ThreadedXla.close`)
    before reaching the ``k``-th makes the ranks waiting there raise :class:`PeerFailed`.
    """

    def __init__(self, world: int):
        self.world = world
        self._cond = threading.Condition()
        self._arrived = [0] * world
        self._launched = [0] * world
        self._left = [False] * world

    def launch(self, rank: int, what: str, fn):
        """Call ``fn()`` (which launches a graph and returns without waiting for it) in turn.

        Raises:
            PeerFailed: a rank left before launching this graph.
            RuntimeError: waited :data:`TURN_TIMEOUT_S` (the ranks called collectives in
                different orders or numbers).
        """
        with self._cond:
            self._arrived[rank] += 1
            k = self._arrived[rank]
            self._cond.notify_all()

            def gone() -> list[int]:  # ranks that left and will never launch their k-th graph
                return [s for s in range(self.world) if self._left[s] and self._launched[s] < k]

            def my_turn() -> bool:
                if rank == 0:
                    return all(a >= k for a in self._arrived)
                return self._launched[rank - 1] >= k

            t0 = time.monotonic()
            if not self._cond.wait_for(lambda: my_turn() or gone(), timeout=TURN_TIMEOUT_S):
                behind = [s for s in range(self.world) if self._arrived[s] < k] or [rank - 1]
                raise RuntimeError(
                    f"replica rank {rank} waited {time.monotonic() - t0:.0f} s to launch graph {k} ({what}) "
                    f"for rank(s) {behind}: thread replicas must call step(), the collectives and "
                    "together() in the same order and number")
            if gone():
                raise PeerFailed(f"rank(s) {gone()} stopped before {what}")
        try:
            result = fn()
        except BaseException:
            self.leave(rank)
            raise
        with self._cond:
            self._launched[rank] = k
            self._cond.notify_all()
        return result

    def leave(self, rank: int) -> None:
        """``rank`` launches nothing more; ranks waiting for it raise :class:`PeerFailed`."""
        with self._cond:
            self._left[rank] = True
            self._cond.notify_all()

    @property
    def finished(self) -> bool:
        return all(self._left)


_TURNSTILE: _Turnstile | None = None
_TURNSTILE_LOCK = threading.Lock()


def _shared_turnstile(world: int) -> _Turnstile:
    """The turnstile of this process's current thread replicas (a new one per launch)."""
    global _TURNSTILE
    with _TURNSTILE_LOCK:
        if _TURNSTILE is None or _TURNSTILE.finished or _TURNSTILE.world != world:
            _TURNSTILE = _Turnstile(world)
        return _TURNSTILE




_MODEL_CLASSES_LOCK = threading.Lock()


def import_model_classes() -> None:
    """Import the transformers classes the replicas load, once per process, under a lock (module doc)."""
    with _MODEL_CLASSES_LOCK:
        from transformers import (  # noqa: F401
            AutoConfig,
            AutoModelForSequenceClassification,
            AutoTokenizer,
            XLMRobertaConfig,
            XLMRobertaForSequenceClassification,
        )


_THREAD_SUBMIT = threading.local()
_THREAD_PG_LOCK = threading.Lock()


def _install_thread_process_groups() -> None:
    """Once per process: per-thread ``torch.distributed`` worlds, and the xla process group's
    broadcast/all-gather outputs handed to the calling thread's submit function (module doc)."""
    import torch.distributed as dist

    threaded_pg = compat.torch_threaded_process_groups()
    ProcessGroupXla = compat.xla_process_group_class()
    with _THREAD_PG_LOCK:
        if not isinstance(dist.distributed_c10d._world, threaded_pg.ThreadLocalWorld):
            threaded_pg._install_threaded_pg()
        if getattr(ProcessGroupXla, "_kitlib_submits", False):
            return

        def submitting(method, outputs):
            def wrapper(self, *args):
                work = method(self, *args)
                fn = getattr(_THREAD_SUBMIT, "fn", None)
                if fn is not None:
                    fn(outputs(*args))
                return work

            return wrapper

        def flat(lists):
            return [t for sub in lists for t in sub]

        ProcessGroupXla.broadcast = submitting(ProcessGroupXla.broadcast, lambda tensors, opts: list(tensors))
        ProcessGroupXla.allgather = submitting(ProcessGroupXla.allgather, lambda out, inp, opts=None: flat(out))
        ProcessGroupXla.allgather_coalesced = submitting(ProcessGroupXla.allgather_coalesced,
                                                         lambda out, inp, opts=None: flat(out))
        ProcessGroupXla._allgather_base = submitting(ProcessGroupXla._allgather_base, lambda out, inp, opts: [out])
        ProcessGroupXla._kitlib_submits = True


class ThreadedXla(Xla):
    """torch_xla's collectives between thread replicas of one process (``xla-cpu``, more than one
    device): every graph launched in turn through the process's :class:`_Turnstile`, DDP over a
    per-thread process group, gradients never bucket views (module doc)."""

    gradient_as_bucket_view = False  # pytorch/xla#8841 (module doc)

    def __init__(self, turnstile: _Turnstile):
        self.turnstile = turnstile

    @classmethod
    def for_replica(cls, world_size: int):
        """One replica alone needs no turn: plain :class:`~kitlib.run.backends.collectives.Xla`."""
        import_model_classes()
        return cls(_shared_turnstile(world_size)) if world_size > 1 else Xla()

    @staticmethod
    def env(rt, launcher):
        """``PJRT_CPU_ASYNC_CLIENT=false`` and ``XLA_THREAD_POOL_SIZE >= N``: collectives between thread
        replicas need both."""
        import os

        from ..hardware import cpu_cores

        env = {}
        if "PJRT_CPU_ASYNC_CLIENT" not in os.environ:
            env["PJRT_CPU_ASYNC_CLIENT"] = "false"
        if int(os.environ.get("XLA_THREAD_POOL_SIZE", "0")) < rt.num_replicas:
            env["XLA_THREAD_POOL_SIZE"] = str(max(rt.num_replicas, cpu_cores()))
        return env

    def abandon(self, rank: int) -> None:
        self.turnstile.leave(rank)

    def close(self, replica) -> None:
        self.turnstile.leave(replica.rank)  # the others stop (PeerFailed) at the next graph this one never launches
        super().close(replica)

    def _in_turn(self, replica, what: str, tensors=None) -> None:
        """Launch the pending graph (of ``tensors``, or of every live tensor) in rank order, then run
        the step closures outside the turn (they may read results, which needs the others' launches)."""
        self.turnstile.launch(replica.rank, what, lambda: compat.xla_submit(tensors))
        compat.xla_finish_sync()

    def all_reduce_sum(self, replica, tensor):
        out = compat.xla_all_reduce_sum(tensor)
        self._in_turn(replica, "all_reduce_sum", [out])
        return out

    def all_gather(self, replica, tensor):
        # one graph for all ranks: XLA's all-gather, not the padded all-reduce
        out = compat.xla_all_gather(tensor, pin_layout=False)
        self._in_turn(replica, "all_gather", [out])
        return out

    def barrier(self, replica, tag: str) -> None:
        import torch

        # xm.rendezvous launches and reads several graphs: one all-reduce instead
        self.all_reduce_sum(replica, torch.zeros(1, device=replica.device)).cpu()

    @contextlib.contextmanager
    def step(self, replica):
        self._in_turn(replica, "the pending graph before a step")
        yield
        self._in_turn(replica, "a training step")

    def join_process_group(self, replica) -> None:
        import torch.distributed as dist

        _install_thread_process_groups()
        _THREAD_SUBMIT.fn = lambda tensors: self._in_turn(replica, "process group collective", tensors)
        # Group names come from a per-world counter ("0" for the default group), but torch registers
        # them process-wide ("A process group is already registered under the name0"): give each
        # thread its own range.
        dist.distributed_c10d._world.group_count = 1_000_000 * replica.rank
        compat.xla_init_process_group()
