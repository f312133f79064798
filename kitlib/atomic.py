"""Write a file or a folder so that readers see either the old one or the complete new one.

Both build under a temporary name in the destination's own folder (same filesystem) and then
move it into place: a file with ``os.replace`` (atomic on POSIX), a folder with an atomic swap
where Linux offers one (see :func:`atomic_dir`). On any error the temporary is removed and the
destination is left as it was: no partial submission, shard or checkpoint.

Two rules of where and how, for every write of the kit:

* **A link is written through** (:func:`real_target`): the file or folder a symbolic link points to is
  replaced (the temporary built beside it, on its filesystem); the link stays a link.
* **Modes follow the umask** (:func:`apply_umask`): what the kit puts in place gets what a plain create
  under the process's umask gives, not ``mkstemp``'s 0600.
* **The kit replaces only what it owns** (:func:`check_replaceable`): a folder built by :func:`atomic_dir`
  lists the entries the kit wrote in :data:`MANIFEST`; an existing folder holding anything else is
  refused before any work, naming what is there, and the swap checks again.
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

MANIFEST = ".kitlib-owned"  # in a folder the kit built: the names of the entries it wrote there, one a line


class NotOwnedError(FileExistsError):
    """An existing folder holds entries the kit did not write, so the kit will not replace it."""


def owned_entries(folder: str | os.PathLike) -> set[str]:
    """The names of the entries the kit wrote into ``folder`` (its :data:`MANIFEST`; empty without one)."""
    try:
        names = (Path(folder) / MANIFEST).read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return set()
    return {n for n in names if n} | {MANIFEST}


def foreign_entries(folder: str | os.PathLike) -> list[str]:
    """The entries of ``folder`` (followed through a link) that the kit did not write, sorted.

    ``[]`` when ``folder`` does not exist or is empty. An existing file (not a folder) is returned as
    ``["<itself>"]``: the kit never replaces a file with a folder.
    """
    folder = real_target(folder)
    if not folder.exists():
        return []
    if not folder.is_dir():
        return ["<itself: a file, not a folder>"]
    owned = owned_entries(folder)
    return sorted(p.name for p in folder.iterdir() if p.name not in owned)


def check_replaceable(final: str | os.PathLike, what: str = "the output folder") -> None:
    """Refuse, before any work, to replace a folder that holds anything the kit did not write.

    The rule of the module doc (the kit replaces only what it owns): ``final`` (or the folder it links
    to) may be absent, empty, or an earlier output of the kit holding only the entries its
    :data:`MANIFEST` names.

    Raises:
        NotOwnedError: ``final`` holds other entries; names up to eight of them, their count, and the fix.
    """
    extra = foreign_entries(final)
    if not extra:
        return
    real = real_target(final)
    where = f"{final} (a link to {real})" if real != Path(final) else f"{final}"
    shown = ", ".join(extra[:8]) + (f", ... ({len(extra)} in all)" if len(extra) > 8 else "")
    raise NotOwnedError(f"{what} {where} holds entries the kit did not write: {shown}. The kit replaces a folder "
                        f"whole and will not delete them: move them out, or choose another folder that is new or empty.")


def _register(folder: Path, name: str) -> None:
    """Add ``name`` to ``folder``'s :data:`MANIFEST` when it has one (a kit-built folder)."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return
    owned = owned_entries(folder) - {MANIFEST}
    if name in owned or name == MANIFEST:
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(f"{n}\n" for n in sorted(owned | {name})))
    apply_umask(tmp)
    os.replace(tmp, manifest)


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
    two rules: :func:`real_target`, :func:`apply_umask`). Written into a folder the kit built, the
    file joins the entries that folder's :data:`MANIFEST` says the kit owns.
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
    _register(final.parent, final.name)


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

    The module's rules hold: a link is written through, modes follow the umask, and only a folder the kit
    owns is replaced (checked before the body runs and again just before the swap; if entries the kit did
    not write appeared meanwhile, the new folder is kept under its temporary name, which the error names).

    Raises:
        NotOwnedError: ``final`` holds entries the kit did not write.
    """
    check_replaceable(final)
    final = real_target(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    old = None
    try:
        yield tmp
        (tmp / MANIFEST).write_text("".join(f"{p.name}\n" for p in sorted(tmp.iterdir())), encoding="utf-8")
        apply_umask(tmp)
        try:
            check_replaceable(final)
        except NotOwnedError as e:
            e.args = (f"{e.args[0]} The new folder is kept at {tmp}.",)
            tmp = None  # keep it: the user's files win, and the work is not lost
            raise
        old = _swap_in(tmp, final)
    except BaseException:
        if tmp is not None:
            _remove(tmp)
        raise
    if old is not None:
        _remove(old)


def _swap_in(tmp: Path, final: Path) -> Path | None:
    """Put the complete folder ``tmp`` in the place of ``final`` (:func:`atomic_dir`'s three cases);
    return where the old folder now is, to delete (None: there was none). On an error ``final`` is as it was."""
    if not (final.exists() or final.is_symlink()):
        os.replace(tmp, final)
        return None
    if _exchange(tmp, final):
        return tmp  # the swap put the old folder under the temporary name
    old = tmp.with_name(tmp.name + ".old")  # unique, as tmp's name is
    os.replace(final, old)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.replace(old, final)
        raise
    return old
