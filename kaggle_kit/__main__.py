"""``python -m kaggle_kit ...``: the command line (:mod:`kaggle_kit.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
