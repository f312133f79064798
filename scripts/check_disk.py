"""Before a set-up: is there disk space for everything it is about to write?

    python3 scripts/check_disk.py VENV --installed-gb N --download-gb M --what "..." [--pip-cache DIR|none]
    python3 scripts/check_disk.py VENV --full [--installed-gb N --download-gb M] --what "..." [--pip-error TEXT]

Why: set-up downloads several GB (PyPI's torch wheel brings 4.3 GB of CUDA libraries; the test
environment and the Kaggle twin take about 11 GB each) and pip only fails when a disk is full,
minutes in, with "OSError: [Errno 28] No space left on device" (a CI run ended so after 146 s).
This script runs first, with the standard library only (no environment exists yet).

The rule: the check covers every filesystem the set-up writes, each with its share of the peak,
less what it already holds, summed per filesystem when several share one (:func:`places`):

- the environment (``VENV``): ``N`` GB once installed, less what an earlier, partial set-up left;
- TMPDIR (:func:`tempfile.gettempdir`, where pip writes): up to ``M`` GB, the downloaded wheels of
  one pip run, which pip keeps in its temporary folder until that run ends;
- pip's cache (``pip cache dir``; none with ``PIP_NO_CACHE_DIR``): up to ``M`` GB when it does not
  hold the wheels yet, less what it holds.

It fails (exit 1) when a filesystem cannot hold what the environment and TMPDIR need there (pip
would fail on it whatever its cache holds), naming that filesystem and every share on it; it warns
(exit 0) when it cannot also hold pip's cache's share (pip goes on without caching when its cache
cannot be written). ``--full`` is what ``scripts/pip_install.sh`` runs when pip failed with a full
disk anyway: it names the filesystem that filled (:func:`filled`) and what to do.

The sizes are the Makefile's (``*_GB``), measured on a fresh machine; README "Quick start" has them.
``SKIP_DISK_CHECK=1`` skips the check.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

GB = 1024**3
FIX = ("Free some space there (pip's cache: `pip cache dir` says where, `pip cache purge` empties it), or move "
       "what does not fit to a bigger disk: the environment with VENV=/path/on/it (make submission, make test; "
       "KAGGLE_VENV= for the twin), pip's temporary files with TMPDIR=/path/on/it, pip's cache with "
       "PIP_CACHE_DIR=/path/on/it (or PIP_NO_CACHE_DIR=1: none); SKIP_DISK_CHECK=1 skips this check.")


@dataclass
class Place:
    """One thing the set-up writes: ``role`` (in words), ``path``, and its share of the peak in
    bytes, ``need`` (pip fails without it) or ``want`` (only pip's cache: pip goes on without)."""

    role: str
    path: Path
    need: int = 0
    want: int = 0
    detail: str = ""


@dataclass
class Filesystem:
    """The places on one filesystem (one ``st_dev``), its free and total bytes."""

    places: list[Place] = field(default_factory=list)
    free: int = 0
    total: int = 0

    @property
    def need(self) -> int:
        return sum(p.need for p in self.places)

    @property
    def want(self) -> int:
        return sum(p.want for p in self.places)

    def name(self) -> str:
        return " and ".join(f"{p.role} ({p.path})" for p in self.places)


def _existing(path: Path) -> Path:
    """The nearest folder at or above ``path`` that exists (where the folder will be made)."""
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def _device(folder: Path) -> int:
    """The filesystem ``folder`` is on (``os.stat``'s ``st_dev``)."""
    return os.stat(folder).st_dev


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


def _gb(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= GB / 10 or n == 0 else f"{n / 2**20:.0f} MiB"


def pip_cache_dir(venv: Path) -> Path | None:
    """Where pip keeps its cache, as the pip that will run says (``pip cache dir``: it reads pip's
    configuration files and ``PIP_CACHE_DIR``); None when pip keeps none (``PIP_NO_CACHE_DIR``,
    ``no-cache-dir`` in its configuration). Without a pip to ask: ``PIP_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/pip``, else ``~/.cache/pip``."""
    if os.environ.get("PIP_NO_CACHE_DIR", "").lower() in ("1", "true", "yes", "on"):
        return None
    for py in (venv / "bin" / "python", Path(sys.executable)):
        if not py.exists():
            continue
        try:
            r = subprocess.run([str(py), "-m", "pip", "cache", "dir"], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and r.stdout.strip():
            return Path(r.stdout.strip().splitlines()[-1])
        if "disabled" in r.stderr:  # "pip cache commands can not function since cache is disabled"
            return None
    if os.environ.get("PIP_CACHE_DIR"):
        return Path(os.environ["PIP_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pip"


def places(venv: Path, installed_gb: float, download_gb: float, pip_cache: Path | None,
           tmpdir: Path | None = None) -> list[Place]:
    """What the set-up writes and its share of the peak, less what each already holds (the rule:
    module docstring). ``tmpdir``: None for :func:`tempfile.gettempdir` (``TMPDIR``, pip's)."""
    held = _size(venv)
    out = [Place("the environment", venv, need=max(int(installed_gb * GB) - held, 0),
                 detail=f"{_gb(max(int(installed_gb * GB) - held, 0))} more ({installed_gb:g} GB in all)"),
           Place("TMPDIR", Path(tmpdir or tempfile.gettempdir()), need=int(download_gb * GB),
                 detail=f"up to {download_gb:g} GB of pip's downloads while it runs")]
    if pip_cache is not None:
        cached = _size(pip_cache)
        out.append(Place("pip's cache", pip_cache, want=max(int(download_gb * GB) - cached, 0),
                         detail=f"up to {_gb(max(int(download_gb * GB) - cached, 0))} more when it does not hold "
                                f"the wheels yet (it holds {_gb(cached)})"))
    return out


def filesystems(where: list[Place]) -> list[Filesystem]:
    """``where`` grouped by filesystem (``os.stat(...).st_dev`` of the nearest existing folder), in
    the order first met, each with ``shutil.disk_usage``'s free and total bytes."""
    by_dev: dict[int, Filesystem] = {}
    for p in where:
        folder = _existing(p.path)
        dev = _device(folder)
        if dev not in by_dev:
            usage = shutil.disk_usage(folder)
            by_dev[dev] = Filesystem(free=usage.free, total=usage.total)
        by_dev[dev].places.append(p)
    return list(by_dev.values())


def _describe(fs: Filesystem, with_want: bool) -> str:
    shares = "; ".join(f"{p.role}: {p.detail}" for p in fs.places if p.need or (with_want and p.want))
    total = fs.need + (fs.want if with_want else 0)
    return (f"the filesystem holding {fs.name()} must hold {_gb(total)} at the set-up's peak ({shares}) and has "
            f"{_gb(fs.free)} free ({_gb(fs.total)} in all)")


def verdict(fss: list[Filesystem], what: str) -> tuple[int, str]:
    """What to say about a set-up, from :func:`filesystems`.

    Returns:
        ``(exit status, message)``: ``(1, error)`` naming every filesystem whose free bytes are
        fewer than the environment's and TMPDIR's shares on it; ``(0, warning)`` naming those that
        hold these but not pip's cache's share too; ``(0, "")`` when every one holds everything.
    """
    short = [fs for fs in fss if fs.free < fs.need]
    if short:
        return 1, f"error: not enough disk for {what}: " + "; ".join(_describe(fs, False) for fs in short) + f". {FIX}"
    tight = [fs for fs in fss if fs.free < fs.need + fs.want]
    if tight:
        return 0, (f"warning: {what} may run out of disk: " + "; ".join(_describe(fs, True) for fs in tight)
                   + f". {FIX}")
    return 0, ""


def filled(fss: list[Filesystem], pip_error: str = "") -> tuple[Filesystem, str]:
    """After pip failed with a full disk: the filesystem that filled, and how that is known.

    In order: the one holding the path pip's error names (``No space left on device: '/path'``);
    else the first that cannot hold its share of the peak (pip removed its temporary files when it
    ended, so a free TMPDIR today says nothing about its peak); else the one with the least free.
    """
    m = re.search(r"No space left on device: '([^']+)'", pip_error)
    if m:
        dev = _device(_existing(Path(m.group(1))))
        for fs in fss:
            if any(_device(_existing(p.path)) == dev for p in fs.places):
                return fs, f"pip's error names {m.group(1)}"
    for fs in fss:
        if fs.free < fs.need + fs.want:
            return fs, "it cannot hold its share of the set-up's peak"
    return min(fss, key=lambda fs: fs.free), "the least space is free there (no sizes to compare with)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("venv", type=Path)
    p.add_argument("--installed-gb", type=float, default=None)
    p.add_argument("--download-gb", type=float, default=None)
    p.add_argument("--what", required=True)
    p.add_argument("--pip-cache", default=None, help="pip's cache folder, or 'none' (default: ask pip)")
    p.add_argument("--full", action="store_true", help="pip failed with a full disk: say which filesystem filled")
    p.add_argument("--pip-error", default="", help="with --full: pip's final error")
    a = p.parse_args(argv)
    if not a.full and (a.installed_gb is None or a.download_gb is None):
        p.error("--installed-gb and --download-gb are needed (or --full)")
    if os.environ.get("SKIP_DISK_CHECK") == "1" and not a.full:
        return 0
    cache = None if a.pip_cache == "none" else Path(a.pip_cache) if a.pip_cache else pip_cache_dir(a.venv)
    fss = filesystems(places(a.venv, a.installed_gb or 0, a.download_gb or 0, cache))
    if a.full:
        fs, why = filled(fss, a.pip_error)
        others = "; ".join(f"{o.name()}: {_gb(o.free)} free" for o in fss if o is not fs)
        print(f"scripts/pip_install.sh: the disk is full (pip: No space left on device) in: {a.what}. It filled on "
              f"the filesystem holding {fs.name()} ({why}): {_gb(fs.free)} free of {_gb(fs.total)} now"
              + (f", and the set-up's share there is {_gb(fs.need + fs.want)} at its peak" if fs.need + fs.want else "")
              + (f"; elsewhere, {others}" if others else "") + f". {FIX} Then run the same make command again.",
              file=sys.stderr)
        return 0
    rc, msg = verdict(fss, a.what)
    if msg:
        print(f"scripts/check_disk.py: {msg}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
