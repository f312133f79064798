#!/usr/bin/env bash
# GPU check: the real workload on CUDA. An XLM-R-large-shaped classifier (24 layers, hidden 1024,
# 16 heads, FF 4096, vocabulary 250,002; random weights, built offline from its config) predicts
# 63,812 synthetic rows (the competition test set's size) drawn from the sample's test.csv, so
# their lengths follow its distribution, through the kit's predict() at 1 replica and at every
# GPU; then a few fp16 training steps through the GradScaler (kitlib/run/backends/precision.py).
# Prints rows/s, seconds for the whole set, the shapes compiled/run, and the share of the device's
# dense peak. Needs a CUDA GPU and the main job's environment (make setup). A few minutes on one GPU.
# Then the decoder path (issue 32): a Llama-3.2-1B-shaped sequence classifier (16 layers, hidden 2048,
# 32 heads, 8 key/value heads, FF 8192; the tiny tokenizer's vocabulary; random weights) scores 2,000 rows on GPU 0 through the kinds
# API, rows sorted by length and batched to a token budget (kitlib/run/balance.py), at fp16 and at
# bf16 (16-bit weights; bf16 on a T4 is emulated: the comparison is the point), and with 8-bit weights
# (bitsandbytes) when it is importable. Per run: tokens/s (padded tokens, what the GPU computed) and
# the fraction of the device's dense peak, 2 * parameters * tokens/s / peak (the matmul FLOPs of a
# forward pass, attention's length-squared term left out), peaks from PEAKS: T4 65 TFLOP/s fp16,
# A100 312 bf16, H100/H200 989 bf16.
#
#   bash scripts/gpu_check.sh [PYTHON] [--smoke]
#
# --smoke: a 2-layer, hidden-64 model, 300 rows and 2 training steps, on the CPU when there is no
# GPU: checks the script's own logic anywhere (it prints the same lines); the decoder part then runs a
# 2-layer, hidden-64 Llama on 200 rows at fp32 and bf16 (8-bit needs CUDA: skipped, said).
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
                   output_csv=str(run / "submission.csv"), batch_size=BATCH, max_len=MAX_LEN, num_buckets=BUCKETS,
                   collapsed="warn")  # random weights on purpose: their predictions barely vary
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

# the decoder path: a Llama classifier through the kinds API, token-budget batches, fp16 / bf16 / 8-bit weights
from transformers import AutoModelForSequenceClassification, LlamaConfig, LlamaForSequenceClassification

from kitlib.models.kinds import kind_for
from kitlib.run.backends.precision import named
from kitlib.run.balance import token_batches

DEC_SHAPE = (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
             if smoke else dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32, num_key_value_heads=8,
                                intermediate_size=8192))
DEC_ROWS, DEC_LEN, DEC_BUDGET = (200, 64, 32 * 64) if smoke else (2000, 256, 64 * 256)
dec = out / "llama-classifier"
dcfg = LlamaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, num_labels=1, problem_type="multi_label_classification",
                   id2label={0: "toxic"}, label2id={"toxic": 0}, **DEC_SHAPE)
torch.manual_seed(0)
m = LlamaForSequenceClassification(dcfg)
dec_params = sum(p.numel() for p in m.parameters())
m.save_pretrained(dec)
tok.save_pretrained(dec)
del m
kind = kind_for(dec, "decoder")
dtok = kind.load_tokenizer(dec)
kind = kind.bind(dtok)
texts = picked["text"].tolist()[:DEC_ROWS]
dlen = np.array([len(x) for x in dtok(texts, truncation=True, max_length=DEC_LEN)["input_ids"]])
batches = token_batches(dlen, DEC_BUDGET)
device = "cuda:0" if gpus else "cpu"
name = torch.cuda.get_device_name(0) if gpus else "CPU"
peak = next((v for k, v in PEAKS.items() if k in name), None)
print(f"decoder: {dec_params / 1e6:.0f} M parameters ({DEC_SHAPE['num_hidden_layers']} layers, hidden "
      f"{DEC_SHAPE['hidden_size']}) on {name}; {DEC_ROWS} rows, {int(dlen.sum()):,} tokens, {len(batches)} batches of "
      f"<= {DEC_BUDGET} padded tokens; fraction of peak = 2 * parameters * tokens/s / "
      f"{'%.0f TFLOP/s' % (peak / 1e12) if peak else 'unknown peak'}")


def decoder_run(label, precision, quantization=None):
    """Load the classifier (16-bit weights at ``precision``, or bitsandbytes ``quantization``), score every batch, time it."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision.name)
    if quantization is None:
        model = kind.load(dec, dtype=dtype).to(device)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(dec, quantization_config=quantization, device_map={"": 0},
                                                                   use_cache=False, pad_token_id=dtok.pad_token_id).eval()
    kind.keep_head_float32(model)
    padded, probs = 0, []
    for timed in (False, True):  # a warm-up pass over the first batches, then the timed pass
        t = time.perf_counter()
        with torch.no_grad(), precision.autocast():
            for b in (batches if timed else batches[:2]):
                enc = kind.encode(dtok, [texts[i] for i in b], DEC_LEN)
                padded += enc["input_ids"].numel() if timed else 0
                p = kind.probabilities(model, enc["input_ids"].to(device), enc["attention_mask"].to(device))
                probs.append(p.float().cpu()) if timed else None
        if gpus:
            torch.cuda.synchronize()
    s = time.perf_counter() - t
    rate = padded / s
    share = f"{2 * dec_params * rate / peak:.1%} of peak" if peak else "peak unknown"
    p = torch.cat(probs)
    print(f"decoder {label}: {s:.2f} s, {rate:,.0f} tokens/s, {2 * dec_params * rate / 1e12:.2f} TFLOP/s, {share}; "
          f"probabilities finite: {bool(torch.isfinite(p).all())}, mean {p.mean():.4f}")
    del model
    if gpus:
        torch.cuda.empty_cache()


for width in (("fp16", "bf16") if gpus else ("fp32", "bf16")):
    decoder_run(f"{width} weights and compute", named(width, "cuda" if gpus else "cpu"))
import importlib.util
if gpus and importlib.util.find_spec("bitsandbytes") is not None:
    from transformers import BitsAndBytesConfig

    decoder_run("8-bit weights (bitsandbytes), fp16 compute", named("fp16", "cuda"), BitsAndBytesConfig(load_in_8bit=True))
else:
    print("decoder 8-bit weights: skipped (" + ("no CUDA device" if not gpus else "bitsandbytes not importable: pip install bitsandbytes") + ")")
EOF
