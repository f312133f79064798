"""The summary `make submission` prints last: held-out ROC AUC overall and per language, and the times.

    python scripts/submission_report.py --checkpoint artifacts/xlmr-toxic --submission submission.csv \
        [--setup-seconds-file F] [--train-seconds-file F] [--predict-seconds-file F] [--train-status-file F]

The figures come from the checkpoint folder (``train_history.json``, ``heldout_scores.json``:
:func:`kitlib.checkpoint.checkpoint_report`) and the submission itself; the times from the files the
Makefile writes (whole steps, seconds). Exit status 2 when the checkpoint holds no training record.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _seconds(path: str | None) -> float | None:
    p = Path(path) if path else None
    return float(p.read_text().strip()) if p is not None and p.is_file() else None


def _fmt(s: float | None) -> str:
    if s is None:
        return "not measured"
    return f"{s:.0f} s" if s < 120 else f"{int(s // 60)} min {s % 60:02.0f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--submission", required=True)
    ap.add_argument("--setup-seconds-file")
    ap.add_argument("--train-seconds-file")
    ap.add_argument("--predict-seconds-file")
    ap.add_argument("--train-status-file")
    args = ap.parse_args(argv)

    import pandas as pd

    from kitlib.outputs.collapse import spread
    from kitlib.checkpoint import checkpoint_report

    r = checkpoint_report(args.checkpoint)
    if r is None:
        print(f"error: {args.checkpoint}: no training record (train_history.json)", file=sys.stderr)
        return 2
    status = Path(args.train_status_file).read_text().strip() if args.train_status_file and Path(args.train_status_file).is_file() else "trained"
    train_s, predict_s = _seconds(args.train_seconds_file), _seconds(args.predict_seconds_file)
    kept, held, best = r["kept_epoch"], r["heldout"], r["best"] or {}
    print("=" * 78)
    print(f"model: {r['trained_from']}\n  fine-tuned: recipe {r['recipe']!r}, lr {r['lr']:g}, {r['epochs_trained']} of "
          f"{r['epochs']} epoch(s), max_len {r['max_len']}, batch {r['batch_size']} x {r['world_size']} replica(s)")
    if best:
        print(f"  kept: epoch {best['epoch']}, {best['why']}")
    if held:
        langs = ", ".join(f"{k} {v:.4f}" for k, v in held["per_language"].items())
        print(f"held-out ROC AUC ({held['rows']}, {held['num_rows']} rows of {held['csv']}, never trained on): "
              f"{held['roc_auc']:.4f}" + (f" ({langs})" if langs else ""))
    else:
        print(f"held-out ROC AUC (epoch {kept.get('epoch')}, {r['valid_csv']}): {kept.get('valid_auc', float('nan')):.4f}")
    sub = pd.read_csv(args.submission, dtype={"id": str}, keep_default_na=False)
    s = spread(sub[sub.columns[1]].to_numpy())
    print(f"{args.submission}: {s['rows']:,} rows, predictions from {s['min']:.4f} to {s['max']:.4f}, std {s['std']:.3f}")
    print("times (whole steps, wall clock):")
    print(f"  set-up (.venv, when it was built): {_fmt(_seconds(args.setup_seconds_file))}")
    step = f", {r['seconds_per_step']:.2f} s a step" if r["seconds_per_step"] else ""
    if status == "reused":
        print(f"  training notebook: not run, the checkpoint was reused (when it was trained: {_fmt(train_s)}, "
              f"fine-tuning {_fmt(sum_train(r))}{step})")
    else:
        print(f"  training notebook: {_fmt(train_s)} (fine-tuning {_fmt(sum_train(r))}{step})")
    print(f"  inference notebook: {_fmt(predict_s)}")
    if status != "reused" and train_s is not None and predict_s is not None:
        print(f"  notebooks together: {_fmt(train_s + predict_s)}")
    print("=" * 78)
    return 0


def sum_train(r: dict) -> float | None:
    """Seconds of fine-tuning (the training loops of every epoch) recorded in the history."""
    from kitlib.checkpoint import read_history

    epochs = read_history(r["checkpoint"]).get("epochs", [])
    return sum(e.get("train_seconds", 0.0) for e in epochs) if epochs else None


if __name__ == "__main__":
    sys.exit(main())
