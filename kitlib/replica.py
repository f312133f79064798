"""What one replica is handed: its device, rank and world size, and its mode's collectives.

:func:`kitlib.runtime.launch` builds a :class:`Replica` in every replica (process or thread) through
its backend (a row of :data:`kitlib.runtime.MODES`, :mod:`kitlib.backends`), as Accelerate's
``PartialState`` is built from the launcher's environment, and calls the replica program with it.
A ``Replica`` is a thin handle: every method passes the call to its backend. Replica programs
never ask torch_xla or ``torch.distributed`` for their rank themselves, and never branch on the
mode: they call ``replica.all_reduce_sum``, ``replica.all_gather``, ``replica.barrier``,
``replica.together``, ``replica.step()``, ``replica.optimizer_step(...)`` and ``replica.autocast``.

Failures: a replica that raises while the others wait in a collective would leave them waiting
forever on a TPU (torch_xla's ``xm.rendezvous``; pytorch/xla#7974). Wrap any step that can fail on
one rank only (saving a checkpoint, reading a file) in ``with replica.together("what"):``. Every
rank then exchanges an ok flag before going on: the rank that failed re-raises its exception,
the others raise :class:`PeerFailed` and return quietly, so the launcher reports one error naming
the rank and the original exception.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

from .backends.base import Backend, OptimizerStep, PeerFailed  # noqa: F401  (PeerFailed: part of this API)
from .backends.precision import PRECISIONS  # noqa: F401


@dataclass
class Replica:
    """One replica's view of the run.

    Attributes:
        rank: global rank, 0-based (shards are named by it).
        world_size: replicas over all hosts.
        local_rank: index of this replica on its host.
        device: the ``torch.device`` to compute on (``xla:N``, ``cuda:N`` or ``cpu``).
        backend: the :mod:`kitlib.backends` backend of its launch mode (also as ``mode``).
        host, num_hosts: this host's index and the number of hosts.
        threads: CPU threads this replica uses (``torch.get_num_threads()`` after start).
        state: what the backend keeps for this replica (a process group joined, a turnstile).
    """

    rank: int
    world_size: int
    local_rank: int
    device: Any
    backend: Backend
    host: int = 0
    num_hosts: int = 1
    threads: int = 1
    state: dict = field(default_factory=dict, repr=False)

    @property
    def mode(self) -> Backend:
        """The launch mode's backend (``.name``, ``.collectives``, ``.summary``)."""
        return self.backend

    @property
    def is_master(self) -> bool:
        """True on global rank 0: the replica that logs, shows progress and writes shared files."""
        return self.rank == 0

    @property
    def xla(self) -> bool:
        """True when this replica computes on an XLA device (TPU or PJRT CPU)."""
        return self.backend.device == "xla"

    @property
    def threaded(self) -> bool:
        """True when several replicas are threads of one process (``xla-cpu``): per-process counters are shared."""
        return self.backend.threaded and self.world_size > 1

    # ------------------------------------------------------------------ collectives

    def all_reduce_sum(self, tensor):
        """Sum of ``tensor`` over all replicas (same shape, on this replica's device)."""
        return tensor if self.world_size == 1 else self.backend.all_reduce_sum(self, tensor)

    def all_gather(self, tensor):
        """Every replica's ``tensor`` concatenated along dim 0 in rank order: ``[world * n, ...]``."""
        return tensor if self.world_size == 1 else self.backend.all_gather(self, tensor)

    def barrier(self, tag: str) -> None:
        """Wait until every replica reaches ``tag`` (``xm.rendezvous`` on XLA, ``dist.barrier`` elsewhere)."""
        if self.world_size > 1:
            self.backend.barrier(self, tag)

    def failed_ranks(self, failed: bool) -> list[int]:
        """Exchange one flag per rank (an all-reduce): the ranks that say they failed, in order."""
        if self.world_size == 1 or self.backend.collectives is None:
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
        """Context around one training step: ``torch_xla.step()`` on XLA (cuts and runs the graph), else nothing."""
        return self.backend.step(self)

    def after_step(self, fn: Callable, args: tuple) -> None:
        """Call ``fn(*args)`` once this step's results can be read (an XLA step closure; at once elsewhere)."""
        self.backend.after_step(self, fn, args)

    def loader(self, loader):
        """``loader`` as this replica consumes it: through ``MpDeviceLoader`` on XLA (batches arrive on the device)."""
        return self.backend.loader(self, loader)

    def to_device(self, batch):
        """Move a tensor, or a dict/tuple of tensors, to this replica's device (a no-op for XLA loader batches)."""
        return self.backend.to_device(self, batch)

    def wrap_model(self, model, pattern: str):
        """The module to train: ``model``, or ``DistributedDataParallel(model)`` for ``pattern="ddp"``
        where the backend has something to average (:mod:`kitlib.train`)."""
        return self.backend.wrap_model(self, model, pattern)

    def optimizer_step(self, optimizer, model, net, precision: str) -> OptimizerStep:
        """The callable that takes one step from a loss: ``backward``, the gradient exchange of this
        backend (``xm.optimizer_step``, DDP's, or an all-reduce by hand) and ``optimizer.step``,
        through a ``torch.amp.GradScaler`` under fp16 (:mod:`kitlib.backends.precision`)."""
        return self.backend.optimizer_step(self, optimizer, model, net, precision)

    def precision(self, requested: str = "auto") -> str:
        """The compute precision for ``requested``: the rule is :mod:`kitlib.backends.precision`'s.

        Raises:
            ValueError: ``requested`` is not one of :data:`PRECISIONS`.
        """
        return self.backend.precision(requested)

    def autocast(self, precision: str):
        """``torch.autocast`` for :meth:`precision` on this replica's device (nothing for fp32).

        Keep the classifier head in float32 with :func:`kitlib.model.keep_head_float32`, so
        probabilities are computed from float32 logits.
        """
        return self.backend.autocast(precision)

    def use_compile_cache(self, root: str | None) -> None:
        """Use a persistent XLA compilation cache under ``root`` (per process; not for thread replicas); None: none."""
        if root:
            self.backend.use_compile_cache(self, root)

    def compile_count(self) -> int | None:
        """XLA compilations so far in this process, or None off XLA."""
        return self.backend.compile_count(self)

    def compile_stats(self) -> dict:
        """XLA compilations so far: ``{"xla_compiles": n}`` for this replica, or
        ``{"xla_compiles_process": n}`` when thread replicas share one process's counter; ``{}`` off XLA."""
        return self.backend.compile_stats(self)

    def device_name(self) -> str:
        """What the replica computes on (a GPU's name, read inside the replica; the parent never initialises CUDA)."""
        return self.backend.device_name(self)

    def close(self) -> None:
        """Leave what the backend joined for this replica, and give the calling process its threads back."""
        self.backend.close(self)


def start_replica(index: int, rt, start_method: str = "fork") -> Replica:
    """Build the :class:`Replica` for launcher index ``index`` (called inside the replica): its backend's ``open``."""
    return rt.backend.open(index, rt, start_method)
