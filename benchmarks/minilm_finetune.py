"""Fine-tune all-MiniLM-L6-v2 on the sample's English rows; print held-out English and multilingual AUC.

One run per call, one JSON line on stdout (and appended to ``--log``)::

    PYTHONPATH=. .venv/bin/python benchmarks/minilm_finetune.py --rows 1839 --max-len 64 --lr 5e-5 \
        --epochs 1 --batch 16 --replicas 1

The held-out split is ``kitlib.cv.splits.english_holdout_split(train.csv, frac=0.2, seed=0)``: 1,839
training rows (160 toxic), 460 held-out rows (40 toxic). ``--rows`` keeps the first rows of the
training part. Training runs through ``kitlib.training.train.train`` (eager CPU replicas by default) (validation = the held-out
rows); the multilingual AUC is computed afterwards from the saved checkpoint on ``validation.csv``
(1,000 rows: tr, es, it) with plain eager torch on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "jigsaw-sample"


def multilingual_auc(checkpoint: Path, max_len: int, batch: int = 64) -> tuple[float, float, float]:
    """(ROC AUC, std of predictions, seconds) of ``checkpoint`` on the sample's validation.csv."""
    import numpy as np
    import torch

    from kitlib.data import read_csv_checked
    from kitlib.models.model import load_classifier, probabilities
    from kitlib.metrics import roc_auc

    t0 = time.perf_counter()
    df = read_csv_checked(SAMPLE / "validation.csv", label_cols=("toxic",))
    tok, model = load_classifier(checkpoint)
    out = []
    with torch.no_grad():
        for i in range(0, len(df), batch):
            enc = tok(df["text"].iloc[i:i + batch].tolist(), padding=True, truncation=True, max_length=max_len, return_tensors="pt")
            out.append(probabilities(model(**enc).logits))
    p = torch.cat(out).numpy()
    return roc_auc(df["toxic"].to_numpy(), p), float(np.std(p)), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16, help="per replica")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--accelerator", default="cpu", help="cpu (eager, gloo) or xla-cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/tmp/minilm-bench")
    ap.add_argument("--log", default=None)
    a = ap.parse_args()

    from kitlib.models.minilm_convert import minilm_checkpoint
    from kitlib.run.runtime import detect_runtime
    from kitlib.cv.splits import english_holdout_split
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    work = Path(a.work)
    ckpt = minilm_checkpoint(work / "cache")
    train_csv, holdout_csv = english_holdout_split(SAMPLE / "train.csv", work / "split", 0.2, 0)
    rt = detect_runtime(a.replicas, a.accelerator)
    cfg = TrainJob(checkpoint=str(ckpt), train_csv=str(train_csv), valid_csv=str(holdout_csv),
                   out_dir=str(work / "trained"), epochs=a.epochs, batch_size=a.batch, max_len=a.max_len, lr=a.lr,
                   train_limit=a.rows, seed=a.seed, log_every=10)
    t0, c0, load0 = time.perf_counter(), os.times(), os.getloadavg()[0]
    hist = train(cfg, rt)
    wall, c1 = time.perf_counter() - t0, os.times()
    cpu = (c1.user + c1.system + c1.children_user + c1.children_system) - (c0.user + c0.system + c0.children_user + c0.children_system)
    ml_auc, ml_std, ml_s = multilingual_auc(work / "trained", a.max_len)
    losses = [v for _, v in hist["step_loss"]]
    rec = {"rows": a.rows or 1839, "max_len": a.max_len, "lr": a.lr, "epochs": a.epochs, "batch": a.batch,
           "replicas": rt.num_replicas, "mode": rt.mode, "seed": a.seed, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
           "loadavg_start_end": [round(load0, 1), round(os.getloadavg()[0], 1)],
           "train_s": [round(e["train_seconds"], 1) for e in hist["epochs"]],
           "valid_s": [round(e["valid_seconds"], 1) for e in hist["epochs"]],
           "train_loss": [round(e["train_loss"], 4) for e in hist["epochs"]],
           "holdout_auc": [round(e["valid_auc"], 4) for e in hist["epochs"]],
           "first_logged_loss": losses[:3], "last_logged_loss": losses[-3:],
           "multilingual_auc": round(ml_auc, 4), "multilingual_std": round(ml_std, 4), "multilingual_s": round(ml_s, 1)}
    line = json.dumps(rec)
    print(line, flush=True)
    if a.log:
        with open(a.log, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
