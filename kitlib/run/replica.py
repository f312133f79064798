"""What one replica is handed: one object, built inside the replica by its backend's ``open``.

:func:`kitlib.run.runtime.launch` starts the replicas of a launch mode (a row of
:data:`kitlib.run.runtime.MODES`, :mod:`kitlib.run.backends`), and in each the row's
:meth:`~kitlib.run.backends.base.Backend.open` builds a :class:`Replica`, as Accelerate's
``PartialState`` is built from the launcher's environment: rank, world size, its device, its
collectives and the compute precision (a :class:`~kitlib.run.backends.precision.Precision`, resolved once
in the calling process). Replica programs never ask for their rank themselves and never branch on the
mode: they call the replica's methods.

Failures: a replica that raises while the others wait in a collective would leave them waiting forever
on a TPU (pytorch/xla#7974). Wrap any step that can fail on one rank only in
``with replica.together("what"):`` (:meth:`Replica.together`).

This module imports nothing of :mod:`kitlib.run.backends` but the precision type: the backends build
replicas, replicas do not know backends.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable


class PeerFailed(RuntimeError):
    """Another rank failed (inside :meth:`Replica.together`, or before a graph thread replicas
    launch in turn); this rank stops without an error of its own."""


class OptimizerStep:
    """``backward``, the gradient exchange and the optimizer step of one replica, as one call.

    Under fp16 the loss is scaled by ``scaler`` (a ``torch.amp.GradScaler``) before ``backward``
    and the step goes through ``scaler.step`` / ``scaler.update`` (:mod:`kitlib.run.backends.precision`);
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


class Replica:
    """One replica of a run: built by :meth:`kitlib.run.backends.base.Backend.open`, handed to the replica program.

    Attributes:
        rank: global rank, 0-based (shards are named by it).
        world_size: replicas over all hosts.
        local_rank: index of this replica on its host.
        host, num_hosts: this host's index and the number of hosts.
        threads: CPU threads this replica uses (``torch.get_num_threads()`` after start).
        device: the ``torch.device`` to compute on (``xla:N``, ``cuda:N`` or ``cpu``).
        precision: the compute precision (:class:`kitlib.run.backends.precision.Precision`), resolved once.
        mode: the launch mode's row (:class:`kitlib.run.backends.base.Backend`: ``.name``, ``.summary``).
        accelerator: the device part (:mod:`kitlib.run.backends.accelerators`).
        collectives: this replica's own collectives object (:mod:`kitlib.run.backends.collectives`).
        threaded: several replicas are threads of this one process (``xla-cpu``): per-process
            counters are shared and no writable cache may be.
    """

    def __init__(self, *, rank: int, world_size: int, local_rank: int, host: int, num_hosts: int, threads: int,
                 device: Any, precision, mode, accelerator, collectives, threaded: bool = False,
                 restore_threads: int | None = None):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.host, self.num_hosts, self.threads = host, num_hosts, threads
        self.device, self.precision, self.mode = device, precision, mode
        self.accelerator, self.collectives = accelerator, collectives
        self.threaded = threaded and world_size > 1
        self._restore_threads = restore_threads

    def __repr__(self) -> str:
        return (f"<replica rank {self.rank} of {self.world_size} ({self.mode.name}) on {self.device}, "
                f"{self.precision.name}>")

    @property
    def is_master(self) -> bool:
        """True on global rank 0: the replica that logs, shows progress and writes shared files."""
        return self.rank == 0

    @property
    def xla(self) -> bool:
        """True when this replica computes on an XLA device (TPU or PJRT CPU): the model loads XLA's attention."""
        return self.accelerator.device_type == "xla"

    @property
    def static_shapes(self) -> bool:
        """True when every model call should be one of a few fixed shapes (XLA compiles one graph per shape)."""
        return self.accelerator.static_shapes

    # ------------------------------------------------------------------ collectives

    def all_reduce_sum(self, tensor):
        """Sum of ``tensor`` over all replicas (same shape, on this replica's device)."""
        return tensor if self.world_size == 1 else self.collectives.all_reduce_sum(self, tensor)

    def all_gather(self, tensor):
        """Every replica's ``tensor`` concatenated along dim 0 in rank order: ``[world * n, ...]``."""
        return tensor if self.world_size == 1 else self.collectives.all_gather(self, tensor)

    def barrier(self, tag: str) -> None:
        """Wait until every replica reaches ``tag`` (``xm.rendezvous`` on XLA, ``dist.barrier`` elsewhere)."""
        if self.world_size > 1:
            self.collectives.barrier(self, tag)

    def failed_ranks(self, failed: bool) -> list[int]:
        """Exchange one flag per rank (an all-reduce): the ranks that say they failed, in order."""
        if self.world_size == 1 or self.collectives.name is None:
            return [self.rank] if failed else []
        import torch

        flags = torch.zeros(self.world_size, dtype=torch.float32)
        flags[self.rank] = float(failed)
        flags = self.all_reduce_sum(flags.to(self.device)).cpu()
        return [int(r) for r in torch.nonzero(flags).flatten().tolist()]

    def agree_on(self, *flags: bool) -> tuple[bool, ...]:
        """The master's ``flags`` on every rank (an all-reduce in which the other ranks add zeros): one
        decision that depends on the master's clock, taken by all (a save point, a time budget)."""
        if self.world_size == 1:
            return tuple(bool(f) for f in flags)
        import torch

        mine = torch.tensor([float(f) * float(self.is_master) for f in flags], dtype=torch.float32)
        return tuple(bool(v > 0) for v in self.all_reduce_sum(mine.to(self.device)).cpu().tolist())

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
        return self.collectives.step(self)

    def after_step(self, fn: Callable, args: tuple) -> None:
        """Call ``fn(*args)`` once this step's results can be read (an XLA step closure; at once elsewhere)."""
        self.accelerator.after_step(fn, args)

    def loader(self, loader):
        """``loader`` as this replica consumes it: through ``MpDeviceLoader`` on XLA (batches arrive on the device)."""
        return self.accelerator.loader(loader, self.device)

    def to_device(self, batch):
        """Move a tensor, or a dict/tuple of tensors, to this replica's device (a no-op for XLA loader batches)."""
        return self.accelerator.to_device(batch, self.device)

    def wrap_model(self, model, pattern: str):
        """The module to train: ``model``, or ``DistributedDataParallel(model)`` for ``pattern="ddp"``
        where the collectives have something to average (:mod:`kitlib.training.loop`)."""
        return self.collectives.wrap_model(self, model, pattern)

    def optimizer_step(self, optimizer, model, net) -> OptimizerStep:
        """The callable that takes one step from a loss: ``backward``, this replica's gradient exchange
        (``xm.optimizer_step``, DDP's, or an all-reduce by hand) and ``optimizer.step``, through a
        ``torch.amp.GradScaler`` under fp16 (:attr:`precision`).

        Args:
            optimizer: the optimizer over ``model``'s parameters.
            model: the plain module; ``net``: what :meth:`wrap_model` returned for it.
        """
        sync, step = self.collectives.gradient_exchange(self, optimizer, model, net)
        return OptimizerStep(optimizer, sync, step, self.precision.grad_scaler())

    def autocast(self):
        """``torch.autocast`` at this replica's precision on its device (nothing for fp32).

        Keep the classifier head in float32 with :func:`kitlib.models.model.keep_head_float32`, so
        probabilities are computed from float32 logits.
        """
        return self.precision.autocast()

    def use_compile_cache(self, root: str | None) -> None:
        """Use a persistent XLA compilation cache under ``root`` (per process; not for thread replicas); None: none."""
        if root and not self.threaded:
            self.accelerator.use_compile_cache(root, self.local_rank)

    def compile_count(self) -> int | None:
        """XLA compilations so far in this process, or None off XLA."""
        return self.accelerator.compile_count()

    def compile_stats(self) -> dict:
        """XLA compilations so far: ``{"xla_compiles": n}`` for this replica, or
        ``{"xla_compiles_process": n}`` when thread replicas share one process's counter; ``{}`` off XLA."""
        n = self.accelerator.compile_count()
        if n is None:
            return {}
        return {"xla_compiles_process" if self.threaded else "xla_compiles": n}

    def device_name(self) -> str:
        """What the replica computes on (a GPU's name, read inside the replica; the parent never initialises CUDA)."""
        return self.accelerator.device_name(self.device)

    def close(self) -> None:
        """Leave what the collectives joined, and give the calling process its threads back."""
        self.collectives.close(self)
        if self._restore_threads is not None:
            import torch

            torch.set_num_threads(self._restore_threads)
            self._restore_threads = None
