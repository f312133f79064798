"""Eager torch replicas that talk through ``torch.distributed`` (gloo or nccl): what cpu, cuda and torchrun share.

Each replica with more than one in the world joins the process group at :meth:`open`
(``init_method="env://"``: ``MASTER_ADDR``/``MASTER_PORT`` from the launch or from torchrun) and
leaves it at :meth:`close`. Collectives are ``torch.distributed``'s; the ``"optimizer_step"``
pattern averages gradients by hand (:func:`average_gradients`, what ``xm.optimizer_step`` does on
XLA), the ``"ddp"`` pattern wraps the model in ``DistributedDataParallel``.
"""
from __future__ import annotations

from .base import Backend, OptimizerStep, global_rank, quiet_unless_master


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


class TorchDistributed(Backend):
    """Base of the eager backends. Subclasses say where ranks and devices come from."""

    collectives = "gloo"

    # where this replica's rank, world size, device and threads come from (overridden by subclasses)
    def rank_and_world(self, index: int, rt) -> tuple[int, int]:
        return global_rank(rt, index), rt.world_size

    def replica_device(self, index: int):
        import torch

        return torch.device("cpu")

    def replica_threads(self, rt, start_method: str) -> int:
        """CPU threads: the replica's share under spawn; 1 under fork (a forked child must stay off the
        OpenMP pool its parent may have started: GNU libgomp is not fork-safe, the first parallel op waits forever)."""
        return rt.threads if start_method == "spawn" else 1

    def open(self, index: int, rt, start_method: str):
        quiet_unless_master(index == 0 and rt.host == 0)
        return self._open(index, rt, start_method, self.replica_threads(rt, start_method))

    def _open(self, index: int, rt, start_method: str, threads: int, restore: int | None = None):
        import torch

        from ..replica import Replica

        rank, world = self.rank_and_world(index, rt)
        device = self.replica_device(index)
        torch.set_num_threads(threads)
        replica = Replica(rank, world, index, device, self, rt.host, rt.num_hosts, torch.get_num_threads())
        replica.state["restore_threads"] = restore
        if world > 1:
            import torch.distributed as dist

            dist.init_process_group(self.collectives, init_method="env://", rank=rank, world_size=world)
            replica.state["process_group"] = True
        return replica

    def close(self, replica) -> None:
        if replica.state.pop("process_group", False):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        restore = replica.state.pop("restore_threads", None)
        if restore is not None:
            import torch

            torch.set_num_threads(restore)

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

    def ddp_device_ids(self, replica):
        return None

    def wrap_model(self, replica, model, pattern: str):
        if pattern != "ddp" or replica.world_size == 1:  # one eager replica: nothing to average
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        # broadcast_buffers=False: the models' buffers (position / token type ids) are constants, the
        # same on every replica; broadcasting them would add a collective to every step.
        return DDP(model, device_ids=self.ddp_device_ids(replica), gradient_as_bucket_view=True, broadcast_buffers=False)

    def optimizer_step(self, replica, optimizer, model, net, requested: str) -> OptimizerStep:
        scaler = self.resolve_precision(requested).grad_scaler()
        sync = None if net is not model else (lambda: average_gradients(model, replica))  # DDP's backward averages
        return OptimizerStep(optimizer, sync, None, scaler)
