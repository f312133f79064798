"""How replicas talk to each other: one object per replica, holding what it joined.

A launch mode's row names a collectives class; :meth:`Collectives.for_replica` builds one instance inside
each replica, which :meth:`~Collectives.open` s what it needs (a process group) and keeps it until
:meth:`~Collectives.close`. Each answers the reductions, the training step's context, how a model is
wrapped for a pattern (``"ddp"``), and how gradients are exchanged before the optimizer steps.

================  ===========================================  ===============================================
class             collectives                                   gradient exchange (``"optimizer_step"`` pattern)
================  ===========================================  ===============================================
:class:`NoCollectives`  none (inference only)                 none
:class:`TorchDistributed`  ``torch.distributed`` over gloo/nccl  an all-reduce by hand (:func:`average_gradients`)
:class:`Xla`      ``xm.all_reduce`` / ``all_gather`` / ``rendezvous``  ``xm.optimizer_step``
threads (:mod:`kitlib.run.backends.xla_threads`)  the same, launched in turn by thread replicas
================  ===========================================  ===============================================

With ``pattern="ddp"`` DDP's backward averages the gradients instead, and the optimizer steps plainly.
"""
from __future__ import annotations

from typing import Callable

from ... import compat
from .processes import rendezvous_env


def average_gradients(model, replica) -> None:
    """All-reduce every parameter gradient over the replicas and divide by the world size.

    What ``xm.optimizer_step`` does before stepping, for nccl/gloo. Parameters without a
    gradient are skipped (every replica must have the same ones).
    """
    if replica.world_size == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            replica.all_reduce_sum(p.grad)
            p.grad.div_(replica.world_size)


class Collectives:
    """What every collectives object answers. As it is, replicas cannot exchange data: the reductions
    raise, naming the mode (:class:`NoCollectives`); the subclasses below implement them."""

    name: str | None = None

    @classmethod
    def for_replica(cls, world_size: int) -> "Collectives":
        """The instance one replica of a ``world_size`` run holds."""
        return cls()

    @staticmethod
    def env(rt, launcher) -> dict[str, str | None]:
        """Variables the launch needs for these collectives."""
        return {}

    def open(self, replica) -> None:
        """Join what the replica needs (called inside it, once)."""

    def close(self, replica) -> None:
        """Leave what :meth:`open` joined."""

    def abandon(self, rank: int) -> None:
        """Rank ``rank`` failed before its replica was open: let the others stop instead of waiting for it
        (thread replicas; processes learn it from their launcher)."""

    def _none(self, replica, what: str) -> RuntimeError:
        return RuntimeError(f"{what} needs collectives, which launch mode {replica.mode.name!r} does not have "
                            f"({replica.mode.summary}); use accelerator='cpu' or 'xla-cpu' for training")

    def all_reduce_sum(self, replica, tensor):
        raise self._none(replica, "all_reduce_sum")

    def all_gather(self, replica, tensor):
        raise self._none(replica, "all_gather")

    def barrier(self, replica, tag: str) -> None:
        raise self._none(replica, "barrier")

    def step(self, replica):
        """Context around one training step: the device's (``torch_xla.step()`` on XLA)."""
        return replica.accelerator.step()

    def wrap_model(self, replica, model, pattern: str):
        """The module to call: ``model`` (nothing to average)."""
        return model

    def gradient_exchange(self, replica, optimizer, model, net) -> tuple[Callable | None, Callable | None]:
        """``(sync, step)`` for :class:`kitlib.run.replica.OptimizerStep`: what runs between ``backward`` and
        the step, and the step itself (None: ``optimizer.step()``)."""
        return None, None


class NoCollectives(Collectives):
    """No collectives: replicas cannot exchange data (``xla-cpu-processes``: inference only)."""


class TorchDistributed(Collectives):
    """``torch.distributed`` over gloo (CPU) or nccl (CUDA); the process group is joined at :meth:`open`
    (``init_method="env://"``: ``MASTER_ADDR``/``MASTER_PORT`` from the launch, or from torchrun) when
    there is more than one replica, and left at :meth:`close`."""

    name = "gloo"
    joined = False

    @staticmethod
    def env(rt, launcher) -> dict[str, str | None]:
        """A fresh local rendezvous when the kit starts several replicas (torchrun sets its own)."""
        return {} if launcher.sets_rendezvous or rt.num_replicas * rt.num_hosts <= 1 else rendezvous_env()

    def open(self, replica) -> None:
        if replica.world_size > 1:
            import torch.distributed as dist

            dist.init_process_group(self.name, init_method="env://", rank=replica.rank, world_size=replica.world_size)
            self.joined = True

    def close(self, replica) -> None:
        if self.joined:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.joined = False

    def all_reduce_sum(self, replica, tensor):
        import torch.distributed as dist

        dist.all_reduce(tensor)
        return tensor

    def all_gather(self, replica, tensor):
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(tensor) for _ in range(replica.world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    def barrier(self, replica, tag: str) -> None:
        import torch.distributed as dist

        dist.barrier()

    def wrap_model(self, replica, model, pattern: str):
        if pattern != "ddp" or replica.world_size == 1:  # one replica: nothing to average
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        # broadcast_buffers=False: the models' buffers (position / token type ids) are constants, the
        # same on every replica; broadcasting them would add a collective to every step.
        return DDP(model, device_ids=replica.accelerator.ddp_device_ids(replica.device), gradient_as_bucket_view=True,
                   broadcast_buffers=False)

    def gradient_exchange(self, replica, optimizer, model, net):
        if net is not model:
            return None, None  # DDP's backward averaged
        return (lambda: average_gradients(model, replica)), None


class Nccl(TorchDistributed):
    """``torch.distributed`` over nccl (one GPU per replica)."""

    name = "nccl"


class Xla(Collectives):
    """torch_xla's collectives: ``xm.all_reduce`` / ``xm.all_gather`` / ``xm.rendezvous``; DDP over the
    ``xla`` process group (``init_method="xla://"``), joined when a model is wrapped."""

    name = "xla"
    joined = False
    gradient_as_bucket_view = True

    def close(self, replica) -> None:
        if self.joined:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.joined = False

    def all_reduce_sum(self, replica, tensor):
        return compat.xla_all_reduce_sum(tensor)

    def all_gather(self, replica, tensor):
        return compat.xla_all_gather(tensor)

    def barrier(self, replica, tag: str) -> None:
        compat.xla_rendezvous(tag)

    def join_process_group(self, replica) -> None:
        compat.xla_init_process_group()

    def wrap_model(self, replica, model, pattern: str):
        if pattern != "ddp":
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.join_process_group(replica)
        self.joined = True
        # broadcast_buffers=False: the buffers (position / token type ids) are constants on every replica.
        return DDP(model, gradient_as_bucket_view=self.gradient_as_bucket_view, broadcast_buffers=False)

    def gradient_exchange(self, replica, optimizer, model, net):
        # fp16 training is refused on XLA (kitlib.run.backends.precision.check_training): no scaler here
        if net is not model:
            return None, None  # DDP's backward averaged
        return None, (lambda: compat.xla_optimizer_step(optimizer))
