"""Starting replicas as local processes with ``torch.multiprocessing`` (cpu, cuda, xla-cpu-processes).

The parent owns them (:func:`kitlib.run.backends.base.owning_replicas`): on any exception in the
parent, KeyboardInterrupt included, every one is terminated and joined before ``launch`` returns.
A replica's failure comes back whole: :func:`~kitlib.run.backends.base.run_replica` writes its rank,
message and traceback to a file of the launch's own error folder, and the parent raises them as
one :class:`~kitlib.run.backends.base.ReplicaError`.
"""
from __future__ import annotations

import os
import pickle
import tempfile
from typing import Callable


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for ``MASTER_PORT``)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rendezvous_env() -> dict[str, str]:
    """``torch.distributed``'s ``env://`` rendezvous on a fresh local port (``MASTER_ADDR``/``MASTER_PORT``)."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}


def start_processes(fn: Callable, job, rt, start_method: str, precision) -> None:
    """Run :func:`~kitlib.run.backends.base.run_replica` in ``rt.num_replicas`` processes started with
    ``start_method``; wait for all.

    Raises:
        ReplicaError: a replica raised (its rank, message and traceback) or died (its exit code).
    """
    import torch.multiprocessing as tmp

    from .base import ReplicaError, global_rank, run_replica

    with tempfile.TemporaryDirectory(prefix="kitlib-errors-") as errors:
        try:
            tmp.start_processes(run_replica, args=(fn, job, rt, start_method, precision, errors),
                                nprocs=rt.num_replicas, start_method=start_method, join=True)
        except tmp.ProcessRaisedException as e:
            record = os.path.join(errors, f"index-{e.error_index}.pkl")
            if os.path.isfile(record):
                with open(record, "rb") as f:
                    rank, message, trace = pickle.load(f)
                raise ReplicaError(rank, message, trace or e.msg) from None
            last = [line for line in e.msg.strip().splitlines() if line.strip()][-1]
            raise ReplicaError(global_rank(rt, e.error_index), last, e.msg) from None
        except tmp.ProcessExitedException as e:
            raise ReplicaError(global_rank(rt, e.error_index),
                               f"process exited with code {e.exit_code} (killed? out of memory?)") from None
