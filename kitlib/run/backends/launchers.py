"""How a launch mode's replicas start and learn who they are: one small class per way of starting.

Each is asked, in the calling process, for the variables it needs (:meth:`~Processes.env`) and to
start every replica of this host (:meth:`~Processes.launch`: each runs
:func:`kitlib.run.backends.base.run_replica`), and, inside a replica, for its rank and world size and
its CPU threads: :class:`Processes`, :class:`HereOrProcesses`, :class:`XlaLaunch`, :class:`Torchrun` (which
mode starts how, and where its rank comes from: the table of :mod:`kitlib.run.runtime`).

Start method: GNU libgomp is not fork-safe, so processes forked from a notebook run single-threaded,
and :class:`HereOrProcesses` starts multi-threaded replicas with spawn when the program is importable.
"""
from __future__ import annotations

import os
from concurrent.futures.process import BrokenProcessPool

from ... import compat
from .base import ReplicaError, global_rank, run_replica
from .processes import start_processes


class Processes:
    """N local processes, one per replica, started with the start method asked for."""

    started_by = "kit"
    threads_share_process = False  # replicas are threads of one process (per-process counters are shared)
    sets_rendezvous = False  # the launcher itself provides MASTER_ADDR / MASTER_PORT

    def env(self, rt) -> dict[str, str | None]:
        return {}

    def launch(self, fn, job, rt, start_method: str, precision) -> None:
        start_processes(fn, job, rt, start_method, precision)

    def rank_and_world(self, index: int, rt) -> tuple[int, int]:
        return global_rank(rt, index), rt.world_size

    def threads(self, rt, start_method: str) -> tuple[int | None, int | None]:
        """``(threads to set, threads to give back at close)``: the replica's share under spawn; 1 under
        fork (a forked child must stay off the OpenMP pool its parent may have started)."""
        return (rt.threads if start_method == "spawn" else 1), None

    def holds_global_rank0(self, rt) -> bool:
        return rt.host == 0


class HereOrProcesses(Processes):
    """One replica in the calling process with every thread of ``rt`` (given back afterwards), or N
    processes with their share of the cores: multi-threaded ones started with spawn (module doc)."""

    def start_method(self, rt, start_method: str, fn) -> str:
        """``start_method``, or spawn for multi-threaded replicas under fork (module doc), with a note."""
        if start_method == "fork" and rt.threads > 1 and getattr(fn, "__module__", "__main__") != "__main__":
            print(f"note: the {rt.num_replicas} CPU replicas ({rt.threads} threads each) start with 'spawn', not "
                  "'fork': a forked child of a process that ran parallel torch ops hangs (GNU libgomp is not "
                  "fork-safe). Pass start_method='spawn' to choose it yourself.", flush=True)
            return "spawn"
        return start_method

    def launch(self, fn, job, rt, start_method: str, precision) -> None:
        if rt.num_replicas == 1:  # no process to start
            run_replica(0, fn, job, rt, start_method, precision)
            return
        start_processes(fn, job, rt, self.start_method(rt, start_method, fn), precision)

    def threads(self, rt, start_method: str) -> tuple[int | None, int | None]:
        if rt.num_replicas == 1:  # the calling process itself: its threads, given back at close
            import torch

            return rt.threads, torch.get_num_threads()
        return super().threads(rt, start_method)


class XlaLaunch:
    """``torch_xla.launch``: one process per TPU chip (on every host of a pod slice), or the PJRT CPU
    devices of one process as threads (``threads_share_process``)."""

    sets_rendezvous = True  # the PJRT runtime connects its replicas itself

    def __init__(self, started_by: str = "kit", threads_share_process: bool = False):
        self.started_by, self.threads_share_process = started_by, threads_share_process

    def env(self, rt) -> dict[str, str | None]:
        return {}

    def launch(self, fn, job, rt, start_method: str, precision) -> None:
        """Raises :class:`~kitlib.run.backends.base.ReplicaError` when a replica raised, or when a replica
        process died without a Python error (torch_xla's pool says only ``BrokenProcessPool``): a signal, such as
        a crash inside torch_xla (a ``SIGSEGV`` in ``_XLAC``, seen once in 2 PJRT CPU thread replicas) or the
        out-of-memory killer; the rank is this host's first, as torch_xla does not say which died."""
        try:
            compat.xla_launch(run_replica, (fn, job, rt, start_method, precision), start_method)
        except BrokenProcessPool:
            first, last = global_rank(rt, 0), global_rank(rt, rt.num_replicas - 1)
            raise ReplicaError(first, f"a torch_xla replica process of ranks {first}-{last} died without a Python "
                               "error: killed by a signal (a crash inside torch_xla or the PJRT runtime, or the "
                               "out-of-memory killer: `dmesg` names it); run it again, and if it repeats, "
                               "report it with dmesg's line") from None

    def rank_and_world(self, index: int, rt) -> tuple[int, int]:
        return compat.xla_rank(), compat.xla_world_size()

    def threads(self, rt, start_method: str) -> tuple[int | None, int | None]:
        return None, None  # torch_xla's processes (or threads) keep what they have

    def holds_global_rank0(self, rt) -> bool:
        return rt.host == 0  # host 0 of a pod holds ordinals 0 .. n-1


class Torchrun:
    """torchrun (``torch.distributed.run``) started one process per replica on every host and set
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR`` and
    ``MASTER_PORT``: this process is one replica, and only ``RANK=0`` merges and reads results back."""

    started_by = "torchrun"
    threads_share_process = False
    sets_rendezvous = True

    def env(self, rt) -> dict[str, str | None]:
        return {}  # torchrun set them

    def launch(self, fn, job, rt, start_method: str, precision) -> None:
        run_replica(int(os.environ["LOCAL_RANK"]), fn, job, rt, start_method, precision)

    def rank_and_world(self, index: int, rt) -> tuple[int, int]:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def threads(self, rt, start_method: str) -> tuple[int | None, int | None]:
        return rt.threads, None  # torchrun's processes are not forked from a notebook

    def holds_global_rank0(self, rt) -> bool:
        return int(os.environ["RANK"]) == 0
