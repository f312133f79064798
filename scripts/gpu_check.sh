#!/usr/bin/env bash
# GPU check: the inference notebook on CUDA at 1 replica and at every GPU (2 on Kaggle's 2x T4),
# and one epoch of the torch training notebook, with the offline tiny model; prints rows/s, the
# device names each replica saw, and the training figures. Needs a CUDA GPU and the main job's
# environment (make setup). Run from anywhere:  bash scripts/gpu_check.sh [PYTHON]
# Nothing in the parent initialises CUDA before the replicas start (fork works); a failure there
# shows as "Cannot re-initialize CUDA in forked subprocess".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
OUT=${OUT:-$(mktemp -d)}
export HF_HUB_OFFLINE=1
"$PY" - "$OUT" <<'EOF'
import json, sys, time
from pathlib import Path

import pandas as pd
import papermill as pm

from kitlib.hardware import cuda_device_count
from kitlib.infer import replica_stats

out = Path(sys.argv[1])
gpus = cuda_device_count()
if not gpus:
    sys.exit("gpu_check: torch sees no CUDA device (torch.cuda.device_count() == 0)")
rows = len(pd.read_csv("data/jigsaw-sample/test.csv", dtype=str, keep_default_na=False))
print(f"gpu_check: {gpus} CUDA device(s); sample test set {rows} rows; output in {out}")
for n in sorted({1, gpus}):
    run = out / f"infer-{n}"
    t = time.perf_counter()
    pm.execute_notebook("notebooks/xla_multicore_inference.ipynb", str(run / "executed.ipynb"), cwd="notebooks",
                        kernel_name="python3", progress_bar=False,
                        parameters=dict(model="tiny-random", accelerator="cuda", num_devices=n, start_method="fork",
                                        output_csv=str(run / "submission.csv"), cache_dir=str(out / "cache")))
    wall = time.perf_counter() - t
    sub = pd.read_csv(run / "submission.csv", dtype={"id": str}, keep_default_na=False)
    text = "".join("".join(o.get("text", "")) for c in json.loads((run / "executed.ipynb").read_text())["cells"]
                   if c["cell_type"] == "code" for o in c.get("outputs", []))
    line = next((l for l in text.splitlines() if l.startswith("runtime:")), "?")
    print(f"inference, {n} replica(s): {len(sub)} rows in {wall:.1f} s whole notebook ({len(sub) / wall:.1f} rows/s); {line}")
    for s in replica_stats(Path("shards") / "xla_multicore_inference"):  # the notebook's shards (working dir = repo)
        print(f"  rank {s['rank']} on {s['device']} ({s['precision']}): {s['rows']} rows in {s['seconds']:.2f} s "
              f"({s['rows'] / max(s['seconds'], 1e-9):.1f} rows/s in the prediction loop)")
t = time.perf_counter()
ckpt = out / "xlmr-toxic"
pm.execute_notebook("notebooks/xla_ddp_train.ipynb", str(out / "train.ipynb"), cwd="notebooks", kernel_name="python3",
                    progress_bar=False, parameters=dict(model="tiny-random", accelerator="cuda", epochs=1,
                                                        output_dir=str(ckpt), cache_dir=str(out / "cache")))
h = json.loads((ckpt / "train_history.json").read_text())
e = h["epochs"][0]
print(f"training, {h['world_size']} replica(s) ({h['mode']}, {h['collectives']}, {h['pattern']}): {h['steps_per_epoch']} steps "
      f"of global batch {h['global_batch']} in {e['train_seconds']:.1f} s ({h['steps_per_epoch'] / e['train_seconds']:.1f} steps/s), "
      f"train loss {e['train_loss']:.4f}, valid AUC {e['valid_auc']:.4f}; notebook {time.perf_counter() - t:.1f} s")
EOF
