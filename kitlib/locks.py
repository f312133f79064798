"""One run per output folder at a time: a lock file beside the folder, naming its holder.

A training run (:func:`kitlib.training.train.train`) and the inference notebook write their output folder
under :func:`output_lock`: ``<folder>.lock`` beside it, held with ``fcntl.flock`` for the whole run
and holding, as JSON, who holds it (pid, host, command, start time). A second run into the same
folder is refused before any work, naming the holder (:class:`FolderLocked`). The operating
system drops a ``flock`` when its process dies, so a lock left by a run that was killed is free;
when its file names a pid that no longer runs on this host, the new run takes it over and prints a
note naming the old holder. The lock file stays (an empty holder is harmless; deleting it while
another process waits on it would let two runs in).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
from pathlib import Path
from typing import Iterator

LOCK_SUFFIX = ".lock"


class FolderLocked(RuntimeError):
    """Another run writes the same output folder; the message names it and its holder."""


def lock_path(folder: str | os.PathLike) -> Path:
    """``<folder>.lock``, beside ``folder`` (a trailing slash does not matter)."""
    folder = Path(os.path.abspath(folder))
    return folder.with_name(folder.name + LOCK_SUFFIX)


def holder() -> dict:
    """This process as a lock's holder: pid, host, command line, start time (UTC, ISO 8601)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def describe(h: dict) -> str:
    """``pid 123 on host h since 2024-01-01T00:00:00+00:00 (python train.py)``."""
    return f"pid {h.get('pid')} on host {h.get('host')} since {h.get('started')} ({h.get('command')})"


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True  # another user's process, or no pid: assume it runs
    return True


def _read_holder(f) -> dict:
    f.seek(0)
    try:
        return json.loads(f.read() or "{}")
    except ValueError:
        return {}


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, what: str = "output folder") -> Iterator[Path]:
    """Hold ``<folder>.lock`` while the body runs; refuse when another run holds it.

    Raises:
        FolderLocked: another process holds the lock; the message names the folder, the holder and the fix.
    """
    path = lock_path(folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderLocked(
                f"{what} {folder} is being written by another run: {describe(_read_holder(f))} holds {path}. "
                "Wait for it to end, or write elsewhere (another output folder)") from None
        old = _read_holder(f)
        if old.get("pid") is not None:
            same_host = old.get("host") == socket.gethostname()
            why = "no longer runs" if same_host and not _pid_alive(old["pid"]) else "no longer holds it"
            print(f"note: {path} named {describe(old)}, which {why}: taking the lock over")
        f.seek(0)
        f.truncate()
        f.write(json.dumps(holder()))
        f.flush()
        try:
            yield path
        finally:
            f.seek(0)
            f.truncate()
            f.flush()
