"""Groups of models trained to be blended: the folds of a cross-validation, or several seeds.

A group is a folder (``make cv``: ``artifacts/cv``; the training notebook's ``output_dir`` with
``folds=K``) whose subfolders are checkpoints the training notebook wrote::

    <group>/folds/folds.csv, folds.json   the folds of the training rows (kitlib.cv.folds)
    <group>/fold-<i>/                     fold i's checkpoint; train_history.json tags: cv, fold, folds
        valid_predictions.csv             the kept epoch's predictions on fold i (the training loop)
        oof.csv                           the same with fold, lang and label: its out-of-fold rows (save_oof)
        heldout_predictions.csv           the held-out rows (kitlib.cv.splits), through the inference path
        heldout_scores.json               their ROC AUC, overall and per language
    <group>/runs.csv                      one row per run (kitlib.training.runs); the report adds oof_auc, heldout_auc
    <group>/cv_report.json, oof.csv, heldout_blend.csv    written by report()

A seed group (``make cv SEEDS="0 1 2"``) has ``seed-<S>/`` checkpoints and no folds. The inference
notebook takes a group folder as ``model`` (or, on Kaggle, ``model="auto"`` with every kit-trained
checkpoint attached, as ``python -m kaggle_kit run --folds K`` attaches them): each member predicts
the test rows, the predictions are kept (``<pred_dir>/<member>.csv``) and blended with
:func:`kitlib.outputs.blend.blend` (mean, or rank mean: the merger's guarantees) into one submission
(:func:`kitlib.infer.predict_members`). A group with a fold missing or twice is refused
(:func:`kitlib.infer.check_group`). Reading a group's members (``group.json``, :func:`kitlib.infer.members_of`) lives
beside ``predict`` in :mod:`kitlib.infer`, so the inference kernel carries no cross-validation code; writing and
scoring a group is this module's.

Out-of-fold predictions: each training row is predicted by the one model that did not train on it
(its fold's), exactly once, which :func:`check_oof` checks; their ROC AUC, overall and per
language, scores the recipe on every training row. The kept epoch of each fold is picked on its
own fold (``monitor``), so the OOF AUC leans slightly optimistic; the held-out rows, which no
model trained or picked an epoch on, are the unbiased comparison of each fold model, their blend
and the single model (``make submission``'s). ``python -m kitlib.cv report GROUP`` prints it all.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..checkpoint import HISTORY_FILE, SCORES_FILE, VALID_PREDICTIONS_FILE
from ..infer import BLENDS, GROUP_FILE, GroupError, check_group, member_labels, member_tags, members_of, read_group
from .folds import FOLDS_FILE, FOLDS_META

FOLDS_DIR = "folds"  # <group>/folds/folds.csv
OOF_FILE = "oof.csv"
HELDOUT_PREDICTIONS_FILE = "heldout_predictions.csv"
HELDOUT_BLEND_FILE = "heldout_blend.csv"
REPORT_FILE = "cv_report.json"


def group_id(folds_csv: str | os.PathLike, extra_train_csv: str | os.PathLike | None = None) -> str:
    """12 hex digits naming a cross-validation run: sha256 of the folds file and of the rows added to
    every fold's training part (pseudo-labels), so every fold of one run, on any machine, gets the same."""
    h = hashlib.sha256(Path(folds_csv).read_bytes())
    if extra_train_csv:
        h.update(b"\0" + Path(extra_train_csv).read_bytes())
    return h.hexdigest()[:12]


def fold_tags(folds_csv: str | os.PathLike, fold: int, extra_train_csv: str | os.PathLike | None = None) -> dict:
    """``TrainJob.tags`` of fold ``fold``: ``{"cv": group_id, "fold": fold, "folds": K}`` (K from ``folds.json``)."""
    meta = json.loads((Path(folds_csv).parent / FOLDS_META).read_text())
    return {"cv": group_id(folds_csv, extra_train_csv), "fold": int(fold), "folds": int(meta["folds"])}


def save_oof(out_dir: str | os.PathLike, valid_csv: str | os.PathLike, label_col: str = "toxic") -> Path:
    """Write ``<out_dir>/oof.csv``: the kept epoch's predictions on fold i's rows (``valid_predictions.csv``)
    with ``id``, ``fold`` (the checkpoint's tag), ``lang`` (``""`` without a ``lang`` column), ``label``
    and ``pred``, in ``valid_csv``'s row order, atomically.

    Raises:
        GroupError: the checkpoint is not a fold's (no ``fold`` tag), or its predictions are not exactly
            ``valid_csv``'s ids.
    """
    from ..atomic import atomic_write
    from ..outputs.blend import BlendError, read_aligned
    from ..data import read_csv_strings

    out_dir = Path(out_dir)
    tags = member_tags(out_dir)
    if "fold" not in tags:
        raise GroupError(f"{out_dir}: not a fold's checkpoint (its train_history.json has no fold tag)")
    raw = read_csv_strings(valid_csv)
    try:
        ids, _, (pred,) = read_aligned([out_dir / VALID_PREDICTIONS_FILE], expected=pd.DataFrame(
            {"id": raw["id"], label_col: 0.0}), expected_name=str(valid_csv))
    except BlendError as e:
        raise GroupError(f"{out_dir}: its validation predictions are not the rows of {valid_csv}: {e}") from None
    oof = pd.DataFrame({"id": ids, "fold": tags["fold"], "lang": raw["lang"] if "lang" in raw.columns else "",
                        "label": pd.to_numeric(raw[label_col]).to_numpy(), "pred": pred[label_col]})
    atomic_write(out_dir / OOF_FILE, lambda tmp: oof.to_csv(tmp, index=False, float_format="%.9g"))
    return out_dir / OOF_FILE


def check_oof(oof: pd.DataFrame, folds: pd.DataFrame, where: str) -> None:
    """Refuse out-of-fold predictions that are not one per training row, each exactly once, from its own fold.

    Args:
        oof: ``id`` (str), ``fold`` (int) and the prediction (one row per prediction).
        folds: the folds file's ``id``, ``fold`` (:data:`kitlib.cv.folds.FOLDS_FILE`).
        where: how the message names the predictions (the group folder).

    Raises:
        GroupError: an id predicted twice, a training id not predicted, an id that is no training row,
            or an id predicted by another fold's model than its own; naming up to 5 ids of each.
    """
    def show(s) -> str:
        s = list(s)
        return ", ".join(map(repr, s[:5])) + (f" and {len(s) - 5} more" if len(s) > 5 else "")

    problems = []
    dup = oof["id"][oof["id"].duplicated()].unique()
    if len(dup):
        problems.append(f"{len(dup)} id(s) predicted more than once: {show(dup)}")
    missing = folds["id"][~folds["id"].isin(oof["id"])]
    if len(missing):
        problems.append(f"{len(missing)} training id(s) with no out-of-fold prediction: {show(missing)}")
    extra = oof["id"][~oof["id"].isin(folds["id"])]
    if len(extra):
        problems.append(f"{len(extra)} id(s) that are no training row: {show(extra)}")
    own = oof.drop_duplicates("id").merge(folds, on="id", suffixes=("", "_file"))
    wrong = own["id"][own["fold"].astype(int) != own["fold_file"].astype(int)]
    if len(wrong):
        problems.append(f"{len(wrong)} id(s) predicted by another fold's model than their own: {show(wrong)}")
    if problems:
        raise GroupError(f"{where}: the out-of-fold predictions are not one per training row, each once: "
                         + "; ".join(problems) + ". Train the missing folds again (make cv) or remove the extra ones")


def start_group(group: str | os.PathLike, names: list[str]) -> None:
    """Record that ``group`` is exactly the members ``names`` (this command's), keeping the requests
    recorded for reuse (:func:`reuse_refusal`); written atomically."""
    from ..atomic import atomic_write

    group = Path(group)
    group.mkdir(parents=True, exist_ok=True)
    record = {"members": list(names), "requests": read_group(group).get("requests", {})}
    atomic_write(group / GROUP_FILE, lambda tmp: Path(tmp).write_text(json.dumps(record, indent=1)))


def record_member(group: str | os.PathLike, name: str, request: dict) -> None:
    """Record what ``<group>/<name>`` was just trained on: ``request`` (``params``: the training notebook's
    parameters; ``cv``: the cv tag asked for) and the run id its history holds."""
    from ..atomic import atomic_write

    group = Path(group)
    record = read_group(group)
    run_id = json.loads((group / name / HISTORY_FILE).read_text()).get("run_id")
    record.setdefault("requests", {})[name] = {**request, "run_id": run_id}
    atomic_write(group / GROUP_FILE, lambda tmp: Path(tmp).write_text(json.dumps(record, indent=1)))


def reuse_refusal(group: str | os.PathLike, name: str, request: dict) -> str | None:
    """None when ``<group>/<name>`` was trained on exactly ``request`` (the same parameters, the same cv tag:
    folds file and pseudo-labels) and holds that run; else why it is trained again. The presence of the
    folder decides nothing (issue 33 item 5)."""
    member = Path(group) / name
    if not (member / HISTORY_FILE).is_file():
        return "not trained"
    rec = read_group(group).get("requests", {}).get(name)
    if rec is None:
        return f"no record in {GROUP_FILE} of what it was trained on"
    history = json.loads((member / HISTORY_FILE).read_text())
    if rec.get("run_id") != history.get("run_id"):
        return f"it holds run {history.get('run_id')}, not the recorded {rec.get('run_id')}"
    if rec.get("params") != request.get("params"):
        return f"trained with parameters {rec.get('params')}, now {request.get('params')}"
    tag = (history.get("tags") or {}).get("cv")
    if tag != request.get("cv"):
        return f"trained on cv run {tag} (other folds or pseudo-labels), this run is {request.get('cv')}"
    return None


def auc_by_language(frame: pd.DataFrame, pred: str = "pred", label: str = "label", lang: str = "lang") -> dict:
    """``{"all": auc, <lang>: auc, ...}``: :func:`kitlib.metrics.roc_auc` overall and per language
    (NaN where a language's rows hold one class)."""
    from ..metrics import roc_auc

    out = {"all": roc_auc(frame[label].to_numpy(), frame[pred].to_numpy())}
    if lang in frame.columns and frame[lang].astype(str).str.len().gt(0).any():
        for k, g in frame.groupby(lang):
            out[str(k)] = roc_auc(g[label].to_numpy(), g[pred].to_numpy())
    return out


def collect_oof(group: str | os.PathLike, members: list[Path]) -> pd.DataFrame | None:
    """Every fold's ``oof.csv`` together (``id``, ``fold``, ``lang``, ``label``, ``pred``), checked against
    ``<group>/folds/folds.csv`` (:func:`check_oof`); None when the members are no folds (a seed group)."""
    from ..data import read_csv_strings

    if not any("fold" in member_tags(m) for m in members):
        return None
    folds_csv = Path(group) / FOLDS_DIR / FOLDS_FILE
    if not folds_csv.is_file():
        raise GroupError(f"{group}: fold checkpoints but no {FOLDS_DIR}/{FOLDS_FILE} (the folds they were trained on)")
    folds = read_csv_strings(folds_csv)
    folds["fold"] = folds["fold"].astype(int)
    missing = [str(m) for m in members if not (m / OOF_FILE).is_file()]
    if missing:
        raise GroupError(f"{group}: no {OOF_FILE} in {', '.join(missing)} (the training notebook writes it with folds=K)")
    oof = pd.concat([read_csv_strings(m / OOF_FILE) for m in members], ignore_index=True)
    oof["fold"] = oof["fold"].astype(int)
    check_oof(oof, folds, str(group))
    oof["label"], oof["pred"] = pd.to_numeric(oof["label"]), pd.to_numeric(oof["pred"])
    return oof


def heldout_rows(members: list[Path], heldout_csv: str | os.PathLike | None, label_col: str) -> pd.DataFrame:
    """The held-out rows (``id``, ``lang``, float ``label``) of ``heldout_csv``, or of the CSV the first member's
    ``heldout_scores.json`` names when None.

    Raises:
        GroupError: that CSV is not here.
    """
    from ..data import read_csv_strings

    if heldout_csv is None:
        scores = members[0] / SCORES_FILE
        heldout_csv = json.loads(scores.read_text())["csv"] if scores.is_file() else None
    if heldout_csv is None or not Path(heldout_csv).is_file():
        raise GroupError(f"{members[0]}: the held-out rows' CSV ({heldout_csv}) is not here; pass --heldout <the held-out CSV>")
    raw = read_csv_strings(heldout_csv)
    return pd.DataFrame({"id": raw["id"], "lang": raw["lang"] if "lang" in raw.columns else "",
                         "label": pd.to_numeric(raw[label_col]).to_numpy()})


def single_on_rows(single: str | os.PathLike, rows: pd.DataFrame, label_col: str = "toxic") -> tuple[dict | None, str | None]:
    """The single model's held-out ROC AUC on the group's held-out ``rows`` (``id``, ``lang``, ``label``),
    per language, from its ``heldout_predictions.csv``: the same rows as the blend's, never the figure its
    ``heldout_scores.json`` gives for other rows (issue 33 item 5).

    Returns:
        ``(figures, None)``, or ``(None, note)`` naming why it is not compared (no predictions, or they
        lack some of the group's rows).
    """
    from ..data import read_csv_strings

    path = Path(single) / HELDOUT_PREDICTIONS_FILE
    if not path.is_file():
        return None, f"{single}: no {HELDOUT_PREDICTIONS_FILE}; not compared"
    pred = read_csv_strings(path).drop_duplicates("id").set_index("id")[label_col]
    missing = rows["id"][~rows["id"].isin(pred.index)]
    if len(missing):
        return None, (f"{single}: its held-out predictions ({len(pred)} rows) lack {len(missing)} of the group's "
                      f"{len(rows)} held-out rows (e.g. {missing.iloc[0]!r}): not the same rows, not compared")
    figures = auc_by_language(rows.assign(pred=pd.to_numeric(pred.reindex(rows["id"])).to_numpy()))
    return {"folder": str(single), "rows": len(rows), **figures}, None


def report(group: str | os.PathLike, *, single: str | os.PathLike | None = None, blend: str = "mean",
           heldout_csv: str | os.PathLike | None = None, started: float | None = None,
           compare: str | os.PathLike | None = None, label_col: str = "toxic") -> dict:
    """Score a group: out-of-fold ROC AUC (folds), each member's and the blend's held-out ROC AUC,
    overall and per language, against the single model's; written to ``<group>/cv_report.json``.

    Args:
        group: the group folder.
        single: a single model's checkpoint folder (``make submission``'s ``artifacts/xlmr-toxic``): its held-out
            predictions scored on the group's held-out rows (:func:`single_on_rows`; a note when they are not those rows).
        blend: ``"mean"`` or ``"rank"``: how the members' held-out predictions are blended.
        heldout_csv: the held-out rows (labels, ``lang``); None: the CSV the first member's
            ``heldout_scores.json`` names.
        started: the Unix time the run began (the report gives the seconds since).
        compare: an earlier group's folder (the round before pseudo-labels): its report's figures and the change.

    Returns:
        The report: ``members`` (label, folder, held-out AUC per language, train seconds), ``oof`` (per
        language; None for a seed group), ``blend`` (held-out per language), ``single``, ``compare``,
        ``seconds``.

    Raises:
        GroupError: no members, a fold missing (:func:`kitlib.infer.check_group`), bad out-of-fold predictions
            (:func:`check_oof`), a member without held-out predictions.
        kitlib.outputs.blend.BlendError: the members' held-out predictions differ in their ids.
    """
    from ..atomic import atomic_write
    from ..outputs import blend as blending

    group = Path(group)
    members = check_group(members_of(group))
    if not members:
        raise GroupError(f"{group}: no checkpoint written by the training notebook in its subfolders")
    labels = member_labels(members)
    rows = heldout_rows(members, heldout_csv, label_col)
    expected = {"expected": rows.assign(**{label_col: 0.0})[["id", label_col]], "expected_name": "the held-out rows"}
    preds = _member_predictions(members)
    _, _, aligned = blending.read_aligned(preds, **expected)  # every member predicted exactly the held-out rows
    out = {"group": str(group), "members": [], "blend_method": blend}
    for m, label, values in zip(members, labels, aligned):
        out["members"].append(_member_entry(m, label, rows.assign(pred=values[label_col])))
    blended = aligned[0][label_col]
    if len(preds) > 1:
        b = blending.blend(preds, group / HELDOUT_BLEND_FILE, rank=blend == "rank")
        blended = blending.read_aligned([b.output], **expected)[2][0][label_col]
    out["blend"] = auc_by_language(rows.assign(pred=blended))
    out["oof"] = _oof_figures(group, members)
    out["single"], out["single_note"] = single_on_rows(single, rows, label_col) if single is not None else (None, None)
    out["compare"] = _earlier_round(compare)
    out["seconds"] = time.time() - started if started else None
    _record_runs(group, members, out)
    atomic_write(group / REPORT_FILE, lambda tmp: Path(tmp).write_text(json.dumps(out, indent=1)))
    return out


def _member_predictions(members: list[Path]) -> list[Path]:
    """Each member's held-out predictions file; refuses a member without one."""
    preds = []
    for m in members:
        p = m / HELDOUT_PREDICTIONS_FILE
        if not p.is_file():
            raise GroupError(f"{m}: no {HELDOUT_PREDICTIONS_FILE} (the training notebook writes it when it has held-out rows)")
        preds.append(p)
    return preds


def _member_entry(m: Path, label: str, scored: pd.DataFrame) -> dict:
    """One member's line of the report: label, folder, tags, kept epoch, train seconds, and the
    held-out AUC per language of its predictions (``scored``: the held-out rows with ``pred``)."""
    h = json.loads((m / HISTORY_FILE).read_text())
    return {"label": label, "folder": str(m), "tags": h.get("tags") or {},
            "kept_epoch": (h.get("best") or {}).get("epoch"), "train_seconds": h.get("train_seconds"),
            "heldout": auc_by_language(scored)}


def _oof_figures(group: Path, members: list[Path]) -> dict | None:
    """The out-of-fold AUC per language (its predictions written to ``<group>/oof.csv``); None for a seed group."""
    oof = collect_oof(group, members)
    if oof is None:
        return None
    from ..atomic import atomic_write

    atomic_write(group / OOF_FILE, lambda tmp: oof.to_csv(tmp, index=False, float_format="%.9g"))
    return {"rows": len(oof), **auc_by_language(oof)}


def _earlier_round(compare: str | os.PathLike | None) -> dict | None:
    """An earlier group's blend and out-of-fold figures, from its report; None without one."""
    if compare is None or not (Path(compare) / REPORT_FILE).is_file():
        return None
    c = json.loads((Path(compare) / REPORT_FILE).read_text())
    return {"group": str(compare), "blend": c["blend"], "oof": c.get("oof")}


def _record_runs(group: Path, members: list[Path], out: dict) -> None:
    """Fill each member's row of the group's runs table with its held-out (and the out-of-fold) AUC."""
    from ..training.runs import RUNS_FILE, update_run

    table = group / RUNS_FILE
    for m, rec in zip(members, out["members"]):
        run_id = json.loads((m / HISTORY_FILE).read_text()).get("run_id")
        if run_id and table.is_file():
            update_run(table, run_id, heldout_auc=rec["heldout"]["all"],
                       oof_auc=out["oof"]["all"] if out["oof"] else None)


def format_report(r: dict) -> str:
    """The report as text: a table of held-out ROC AUC per language (each member, the blend, the single
    model, the earlier round), the out-of-fold AUC per language, and the time."""
    rows = {m["label"]: m["heldout"] for m in r["members"]}
    rows[f"blend ({r['blend_method']}) of {len(r['members'])}"] = r["blend"]
    if r["single"]:
        rows["single model (make submission), same rows"] = {k: v for k, v in r["single"].items() if k not in ("folder", "rows")}
    if r["compare"]:
        rows[f"blend before ({r['compare']['group']})"] = r["compare"]["blend"]
    table = pd.DataFrame(rows).T
    lines = [f"group {r['group']}: {len(r['members'])} model(s): {', '.join(m['label'] for m in r['members'])}", "held-out ROC AUC (rows no model trained on):",
             table.to_string(float_format=lambda v: f"{v:.4f}")]
    if r["oof"]:
        oof = {k: v for k, v in r["oof"].items() if k != "rows"}
        lines += [f"out-of-fold ROC AUC ({r['oof']['rows']} training rows, each predicted once by the fold model "
                  "that did not train on it):", pd.DataFrame([oof], index=["oof"]).to_string(float_format=lambda v: f"{v:.4f}")]
    best = max(m["heldout"]["all"] for m in r["members"])
    mean = float(np.mean([m["heldout"]["all"] for m in r["members"]]))
    lines.append(f"blend {r['blend']['all']:.4f} vs members: best {best:.4f}, mean {mean:.4f}"
                 + (f"; vs the single model {r['single']['all']:.4f} ({r['blend']['all'] - r['single']['all']:+.4f})"
                    if r["single"] else "; " + (r.get("single_note") or "no single model to compare (make submission writes it)")))
    if r["compare"]:
        d = r["blend"]["all"] - r["compare"]["blend"]["all"]
        lines.append(f"change from {r['compare']['group']}: held-out blend {r['compare']['blend']['all']:.4f} -> "
                     f"{r['blend']['all']:.4f} ({d:+.4f}: {'better' if d > 0 else 'worse' if d < 0 else 'the same'})"
                     + (f"; out-of-fold {r['compare']['oof']['all']:.4f} -> {r['oof']['all']:.4f}"
                        if r["compare"].get("oof") and r["oof"] else ""))
    if r["seconds"] is not None:
        train = sum(m["train_seconds"] or 0 for m in r["members"])
        lines.append(f"time: {r['seconds'] / 60:.1f} min in all ({train / 60:.1f} min fine-tuning)")
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m kitlib.cv report GROUP [--single DIR] [--blend mean|rank] [--heldout CSV] [--started T] [--compare DIR]``
    and ``python -m kitlib.cv pseudo --predictions DIR --test CSV -o CSV [--high H --low L]``."""
    p = argparse.ArgumentParser(prog="python -m kitlib.cv", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="score a group: out-of-fold, each member's and the blend's held-out AUC")
    r.add_argument("group")
    r.add_argument("--single", help="a single model's checkpoint folder (artifacts/xlmr-toxic) to compare with")
    r.add_argument("--blend", choices=BLENDS, default="mean")
    r.add_argument("--heldout", help="the held-out rows' CSV (default: the one the members' heldout_scores.json names)")
    r.add_argument("--started", type=float, help="Unix time the run began")
    r.add_argument("--compare", help="an earlier group's folder (before pseudo-labels)")
    s = sub.add_parser("pseudo", help="pseudo-labels: test rows every member agrees on")
    s.add_argument("--predictions", required=True, help="folder of the members' test predictions (<member>.csv)")
    s.add_argument("--test", required=True, help="the test CSV (id, text, lang)")
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--high", type=float, default=None, help="label 1 where every member predicts at least this (kitlib.cv.pseudo.HIGH)")
    s.add_argument("--low", type=float, default=None, help="label 0 where every member predicts at most this (kitlib.cv.pseudo.LOW)")
    args = p.parse_args(argv)
    try:
        if args.command == "report":
            print(format_report(report(args.group, single=args.single, blend=args.blend, heldout_csv=args.heldout,
                                       started=args.started, compare=args.compare)))
        else:
            from .pseudo import HIGH, LOW, write_pseudo

            print(write_pseudo(sorted(Path(args.predictions).glob("*.csv")), args.test, args.output,
                               high=HIGH if args.high is None else args.high, low=LOW if args.low is None else args.low)["summary"])
    except (GroupError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
