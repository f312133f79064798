"""Does a CPU precision keep the fine-tuned model's ranking? ROC AUC of fp32 against bf16 on held-out rows.

    .venv/bin/python benchmarks/e5_precision.py --checkpoint FOLDER   # a fine-tuned multilingual-e5-small
    .venv/bin/python benchmarks/e5_precision.py                        # a quick frozen-body probe instead

Held-out rows: validation.csv rows 500-999 of the bundled sample (tr 179, es 168, it 153; 88 toxic),
the rows ``make submission`` holds out (:func:`kitlib.cv.splits.validation_split`) and never trains on.
Each precision runs the kit's inference path itself, ``predict(job, detect_runtime(accelerator="cpu"))``,
on the same rows in this process, one after the other; the script prints each one's ROC AUC
(overall and per language), its loop seconds and CPU seconds, and the differences against fp32. The rule
for a precision other than fp32 (issue 18 section 5): AUC within 0.002 of fp32.

Without ``--checkpoint`` the model is a *probe*, built once into ``.cache/bench-e5-probe``: the
pretrained multilingual-e5-small body, frozen, with its mean-pooled head fitted by logistic
regression on 800 English training rows plus validation.csv rows 0-499 (max_len 64). That is
quicker than a fine-tune (no backward pass) and gives predictions that spread; a fine-tuned body
may react to a precision differently, so prefer ``--checkpoint`` with ``make submission``'s checkpoint.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "jigsaw-sample"
sys.path.insert(0, str(ROOT))

HELD_OUT = slice(500, 1000)  # validation.csv rows never trained on (kitlib.cv.splits.validation_split's second half)
PROBE_ENGLISH_ROWS = 800


def held_out_csv(out: Path) -> Path:
    import pandas as pd

    v = pd.read_csv(SAMPLE / "validation.csv", dtype=str, keep_default_na=False).iloc[HELD_OUT]
    v.to_csv(out, index=False)
    return out


def probe_checkpoint() -> Path:
    """The frozen-body probe (module doc), built once."""
    import numpy as np
    import pandas as pd
    import torch
    from sklearn.linear_model import LogisticRegression

    from kitlib.data import PlannedBatches, choose_bucket_lengths, plan_batches, tokenize
    from kitlib.checkpoint import with_text_prefix
    from kitlib.models.model import load_classifier, resolve_checkpoint

    out = ROOT / ".cache" / "bench-e5-probe"
    if (out / "config.json").is_file():
        return out
    src = resolve_checkpoint("multilingual-e5-small", data_dir=SAMPLE, cache_dir=ROOT / ".cache")
    tok, model = load_classifier(src, head_for_training=True)
    en = pd.read_csv(SAMPLE / "train.csv", dtype=str, keep_default_na=False).iloc[:PROBE_ENGLISH_ROWS]
    va = pd.read_csv(SAMPLE / "validation.csv", dtype=str, keep_default_na=False).iloc[:HELD_OUT.start]
    texts = with_text_prefix(src, en["comment_text"].tolist() + va["comment_text"].tolist())
    labels = np.concatenate([en["toxic"].astype(float), va["toxic"].astype(float)])
    tokens = tokenize(tok, texts, 64)
    plans = plan_batches(np.arange(len(texts)), 32, 64, tokens.lengths,
                         choose_bucket_lengths(tokens.lengths, 64, 64, multiple=1), fill_last=False)
    batches = PlannedBatches(tokens, plans)
    feats = np.zeros((len(texts), model.config.hidden_size), np.float32)
    t = time.perf_counter()
    with torch.inference_mode():
        for i in range(len(batches)):
            b = batches[i]
            h = model.bert(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).float()
            feats[plans[i].rows] = ((h * m).sum(1) / m.sum(1)).numpy()
    lr = LogisticRegression(C=10.0, max_iter=2000, class_weight="balanced").fit(feats, labels)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy(lr.coef_.astype(np.float32)))
        model.classifier.bias.copy_(torch.from_numpy(lr.intercept_.astype(np.float32)))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"probe: {len(texts)} rows embedded in {time.perf_counter() - t:.0f} s; head fitted; saved to {out}")
    return out


def score(checkpoint: Path, test_csv: Path, precision: str, tmp: Path) -> dict:
    import numpy as np
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    from kitlib.infer import InferJob, predict, replica_stats
    from kitlib.run.runtime import detect_runtime

    out = tmp / precision
    c, t = time.process_time(), time.perf_counter()
    predict(InferJob(checkpoint=str(checkpoint), test_csv=str(test_csv), shard_dir=str(out / "shards"),
                     output_csv=str(out / "sub.csv"), batch_size=32, max_len=128, precision=precision),
            detect_runtime(None, "cpu"))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    truth = pd.read_csv(test_csv, dtype=str, keep_default_na=False)
    pred = pd.read_csv(out / "sub.csv", dtype={"id": str}, keep_default_na=False)
    df = truth.merge(pred.rename(columns={"toxic": "p"}), on="id")
    y = df["toxic"].astype(float).to_numpy()
    res = {"precision": precision, "auc": roc_auc_score(y, df["p"]), "p": df["p"].to_numpy(), "wall": wall, "cpu": cpu,
           "loop": replica_stats(out / "shards")[0]["seconds"], "stated": replica_stats(out / "shards")[0]["precision"]}
    for lang, g in df.groupby("lang"):
        res[lang] = roc_auc_score(g["toxic"].astype(float), g["p"])
    res["std"] = float(np.std(res["p"]))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="a fine-tuned multilingual-e5-small folder (default: the probe)")
    ap.add_argument("--precisions", default="fp32,bf16")
    args = ap.parse_args()
    import numpy as np

    ck = Path(args.checkpoint) if args.checkpoint else probe_checkpoint()
    print(f"# precision vs ROC AUC, {time.strftime('%Y-%m-%d %H:%M')}; checkpoint {ck}; held-out validation.csv rows "
          f"{HELD_OUT.start}-{HELD_OUT.stop - 1}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        csv = held_out_csv(tmp / "held_out.csv")
        runs = [score(ck, csv, p, tmp) for p in args.precisions.split(",")]
    base = runs[0]
    langs = sorted(k for k in base if len(k) == 2)
    for r in runs:
        per = ", ".join(f"{lang} {r[lang]:.4f}" for lang in langs)
        print(f"  {r['precision']:5s} (stated {r['stated']}): AUC {r['auc']:.4f} ({per}); prediction std {r['std']:.3f}; "
              f"loop {r['loop']:.1f} s, whole predict {r['wall']:.1f} s, cpu {r['cpu']:.1f} s")
    for r in runs[1:]:
        print(f"  {r['precision']} - {base['precision']}: AUC {r['auc'] - base['auc']:+.4f} (rule: within 0.002); "
              f"predictions differ by <= {np.abs(r['p'] - base['p']).max():.4f} (mean {np.abs(r['p'] - base['p']).mean():.4f}); "
              f"loop {r['loop'] / base['loop']:.2f}x, cpu {r['cpu'] / base['cpu']:.2f}x")


if __name__ == "__main__":
    main()
