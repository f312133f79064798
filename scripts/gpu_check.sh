#!/usr/bin/env bash
# GPU check: the real workload on CUDA. An XLM-R-large-shaped classifier (24 layers, hidden 1024,
# 16 heads, FF 4096, vocabulary 250,002; random weights, built offline from its config) predicts
# 63,812 synthetic rows (the competition test set's size) drawn from the sample's test.csv, so
# their lengths follow its distribution, through the kit's predict() at 1 replica and at every
# GPU; then a few fp16 training steps through the GradScaler (kitlib/run/backends/precision.py).
# Prints rows/s, seconds for the whole set, the shapes compiled/run, and the share of the device's
# dense peak. Needs a CUDA GPU and the main job's environment (make setup). A few minutes on one GPU.
#
#   bash scripts/gpu_check.sh [PYTHON] [--smoke]
#
# --smoke: a 2-layer, hidden-64 model, 300 rows and 2 training steps, on the CPU when there is no
# GPU: checks the script's own logic anywhere (it prints the same lines).
# Nothing in the parent initialises CUDA before the replicas start (fork works); a failure there
# shows as "Cannot re-initialize CUDA in forked subprocess".
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [[ $# -gt 0 && "$1" != --* ]]; then PY=$1; shift; fi
OUT=${OUT:-$(mktemp -d)}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - "$OUT" "$@" <<'EOF'
import sys, time
from pathlib import Path

import numpy as np
import pandas as pd

from kitlib.data import choose_bucket_lengths, read_csv_checked, tokenize
from kitlib.run.hardware import cuda_device_count
from kitlib.infer import InferJob, predict, replica_stats
from kitlib.models.model import resolve_checkpoint
from kitlib.run.runtime import detect_runtime
from kitlib.training.job import TrainJob
from kitlib.training.train import train

out, smoke = Path(sys.argv[1]), "--smoke" in sys.argv[2:]
SAMPLE = Path("data/jigsaw-sample")
ROWS = 300 if smoke else 63_812  # the competition's test set
MAX_LEN, BATCH, BUCKETS = (64, 8, 2) if smoke else (128, 128, 4)
SHAPE = (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128) if smoke else
         dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096))
# dense peak FLOP/s by device name (the compute precision each runs at): H200 bf16/fp16 dense,
# T4 fp16 tensor cores; a TPU v5e-8 is 8 x 197 TFLOP/s bf16 (for the comparison line)
PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "T4": 65e12}
V5E8_PEAK = 8 * 197e12

gpus = cuda_device_count()
if not gpus and not smoke:
    sys.exit("gpu_check: torch sees no CUDA device (torch.cuda.device_count() == 0); --smoke runs on the CPU")
accelerator = "cuda" if gpus else "cpu"
print(f"gpu_check: {gpus} CUDA device(s){' (smoke: CPU)' if not gpus else ''}; output in {out}")

# the model: XLM-R large's shape, random weights, the offline tiny model's tokenizer (trained on the sample)
import torch
from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForSequenceClassification

tiny = resolve_checkpoint("tiny-random", data_dir=SAMPLE, cache_dir=out / "cache")
ckpt = out / "xlmr-large-shaped"
tok = AutoTokenizer.from_pretrained(tiny)
cfg = XLMRobertaConfig(vocab_size=250_002, max_position_embeddings=514, pad_token_id=tok.pad_token_id,
                       bos_token_id=tok.cls_token_id, eos_token_id=tok.eos_token_id, num_labels=1,
                       problem_type="multi_label_classification", **SHAPE)
t = time.perf_counter()
torch.manual_seed(0)
model = XLMRobertaForSequenceClassification(cfg)
params = sum(p.numel() for p in model.parameters())
model.save_pretrained(ckpt)
tok.save_pretrained(ckpt)
del model
print(f"model: {params / 1e6:.0f} M parameters ({SHAPE['num_hidden_layers']} layers, hidden {SHAPE['hidden_size']}), "
      f"built and saved in {time.perf_counter() - t:.1f} s")


def flops_per_row(length: int) -> float:
    """Forward FLOPs of one row of ``length`` tokens: 2 per weight of every matmul per token, plus attention."""
    h, ff, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    per_token = n * (2 * (4 * h * h + 2 * h * ff) + 4 * length * h) + 2 * (h * h + h)  # + the head
    return per_token * length


# the data: ROWS rows drawn (with replacement) from the sample's test.csv, so lengths follow its distribution
sample = read_csv_checked(SAMPLE / "test.csv")
rng = np.random.default_rng(0)
picked = sample.iloc[rng.integers(0, len(sample), ROWS)]
test_csv = out / "test.csv"
pd.DataFrame({"id": [f"s{i}" for i in range(ROWS)], "content": picked["text"].to_numpy()}).to_csv(test_csv, index=False)
lengths = tokenize(tok, picked["text"].tolist(), MAX_LEN).lengths
buckets = choose_bucket_lengths(lengths, MAX_LEN, BUCKETS)  # what predict chooses, from the same rows
padded = np.array([min(b for b in buckets if b >= n) for n in np.maximum(lengths, 1)])
work = sum(flops_per_row(int(n)) for n in padded)
print(f"data: {ROWS:,} rows, tokens per row median {int(np.median(lengths))}, mean {lengths.mean():.1f}, "
      f"max {lengths.max()} (max_len {MAX_LEN}); shapes [{BATCH}, L] for L in {list(buckets)}; "
      f"{work / 1e15:.2f} PFLOP as padded ({work / (V5E8_PEAK) :.1f} s at a TPU v5e-8's bf16 peak)")

for n in sorted({1, gpus or 1}):
    rt = detect_runtime(n, accelerator)
    run = out / f"infer-{n}"
    job = InferJob(checkpoint=str(ckpt), test_csv=str(test_csv), shard_dir=str(run / "shards"),
                   output_csv=str(run / "submission.csv"), batch_size=BATCH, max_len=MAX_LEN, num_buckets=BUCKETS)
    t = time.perf_counter()
    predict(job, rt)
    wall = time.perf_counter() - t
    stats = replica_stats(run / "shards")
    loop = max(s["seconds"] for s in stats)
    name = stats[0]["device"]
    peak = next((v * n for k, v in PEAKS.items() if k in name), None)
    share = f"{work / loop / peak:.1%} of {peak / 1e12:.0f} TFLOP/s dense peak" if peak else "peak unknown for this device"
    print(f"inference, {n} replica(s) on {name} ({stats[0]['precision']}): {ROWS:,} rows in {wall:.1f} s whole predict "
          f"({ROWS / wall:,.0f} rows/s); prediction loop {loop:.1f} s ({ROWS / loop:,.0f} rows/s, {work / loop / 1e12:.1f} "
          f"TFLOP/s, {share}); shapes run: {len(buckets)}"
          + "".join(f"; {k} {s[k]}" for s in stats[:1] for k in s if k.startswith("xla_compiles")))

# a few training steps: fp16 through the GradScaler on CUDA (precision="auto"), every GPU
steps = 2 if smoke else 8
t = time.perf_counter()
job = TrainJob(checkpoint=str(ckpt), train_csv=str(SAMPLE / "train.csv"), valid_csv=str(SAMPLE / "validation.csv"),
               out_dir=str(out / "trained"), batch_size=8, max_len=MAX_LEN, epochs=1, lr=1e-5,
               train_limit=8 * steps * (gpus or 1), valid_limit=16, log_every=1)
h = train(job, detect_runtime(None if gpus else 1, accelerator))
e = h["epochs"][0]
print(f"training, {h['world_size']} replica(s) ({h['mode']}, {h['collectives']}, precision {h['precision']}, "
      f"grad scaler {'on' if h['grad_scaler'] else 'off'}): {h['steps_per_epoch']} steps of global batch "
      f"{h['global_batch']} x {MAX_LEN} tokens in {e['train_seconds']:.1f} s ({h['steps_per_epoch'] / e['train_seconds']:.2f} "
      f"steps/s), step losses {[round(l, 4) for _, l in h['step_loss']]}, all finite: "
      f"{bool(np.isfinite([l for _, l in h['step_loss']]).all())}; whole train() {time.perf_counter() - t:.1f} s")
EOF
