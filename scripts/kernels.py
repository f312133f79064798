"""Kaggle kernels from the paired notebooks: the command line of ``scripts/kaggle_kernels``.

::

    python scripts/kernels.py stage     [NOTEBOOK ...] [--owner NAME] [--out build/kernels]
    python scripts/kernels.py validate  [NOTEBOOK ...] [--owner NAME]     # = push --dry-run
    python scripts/kernels.py push      [NOTEBOOK ...] [--dry-run] [--wait] [--timeout S] [--output DIR]
    python scripts/kernels.py status    OWNER/SLUG
    python scripts/kernels.py output    OWNER/SLUG [-o DIR]
    python scripts/kernels.py run-local NOTEBOOK [--root DIR] [--data data/jigsaw-sample] [-p NAME VALUE]

See ``scripts/kaggle_kernels/cli.py`` and docs/kernels.md.
"""
import sys

from kaggle_kernels.cli import main  # scripts/ is on sys.path: it holds this script

if __name__ == "__main__":
    sys.exit(main())
