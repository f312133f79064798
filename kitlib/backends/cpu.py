"""``cpu``: eager torch on the CPU; one replica in the calling process, or N processes over gloo.

One replica (the default on a few cores: one replica with every thread beats several) runs in
the calling process with all of ``rt.threads``, which are given back afterwards. Several run as
processes (:mod:`kitlib.backends.processes`), each with its share of the cores.

Start method: a forked child of a parent that has run a parallel torch op hangs at its first
multi-threaded op (GNU libgomp is not fork-safe; seen here). So under ``start_method="fork"``
replicas with more than one thread each are **started with spawn instead**, when the replica
program is importable (a note says so; pass ``start_method="spawn"`` to choose it yourself), and
otherwise keep fork and run single-threaded.
"""
from __future__ import annotations

from .base import run_replica
from .distributed import TorchDistributed
from .processes import rendezvous_env, start_processes


class Cpu(TorchDistributed):
    name = "cpu"
    device = "cpu"
    hardware = "cpu"
    collectives = "gloo"
    starts = "in the calling process (one replica), or N processes with their share of the cores"
    summary = "eager torch on the CPU, gloo"

    def env(self, rt):
        return rendezvous_env() if rt.num_replicas > 1 else {}

    def start_method(self, rt, start_method: str, fn) -> str:
        """``start_method``, or spawn for multi-threaded replicas under fork (module doc), with a note."""
        if start_method == "fork" and rt.threads > 1 and getattr(fn, "__module__", "__main__") != "__main__":
            print(f"note: the {rt.num_replicas} CPU replicas ({rt.threads} threads each) start with 'spawn', not "
                  "'fork': a forked child of a process that ran parallel torch ops hangs (GNU libgomp is not "
                  "fork-safe). Pass start_method='spawn' to choose it yourself.", flush=True)
            return "spawn"
        return start_method

    def launch(self, fn, job, rt, start_method: str) -> None:
        if rt.num_replicas == 1:  # no process to start
            run_replica(0, fn, job, rt, start_method)
            return
        start_processes(fn, job, rt, self.start_method(rt, start_method, fn))

    def open(self, index: int, rt, start_method: str):
        if rt.num_replicas == 1:  # the calling process itself: its threads, given back at close
            import torch

            return self._open(index, rt, start_method, rt.threads, restore=torch.get_num_threads())
        return super().open(index, rt, start_method)
