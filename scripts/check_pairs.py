"""Paired notebooks kept honest: the command line of :mod:`notebook_pairs` (its docstring has the rules).

Check (CI: ``make test``; pre-commit)::

    python scripts/check_pairs.py [NOTEBOOK ...]          # default: every pair under notebooks/

exits 1 with one line per problem, naming the file: a missing side, a pair that disagrees, a
non-deterministic ``.ipynb``. Sync::

    python scripts/check_pairs.py --sync [--from py|ipynb] [NOTEBOOK ...]

brings each pair together from the side git shows as changed; it refuses (exit 1, nothing written)
when both sides changed, neither did, or the round trip would change a cell. ``--from`` picks the
side explicitly (overwriting the other side's edits: your call).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's notebook_pairs and kitlib

from notebook_pairs import Pair, SyncRefused, check_pair, pairs_for, sync_pair  # noqa: E402

__all__ = ["Pair", "SyncRefused", "check_pair", "main", "pairs_for", "sync_pair"]


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring): 0 all pairs honest, 1 a problem (or a refused sync), 2 bad usage."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", help="X, X.py or X.ipynb (default: every pair in notebooks/)")
    p.add_argument("--sync", action="store_true", help="sync disagreeing pairs (refuses when both sides changed)")
    p.add_argument("--from", dest="source", choices=("py", "ipynb"), help="with --sync: take this side")
    a = p.parse_args(argv)
    try:
        pairs = pairs_for(a.notebooks)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = 0
    for pair in pairs:
        try:
            if a.sync:
                print(sync_pair(pair, a.source))
            problems = check_pair(pair)
        except (SyncRefused, FileNotFoundError, RuntimeError) as e:
            problems = [str(e)]
        for msg in problems:
            print(f"error: {msg}", file=sys.stderr)
        failed += bool(problems)
    if not a.sync:
        print(f"{len(pairs) - failed}/{len(pairs)} notebook pair(s) in sync")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
