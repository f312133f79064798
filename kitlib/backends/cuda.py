"""``cuda``: one process per GPU, nccl.

The calling process never initialises CUDA (``torch.cuda.set_device`` runs in the replica), so
forked replicas can use it (:mod:`kitlib.hardware`).
"""
from __future__ import annotations

from .distributed import TorchDistributed
from .processes import rendezvous_env, start_processes


class Cuda(TorchDistributed):
    name = "cuda"
    device = "cuda"
    hardware = "cuda"
    precision_of = "cuda"
    collectives = "nccl"
    starts = "one process per GPU (torch.multiprocessing)"
    summary = "one process per GPU, nccl"

    def env(self, rt):
        return rendezvous_env()

    def launch(self, fn, job, rt, start_method: str) -> None:
        start_processes(fn, job, rt, start_method)

    def replica_device(self, index: int):
        import torch

        torch.cuda.set_device(index)  # in the replica: the parent never initialises CUDA
        return torch.device("cuda", index)

    def ddp_device_ids(self, replica):
        return [replica.device.index]

    def device_name(self, replica) -> str:
        import torch

        return torch.cuda.get_device_name(replica.device)
