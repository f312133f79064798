"""``tpu``: ``torch_xla.launch``, one process per TPU chip, XLA collectives; the base of every XLA backend.

Rank and world size come from ``torch_xla.runtime`` (global ordinal, world size). Collectives are
``xm.all_reduce`` / ``xm.all_gather`` / ``xm.rendezvous``; the ``"optimizer_step"`` pattern steps
with ``xm.optimizer_step`` (all-reduce of the gradients, then the step), the ``"ddp"`` pattern
wraps the model in ``DistributedDataParallel`` over the ``xla`` process group (``xla://``). Batches
arrive on the device through ``MpDeviceLoader``; each training step is a ``torch_xla.step()``.

Before starting, the calling process must not have touched the XLA runtime, and must not have
imported TensorFlow before torch_xla (:meth:`Xla.check_parent`). The launch removes the variables
that change precision behind the kit's back (:func:`kitlib.backends.precision.precision_env_overrides`).
Every torch_xla name goes through :mod:`kitlib.compat`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .. import compat
from . import precision as prec
from .base import Backend, OptimizerStep, quiet_unless_master, run_replica


class Xla(Backend):
    name = "tpu"
    device = "xla"
    hardware = "tpu"
    precision_of = "tpu"
    collectives = "xla"
    starts = "torch_xla.launch: one process per TPU chip"
    summary = "torch_xla.launch, one process per TPU chip"
    pjrt_device = "TPU"

    # ------------------------------------------------------------ in the calling process

    def env(self, rt):
        return {"PJRT_DEVICE": self.pjrt_device, **prec.precision_env_overrides()}

    def check_parent(self, rt) -> None:
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

    def launch(self, fn, job, rt, start_method: str) -> None:
        compat.xla_launch(run_replica, (fn, job, rt, start_method), start_method)

    # ------------------------------------------------------------ in each replica

    def open(self, index: int, rt, start_method: str):
        import torch

        from ..replica import Replica

        quiet_unless_master(index == 0 and rt.host == 0)
        device = compat.xla_device()
        return Replica(compat.xla_rank(), compat.xla_world_size(), index, device, self, rt.host, rt.num_hosts,
                       torch.get_num_threads())

    def close(self, replica) -> None:
        if replica.state.pop("process_group", False):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()

    def all_reduce_sum(self, replica, tensor):
        return compat.xla_all_reduce_sum(tensor)

    def all_gather(self, replica, tensor):
        return compat.xla_all_gather(tensor)

    def barrier(self, replica, tag: str) -> None:
        compat.xla_rendezvous(tag)

    def step(self, replica):
        return compat.xla_step()

    def after_step(self, replica, fn, args) -> None:
        compat.xla_add_step_closure(fn, args)

    def loader(self, replica, loader):
        return compat.xla_device_loader(loader, replica.device)

    def to_device(self, replica, batch):
        return batch  # MpDeviceLoader's batches are on the device already

    def join_process_group(self, replica) -> None:
        compat.xla_init_process_group()

    def gradient_as_bucket_view(self, replica) -> bool:
        return True

    def wrap_model(self, replica, model, pattern: str):
        if pattern != "ddp":
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.join_process_group(replica)
        replica.state["process_group"] = True
        # broadcast_buffers=False: the buffers (position / token type ids) are constants on every replica.
        return DDP(model, gradient_as_bucket_view=self.gradient_as_bucket_view(replica), broadcast_buffers=False)

    def optimizer_step(self, replica, optimizer, model, net, requested: str) -> OptimizerStep:
        # fp16 training is refused on XLA (check_training): no scaler here
        if net is not model:
            return OptimizerStep(optimizer, None)  # DDP's backward already averaged
        return OptimizerStep(optimizer, None, lambda: compat.xla_optimizer_step(optimizer))

    def use_compile_cache(self, replica, root: str) -> None:
        compat.xla_initialize_cache(str(Path(root) / f"proc-{replica.local_rank}"))

    def compile_count(self, replica) -> int:
        return compat.xla_compile_count()

    def compile_stats(self, replica) -> dict:
        return {"xla_compiles": compat.xla_compile_count()}


class TpuPod(Xla):
    """``tpu-pod``: every host of a TPU pod slice runs the same program; ``torch_xla.launch`` starts
    this host's chips. The global ordinal comes from torch_xla, the host from
    :func:`kitlib.hardware.tpu_hosts`; host 0 holds global rank 0."""

    name = "tpu-pod"
    started_by = "tpu-pod"
    starts = "torch_xla.launch on every host of the slice: one process per TPU chip"
    summary = "torch_xla.launch on every host of a TPU pod slice, one process per chip"
