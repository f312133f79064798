"""Command line: ``python -m kitlib merge SHARDS... -o submission.csv [--sample-submission FILE]``.

Exit status 0 on success (``note: ...`` lines on stderr name columns dropped or ignored, and a
submission of another writer replaced: :mod:`kitlib.provenance`); 2 with
``error: ...`` on stderr, and no output file (an existing one is left as it was), when the shards
cannot give a correct submission (see :func:`kitlib.merge.merge_shards`).
"""
from __future__ import annotations

import argparse
import sys
import warnings

from . import provenance
from .merge import MergeError, merge_shards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kitlib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge prediction shards into one submission CSV")
    m.add_argument("shards", nargs="+", help="shard files, or folders holding them")
    m.add_argument("-o", "--output", required=True, help="submission CSV to write")
    m.add_argument("--sample-submission", help="write rows in this file's order; its ids must all be predicted")
    m.add_argument("--test", help="test CSV: the order for shards without a row index; checked against kit shards")
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():  # a replaced submission is printed below, as a note
            warnings.simplefilter("ignore", provenance.SubmissionReplaced)
            r = merge_shards(args.shards, args.output, sample_submission=args.sample_submission, test=args.test,
                             writer=provenance.CLI)
    except MergeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for note in r.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"wrote {r.output}: {r.num_rows} rows from {r.num_shards} shard(s), "
        f"{r.num_padding_duplicates} padding duplicate(s) dropped, columns id,{','.join(r.prediction_columns)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
