"""Write a file or a folder so that readers see either the old one or the complete new one.

Both build under a temporary name in the destination's own folder (same filesystem) and then
``os.replace`` it into place, which is atomic on POSIX. On any error the temporary is removed
and the destination is left as it was: no partial submission, shard or checkpoint.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def atomic_write(final: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` for a temporary file beside ``final``, then rename it into place."""
    final = Path(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a submission or shard is an ordinary file
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; on success it replaces ``final`` (an older one is removed)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
