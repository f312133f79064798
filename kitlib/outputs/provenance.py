"""Who wrote a submission, and saying so when another writer replaces it.

The rule (README, "Which notebook wrote submission.csv"): every writer of a submission CSV records
itself beside it, in ``<name>.writer.json``: the writer, what it predicted with, when, the row count and
the file's sha256. A writer about to replace a submission that another writer (or none) recorded says so
(:class:`SubmissionReplaced`, a ``UserWarning``, and a line in the merge's notes); replacing its own last
output is a rerun and says nothing.

A record describes its file only while its sha256 is the file's: every reader goes through
:func:`read_record` (:func:`replaced_note`; :func:`recorded_runs` names no run for a stale record).

Writers (each passes its name to :func:`kitlib.outputs.merge.merge_shards`, which writes through
:func:`write_recorded`): :data:`INFER`, :data:`KERAS`, :data:`CLI`; :mod:`kitlib.outputs.blend` (:data:`BLEND`), :mod:`kitlib.outputs.cascade`
(:data:`CASCADE`) and any other
writer call :func:`write_recorded` with their own name.
Works for local paths and fsspec URLs (:mod:`kitlib.storage`).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import warnings

from .. import storage

RECORD_SUFFIX = ".writer.json"
INFER = "kitlib.infer.predict (the torch inference notebook, xla_multicore_inference)"
KERAS = "kitlib.keras write_submission (the Keras notebook, keras_xlmr_train)"
CLI = "python -m kitlib merge"
BLEND = "kitlib.outputs.blend (python -m kitlib blend)"
CASCADE = "kitlib.outputs.cascade (python -m kitlib cascade)"


class SubmissionReplaced(UserWarning):
    """An existing submission written by another writer (or by none the kit knows) was replaced."""


def record_path(output):
    """The writer record beside ``output``: ``<output>.writer.json`` (a Path or a storage URL)."""
    output = storage.as_path(output)
    return output.parent / (output.name + RECORD_SUFFIX)


def _read_bytes(path) -> bytes | None:
    path = storage.as_path(path)
    try:
        if isinstance(path, storage.URL):
            return path.fs.cat_file(path._key) if path.exists() else None
        return path.read_bytes() if path.is_file() else None
    except FileNotFoundError:
        return None


def _describe(record: dict) -> str:
    what = f", {record['source']}" if record.get("source") else ""
    return f"written by {record.get('writer', '?')}{what} at {record.get('written_at', '?')}, {record.get('rows', '?')} rows"


def _record_of(output, data: bytes | None) -> tuple[dict | None, bool]:
    raw = _read_bytes(record_path(output))
    try:
        record = json.loads(raw) if raw is not None else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return None, False
    return record, data is not None and record.get("sha256") == hashlib.sha256(data).hexdigest()


def read_record(output) -> tuple[dict | None, bool]:
    """``(record, current)``: ``output``'s writer record (None without one, or unreadable), and whether
    it describes the file there now (its ``sha256`` is the file's). Every reader of a record asks here
    (the module's rule): a stale record names the file's previous writer, not its content's."""
    return _record_of(output, _read_bytes(output))


def replaced_note(output, writer: str) -> str | None:
    """What writing ``output`` as ``writer`` would replace, as one line; None when nothing to say.

    Call it before writing. None: no file at ``output``, or ``writer`` itself wrote the file there
    (its record matches the file's sha256). Otherwise the line names the file and, from its
    record, the writer, source, time and rows; or says that no kit writer recorded the file there
    (no record, or the file changed since its record was written).
    """
    old = _read_bytes(output)
    if old is None:
        return None
    record, current = _record_of(output, old)
    if current:
        if record.get("writer") == writer:
            return None
        return f"replaced {output} ({_describe(record)}) with the output of {writer}"
    if record is not None:
        return (f"replaced {output}, which changed after it was {_describe(record)} (by hand or another tool), "
                f"with the output of {writer}")
    return (f"replaced {output}, which no kit writer recorded ({len(old):,} bytes: a copy, a hand edit or another "
            f"tool's file), with the output of {writer}")


def record_writer(output, writer: str, *, source: str = "", rows: int | None = None, runs=()) -> None:
    """Write ``<output>.writer.json`` for the file just written at ``output`` (atomically).

    A failure to write the record (a full disk) is a warning, not an error: the submission is
    written; the next writer then says it replaced a file no writer recorded.

    Args:
        output: the submission just written (a Path or a storage URL).
        writer: who wrote it (e.g. :data:`INFER`).
        source: what it predicted with (e.g. ``"model /kaggle/input/x/artifacts/xlmr-toxic"``).
        rows: data rows written.
        runs: the training run ids the predictions came from (:func:`kitlib.checkpoint.run_ids_of`), which
            ``python -m kaggle_kit submit`` puts in the submission's description.
    """
    data = _read_bytes(output)
    record = {"writer": writer, "source": source, "rows": rows, "runs": list(dict.fromkeys(runs)),
              "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "sha256": hashlib.sha256(data or b"").hexdigest()}
    text = json.dumps(record, indent=1)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    try:
        storage.atomic_write(record_path(output), write)
    except OSError as e:  # the submission itself is written and correct: a missing record only makes the next writer say more
        with contextlib.suppress(OSError):
            record_path(output).unlink()  # a stale record would name the previous writer
        warnings.warn(f"wrote {output}, but could not record its writer in {record_path(output)}: {e}", stacklevel=3)


def recorded_runs(output, say=None) -> list[str]:
    """The run ids in ``output``'s writer record (:func:`record_writer`) while the record describes the
    file (:func:`read_record`); [] without a record or runs, and for a stale record (the file changed
    since: its runs are not the file's), which ``say`` (e.g. ``print``), when given, is told."""
    record, current = read_record(output)
    runs = record.get("runs") if record is not None else None
    runs = [r for r in runs if isinstance(r, str)] if isinstance(runs, list) else []
    if runs and not current:
        if say is not None:
            say(f"{record_path(output)} names run(s) {', '.join(runs)}, but {output} changed after that record "
                f"was written (its sha256 differs: replaced by hand or another tool), so no run is named for it")
        return []
    return runs


def say_replaced(note: str | None, stacklevel: int = 3) -> None:
    """Warn with ``note`` (:class:`SubmissionReplaced`) when there is one."""
    if note:
        warnings.warn(note, SubmissionReplaced, stacklevel=stacklevel)


def write_recorded(output, write, *, writer: str, source: str = "", rows: int | None = None, runs=()) -> str | None:
    """Write a submission as ``writer`` the kit's way: atomically, recorded, a replacement said.

    :func:`replaced_note`, then :func:`kitlib.storage.atomic_write` ``(output, write)``, then
    :func:`record_writer`, then :func:`say_replaced`. Every submission writer calls this (the
    merge does, for the notebooks and the CLI).

    Args:
        output: the submission (a Path, a str or a storage URL).
        write: ``write(tmp_path)`` writes the whole file to a local temporary path.
        writer, source, rows, runs: as for :func:`record_writer`.

    Returns:
        The line saying what was replaced (also warned), or None.

    Raises:
        Whatever ``write`` or the store raises; ``output`` is then as it was and no record is written.
    """
    note = replaced_note(output, writer)
    storage.atomic_write(output, write)
    record_writer(output, writer, source=source, rows=rows, runs=runs)
    say_replaced(note, stacklevel=4)
    return note

