"""Write a file or a folder so that readers see either the old one or the complete new one.

Both build under a temporary name in the destination's own folder (same filesystem) and then
move it into place: a file with ``os.replace`` (atomic on POSIX), a folder with an atomic swap
where Linux offers one (see :func:`atomic_dir`). On any error the temporary is removed and the
destination is left as it was: no partial submission, shard or checkpoint.

Two rules of where and how, for every write of the kit:

* **A link is written through** (:func:`real_target`): when the destination is a symbolic link
  (Colab users link ``submission.csv`` or a checkpoint folder into a mounted Drive), the file or
  folder it points to is replaced, and the temporary is built beside that real target, on its
  filesystem; the link stays a link. Renaming over the link itself would put a local copy in
  its place and leave the drive's old files, without a word.
* **Modes follow the umask** (:func:`apply_umask`): ``tempfile.mkstemp`` makes 0600 files and
  ``mkdtemp`` 0700 folders, and some writers inside a folder make 0600 files too (safetensors'
  ``save_file``); what the kit puts in place gets what a plain create under the process's umask
  gives: files ``0o666 & ~umask`` (``0o777 & ~umask`` for a file with an execute bit), folders
  ``0o777 & ~umask`` (umask 022: 0644 and 0755; umask 077: 0600 and 0700).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterator

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc/self/status``).

    Elsewhere it is read by setting and restoring it, under a lock (replicas may be threads of one
    process, and ``os.umask`` is process-wide).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (a file, or a folder and everything in it) the modes a plain create gives.

    Files: ``0o666 & ~umask``, or ``0o777 & ~umask`` when the file has an execute bit; folders:
    ``0o777 & ~umask`` (:func:`current_umask`). Symbolic links inside a folder are left alone.
    """
    mask = current_umask()
    path = Path(path)

    def fix(p: Path, is_dir: bool) -> None:
        mode = os.lstat(p).st_mode
        want = (0o777 if is_dir or mode & 0o111 else 0o666) & ~mask
        if mode & 0o7777 != want:
            os.chmod(p, want)

    if not path.is_dir():
        fix(path, False)
        return
    for top, dirs, files in os.walk(path):
        fix(Path(top), True)
        for name in files:
            if not os.path.islink(os.path.join(top, name)):
                fix(Path(top) / name, False)


def real_target(final: str | os.PathLike) -> Path:
    """Where a write to ``final`` must go: ``final`` itself, or what it links to.

    A symbolic link (or a chain of them, or a link in a parent folder) is followed to the file or
    folder it names, which need not exist yet (a dangling link names where to create it). The link
    itself is never replaced.
    """
    final = Path(final)
    if final.is_symlink() or any(p.is_symlink() for p in final.parents if p != p.parent):
        return Path(os.path.realpath(final))
    return final


def atomic_write(final: str | os.PathLike, write: Callable[[str], None], *, suffix: str = ".tmp") -> None:
    """Call ``write(tmp_path)`` for a temporary file beside ``final``, then rename it into place.

    ``suffix`` ends the temporary name, for writers that read the format from it (``model.save``
    wants ``.keras``). A link is written through and the file gets the umask's mode (the module's
    two rules: :func:`real_target`, :func:`apply_umask`).
    """
    final = real_target(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.close(fd)
    try:
        write(tmp)
        apply_umask(tmp)  # mkstemp makes 0600
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

    A link ``final`` is written through: the folder it points to is replaced and the link stays
    (:func:`real_target`); the new folder and everything in it get the umask's modes
    (:func:`apply_umask`; ``mkdtemp`` makes 0700, safetensors 0600 files).
    """
    final = real_target(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    old = None
    try:
        yield tmp
        apply_umask(tmp)
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
