"""The bundled sample (``data/jigsaw-sample``), recognised by its content wherever it lies.

``model="auto"`` may fall back to the small random model only on this sample (a demo run gives a
chance-level submission, which is fine there and nowhere else: :func:`kitlib.models.model.resolve_checkpoint`).
The sample is recognised by the size and sha256 of each file, not by its folder: a copy of it in
another folder (Colab, a temporary folder) is still the sample; a file with one row changed, or
the competition's files anywhere, is not. Line endings are normalised first (a checkout with
``core.autocrlf`` turns LF into CRLF), so the fingerprints are those of the LF files listed in
``data/jigsaw-sample/SOURCE.md``. When a sample file changes, update :data:`FINGERPRINTS`
(``tests/test_checkpoints.py`` checks both against the files).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

# file name in data/jigsaw-sample -> (bytes, sha256) of its LF form (SOURCE.md's table)
FINGERPRINTS = {
    "train.csv": (980_491, "1d50f234ff43946f4c1b76863322031fea4751dfc8a36b6d798bf5bb57a2827a"),
    "validation.csv": (388_163, "3fffefc5d38eba54680fa5ef965cd3aaf0a531d98ab065f848b255aa4569a7ed"),
    "test.csv": (431_667, "6bca10fe6e7fcccac4c2db0ea8e9a7b505402114ad61a69cf38757523b1ed4a9"),
    "sample_submission.csv": (9_810, "d69607979f7013806e1b1954e6ad5cbf8a98fbcc8ca25f9f02870eded59f7fdb"),
}
_MAX_BYTES = 2 * max(size for size, _ in FINGERPRINTS.values())  # CRLF at most doubles a file


def fingerprint(path: str | os.PathLike) -> tuple[int, str] | None:
    """``(bytes, sha256)`` of ``path`` with CRLF read as LF; None for a file far larger than any sample file.

    Raises:
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if path.stat().st_size > _MAX_BYTES:  # the competition's files: tens of MB, never read here
        return None
    data = path.read_bytes().replace(b"\r\n", b"\n")
    return len(data), hashlib.sha256(data).hexdigest()


def sample_file_name(path: str | os.PathLike) -> str | None:
    """The sample file ``path`` holds (e.g. ``"test.csv"``), whatever it is called; None if it is not one.

    A missing file is not a sample file.
    """
    try:
        fp = fingerprint(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return next((name for name, known in FINGERPRINTS.items() if fp == known), None)


def not_sample(files) -> list[Path]:
    """The ``files`` (paths) that are not bundled sample files; ``[]`` when all of them are."""
    return [Path(f) for f in files if sample_file_name(f) is None]


# The files a run reads from a data folder: the sample's names, and the competition's training file.
RUN_FILES = (*FINGERPRINTS, "jigsaw-toxic-comment-train.csv")


def data_files(data_dir: str | os.PathLike) -> list[Path]:
    """The files of :data:`RUN_FILES` that ``data_dir`` holds (other files there are not read by a run)."""
    data_dir = Path(data_dir)
    return [data_dir / n for n in RUN_FILES if (data_dir / n).is_file()]
