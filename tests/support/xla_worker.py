"""Subprocess body for the XLA thread-replica tests: one torch_xla launch per process, killable as a group.

Usage:
  ``python tests/support/xla_worker.py train JOB_JSON NUM_REPLICAS``: ``kitlib.training.train.train`` on ``xla-cpu``
  (the test reads the history and per-rank states the job writes).
  ``python tests/support/xla_worker.py collectives OUT_DIR``: :func:`collectives_program` on 2 ``xla-cpu``
  replicas; rank 1 fails inside ``together``; writes ``OUT_DIR/rank-<r>.json`` and ``OUT_DIR/error.txt``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def collectives_program(replica, out_dir: str) -> None:
    """Every Replica collective once on thread replicas, then a failure on rank 1 inside ``together``."""
    import torch

    out = Path(out_dir)
    seen = {"rank": replica.rank, "world": replica.world_size, "threaded": replica.threaded}
    mine = torch.full((2, 3), float(replica.rank + 1)).to(replica.device)
    seen["all_gather"] = replica.all_gather(mine).cpu().tolist()  # [4, 3]: rank 0's rows, then rank 1's
    seen["all_reduce_sum"] = replica.all_reduce_sum(mine * 10).cpu().tolist()
    replica.barrier("after the sums")
    seen["failed_ranks_none"] = replica.failed_ranks(False)
    with replica.step():  # a lazy collective inside a step, read after it
        inside = replica.all_reduce_sum(mine + 1)
    seen["in_step"] = inside.cpu().tolist()
    (out / f"rank-{replica.rank}.json").write_text(json.dumps(seen))
    with replica.together("the failing block"):
        if replica.rank == 1:
            raise OSError("rank 1 cannot write")
    (out / f"after-{replica.rank}.txt").write_text("not reached")


if __name__ == "__main__":
    from kitlib.run.runtime import ReplicaError, detect_runtime, launch

    if sys.argv[1] == "train":
        from kitlib.training.job import TrainJob
        from kitlib.training.train import train

        train(TrainJob(**json.loads(sys.argv[2])), detect_runtime(int(sys.argv[3]), "xla-cpu"))
    else:
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        try:
            launch(collectives_program, str(out), detect_runtime(2, "xla-cpu"))
        except ReplicaError as e:
            (out / "error.txt").write_text(f"{e.rank}\n{e}")
