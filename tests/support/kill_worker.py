"""Subprocess body for the survive-a-kill tests: ``kitlib.training.train.train`` that SIGKILLs its own process group.

Usage: ``python tests/support/kill_worker.py JOB_JSON ACCELERATOR NUM_REPLICAS START_METHOD KILL_AT [SIGNAL]``

``SIGNAL`` ``TERM``: at step ``KILL_AT`` SIGTERM goes to this worker's process alone (what Kaggle and Colab
send a kernel: the run saves its state and returns), instead of SIGKILL to the group.

Trains ``TrainJob(**JOB_JSON)`` on ``detect_runtime(NUM_REPLICAS, ACCELERATOR)``. With ``KILL_AT`` > 0,
every replica counts its training steps (calls of ``kitlib.models.kinds.Kind.loss``, the one loss every kind trains with) and the first
to reach step ``KILL_AT`` sends SIGKILL to the whole process group (this worker, its replicas): what a
preemption, an out-of-memory kill or a Kaggle session's end does. Replica processes are forked, so
they inherit the counting wrapper; thread replicas share it (a count per thread).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

if __name__ == "__main__":
    from kitlib.models import kinds
    from kitlib.training import train as training
    from kitlib.training.job import TrainJob
    from kitlib.run.runtime import Runtime, detect_runtime

    job_json, accelerator, replicas, start_method, kill_at = sys.argv[1:6]
    term, main = sys.argv[6:7] == ["TERM"], os.getpid()
    kill_at = int(kill_at)
    if kill_at:
        loss, counts = kinds.Kind.loss, threading.local()

        def counting_loss(*args, **kwargs):
            counts.n = getattr(counts, "n", 0) + 1
            if counts.n == kill_at:
                if term:
                    os.kill(main, signal.SIGTERM)
                else:
                    os.killpg(os.getpgid(0), signal.SIGKILL)
            return loss(*args, **kwargs)

        kinds.Kind.loss = counting_loss
    rt = detect_runtime(int(replicas), accelerator)
    if accelerator == "cpu" and rt.num_replicas > 1:  # one thread each: fork is kept, and the wrapper with it
        rt = Runtime("cpu", rt.num_replicas, rt.reason, threads=1)
    training.train(TrainJob(**json.loads(job_json)), rt, start_method)
