"""Where shards and submissions live: a local path, or a URL (``s3://``, ``gs://``, ``file://``...).

A multi-host run needs one folder every host can write: an object store bucket (Cloud Storage
next to a TPU pod, S3, or any filesystem fsspec knows). :func:`as_path` turns what the user
gave into something with the few ``pathlib`` methods the kit uses (``name``, ``parent``,
``suffix``, ``/``, ``iterdir``, ``is_dir``, ``is_file``, ``unlink``, ``mkdir``):

* a local path or a ``file:`` URL (RFC 8089: :func:`file_url_path`) -> :class:`pathlib.Path`, written
  through :func:`kitlib.atomic.atomic_write`;
* any other URL -> :class:`URL`, backed by the fsspec filesystem of its protocol (the ``storage`` extra);
  credentials come from that library's usual sources.

``shard_dir`` must be a store that processes share: ``memory://`` is refused before any replica starts
(:func:`check_shared`). A write that fails raises :class:`CannotWrite` naming the file, and a file appears
whole or not at all (:func:`atomic_write`: one upload, or a dot-name moved into place).
"""
from __future__ import annotations

import os
import posixpath
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import unquote_to_bytes, urlsplit

from .atomic import atomic_write as _local_atomic_write

# fsspec protocols whose objects are replaced whole by an upload, and that have no real folders
OBJECT_STORES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss")
# fsspec protocols whose files live in the memory of one process: replica processes cannot share them
PROCESS_LOCAL = ("memory",)
_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_FILE_RE = re.compile(r"^file:", re.IGNORECASE)


class CannotWrite(OSError):
    """A file the kit could not write (``str()``: ``cannot write <path>: <reason>``).

    Keeps the original ``errno`` (ENOSPC, EFBIG, EACCES, EROFS, ...) and chains the original error.
    Attributes: ``path`` (what was to be written, as given), ``reason`` (the system's words).
    """

    def __init__(self, path, error: OSError):
        reason = error.strerror or (os.strerror(error.args[0]) if error.args and isinstance(error.args[0], int) else str(error))
        code = error.errno if error.errno is not None else (error.args[0] if error.args and isinstance(error.args[0], int) else None)
        super().__init__(code, reason)
        self.path, self.reason = str(path), reason

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"

    def __reduce__(self):  # travels back from a replica process whole
        return (CannotWrite, (self.path, OSError(self.errno, self.reason)))


def is_url(path: str | os.PathLike) -> bool:
    """True for ``scheme://...`` strings other than ``file:`` URLs (those are local paths)."""
    m = _URL_RE.match(str(path)) if isinstance(path, str) else None
    return bool(m) and m.group(1).lower() != "file"


def file_url_path(url: str) -> Path:
    """The local path a ``file:`` URL names, decoded as RFC 8089 says.

    ``file:///p``, ``file://localhost/p`` and ``file:/p`` name the absolute path ``/p``; the path's
    percent-escapes are decoded as bytes and then as the filesystem encoding
    (:func:`os.fsdecode`), the inverse of :meth:`pathlib.Path.as_uri` (``%20`` -> space,
    ``%23`` -> ``#``, ``%C3%A9`` -> ``é``).

    Raises:
        ValueError: a host other than ``localhost`` (a remote file: mount it and pass the path), or a
            query or fragment (an unescaped ``?`` or ``#``, which would cut the path short: write them
            as ``%3F`` and ``%23``), or no absolute path.
    """
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{url}: a file: URL on host {parts.netloc!r}; the kit reads only this machine's files "
                         "(write file:///path, or mount the remote folder and pass its path)")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(f"{url}: a file: URL with an unescaped '?' or '#' names a shorter path than it seems; "
                         "write them as %3F and %23 (pathlib.Path.as_uri() does)")
    if not parts.path.startswith("/"):
        raise ValueError(f"{url}: a file: URL needs an absolute path (file:///path)")
    return Path(os.fsdecode(unquote_to_bytes(parts.path)))


def as_path(path: str | os.PathLike | URL) -> Path | URL:
    """``path`` as a :class:`pathlib.Path` (local, or a ``file:`` URL) or a :class:`URL` (anything else).

    A local path's ``~`` is expanded (:meth:`pathlib.Path.expanduser`), as pandas and pyarrow
    expand it when they read: the kit's own writers (``pathlib``, ``os``) do not, and would write
    a literal ``./~/...`` folder that the readers never look in. :func:`normalise` gives the same
    path as a string.

    Raises:
        ValueError: a ``file:`` URL that names no local path (:func:`file_url_path`).
        ImportError: the URL's fsspec filesystem is not installed (e.g. ``pip install s3fs``),
            raised when the URL is first used.
    """
    if isinstance(path, URL):
        return path
    if isinstance(path, Path):
        return path.expanduser()
    s = os.fspath(path)
    if isinstance(s, str) and _FILE_RE.match(s):
        return file_url_path(s)
    return URL(s) if is_url(s) else Path(s).expanduser()


def normalise(path: str | os.PathLike | URL) -> str:
    """The one form of a path the user gave, taken once, up front, by every job (``InferJob``,
    ``TrainJob``) and command line (``merge``, ``blend``, ``submit``), so that every reader and
    writer (pathlib, pandas, pyarrow, fsspec) gets the same file.

    ``~`` and ``~user`` expanded; a ``file:`` URL decoded to its local path
    (:func:`file_url_path`); any other URL kept as it is. A relative path stays relative (to the
    working folder the job runs in).

    Raises:
        ValueError: a ``file:`` URL that names no local path.
    """
    return str(as_path(path))


def check_shared(folder: str | os.PathLike | URL, what: str = "shard_dir") -> None:
    """Refuse a folder that replica processes cannot share with the process that merges.

    A filesystem that lives in one process's memory (fsspec's ``memory://``: :data:`PROCESS_LOCAL`,
    or any subclass of fsspec's ``MemoryFileSystem``) gives each replica process its own empty copy:
    their shards would never reach the merge. Called before any replica starts.

    Raises:
        ValueError: naming ``what``, the folder and the fix.
    """
    p = as_path(folder)
    if not isinstance(p, URL):
        return
    local = p.protocol in PROCESS_LOCAL
    if not local:
        from fsspec.implementations.memory import MemoryFileSystem

        try:
            local = isinstance(p.fs, MemoryFileSystem)
        except (ImportError, ValueError):  # an unknown or uninstalled protocol fails later, at its first use
            local = False
    if local:
        raise ValueError(
            f"{what}={p.url}: {p.protocol}:// files live in the memory of one process, so the replica "
            "processes cannot share them with the process that merges (each would write into its own copy). "
            "Use a local folder, a folder every host mounts, or an object store (gs://, s3://)"
        )


@dataclass(frozen=True, order=True)
class URL:
    """A file or folder on an fsspec filesystem, named by its URL (``s3://bucket/run1/shards``).

    Offers the part of the ``pathlib.Path`` interface the kit uses. Listings and existence checks
    always ask the store (fsspec's listing cache is dropped first), since other hosts write
    to the same folder.
    """

    url: str

    def __post_init__(self):
        object.__setattr__(self, "url", self.url.rstrip("/") if not self.url.endswith("://") else self.url)

    def __str__(self) -> str:
        return self.url

    def __truediv__(self, name: str) -> URL:
        return URL(f"{self.url}/{name}")

    @property
    def protocol(self) -> str:
        """The URL's scheme, e.g. ``"s3"``."""
        return self.url.split("://", 1)[0].lower()

    @property
    def fs(self):
        """The fsspec filesystem object (cached by fsspec per protocol and options)."""
        import fsspec

        return fsspec.filesystem(self.protocol)

    @property
    def _key(self) -> str:
        return self.fs._strip_protocol(self.url)

    @property
    def name(self) -> str:
        """The last part of the URL (``shard-00000-of-00002.parquet``)."""
        return posixpath.basename(self.url.split("://", 1)[1])

    @property
    def suffix(self) -> str:
        """The file extension, with its dot (``.parquet``), or ``""``."""
        return posixpath.splitext(self.name)[1]

    @property
    def parent(self) -> URL:
        """The folder holding this file (the bucket for a top-level object)."""
        scheme, rest = self.url.split("://", 1)
        head = posixpath.dirname(rest)
        return URL(f"{scheme}://{head}") if head else self

    def resolve(self) -> URL:
        """Itself: a URL is already absolute."""
        return self

    def _fresh(self) -> None:
        self.fs.invalidate_cache(self._key)
        self.fs.invalidate_cache(self.parent._key)

    def exists(self) -> bool:
        self._fresh()
        return self.fs.exists(self._key)

    def is_dir(self) -> bool:
        self._fresh()
        return self.fs.isdir(self._key)

    def is_file(self) -> bool:
        self._fresh()
        return self.fs.isfile(self._key)

    def iterdir(self) -> Iterator[URL]:
        """The files and folders directly inside, as URLs."""
        self._fresh()
        scheme = self.url.split("://", 1)[0]
        for entry in self.fs.ls(self._key, detail=False):
            yield URL(f"{scheme}://{entry}")

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.rm_file(self._key)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """On an object store, check that the bucket exists (it has no folders); elsewhere ``makedirs``.

        Raises:
            FileNotFoundError: no such bucket, or no access to it (the kit creates no bucket).
        """
        if self.protocol not in OBJECT_STORES:
            self.fs.makedirs(self._key, exist_ok=True)
            return
        bucket = self._key.split("/", 1)[0]
        self.fs.invalidate_cache(bucket)
        if not self.fs.exists(bucket):
            raise FileNotFoundError(f"{self.url}: bucket {self.protocol}://{bucket} does not exist or cannot be "
                                    "read with these credentials; create it (the kit creates no bucket)")


def readable(path: Path | URL):
    """What a pyarrow reader (``pq.read_table``, ``pyarrow.csv.read_csv``) takes for ``path``.

    The local path as a string (pyarrow maps it), or a ``pyarrow.BufferReader`` over the object's
    bytes, read in one request (shards and submissions are a few MB).

    Raises:
        FileNotFoundError (an ``OSError``): no such object.
    """
    if isinstance(path, URL):
        import pyarrow as pa

        return pa.BufferReader(path.fs.cat_file(path._key))
    return str(path)


def atomic_write(final: str | os.PathLike | URL, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` for a local temporary file, then put it at ``final`` whole.

    Local paths: :func:`kitlib.atomic.atomic_write` (``os.replace``). Object stores: one
    ``put_file`` upload (an object appears only complete). Other fsspec filesystems: upload to
    a dot-name beside ``final``, then ``mv``. On any error nothing is left at ``final`` and an
    older file there stays as it was.

    Raises:
        CannotWrite: an ``OSError`` while writing or moving the file (a full disk: ENOSPC; a file
            too large: EFBIG; no permission: EACCES; a read-only filesystem: EROFS; the store's
            refusal), naming ``final`` and keeping the ``errno``. Other errors of ``write``
            propagate as they are.
    """
    final = as_path(final)
    if not isinstance(final, URL):
        try:
            _local_atomic_write(final, write)
        except CannotWrite:
            raise
        except OSError as e:
            raise CannotWrite(final, e) from e
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp")
    except OSError as e:  # the local temporary folder (a full or read-only /tmp)
        raise CannotWrite(final, e) from e
    os.close(fd)
    try:
        write(tmp)
        fs = final.fs
        if final.protocol in OBJECT_STORES:
            fs.put_file(tmp, final._key)
        else:
            staging = final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"
            fs.put_file(tmp, staging._key)
            try:
                fs.mv(staging._key, final._key)
            except BaseException:
                staging.unlink(missing_ok=True)
                raise
        fs.invalidate_cache(final.parent._key)
    except CannotWrite:
        raise
    except OSError as e:  # the store's message seldom names the object
        raise CannotWrite(final, e) from e
    finally:
        os.unlink(tmp)


def check_writable(target: str | os.PathLike | URL, what: str, *, folder: bool = False) -> None:
    """Check, before any work, that the kit can write ``target`` (a file, or with ``folder`` a folder).

    Local: the folder that will hold the file (the real one, for a link: :func:`kitlib.atomic.real_target`)
    is created if missing, and a temporary file is created and removed in it: what the writer
    itself will do (a read-only mount, no permission, a file where a folder should be, all fail
    here). A URL: its bucket or folder is checked (:meth:`URL.mkdir`).

    Raises:
        CannotWrite: naming ``what``, the path and the system's reason (``errno`` kept).
        ValueError: a file ``target`` that is an existing folder.
    """
    from .atomic import real_target

    p = as_path(target)
    if isinstance(p, URL):
        try:
            (p if folder else p.parent).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CannotWrite(f"{p} ({what})", e) from e
        return
    p = real_target(p)
    if not folder and p.is_dir():
        raise ValueError(f"{what}={p}: is a folder; name the file to write (e.g. {p / 'submission.csv'})")
    where = p if folder else p.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".kit-write-check-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CannotWrite(f"{where} ({what}, checked before any work)", e) from e
