"""``make cv``: train every fold (or seed) through the training notebook, blend, score, report.

    python scripts/cv.py --folds 5 [--pseudo] [--blend mean|rank] [--single artifacts/xlmr-toxic] -- <papermill -p ...>
    python scripts/cv.py --seeds 0,1,2 -- <papermill -p ...>

Each fold i runs ``notebooks/xla_ddp_train.ipynb`` through papermill with the given parameters plus
``-p folds K -p fold i -p output_dir <group>`` (the group folder, ``artifacts/cv``: :mod:`kitlib.cv.groups`);
each seed S with ``-p seed S -p output_dir <group>/seed-S`` (``artifacts/seeds``). Then the inference
notebook predicts the test rows with every member and blends them (``-p model <group> -p blend ...``)
into ``--submission`` (``submission-cv.csv`` for folds, ``submission-seeds.csv`` for seeds), and ``kitlib.cv.groups.report`` prints the out-of-fold ROC AUC
per language, each member's and the blend's held-out ROC AUC against the single model's, and the time.

``--pseudo`` (folds only) then runs one round of pseudo-labels: the test rows every fold model agrees
on (``kitlib.cv.pseudo``, ``--high``/``--low``) join every fold's training rows, the folds are trained again
into ``<group>-pseudo``, and the report gives the change on the same held-out rows.

Executed notebooks go to ``outputs/cv/``. A fold already done (its ``oof.csv`` and held-out
predictions there) is trained again unless ``--reuse``. Exit status: 0, or the failing step's.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


SUBMISSIONS = {"folds": "submission-cv.csv", "seeds": "submission-seeds.csv"}  # each blend its own file


def default_submission(folds: bool) -> Path:
    """Where a round blends by default: the folds into ``submission-cv.csv``, the seeds into
    ``submission-seeds.csv``, so a seeds round never replaces the folds' blend (or the reverse);
    a line says so when the other round's file is there."""
    mine, other = ("folds", "seeds") if folds else ("seeds", "folds")
    if (ROOT / SUBMISSIONS[other]).is_file():
        print(f"note: the {mine} blend goes to {SUBMISSIONS[mine]}; {SUBMISSIONS[other]} (the {other}' blend) is left "
              "as it is (--submission FILE to choose)", flush=True)
    return ROOT / SUBMISSIONS[mine]


def _papermill(python: str, notebook: str, out: Path, params: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "kitlib.notebook", "--cwd", "notebooks", "-k", "python3", "--log-output", *params,
           f"notebooks/{notebook}", str(out)]
    print("== " + " ".join(cmd[1:]), flush=True)
    t0 = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True)
    print(f"== {notebook} done in {time.time() - t0:.0f} s", flush=True)


def _done(member: Path, folds: bool) -> bool:
    from kitlib.cv.groups import HELDOUT_PREDICTIONS_FILE, OOF_FILE

    return (member / HELDOUT_PREDICTIONS_FILE).is_file() and (not folds or (member / OOF_FILE).is_file())


def run_round(args, group: Path, submission: Path, extra: list[str], compare: Path | None = None) -> dict:
    """Train every member of ``group``, predict and blend the test rows, report; returns the report."""
    from kitlib.cv.groups import format_report, report

    started = time.time()
    units = ([(f"fold-{i}", ["-p", "folds", str(args.folds), "-p", "fold", str(i), "-p", "output_dir", str(group)])
              for i in range(args.folds)] if args.folds else
             [(f"seed-{s}", ["-p", "seed", str(s), "-p", "output_dir", str(group / f"seed-{s}")]) for s in args.seeds])
    for name, params in units:
        if args.reuse and _done(group / name, bool(args.folds)):
            print(f"== reusing {group / name} (--reuse)")
            continue
        _papermill(args.python, "xla_ddp_train.ipynb", ROOT / "outputs" / "cv" / f"{group.name}-{name}.ipynb",
                   args.params + params + extra)
    _papermill(args.python, "xla_multicore_inference.ipynb", ROOT / "outputs" / "cv" / f"{group.name}-inference.ipynb",
               ["-p", "model", str(group), "-p", "blend", args.blend, "-p", "output_csv", str(submission)])
    r = report(group, single=args.single, blend=args.blend, started=started, compare=compare)
    print(format_report(r), flush=True)
    print(f"blended submission: {submission}")
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folds", type=int, default=0)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.replace(",", " ").split()], default=None)
    p.add_argument("--pseudo", action="store_true", help="one round of pseudo-labels after the folds")
    p.add_argument("--high", type=float, default=None, help="pseudo-label 1 where every fold predicts at least this (kitlib.cv.pseudo.HIGH)")
    p.add_argument("--low", type=float, default=None, help="pseudo-label 0 where every fold predicts at most this (kitlib.cv.pseudo.LOW)")
    p.add_argument("--blend", choices=("mean", "rank"), default="mean")
    p.add_argument("--group", type=Path, help="default: artifacts/cv (folds), artifacts/seeds (seeds)")
    p.add_argument("--submission", type=Path, default=None,
                   help=f"default: {SUBMISSIONS['folds']} (folds), {SUBMISSIONS['seeds']} (seeds): each its own")
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
    submission = (args.submission or default_submission(bool(args.folds))).resolve()
    t0 = time.time()
    try:
        first = run_round(args, group, submission, [])
        if args.pseudo:
            from kitlib.cv.pseudo import HIGH, LOW, write_pseudo

            preds = ROOT / "artifacts" / "predictions" / submission.stem
            pseudo_csv = group / "pseudo.csv"
            summary = write_pseudo(sorted(preds.glob("fold-*.csv")), args.test, pseudo_csv, high=HIGH if args.high is None else args.high, low=LOW if args.low is None else args.low)
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
    except ValueError as e:  # GroupError, FoldsError, BlendError: named inputs
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"make cv: {(time.time() - t0) / 60:.1f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
