"""Write a file or a folder so that readers see either the old one or the complete new one.

Both build under a temporary name in the destination's own folder (same filesystem) and then
move it into place: a file with ``os.replace`` (atomic on POSIX), a folder with an atomic swap
where Linux offers one (see :func:`atomic_dir`). On any error the temporary is removed and the
destination is left as it was: no partial submission, shard or checkpoint.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def atomic_write(final: str | os.PathLike, write: Callable[[str], None], *, suffix: str = ".tmp") -> None:
    """Call ``write(tmp_path)`` for a temporary file beside ``final``, then rename it into place.

    ``suffix`` ends the temporary name, for writers that read the format from it (``model.save``
    wants ``.keras``).
    """
    final = Path(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a submission or shard is an ordinary file
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where the system cannot.

    Linux ``renameat2(..., RENAME_EXCHANGE)`` (glibc 2.28+, kernel 3.15+; ext4, xfs, btrfs,
    tmpfs and overlayfs support it). Elsewhere, or on a filesystem that refuses it, returns
    False and nothing has changed.

    Raises:
        OSError: the call itself failed for another reason (e.g. permissions).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2  # <fcntl.h>, <linux/fs.h>
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _remove(path: Path) -> None:
    """Delete a replaced file or folder; a failure only leaves a hidden leftover behind."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``final``; on success it replaces ``final``.

    ``final`` is always the old folder or the complete new one, never neither or part:

    * no ``final`` yet: the new folder is renamed into place (``os.replace``, atomic).
    * Linux: the two folders swap names in one atomic step (:func:`_exchange`), then the old
      one, now under the temporary name, is deleted.
    * elsewhere (or a filesystem without the swap): the old folder is renamed aside to
      ``.<name>.<random>.old``, the new one renamed into place (if that fails the old one is
      renamed back and the error propagates), then the old one deleted. A process killed
      between the two renames leaves the old folder under its ``.old`` name.

    A failure to delete the old folder leaves a hidden leftover; ``final`` is the new one.
    On an error in the ``with`` body or in a rename, the temporary folder is removed and
    ``final`` is left as it was.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    old = None
    try:
        yield tmp
        if final.exists() or final.is_symlink():
            if _exchange(tmp, final):
                old = tmp  # the swap put the old folder under the temporary name
            else:
                old = tmp.with_name(tmp.name + ".old")  # unique, as tmp's name is
                os.replace(final, old)
                try:
                    os.replace(tmp, final)
                except BaseException:
                    os.replace(old, final)
                    old = None
                    raise
        else:
            os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    if old is not None:
        _remove(old)
