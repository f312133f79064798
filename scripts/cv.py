"""``make cv``: train every fold (or seed) through the training notebook, blend, score, report.

    python scripts/cv.py --folds 5 [--pseudo] [--blend mean|rank] [--single artifacts/xlmr-toxic] -- <papermill -p ...>
    python scripts/cv.py --seeds 0,1,2 -- <papermill -p ...>

Each fold i runs ``notebooks/xla_ddp_train.ipynb`` through papermill with the given parameters plus
``-p folds K -p fold i -p output_dir <group>`` (the group folder, ``artifacts/cv``: :mod:`kitlib.cv.groups`);
each seed S with ``-p seed S -p output_dir <group>/seed-S`` (``artifacts/seeds``). Then the inference
notebook predicts the test rows with every member and blends them (``-p model <group> -p blend ...``)
into ``--submission`` (``submission-cv.csv``), and ``kitlib.cv.groups.report`` prints the out-of-fold ROC AUC
per language, each member's and the blend's held-out ROC AUC against the single model's, and the time.

``--pseudo`` (folds only) then runs one round of pseudo-labels: the test rows every fold model agrees
on (``kitlib.cv.pseudo``, ``--high``/``--low``) join every fold's training rows, the folds are trained again
into ``<group>-pseudo``, and the report gives the change on the same held-out rows.

The group is exactly the members asked for, by name (``<group>/group.json``: :func:`kitlib.cv.groups.start_group`);
other ``fold-*``/``seed-*`` folders in it are named and left out. Executed notebooks go to ``outputs/cv/``.
Every member is trained again unless ``--reuse`` and it was trained on exactly these inputs: the same
notebook parameters and the same cv tag (folds file and pseudo-labels), as ``group.json`` recorded
(:func:`kitlib.cv.groups.reuse_refusal`); the presence of its folder decides nothing. Exit status: 0, or the
failing step's.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _papermill(python: str, notebook: str, out: Path, params: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "papermill", "--cwd", "notebooks", "-k", "python3", "--log-output", *params,
           f"notebooks/{notebook}", str(out)]
    print("== " + " ".join(cmd[1:]), flush=True)
    t0 = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True)
    print(f"== {notebook} done in {time.time() - t0:.0f} s", flush=True)


def _done(member: Path, folds: bool) -> bool:
    from kitlib.cv.groups import HELDOUT_PREDICTIONS_FILE, OOF_FILE

    return (member / HELDOUT_PREDICTIONS_FILE).is_file() and (not folds or (member / OOF_FILE).is_file())


def _param(params: list[str], name: str, default: str = "") -> str:
    """The value of ``-p name value`` in papermill ``params`` (the last one given), else ``default``."""
    values = [params[i + 2] for i in range(len(params) - 2) if params[i] == "-p" and params[i + 1] == name]
    return values[-1] if values else default


def _cv_tag(group: Path, extra: list[str]) -> str | None:
    """The cv tag a fold trained now would get (:func:`kitlib.cv.groups.group_id`), None before the folds file exists."""
    from kitlib.cv.groups import FOLDS_DIR, group_id
    from kitlib.cv.folds import FOLDS_FILE

    folds_csv = group / FOLDS_DIR / FOLDS_FILE
    pseudo = _param(extra, "pseudo_csv")
    return group_id(folds_csv, pseudo or None) if folds_csv.is_file() else None


def _train(args, group: Path, name: str, params: list[str], extra: list[str]) -> None:
    """Train member ``name`` unless ``--reuse`` and it was trained on exactly these inputs (its recorded
    parameters and cv tag: :func:`kitlib.cv.groups.reuse_refusal`), then record what it was trained on."""
    from kitlib.cv.groups import record_member, reuse_refusal

    request = {"params": args.params + params + extra, "cv": _cv_tag(group, extra) if args.folds else None}
    if args.reuse:
        why = reuse_refusal(group, name, request)
        if why is None and _done(group / name, bool(args.folds)):
            print(f"== reusing {group / name} (--reuse: trained on these parameters and rows)")
            return
        print(f"== not reusing {group / name}: {why or 'its predictions are missing'}")
    _papermill(args.python, "xla_ddp_train.ipynb", ROOT / "outputs" / "cv" / f"{group.name}-{name}.ipynb",
               request["params"])
    if args.folds:
        request["cv"] = _cv_tag(group, extra)  # the folds file exists now
    record_member(group, name, request)


def run_round(args, group: Path, submission: Path, extra: list[str], compare: Path | None = None) -> dict:
    """Train every member of ``group`` (exactly the folds or seeds asked for, recorded by name in its
    ``group.json``), predict and blend the test rows, report; returns the report."""
    from kitlib.cv.groups import format_report, report, start_group

    started = time.time()
    units = ([(f"fold-{i}", ["-p", "folds", str(args.folds), "-p", "fold", str(i), "-p", "output_dir", str(group)])
              for i in range(args.folds)] if args.folds else
             [(f"seed-{s}", ["-p", "seed", str(s), "-p", "output_dir", str(group / f"seed-{s}")]) for s in args.seeds])
    names = [name for name, _ in units]
    start_group(group, names)
    others = sorted(p.name for p in group.iterdir() if p.is_dir() and p.name.startswith(("fold-", "seed-")) and p.name not in names)
    print(f"== group {group}: {len(names)} member(s), {', '.join(names)}"
          + (f"; not members (not asked for this time): {', '.join(others)}" if others else ""), flush=True)
    for name, params in units:
        _train(args, group, name, params, extra)
    _papermill(args.python, "xla_multicore_inference.ipynb", ROOT / "outputs" / "cv" / f"{group.name}-inference.ipynb",
               ["-p", "model", str(group), "-p", "blend", args.blend, "-p", "output_csv", str(submission)])
    r = report(group, single=args.single, blend=args.blend, started=started, compare=compare)
    print(format_report(r), flush=True)
    print(f"blended submission ({len(r['members'])} members): {submission}")
    return r


def check_pseudo_joins(params: list[str]) -> None:
    """Refuse ``--pseudo`` before the first fold trains when the pseudo-labelled rows (:data:`kitlib.cv.pseudo.COLUMNS`)
    could not join the training rows of the split ``params`` ask for (:func:`kitlib.cv.splits.training_columns`).

    Raises:
        kitlib.cv.folds.FoldsError: naming the columns the pseudo rows lack and the fix.
    """
    from kitlib import paths, storage
    from kitlib.cv.folds import check_extra_columns
    from kitlib.cv.pseudo import COLUMNS
    from kitlib.cv.splits import training_columns

    split = _param(params, "split", "english")  # the training notebook's default split
    train_csv = None  # split "validation": its columns do not depend on the file
    if split == "english":
        data = storage.as_path(_param(params, "data_dir")) if _param(params, "data_dir") else paths.default_data_dir(ROOT)
        train_csv = storage.as_path(_param(params, "train_csv")) if _param(params, "train_csv") else paths.train_file(data)
    check_extra_columns(COLUMNS, training_columns(split, train_csv, _param(params, "text_col") or None),
                        "--pseudo: the pseudo-labelled rows (kitlib.cv.pseudo)", f"split={split!r}'s training rows ({train_csv})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folds", type=int, default=0)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.replace(",", " ").split()], default=None)
    p.add_argument("--pseudo", action="store_true", help="one round of pseudo-labels after the folds")
    p.add_argument("--high", type=float, default=None, help="pseudo-label 1 where every fold predicts at least this (kitlib.cv.pseudo.HIGH)")
    p.add_argument("--low", type=float, default=None, help="pseudo-label 0 where every fold predicts at most this (kitlib.cv.pseudo.LOW)")
    p.add_argument("--blend", choices=("mean", "rank"), default="mean")
    p.add_argument("--group", type=Path, help="default: artifacts/cv (folds), artifacts/seeds (seeds)")
    p.add_argument("--submission", type=Path, default=ROOT / "submission-cv.csv")
    p.add_argument("--single", default=str(ROOT / "artifacts" / "xlmr-toxic"), help="the single model to compare with")
    p.add_argument("--test", type=Path, default=ROOT / "data" / "jigsaw-sample" / "test.csv")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--reuse", action="store_true", help="keep the members already trained")
    p.add_argument("params", nargs="*", help="papermill parameters for the training notebook (after --)")
    args = p.parse_args(argv)
    if bool(args.folds) == bool(args.seeds):
        p.error("give --folds K (K >= 2) or --seeds S,S,... (one of them)")
    if args.folds and args.folds < 2:
        p.error(f"--folds {args.folds}: K folds need K >= 2")
    if args.pseudo and not args.folds:
        p.error("--pseudo needs --folds (pseudo-labels join the folds' training rows)")
    group = (args.group or ROOT / "artifacts" / ("cv" if args.folds else "seeds")).resolve()
    submission = args.submission.resolve()
    t0 = time.time()
    try:
        if args.pseudo:
            check_pseudo_joins(args.params)  # before the first fold, not after every fold trained
        first = run_round(args, group, submission, [])
        if args.pseudo:
            from kitlib.cv.pseudo import HIGH, LOW, write_pseudo

            preds = ROOT / "artifacts" / "predictions" / submission.stem
            pseudo_csv = group / "pseudo.csv"
            member_csvs = [preds / f"{m['label']}.csv" for m in first["members"]]  # this round's, by name
            print(f"== pseudo-labels from {len(member_csvs)} members: {', '.join(p.name for p in member_csvs)}", flush=True)
            summary = write_pseudo(member_csvs, args.test, pseudo_csv, high=HIGH if args.high is None else args.high, low=LOW if args.low is None else args.low)
            print(f"== pseudo-labels: {summary['summary']} -> {pseudo_csv}", flush=True)
            second = run_round(args, group.with_name(group.name + "-pseudo"),
                               submission.with_name(submission.stem + "-pseudo" + submission.suffix),
                               ["-p", "pseudo_csv", str(pseudo_csv)], compare=group)
            d = second["blend"]["all"] - first["blend"]["all"]
            print(f"pseudo-label round: held-out blend ROC AUC {first['blend']['all']:.4f} -> {second['blend']['all']:.4f} ({d:+.4f})")
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd[1:4]))}... failed (exit {e.returncode}); the executed notebook in "
              "outputs/cv/ shows where", file=sys.stderr)
        return e.returncode or 1
    except (ValueError, FileNotFoundError) as e:  # GroupError, FoldsError, BlendError, a missing file: named inputs
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"make cv: {(time.time() - t0) / 60:.1f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
