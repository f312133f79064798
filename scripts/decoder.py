"""``make decoder``: fine-tune a packaged decoder with LoRA on the sample, then compare it with e5 on the held-out rows.

    python scripts/decoder.py [--single artifacts/xlmr-toxic] [--output artifacts/gemma3-lora]
                              [--fraction 0.2] -- <papermill -p ...>

1. The training notebook fine-tunes the packaged decoder the parameters name (``-p model gemma3-270m``, Gemma 3
   270M, multilingual, under the Gemma Terms of Use; or ``smollm2-135m``: ``kitlib/models/gguf_convert.py``) with
   LoRA (``kitlib/models/adapters.py``) into ``--output``, on ``make submission``'s split (``split
   validation``: the English rows + the first half of ``validation.csv``; its second half held out), with
   the parameters given after ``--`` (``make decoder``'s ``DECODER_PARAMS``). Its hand-off scores the saved
   adapters through the inference path on the held-out rows (``heldout_predictions.csv``).
2. :func:`compare` reads the held-out predictions of both models (``--single``, ``make submission``'s
   multilingual-e5-small) on the same rows, and scores, overall and per language: e5 alone, the decoder alone,
   their rank blend (:func:`kitlib.outputs.blend.blend`, ``rank=True``: the two kinds' scales differ) and
   the confidence cascade (:func:`kitlib.outputs.cascade.cascade`: e5 scores every row, the decoder re-orders
   e5's least certain ``--fraction`` by rank, ``rule="reorder"``, so e5's scale is kept). Both go through
   the merger's checks (ids, finite values, the collapse rule).
3. The table and the times are printed and written to ``<output>/kinds_report.json``.

Exit status: 0; 1 when the hand-off refused the decoder (a collapsed model: its figures are still printed, and
the folder is marked so that ``model="auto"`` never picks it); the training notebook's own on any other failure
(its message in one block, ``kitlib.notebook``); 2 when the held-out predictions are missing or are not the same
rows (naming the folder and the fix).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class CompareError(RuntimeError):
    """The two models' held-out predictions cannot be compared (the message names the folder and the fix)."""


def _heldout(folder: Path, label_col: str):
    """``(predictions, csv)``: a trained folder's held-out predictions (``id`` + ``label_col``) and the held-out CSV it names."""
    from kitlib.checkpoint import SCORES_FILE
    from kitlib.cv.groups import HELDOUT_PREDICTIONS_FILE
    from kitlib.data import read_csv_strings

    pred, scores = folder / HELDOUT_PREDICTIONS_FILE, folder / SCORES_FILE
    if not pred.is_file() or not scores.is_file():
        raise CompareError(f"{folder}: no {HELDOUT_PREDICTIONS_FILE} / {SCORES_FILE} (the training notebook writes them with "
                           "split 'validation' or 'holdout'); train it with one of those splits")
    frame = read_csv_strings(pred)
    if label_col not in frame.columns:
        raise CompareError(f"{pred}: no column {label_col!r} (columns: {', '.join(frame.columns)})")
    return frame[["id", label_col]], json.loads(scores.read_text())["csv"]


def compare(single: str | Path, decoder: str | Path, *, fraction: float = 0.2, label_col: str = "toxic",
            work: str | Path | None = None) -> dict:
    """Score ``single`` (A, the encoder), ``decoder`` (B), their rank blend and the cascade on the same held-out rows.

    Args:
        single, decoder: trained folders, each with ``heldout_predictions.csv`` and ``heldout_scores.json``
            (the training notebook's hand-off writes them), predicted on the same held-out CSV.
        fraction: the cascade's share of A's rows re-ordered by B: A's least certain rows by rank
            (:func:`kitlib.outputs.cascade.uncertain_rows`, ``by="rank"``) around the quantile ``1 - r``, ``r`` the
            share of rows A scores above 0.5 (read from A's predictions, never from the labels).
        label_col: the prediction and label column.
        work: where the blend and cascade CSVs are written (a temporary folder when None).

    Returns:
        ``{"rows": n, "csv": the held-out CSV, "fraction": f, "center": c, "models": {name: {"all": auc,
        <lang>: auc, ...}}, "gain_95": {name: (low, high)}}`` with names ``encoder``, ``decoder``, ``rank blend``,
        ``cascade``; ``gain_95``: each model's paired bootstrap 95% interval of its overall AUC minus e5's
        (:func:`kitlib.metrics.auc_gain_interval`).

    Raises:
        CompareError: a folder without held-out predictions, or the two not on the same rows or CSV.
    """
    import pandas as pd

    from kitlib.cv.groups import auc_by_language, heldout_rows
    from kitlib.data import read_csv_strings
    from kitlib.metrics import auc_gain_interval
    from kitlib.outputs.blend import blend
    from kitlib.outputs.cascade import cascade

    (a, a_csv), (b, b_csv) = _heldout(Path(single), label_col), _heldout(Path(decoder), label_col)
    if Path(a_csv).resolve() != Path(b_csv).resolve():
        raise CompareError(f"{single} was held out on {a_csv}, {decoder} on {b_csv}: not the same rows; "
                           "train both with the same data and split")
    if set(a["id"]) != set(b["id"]):
        raise CompareError(f"{single} and {decoder}: held-out predictions of different rows ({len(a)} and {len(b)}); "
                           "train both with the same data, split and valid_limit")
    rows = heldout_rows([Path(single)], a_csv, label_col).set_index("id").loc[a["id"]].reset_index()
    center = 1.0 - float((pd.to_numeric(a[label_col]) > 0.5).mean())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(work or tmp)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"encoder": out / "encoder.csv", "decoder": out / "decoder.csv"}
        a.to_csv(paths["encoder"], index=False)
        b.to_csv(paths["decoder"], index=False)
        paths["rank blend"] = out / "rank-blend.csv"
        blend([paths["encoder"], paths["decoder"]], paths["rank blend"], rank=True, collapsed="warn")
        paths["cascade"] = out / "cascade.csv"
        cascade(paths["encoder"], paths["decoder"], paths["cascade"], fraction=fraction, rule="reorder", by="rank",
                center=center, collapsed="warn")
        preds = {name: pd.to_numeric(read_csv_strings(path).set_index("id")[label_col].reindex(rows["id"])).to_numpy()
                 for name, path in paths.items()}
    models = {name: auc_by_language(rows.assign(pred=pred)) for name, pred in preds.items()}
    gains = {name: auc_gain_interval(rows["label"], preds["encoder"], preds[name]) for name in preds if name != "encoder"}
    return {"rows": len(rows), "csv": str(a_csv), "fraction": fraction, "center": center, "models": models,
            "gain_95": gains}


def format_table(report: dict) -> str:
    """``report`` (:func:`compare`) as a text table: a row per model, a column per language."""
    langs = sorted({k for m in report["models"].values() for k in m if k != "all"})
    head = f"{'held-out ROC AUC':<18}{'all':>8}" + "".join(f"{k:>8}" for k in langs)
    lines = [head]
    gains = report.get("gain_95", {})
    for name, figures in report["models"].items():
        gain = (f"   vs e5 {figures['all'] - report['models']['encoder']['all']:+.4f} (95%: {gains[name][0]:+.4f} .. "
                f"{gains[name][1]:+.4f})" if name in gains else "")
        lines.append(f"{name:<18}{figures['all']:>8.4f}" + "".join(f"{figures.get(k, float('nan')):>8.4f}" for k in langs)
                     + gain)
    lines.append(f"({report['rows']} held-out rows of {report['csv']}; cascade: e5's least certain "
                 f"{report['fraction']:.0%} by rank around the quantile {report['center']:.3f}, re-ordered by "
                 f"{report.get('decoder_model') or 'the decoder'})")
    return "\n".join(lines)


def _refusal_stamp(output: Path):
    """The hand-off's refusal mark in ``output``: its ``st_mtime_ns``, or None when there is none."""
    from kitlib.checkpoint import REFUSED_FILE

    marker = output / REFUSED_FILE
    return marker.stat().st_mtime_ns if marker.is_file() else None


def _refused_now(output: Path, before) -> bool:
    """Whether the hand-off refused ``output`` since its mark stood at ``before`` (:func:`_refusal_stamp`; "any"
    when no run was made here): the held-out predictions, written before the hand-off, are then this run's, and
    they are compared all the same (the exit status is 1)."""
    stamp = _refusal_stamp(output)
    return stamp is not None and (before == "any" or stamp != before)


def _model_param(params: list) -> str | None:
    """The ``model`` papermill parameter among ``params`` (``-p model NAME``), the last one given; None without one."""
    names = [params[i + 2] for i in range(len(params) - 2) if params[i] in ("-p", "--parameters") and params[i + 1] == "model"]
    return names[-1] if names else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--single", default="artifacts/xlmr-toxic", help="the encoder's trained folder (make submission's)")
    ap.add_argument("--output", default="artifacts/gemma3-lora", help="the decoder's output folder")
    ap.add_argument("--fraction", type=float, default=0.2, help="the cascade's share of the encoder's least certain rows")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--skip-training", action="store_true", help="compare what --output already holds")
    args, params = ap.parse_known_args(argv)
    params = [p for p in params if p != "--"]
    single, output = ROOT / args.single, ROOT / args.output
    t0, before = time.time(), "any" if args.skip_training else _refusal_stamp(output)
    if not args.skip_training:
        cmd = [args.python, "-m", "kitlib.notebook", "--cwd", "notebooks", "-k", "python3", "--log-output", *params,
               "-p", "output_dir", str(output), "notebooks/xla_ddp_train.ipynb", "outputs/decoder_train.ipynb"]
        print("== " + " ".join(cmd[1:]), flush=True)
        (ROOT / "outputs").mkdir(exist_ok=True)
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        if rc and not _refused_now(output, before):
            return rc
    train_s = time.time() - t0
    try:
        report = compare(single, output, fraction=args.fraction)
    except CompareError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report["train_seconds"] = train_s if not args.skip_training else None
    report["decoder_model"] = _model_param(params)
    report["decoder_refused"] = _refused_now(output, before)
    from kitlib.checkpoint import SCORES_FILE

    report["decoder_predict_seconds"] = json.loads((output / SCORES_FILE).read_text()).get("predict_seconds")
    print(format_table(report))
    if report["decoder_refused"]:
        print(f"note: the hand-off refused the decoder ({output / 'handoff_refused.json'}): its figures are shown, "
              "whichever way they go, but model='auto' will not pick it")
    if not args.skip_training:
        print(f"{report['decoder_model'] or 'the decoder'} LoRA: trained, scored and handed off in {train_s / 60:.1f} min "
              f"(of which {report['decoder_predict_seconds'] or 0:.0f} s predicting the held-out rows)")
    from kitlib.atomic import atomic_write  # the folder's manifest lists it as the kit's (a new training may replace it)

    atomic_write(output / "kinds_report.json", lambda tmp: Path(tmp).write_text(json.dumps(report, indent=1)))
    return 1 if report["decoder_refused"] and not args.skip_training else 0


if __name__ == "__main__":
    sys.exit(main())
