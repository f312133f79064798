"""``xla-cpu-processes``: N processes, one PJRT CPU device each; no collectives (inference only).

Ranks come from the launcher (:func:`kitlib.backends.base.global_rank`); each process computes on
its own PJRT CPU device, single-threaded under fork (a forked child must stay off its parent's
OpenMP pool), with its share of the cores when spawned.
"""
from __future__ import annotations

from .. import compat
from .base import Backend, global_rank, quiet_unless_master
from .processes import start_processes
from .xla import Xla


class XlaCpuProcesses(Xla):
    name = "xla-cpu-processes"
    hardware = "cpu"
    collectives = None
    pjrt_device = "CPU"
    starts = "N processes, one PJRT CPU device each (inference)"
    summary = "torch_xla on PJRT CPU, one process per device, no collectives"

    def env(self, rt):
        return {**super().env(rt), "CPU_NUM_DEVICES": "1"}

    def launch(self, fn, job, rt, start_method: str) -> None:
        start_processes(fn, job, rt, start_method)

    def open(self, index: int, rt, start_method: str):
        import torch

        from ..replica import Replica

        quiet_unless_master(index == 0 and rt.host == 0)
        device = compat.xla_device()
        torch.set_num_threads(rt.threads if start_method == "spawn" else 1)
        return Replica(global_rank(rt, index), rt.world_size, index, device, self, rt.host, rt.num_hosts,
                       torch.get_num_threads())

    # no collectives: Backend's refusals, not Xla's
    all_reduce_sum = Backend.all_reduce_sum
    all_gather = Backend.all_gather
    barrier = Backend.barrier
