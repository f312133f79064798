"""Command line: ``python -m kitlib merge SHARDS... -o submission.csv [--sample-submission FILE]``,
``python -m kitlib blend A.csv B.csv ... -o submission.csv [--weights W ...] [--rank] [--sample-submission FILE]``,
``python -m kitlib cascade A.csv B.csv -o submission.csv --fraction F [--rule replace|mean|reorder] [--weight W]
[--by probability|rank] [--center C] [--sample-submission FILE]`` (:mod:`kitlib.outputs.cascade`).

Exit status (every command):

====  =====================================================================================
0     success (``note: ...`` lines on stderr name columns dropped or ignored, and a
      submission of another writer replaced: :mod:`kitlib.outputs.provenance`)
1     an I/O failure: one line ``error: cannot write <output>: <reason>`` (a full disk, a file
      too large, no permission, a read-only folder: ENOSPC, EFBIG, EACCES, EROFS) or
      ``error: cannot read <file>: <reason>``
2     refused input: one line ``error: ...`` naming the file, rank, row or id (the shards cannot
      give a correct submission: see :func:`kitlib.outputs.merge.merge_shards`); also argparse's usage errors
====  =====================================================================================

Whatever the failure, no output file is written and an existing one is left as it was.
"""
from __future__ import annotations

import argparse
import sys
import warnings

from .outputs import provenance
from .outputs.collapse import POLICIES, CollapsedPredictionWarning
from .outputs.merge import MergeError, merge_shards
from .storage import CannotWrite

EXIT_OK, EXIT_IO, EXIT_REFUSED = 0, 1, 2
ID_COL_HELP = ("the id column of every file read and of the output, as the sample submission's header names it "
               "(default: id; e.g. row_id); ids are read as exact strings (kitlib.outputs.submission_csv)")
COLLAPSED_HELP = ("predictions that barely vary (std < 0.005, kitlib.outputs.collapse): warn (write, with a note) or refuse; "
                  "default: warn on the bundled sample only (recognised by content), else refuse")


def _merge(args) -> int:
    with warnings.catch_warnings():  # a replaced submission and a collapse warning are printed below, once, as notes
        warnings.simplefilter("ignore", provenance.SubmissionReplaced)
        warnings.simplefilter("ignore", CollapsedPredictionWarning)
        r = merge_shards(args.shards, args.output, sample_submission=args.sample_submission, test=args.test,
                         writer=provenance.CLI, collapsed=args.collapsed, id_col=args.id_col)
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"wrote {r.output}: {r.num_rows} rows from {r.num_shards} shard(s), "
        f"{r.num_padding_duplicates} padding duplicate(s) dropped, columns {args.id_col},{','.join(r.prediction_columns)}"
    )
    return EXIT_OK


def run_command(command, args) -> int:
    """``command(args)`` with its failures as one ``error:`` line on stderr and the exit status above."""
    try:
        return command(args)
    except (MergeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    except CannotWrite as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_IO
    except OSError as e:  # a read (a file written above as CannotWrite)
        what = e.filename if e.filename is not None else "a file"
        print(f"error: cannot read {what}: {e.strerror or e}", file=sys.stderr)
        return EXIT_IO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kitlib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge prediction shards into one submission CSV")
    m.add_argument("shards", nargs="+", help="shard files, or folders holding them")
    m.add_argument("-o", "--output", required=True, help="submission CSV to write")
    m.add_argument("--sample-submission", help="write rows in this file's order; its ids must all be predicted")
    m.add_argument("--test", help="test CSV: the order for shards without a row index; checked against kit shards")
    m.add_argument("--collapsed", choices=POLICIES, help=COLLAPSED_HELP)
    m.add_argument("--id-col", default="id", help=ID_COL_HELP)
    m.set_defaults(run=_merge)
    b = sub.add_parser("blend", help="blend submissions: weighted mean of predictions or of ranks (kitlib.outputs.blend)")
    b.add_argument("inputs", nargs="+", help="two or more submission CSVs")
    b.add_argument("-o", "--output", required=True, help="submission CSV to write")
    b.add_argument("--weights", nargs="+", type=float, help="one weight per input (default: equal)")
    b.add_argument("--rank", action="store_true", help="average ranks (divided by the row count), the usual choice for ROC AUC")
    b.add_argument("--sample-submission", help="row order and id set; its columns are the prediction columns")
    b.add_argument("--collapsed", choices=POLICIES, help=COLLAPSED_HELP)
    b.add_argument("--id-col", default="id", help=ID_COL_HELP)
    b.set_defaults(run=_blend)
    _add_cascade(sub)
    args = parser.parse_args(argv)
    return run_command(args.run, args)


def _blend(args) -> int:
    from .outputs.blend import blend  # BlendError is a ValueError: refused input, exit 2 (run_command)

    try:
        with warnings.catch_warnings():  # a replaced submission and a collapse warning are printed below, as notes
            warnings.simplefilter("ignore", provenance.SubmissionReplaced)
            warnings.simplefilter("ignore", CollapsedPredictionWarning)
            r = blend(args.inputs, args.output, weights=args.weights, rank=args.rank,
                      sample_submission=args.sample_submission, collapsed=args.collapsed, id_col=args.id_col)
    except OSError as e:  # the inputs were read by then: writing failed (the old output is kept)
        print(f"error: {e if isinstance(e, CannotWrite) else CannotWrite(args.output, e)}", file=sys.stderr)
        return EXIT_IO
    for note in (*r.notes, *([r.replaced] if r.replaced else [])):
        print(f"note: {note}", file=sys.stderr)
    how = "ranks" if r.rank else "predictions"
    print(f"wrote {r.output}: {r.num_rows} rows, the weighted mean of {len(args.inputs)} files' {how} "
          f"(weights {', '.join(f'{w:.3g}' for w in r.weights)}), columns {args.id_col},{','.join(r.columns)}")
    return EXIT_OK


def _add_cascade(sub) -> None:
    """The ``cascade`` subcommand's arguments (kitlib.outputs.cascade)."""
    from .outputs.cascade import RULES, SCORES

    c = sub.add_parser("cascade", help="confidence cascade: B's predictions for A's least certain rows (kitlib.outputs.cascade)")
    c.add_argument("a", help="model A's submission CSV (every row)")
    c.add_argument("b", help="model B's CSV: the picked rows (or every row)")
    c.add_argument("-o", "--output", required=True, help="submission CSV to write")
    c.add_argument("--fraction", required=True, type=float, help="share of rows B re-scores, in (0, 1]")
    c.add_argument("--rule", choices=RULES, default="replace", help="how B's value enters (default: replace, for two files on one scale; reorder keeps A's "
                   "values, for two kinds: what make decoder measured, with --by rank)")
    c.add_argument("--weight", type=float, default=0.5, help="B's share under --rule mean (default 0.5)")
    c.add_argument("--by", choices=tuple(SCORES), default="probability", help="uncertainty of A's probability or rank")
    c.add_argument("--center", type=float, default=0.5, help="the least certain score (default 0.5)")
    c.add_argument("--sample-submission", help="row order and id set; its columns are the prediction columns")
    c.add_argument("--collapsed", choices=POLICIES, help=COLLAPSED_HELP)
    c.add_argument("--id-col", default="id", help=ID_COL_HELP)
    c.set_defaults(run=_cascade)


def _cascade(args) -> int:
    from .outputs.cascade import cascade  # CascadeError is a ValueError: refused input, exit 2 (run_command)

    try:
        with warnings.catch_warnings():  # printed below, as notes
            warnings.simplefilter("ignore", provenance.SubmissionReplaced)
            warnings.simplefilter("ignore", CollapsedPredictionWarning)
            r = cascade(args.a, args.b, args.output, fraction=args.fraction, rule=args.rule, weight=args.weight,
                        by=args.by, center=args.center, sample_submission=args.sample_submission,
                        collapsed=args.collapsed, id_col=args.id_col)
    except OSError as e:  # the inputs were read by then: writing failed (the old output is kept)
        print(f"error: {e if isinstance(e, CannotWrite) else CannotWrite(args.output, e)}", file=sys.stderr)
        return EXIT_IO
    for note in (*r.notes, *([r.replaced] if r.replaced else [])):
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {r.output}: {r.num_rows} rows, {r.rescored} re-scored by {args.b} (fraction {r.fraction:g}, "
          f"rule {r.rule}), columns {args.id_col},{','.join(r.columns)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
