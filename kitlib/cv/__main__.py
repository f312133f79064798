"""``python -m kitlib.cv report GROUP ...`` and ``python -m kitlib.cv pseudo ...``: :func:`kitlib.cv.groups.main`."""
import sys

from .groups import main

if __name__ == "__main__":
    sys.exit(main())
