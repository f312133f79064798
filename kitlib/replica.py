"""What one replica is handed: its device, rank and world size, and the collectives of its mode.

:func:`kitlib.runtime.launch` builds a :class:`Replica` in every replica (process or thread) from
the :class:`~kitlib.runtime.Runtime`, as Accelerate's ``PartialState`` is built from the launcher's
environment, and calls the replica program with it. Replica programs never ask torch_xla or
``torch.distributed`` for their rank themselves, and never branch on the backend: they call
``replica.all_reduce_sum``, ``replica.all_gather``, ``replica.barrier`` and ``replica.together``.

Failures: a replica that raises while the others wait in a collective would leave them waiting
forever on a TPU (torch_xla's ``xm.rendezvous``; pytorch/xla#7974). Wrap any step that can fail on
one rank only (saving a checkpoint, reading a file) in ``with replica.together("what"):``. Every
rank then exchanges an ok flag before going on: the rank that failed re-raises its exception,
the others raise :class:`PeerFailed` and return quietly, so the launcher reports one error naming
the rank and the original exception.

Thread replicas (``xla-cpu``, PJRT CPU): XLA's CPU collectives match the replicas' calls by
the compiled module, so every thread must run the executable one thread compiled. Two threads
that cut the same graph at once both miss torch_xla's graph cache, compile it twice, and wait
for each other in two different rendezvous ("RendezvousKey ... op_id=0" and "op_id=1") until
XLA ends the process after 10 s. The replicas of one process therefore share a
:class:`_Turnstile`: every graph a :class:`Replica` cuts (``step()``, the results of
``all_reduce_sum``/``all_gather``, ``barrier``, DDP's init-time collectives) is launched when all
threads have reached it, rank 0 first, then each rank in turn, so the later ranks find rank 0's
executable in the cache. Nothing waits for a result inside its turn: a launched graph runs
until every thread has launched its own, so a result is read only after the turn is passed on.
Processes (TPU chips, eager CPU, CUDA) never use it.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import compat
from .runtime import MODES, LaunchMode, Runtime


PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")  # int8: CPU inference only (kitlib.quantize)


class PeerFailed(RuntimeError):
    """Another rank failed inside :meth:`Replica.together`; this rank stops without an error of its own."""


TURN_TIMEOUT_S = 1800.0  # longest wait for the other thread replicas at one launch (rank 0 may be compiling)


class _Turnstile:
    """Launches graphs of thread replicas one rank at a time, in rank order (see the module doc).

    Each rank counts the graphs it launches through :meth:`launch`. Rank 0 launches its
    ``k``-th when every rank has arrived at its ``k``-th; rank ``r > 0`` when rank ``r - 1``
    has launched its ``k``-th. A rank that leaves (:meth:`leave`, from :meth:`Replica.close`)
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


@dataclass
class Replica:
    """One replica's view of the run.

    Attributes:
        rank: global rank, 0-based (shards are named by it).
        world_size: replicas over all hosts.
        local_rank: index of this replica on its host.
        host, num_hosts: this host's index and the number of hosts.
        device: the ``torch.device`` to compute on (``xla:N``, ``cuda:N`` or ``cpu``).
        mode: the :data:`kitlib.runtime.MODES` row this replica runs under.
        threads: CPU threads this replica uses (``torch.get_num_threads()`` after start).
    """

    rank: int
    world_size: int
    local_rank: int
    device: Any
    mode: LaunchMode
    host: int = 0
    num_hosts: int = 1
    threads: int = 1
    _process_group: bool = field(default=False, repr=False)
    _restore_threads: int | None = field(default=None, repr=False)
    _turnstile: _Turnstile | None = field(default=None, repr=False)

    @property
    def is_master(self) -> bool:
        """True on global rank 0: the replica that logs, shows progress and writes shared files."""
        return self.rank == 0

    @property
    def xla(self) -> bool:
        """True when this replica computes on an XLA device (TPU or PJRT CPU)."""
        return self.mode.device == "xla"

    @property
    def threaded(self) -> bool:
        """True when several replicas are threads of one process (``xla-cpu``): per-process counters are shared."""
        return self.mode.name == "xla-cpu" and self.world_size > 1

    # ------------------------------------------------------------------ collectives

    def _check_collectives(self, what: str) -> None:
        if self.world_size > 1 and self.mode.collectives is None:
            raise RuntimeError(
                f"{what} needs collectives, which launch mode {self.mode.name!r} does not have "
                f"({self.mode.summary}); use accelerator='cpu' or 'xla-cpu' for training"
            )

    def all_reduce_sum(self, tensor):
        """Sum of ``tensor`` over all replicas (same shape, on this replica's device)."""
        if self.world_size == 1:
            return tensor
        self._check_collectives("all_reduce_sum")
        if self.mode.collectives == "xla":
            return self._launched(compat.xla_all_reduce_sum(tensor), "all_reduce_sum")
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor

    def all_gather(self, tensor):
        """Every replica's ``tensor`` concatenated along dim 0 in rank order: ``[world * n, ...]``."""
        if self.world_size == 1:
            return tensor
        self._check_collectives("all_gather")
        if self.mode.collectives == "xla":
            # thread replicas need one graph for all ranks: XLA's all-gather, not the padded all-reduce
            return self._launched(compat.xla_all_gather(tensor, pin_layout=self._turnstile is None), "all_gather")
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    def barrier(self, tag: str) -> None:
        """Wait until every replica reaches ``tag`` (``xm.rendezvous`` on XLA, ``dist.barrier`` elsewhere)."""
        if self.world_size == 1:
            return
        self._check_collectives("barrier")
        if self._turnstile is not None:  # xm.rendezvous launches and reads several graphs: one all-reduce instead
            import torch

            self.all_reduce_sum(torch.zeros(1, device=self.device)).cpu()
        elif self.mode.collectives == "xla":
            compat.xla_rendezvous(tag)
        else:
            import torch.distributed as dist

            dist.barrier()

    def _launched(self, tensor, what: str):
        """``tensor`` (the lazy result of a collective); on thread replicas, its graph launched in turn."""
        if self._turnstile is not None:
            self._in_turn(what, [tensor])
        return tensor

    def _in_turn(self, what: str, tensors=None) -> None:
        """Launch the pending graph (of ``tensors``, or of every live tensor) in rank order, then
        run the step closures outside the turn (they may read results, which needs the others' launches)."""
        self._turnstile.launch(self.rank, what, lambda: compat.xla_submit(tensors))
        compat.xla_finish_sync()

    def init_xla_process_group(self) -> None:
        """Join ``torch.distributed``'s ``xla`` process group (``xla://``), for DDP on XLA replicas.

        On thread replicas the process group's broadcasts and all-gathers (DDP's parameter check
        and broadcast at construction, its bucket rebuild at the second step) launch in turn.
        """
        if self._turnstile is None:
            compat.xla_init_process_group()
        else:
            compat.xla_init_process_group(lambda tensors: self._in_turn("process group collective", tensors))

    def failed_ranks(self, failed: bool) -> list[int]:
        """Exchange one flag per rank (an all-reduce): the ranks that say they failed, in order."""
        if self.world_size == 1 or self.mode.collectives is None:
            return [self.rank] if failed else []
        import torch

        flags = torch.zeros(self.world_size, dtype=torch.float32)
        flags[self.rank] = float(failed)
        flags = self.all_reduce_sum(flags.to(self.device)).cpu()
        return [int(r) for r in torch.nonzero(flags).flatten().tolist()]

    @contextlib.contextmanager
    def together(self, what: str):
        """Run the block on every rank, then agree whether all succeeded, before anyone goes on.

        Raises:
            the block's own exception, on the rank where it was raised;
            PeerFailed: on the other ranks, when any rank failed (the launcher treats it as a
                quiet stop, so the one error reported is the original).
        """
        error: BaseException | None = None
        try:
            yield
        except Exception as e:  # noqa: BLE001 - re-raised below, after the others have been told
            error = e
        failed = self.failed_ranks(error is not None)
        if error is not None:
            raise error
        if failed:
            raise PeerFailed(f"rank(s) {failed} failed while {what}")

    # ------------------------------------------------------------------ stepping

    def step(self):
        """Context around one training step: ``torch_xla.step()`` on XLA (cuts and runs the graph), else nothing.

        On thread replicas the graphs before and after the step launch in turn (module doc).
        """
        if self._turnstile is not None:
            return self._step_in_turn()
        return compat.xla_step() if self.xla else contextlib.nullcontext()

    @contextlib.contextmanager
    def _step_in_turn(self):
        self._in_turn("the pending graph before a step")
        yield
        self._in_turn("a training step")

    def loader(self, loader):
        """``loader`` as this replica consumes it: through ``MpDeviceLoader`` on XLA (batches arrive on the device)."""
        return compat.xla_device_loader(loader, self.device) if self.xla else loader

    def to_device(self, batch):
        """Move a tensor, or a dict/tuple of tensors, to this replica's device (a no-op for XLA loader batches)."""
        if self.xla:
            return batch
        if isinstance(batch, dict):
            return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        if isinstance(batch, (list, tuple)):
            return type(batch)(v.to(self.device, non_blocking=True) for v in batch)
        return batch.to(self.device, non_blocking=True)

    def precision(self, requested: str = "auto") -> str:
        """The compute precision for ``requested``: ``"auto"`` is bf16 on a TPU, fp16 on CUDA, fp32 elsewhere.

        Raises:
            ValueError: ``requested`` is not one of :data:`PRECISIONS`.
        """
        if requested not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {requested!r}")
        if requested != "auto":
            return requested
        return {"tpu": "bf16", "cuda": "fp16"}.get(self.mode.name, "fp32")

    def autocast(self, precision: str):
        """``torch.autocast`` for :meth:`precision` on this replica's device (nothing for fp32).

        Keep the classifier head in float32 with :func:`kitlib.model.keep_head_float32`, so
        probabilities are computed from float32 logits.
        """
        import torch

        p = self.precision(precision)
        if p in ("fp32", "int8"):  # int8 is in the model's modules (kitlib.quantize), not autocast
            return contextlib.nullcontext()
        return torch.autocast(self.mode.device, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[p])

    def compile_stats(self) -> dict:
        """XLA compilations so far: ``{"xla_compiles": n}`` for this replica, or
        ``{"xla_compiles_process": n}`` when thread replicas share one process's counter; ``{}`` off XLA."""
        if not self.xla:
            return {}
        key = "xla_compiles_process" if self.threaded else "xla_compiles"
        return {key: compat.xla_compile_count()}

    def close(self) -> None:
        """Leave the process group this replica joined, and give the calling process its threads back.

        A thread replica also leaves the turnstile: the others stop (:class:`PeerFailed`) at the
        next graph this one will never launch.
        """
        if self._turnstile is not None:
            self._turnstile.leave(self.rank)
        if self._process_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._process_group = False
        if self._restore_threads is not None:
            import torch

            torch.set_num_threads(self._restore_threads)
            self._restore_threads = None


def start_replica(index: int, rt: Runtime, start_method: str = "fork") -> Replica:
    """Build the :class:`Replica` for launcher index ``index`` (called inside the replica).

    Sets the device, the CPU threads and, for process modes with more than one replica, joins the
    ``torch.distributed`` group (``env://``: ``MASTER_ADDR``/``MASTER_PORT`` from the launcher or torchrun).
    """
    import torch

    mode = MODES[rt.mode]
    if mode.device != "cpu" or rt.num_replicas != 1 or rt.started_by != "kit":
        _quiet_unless_master(index == 0 and rt.host == 0)
    if mode.device == "xla":
        device = compat.xla_device()
        if mode.start == "torch_xla.launch":
            rank, world = compat.xla_rank(), compat.xla_world_size()
        else:  # one PJRT CPU device per process: ranks from the launcher
            rank, world = rt.host * rt.num_replicas + index, rt.world_size
        if mode.start == "processes":  # single-threaded under fork (see below), its share of the cores when spawned
            torch.set_num_threads(rt.threads if start_method == "spawn" else 1)
        turnstile = _shared_turnstile(world) if mode.name == "xla-cpu" and world > 1 else None
        return Replica(rank, world, index, device, mode, rt.host, rt.num_hosts, torch.get_num_threads(),
                       _turnstile=turnstile)

    if rt.started_by == "torchrun":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        rank, world = rt.host * rt.num_replicas + index, rt.world_size
    restore = None
    if mode.device == "cuda":
        torch.cuda.set_device(index)  # in the replica: the parent never initialises CUDA
        device = torch.device("cuda", index)
    else:
        device = torch.device("cpu")
    inline = rt.num_replicas == 1 and rt.started_by == "kit"
    if inline:
        restore = torch.get_num_threads()
    # A forked child must stay off the OpenMP pool its parent may have started (GNU libgomp is not
    # fork-safe: the first parallel op waits forever); kitlib.runtime spawns multi-threaded replicas.
    torch.set_num_threads(rt.threads if (inline or start_method == "spawn" or rt.started_by == "torchrun") else 1)
    replica = Replica(rank, world, index, device, mode, rt.host, rt.num_hosts, torch.get_num_threads(),
                      _restore_threads=restore)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group(mode.collectives, init_method="env://", rank=rank, world_size=world)
        replica._process_group = True
    return replica


def _quiet_unless_master(master: bool) -> None:
    """Only the master shows transformers' progress bars ("Loading weights") and info logs."""
    if master:
        return
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
