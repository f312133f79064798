"""The kit's locks, one mechanism: a lock file held with ``fcntl.flock``, removed when released.

* **One run per output folder at a time** (:func:`output_lock`): a training run holds ``<folder>.lock``
  beside its output folder for the whole run, and an inference run one beside its shard folder and one
  beside its submission file; the file names its holder (pid, host, command, start time, as JSON). A second
  run into the same folder is refused before any work, naming the holder (:class:`FolderLocked`).
* **A lock belongs to the folder written, not to the name it was reached by** (:func:`lock_path`): every
  link on the way is followed (the rule writes follow too: :func:`kitlib.atomic.real_target`).
* **A shared record changed by several processes** (:func:`record_lock`): the runs table's
  read-change-replace (:mod:`kitlib.training.runs`) waits for ``.<name>.lock`` beside the record.

The operating system drops a ``flock`` when its process dies; a holder removes its lock file on release
(a waiter that then holds a removed file tries again on the path's current one). A file left by a killed
run is free: the next run takes it, with a note naming that holder.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

LOCK_SUFFIX = ".lock"


class FolderLocked(RuntimeError):
    """Another run writes the same output folder; the message names it and its holder."""


def lock_path(folder: str | os.PathLike) -> Path:
    """``<real>.lock`` beside ``real``, the folder (or file) that ``folder`` names once every link on the way is
    followed (:func:`os.path.realpath`; it need not exist yet): one lock per real folder, whatever name or link
    reaches it. A trailing slash does not matter."""
    folder = Path(os.path.realpath(folder))
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


def _take(path: Path, wait_s: float | None):
    """Open ``path`` and hold its ``flock``; returns the open file, or None when another process holds it
    (``wait_s`` None: do not wait; else wait up to ``wait_s`` seconds, then None)."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while True:
        f = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            if deadline is None or time.monotonic() > deadline:
                return None
            time.sleep(0.02)
            continue
        try:
            current = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return f
        f.close()  # its holder removed it as we waited: take the file the path names now


def _release(path: Path, f) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # still held: a waiter holding the old file tries again (see _take)
    f.close()


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, what: str = "output folder") -> Iterator[Path]:
    """Hold ``<folder>.lock`` while the body runs; refuse when another run holds it.

    Raises:
        FolderLocked: another process holds the lock; the message names the folder, the holder and the fix.
    """
    path = lock_path(folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise type(e)(e.errno, f"{what} {folder}: its lock {path} cannot be made there ({e.strerror}: a file where "
                               "a folder should be, or a link into one?); write elsewhere", str(path.parent)) from e
    f = _take(path, None)
    if f is None:
        with contextlib.suppress(OSError), open(path, encoding="utf-8") as g:
            held = _read_holder(g)
        real = os.path.realpath(folder)
        via = f" (the folder {real}, which it links to)" if real != os.path.abspath(folder) else ""
        raise FolderLocked(
            f"{what} {folder}{via} is being written by another run: {describe(held)} holds {path}. "
            "Wait for it to end, or write elsewhere (another output folder)")
    try:
        old = _read_holder(f)
        if old.get("pid") is not None:
            same_host = old.get("host") == socket.gethostname()
            why = "no longer runs" if same_host and not _pid_alive(old["pid"]) else "no longer holds it"
            print(f"note: {path} named {describe(old)}, which {why}: taking the lock over")
        f.seek(0)
        f.truncate()
        f.write(json.dumps(holder()))
        f.flush()
        yield path
    finally:
        _release(path, f)


@contextlib.contextmanager
def record_lock(record: str | os.PathLike, wait_s: float) -> Iterator[Path]:
    """Hold ``.<name>.lock`` beside the shared file ``record`` while the body reads, changes and replaces it.

    Raises:
        TimeoutError: another process held it for ``wait_s`` seconds; names the lock and the fix.
    """
    real = Path(os.path.realpath(record))  # one lock per real file, whatever link reaches it (lock_path)
    path = real.parent / f".{real.name}{LOCK_SUFFIX}"
    f = _take(path, wait_s)
    if f is None:
        raise TimeoutError(f"{record}: another process has held its lock {path} for {wait_s:g} s; wait for the "
                           "other run to finish writing, or remove the lock file if no process of the kit is running")
    try:
        yield Path(record)
    finally:
        _release(path, f)
