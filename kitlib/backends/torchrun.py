"""``cpu-torchrun`` / ``cuda-torchrun``: this process is one replica that torchrun started.

torchrun (``torch.distributed.run``) starts one process per replica on every host and sets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; ``launch`` runs the replica program in this process, with torchrun's global rank
and world size. Only the process of ``RANK=0`` merges and reads results back.
"""
from __future__ import annotations

import os

from .base import run_replica
from .cpu import Cpu
from .cuda import Cuda
from .distributed import TorchDistributed


class _Torchrun:
    started_by = "torchrun"
    starts = "by torchrun: this process is one replica"

    def launch(self, fn, job, rt, start_method: str) -> None:
        run_replica(int(os.environ["LOCAL_RANK"]), fn, job, rt, start_method)

    def env(self, rt):
        return {}  # torchrun set them

    def rank_and_world(self, index: int, rt) -> tuple[int, int]:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def replica_threads(self, rt, start_method: str) -> int:
        return rt.threads  # torchrun's processes are not forked from a notebook

    def holds_global_rank0(self, rt) -> bool:
        return int(os.environ["RANK"]) == 0


class CpuTorchrun(_Torchrun, Cpu):
    name = "cpu-torchrun"
    summary = "eager torch on the CPU, started by torchrun, gloo"

    def open(self, index: int, rt, start_method: str):
        return TorchDistributed.open(self, index, rt, start_method)  # never Cpu's in-process path


class CudaTorchrun(_Torchrun, Cuda):
    name = "cuda-torchrun"
    summary = "one process per GPU, started by torchrun, nccl"
