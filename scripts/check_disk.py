"""Before a set-up: is there disk space for the virtual environment it is about to fill?

    python3 scripts/check_disk.py VENV --installed-gb N --download-gb M --what "..."

Why: set-up downloads several GB (PyPI's torch wheel brings 4.3 GB of CUDA libraries; the test
environment and the Kaggle twin take about 11 GB each) and pip only fails when the disk is full,
minutes in, with "OSError: [Errno 28] No space left on device" (a CI run ended so after 146 s).
This script runs first, with the standard library only (no environment exists yet):

- it fails (exit 1) when the disk cannot hold what the environment will hold, ``N`` GB less what
  `VENV` already holds: that set-up would fail whatever pip's cache holds;
- it warns (exit 0) when it cannot also hold pip's downloads, ``M`` GB more: they come from pip's
  cache when it has them, from the network (and into the cache) when it does not.

The sizes are the Makefile's (``*_GB``), measured on a fresh machine; README "Quick start" has them.
``SKIP_DISK_CHECK=1`` skips the check.
"""
import argparse
import os
import shutil
import sys
from pathlib import Path

GB = 1024**3


def _existing(path: Path) -> Path:
    """The nearest folder at or above ``path`` that exists (where the venv will be made)."""
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def _size(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (0 if it does not exist); links are not followed."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total


def verdict(free: int, held: int, installed_gb: float, download_gb: float, what: str,
            where: str) -> tuple[int, str]:
    """What to say about a set-up, from byte counts.

    Args:
        free: bytes free on the disk that will hold the environment.
        held: bytes the environment already holds (an earlier, partial set-up).
        installed_gb: GB the whole environment takes once installed.
        download_gb: GB pip downloads on the way when its cache is empty.
        what: the set-up, in words (for the message).
        where: the environment's folder (for the message).

    Returns:
        ``(exit status, message)``: ``(1, error)`` when ``free`` is less than what is still to be
        installed, ``(0, warning)`` when it holds that but not the downloads too, ``(0, "")`` when
        it holds both.
    """
    need = max(installed_gb * GB - held, 0)
    fix = (f"Free some space (pip's cache: `pip cache dir` says where, `pip cache purge` empties it), or make "
           f"the environment on a bigger disk (VENV=/path/on/it for make submission and make test, "
           f"KAGGLE_VENV= for the twin); SKIP_DISK_CHECK=1 skips this check.")
    if free < need:
        return 1, (f"error: not enough disk for {what}: {where} will take {need / GB:.1f} GB more "
                   f"({installed_gb:g} GB in all), and its disk has {free / GB:.1f} GB free. {fix}")
    if free < need + download_gb * GB:
        return 0, (f"warning: {what} may run out of disk: {where} will take {need / GB:.1f} GB more, pip "
                   f"downloads up to {download_gb:g} GB on the way when its cache does not hold the "
                   f"wheels yet, and the disk has {free / GB:.1f} GB free. {fix}")
    return 0, ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("venv", type=Path)
    p.add_argument("--installed-gb", type=float, required=True)
    p.add_argument("--download-gb", type=float, required=True)
    p.add_argument("--what", required=True)
    a = p.parse_args(argv)
    if os.environ.get("SKIP_DISK_CHECK") == "1":
        return 0
    free = shutil.disk_usage(_existing(a.venv)).free
    rc, msg = verdict(free, _size(a.venv), a.installed_gb, a.download_gb, a.what, str(a.venv))
    if msg:
        print(f"scripts/check_disk.py: {msg}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
