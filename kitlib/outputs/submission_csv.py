"""Submission-like CSVs, read by one reader: submissions, sample submissions, seed-pattern shards,
blend inputs (``python -m kitlib merge``, ``blend``, and ``kaggle_kit`` submit's local check).

The rules, one home:

* the id column is the ``id_col`` parameter (``id`` by default, ``row_id`` where the sample
  submission's header says so), read and written under that name; a sample submission whose header
  lacks it is refused before any work, naming both (:func:`check_sample_submission`);
* ids are the exact strings of the file (``"007"`` stays ``"007"``); a quoted field may hold newlines,
  whatever the file's size;
* an index column is not a prediction: pandas' unnamed index and a seed shard's ``row``
  (:data:`INDEX_COLUMN_RE`). It is dropped, with a note naming the file (:func:`read`);
* the prediction columns are the sample submission's: its columns other than the id column and index
  columns (:func:`prediction_columns`). A file's other columns are not predictions of the
  submission (its writers ignore them with a note, or refuse them).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

# Columns that are a row index, not a prediction (see the module docstring).
INDEX_COLUMN_RE = re.compile(r"^(|Unnamed: \d+|__index_level_\d+__|row)$")
ID = "id"


class SubmissionFileError(ValueError):
    """A submission-like file that cannot be read as one (the message names the file)."""


@dataclass
class SubmissionTable:
    """One submission-like file as read by :func:`read`.

    Attributes:
        path: the file.
        table: ``id`` (string, exact: the file's ``id_col``, named ``id`` here) and every other column but the
            index columns, in file order; numeric columns as pyarrow infers them (float64 / int64), others as strings.
        id_col: the file's name of its id column (what a writer names it back).
        dropped: the index columns dropped.
        notes: one line per column dropped, naming the file.
    """

    path: Path
    table: pa.Table
    dropped: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    id_col: str = ID

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns kept, other than ``id``."""
        return tuple(c for c in self.table.column_names if c != ID)


def is_index_column(name: str) -> bool:
    """True for a column that is a row index, not a prediction (:data:`INDEX_COLUMN_RE`)."""
    return bool(INDEX_COLUMN_RE.match(name))


def index_note(column: str, path: str | os.PathLike | None = None) -> str:
    """The note said when index column ``column`` of ``path`` is dropped."""
    hint = "" if column == "row" else " (pandas writes one unless index=False)"
    where = f" of {Path(path).name}" if path is not None else ""
    return f"dropped column {column!r}{where}: a row index, not a prediction{hint}"


def read_table(path: str | os.PathLike, string_columns: tuple[str, ...] = (ID,)) -> pa.Table:
    """The whole CSV as a pyarrow table, ``string_columns`` as exact strings, quoted newlines allowed.

    ``path`` may be a local path or what :func:`kitlib.storage.readable` takes (a URL's bytes).

    Raises:
        FileNotFoundError: no such file.
        SubmissionFileError: not a readable CSV.
    """
    import pyarrow.csv as pacsv

    from .. import storage

    p = storage.as_path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    try:
        return pacsv.read_csv(
            storage.readable(p),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in string_columns},
                                                 strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as e:
        raise SubmissionFileError(f"{p}: unreadable CSV ({e})") from None


def drop_index_columns(path: str | os.PathLike, table: pa.Table, id_col: str = ID) -> SubmissionTable:
    """``table`` without its index columns (:func:`is_index_column`; never ``id_col``), with a note for each."""
    dropped = tuple(c for c in table.column_names if c != id_col and is_index_column(c))
    kept = table.drop_columns(list(dropped)) if dropped else table
    return SubmissionTable(Path(str(path)), kept, dropped, [index_note(c, path) for c in dropped], id_col)


def no_id_col(path, id_col: str, columns) -> str:
    """The message for a file whose header lacks ``id_col``, naming both and the fix."""
    return (f"{path}: no {id_col!r} column (id_col={id_col!r}; its header is {','.join(columns)}); pass id_col "
            "(--id-col) as the sample submission's header names its id column")


def read(path: str | os.PathLike, id_col: str = ID) -> SubmissionTable:
    """Read one submission-like CSV by the module's rules: ``id_col`` as exact strings (named ``id`` in the
    table), index columns dropped with a note.

    Raises:
        FileNotFoundError: no such file.
        SubmissionFileError: not a readable CSV, or no ``id_col`` column (both named: :func:`no_id_col`).
    """
    table = read_table(path, (id_col,))
    if id_col not in table.column_names:
        raise SubmissionFileError(no_id_col(path, id_col, table.column_names))
    if ID in table.column_names and id_col != ID:
        raise SubmissionFileError(f"{path}: has both {id_col!r} (id_col) and {ID!r} columns; pass id_col={ID!r}, or "
                                  f"drop one of them")
    out = drop_index_columns(path, table.rename_columns([ID if c == id_col else c for c in table.column_names]), ID)
    out.id_col = id_col
    return out


def prediction_columns(sample: SubmissionTable | tuple[str, ...] | list[str], path: str | os.PathLike = "",
                       id_col: str = ID) -> tuple[str, ...]:
    """The prediction columns a submission must have: the sample submission's columns other than
    its id column and index columns.

    Args:
        sample: the sample submission as :func:`read` gave it, or its column names.
        path: the sample submission, for the message.
        id_col: the id column of ``sample`` given as names (a :class:`SubmissionTable`'s is ``id``).

    Raises:
        SubmissionFileError: it names no prediction column.
    """
    names = sample.table.column_names if isinstance(sample, SubmissionTable) else list(sample)
    id_col = ID if isinstance(sample, SubmissionTable) else id_col
    cols = tuple(c for c in names if c != id_col and not is_index_column(c))
    if not cols:
        where = path or (sample.path if isinstance(sample, SubmissionTable) else "the sample submission")
        raise SubmissionFileError(f"{where}: the sample submission names no prediction column besides {id_col!r}")
    return cols


NO_SAMPLE = "none"  # sample_submission="none": no sample submission, the test set's order (asked for by name)


def check_id_col(id_col: str) -> None:
    """Raises ValueError for an ``id_col`` other than ``id`` in the Keras and test-time notebooks, whose
    submissions are not yet written by the rule above."""
    if id_col != ID:
        raise ValueError(f"id_col={id_col!r}: this notebook writes an {ID!r} column; predict with the inference "
                         f"notebook (-p id_col {id_col}), which takes any id_col")


def choose_prediction_column(prediction_column: str, sample_submission: str | os.PathLike | None,
                             label: str | None, *, label_parameter: str = "the checkpoint's head", id_col: str = ID) -> str:
    """The column a notebook writes its predictions to: the one rule (the ``prediction_column`` parameter).

    ``prediction_column`` when given; else the sample submission's one prediction column
    (:func:`prediction_columns`); else, with no sample submission, ``label``: the label the model was
    trained on (the training notebook's ``label_col``, or what the checkpoint's head names:
    :func:`kitlib.models.model.trained_label`). Never a fixed name: a ``label`` task is not written as
    ``toxic``.

    Args:
        prediction_column: the notebook parameter (``""``: choose by the rule above).
        sample_submission: the sample submission, or None (``sample_submission="none"``).
        label: the trained label, or None when nothing names it.
        label_parameter: where ``label`` came from, for the message.
        id_col: the sample submission's id column (the one rule: the module docstring).

    Raises:
        FileNotFoundError, SubmissionFileError: an unreadable sample submission (:func:`read`).
        ValueError: nothing names the column (no sample submission, no label), or the sample names
            several: the message names ``prediction_column``.
    """
    if prediction_column:
        return prediction_column
    if sample_submission is not None:
        cols = prediction_columns(read(sample_submission, id_col), sample_submission)
        if len(cols) != 1:
            raise SubmissionFileError(f"{sample_submission}: the sample submission has {len(cols)} prediction columns "
                                      f"({', '.join(cols)}); the kit predicts one: pass -p prediction_column <one of them>")
        return cols[0]
    if label is None:
        raise ValueError(f"sample_submission={NO_SAMPLE!r}: nothing names the prediction column ({label_parameter} "
                         "names no label): pass -p prediction_column <the competition's prediction column> (e.g. label)")
    return label


def check_sample_submission(path: str | os.PathLike, test_ids, columns: tuple[str, ...], *,
                            test_path: str | os.PathLike = "the test set", id_col: str = ID) -> SubmissionTable:
    """Check, before any replica starts, that the merge at the run's end can use this sample submission.

    It must exist and be readable (:func:`read`), have the id column ``id_col`` (else refused naming both
    ``id_col`` and its header), hold each id once, exactly the test set's ids
    (in any order), and name exactly ``columns`` as its prediction columns
    (:func:`prediction_columns`; an index column is not one).

    Args:
        path: the sample submission.
        test_ids: the test set's ids, exact strings (a sequence, numpy or pyarrow array), or a callable giving
            them, called once the sample's header is checked (so a wrong ``id_col`` names the sample's header).
        columns: the columns the run predicts (``InferJob.prediction_column``).
        test_path: the test file, for the message.
        id_col: the id column (the notebooks' ``id_col`` parameter).

    Returns:
        The sample as read.

    Raises:
        FileNotFoundError: no such file (the message says how to run without one).
        SubmissionFileError: unreadable, no ``id_col``, a repeated id, ids other than the test set's,
            or other prediction columns; the message names the file, the ids or columns, and the fix.
    """
    import pyarrow.compute as pc

    try:
        sample = read(path, id_col)
    except FileNotFoundError:
        raise FileNotFoundError(f"sample_submission={path}: no such file. Pass the competition's "
                                f"sample_submission.csv, or sample_submission={NO_SAMPLE!r} to write the rows in the "
                                "test set's order") from None
    want = prediction_columns(sample, path)
    if tuple(want) != tuple(columns):
        extra = [c for c in want if c not in columns]
        missing = [c for c in columns if c not in want]
        raise SubmissionFileError(
            f"{path}: the sample submission's prediction columns are {', '.join(want)}; this run predicts "
            f"{', '.join(columns)}" + (f" (not predicted: {', '.join(extra)})" if extra else "")
            + (f" (not in the sample: {', '.join(missing)})" if missing else "")
            + f". Give the competition's own sample submission, or pass -p prediction_column {want[0]}")
    ids = sample.table.column(ID).combine_chunks()
    if pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        dup = counts.field("values").filter(pc.greater(counts.field("counts"), 1)).to_pylist()
        raise SubmissionFileError(f"{path}: id(s) {_preview(dup)} repeated in the sample submission")
    test_ids = test_ids() if callable(test_ids) else test_ids
    test = pa.array(list(test_ids) if not isinstance(test_ids, (pa.Array, pa.ChunkedArray)) else test_ids, pa.string())
    missing = test.filter(pc.invert(pc.is_in(test, value_set=ids))).to_pylist()
    extra = ids.filter(pc.invert(pc.is_in(ids, value_set=test))).to_pylist()
    if missing or extra:
        raise SubmissionFileError(
            f"{path}: the sample submission's ids are not {test_path}'s: "
            + "; ".join(([f"{len(missing)} test id(s) not in it: {_preview(missing)}"] if missing else [])
                        + ([f"{len(extra)} id(s) not in the test set: {_preview(extra)}"] if extra else []))
            + f". Give the sample submission of this test set, or sample_submission={NO_SAMPLE!r} for the test set's order")
    return sample


def _preview(values, show: int = 5) -> str:
    more = f" and {len(values) - show} more" if len(values) > show else ""
    return ", ".join(repr(v) for v in values[:show]) + more
