"""Kaggle kernels from the paired notebooks: a thin entry point to the package ``kaggle_kit``.

``python scripts/kernels.py ARGS`` is ``python -m kaggle_kit ARGS`` (see ``kaggle_kit/cli.py`` and
docs/kernels.md); it works from a checkout without installing the package.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root holds kaggle_kit/

from kaggle_kit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
