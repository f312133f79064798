"""One replica of the two-host tests (tests/test_multihost.py): the script torchrun starts on each "host".

Usage: ``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d ... tests/support/multihost_worker.py
JOB REPORT_DIR ARGS.json``, where JOB is ``infer``, ``train`` or ``infer-host-dies`` and ARGS.json
holds the keyword arguments of :class:`kitlib.infer.InferJob` or :class:`kitlib.training.job.TrainJob`.
Each process writes ``REPORT_DIR/rank-<RANK>.json`` with the runtime line and what
``predict``/``train`` returned. ``infer-host-dies``: the replica of global rank 1 writes
``REPORT_DIR/rank-1.ready`` (JSON: its torchrun agent's pid and its own process group; torchrun
starts workers in a session of their own) once it is past the first cross-host exchange, then
sleeps, for the test to kill its whole host.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path


def main(job_kind: str, report_dir: str, args_file: str) -> None:
    import kitlib.infer as infer
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    # both "hosts" share this machine's cores: one thread each, and the same numerics as a one-host run
    rt = dataclasses.replace(detect_runtime(prefer="cpu"), threads=1)
    print(rt.describe(), flush=True)
    kwargs = json.loads(Path(args_file).read_text())
    out = {"rank": int(os.environ["RANK"]), "describe": rt.describe(), "num_hosts": rt.num_hosts, "host": rt.host}
    if job_kind == "train":
        history = train(TrainJob(**kwargs), rt)
        out["history_world_size"] = None if history is None else history["world_size"]
    else:
        if job_kind == "infer-host-dies" and out["rank"] == 1:
            real = infer.load_for_inference

            def stall(*a, **k):  # called after the shard folder is cleared and the run id agreed
                host = {"agent": os.getppid(), "worker_group": os.getpgid(0)}
                Path(report_dir, "ready.tmp").write_text(json.dumps(host))
                os.replace(Path(report_dir, "ready.tmp"), Path(report_dir, "rank-1.ready"))
                time.sleep(600)
                return real(*a, **k)

            infer.load_for_inference = stall
        result = infer.predict(infer.InferJob(**kwargs), rt)
        out["merged_rows"] = None if result is None else result.num_rows
        out["output"] = None if result is None else str(result.output)
    Path(report_dir, f"rank-{out['rank']}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
