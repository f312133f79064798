"""Merge per-rank prediction shards into one submission with exactly one row per input row.

Two kinds of shard are accepted (never mixed in one merge):

* kit shards (:mod:`kitlib.outputs.shards`): Parquet with ``row``, ``id`` and prediction columns plus
  metadata naming the rank, the world size and the input's row count. Every rank must be
  present and every input row covered. Padding duplicates are dropped: rows a format-2 shard marks
  in its ``padding`` column after checking only their id; in shards without the mark, duplicates of
  one row must agree within :data:`DUPLICATE_ATOL`.
* seed-pattern shards: CSV (or Parquet) files with an ``id`` column and prediction columns, no row
  index, as most Kaggle multicore notebooks write them. Duplicated ids must agree within
  :data:`DUPLICATE_ATOL`; the order comes from ``--sample-submission`` or ``--test``. The prediction
  columns are the sample submission's when one is given (others ignored, with a note); an unnamed
  index column is dropped with a note; without a sample submission any other non-numeric column is refused.

Output order: the sample submission's, else the test set's. Ids are exact strings (the CSV rules:
:mod:`kitlib.outputs.submission_csv`). Every value written must be finite. On any problem
:class:`MergeError` names the file, rank, rows or ids, and no output file is written (an existing one
is left as it was).
"""
from __future__ import annotations

import csv
import io
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import provenance, submission_csv
from .. import storage
from .collapse import CollapsedModelError, CollapsedPredictionWarning, check_predictions
from ..data import csv_columns, read_ids
from .shards import SHARD_FORMAT, SHARD_RE, ShardInfo, read_shard_info, shard_name

# Duplicates without a padding mark are the same text predicted twice: equal up to float noise.
# Measured float32 noise is below 1e-6; bfloat16 can exceed this, hence the kit's padding mark.
DUPLICATE_ATOL = 1e-4
# Columns that are a row index, not a prediction: the rule of kitlib.outputs.submission_csv (one home).
INDEX_COLUMN_RE = submission_csv.INDEX_COLUMN_RE
_SHOW = 5  # how many offending values an error lists
_NONFINITE_HINT = (
    "a NaN or inf is what float16/bfloat16 inference gives when a logit overflows: "
    "take the logits to float32 before the sigmoid and predict again"
)


class MergeError(ValueError):
    """A shard set or reference file that cannot give a correct submission."""


@dataclass
class MergeResult:
    """What :func:`merge_shards` wrote: the path, the row count, the shard bookkeeping and notes.

    ``notes``: one line per column dropped or ignored (naming the files), and per id type
    converted; the CLI prints them. ``run_id``: the run whose shards were merged (None when
    :func:`merge_shards` was not given one).
    """

    output: Path
    num_rows: int
    num_shards: int
    num_padding_duplicates: int
    prediction_columns: tuple[str, ...]
    notes: list[str] = field(default_factory=list)
    run_id: str | None = None


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def _preview(values, total: int | None = None) -> str:
    """The first few values as plain Python reprs (``2``, not ``np.int64(2)``), and how many more."""
    values = [_plain(v) for v in values]
    total = len(values) if total is None else total
    more = f" and {total - _SHOW} more" if total > _SHOW else ""
    return ", ".join(repr(v) for v in values[:_SHOW]) + more


class _Notes:
    """Notes collected during a merge: each text once, with the files it applies to."""

    def __init__(self) -> None:
        self._files: dict[str, list[str]] = {}

    def add(self, text: str, path: Path | None = None) -> None:
        files = self._files.setdefault(text, [])
        if path is not None and path.name not in files:
            files.append(path.name)

    def lines(self) -> list[str]:
        out = []
        for text, files in self._files.items():
            if files:
                more = f" and {len(files) - _SHOW} more" if len(files) > _SHOW else ""
                text += f" (in {', '.join(files[:_SHOW])}{more})"
            out.append(text)
        return out


def expand_shard_paths(inputs: list[str | os.PathLike], exclude: Path | None = None) -> list[Path]:
    """Files named directly, plus the ``.parquet``/``.csv`` files inside named folders.

    In a folder that holds kit shards (``shard-*-of-*.parquet``) only those are taken.
    Temporary files (names starting with ``.``) and ``exclude`` (the output) are skipped.
    Each input, and the output, may be a URL (``s3://``, ``gs://``: :mod:`kitlib.storage`).

    Raises:
        MergeError: a named path does not exist, or nothing is found.
    """
    paths: list[Path] = []
    for raw in inputs:
        p = storage.as_path(raw)  # a local path or a URL (kitlib.storage)
        if p.is_dir():
            found = sorted(
                q for q in p.iterdir()
                if q.is_file() and not q.name.startswith(".") and q.suffix in (".parquet", ".csv")
            )
            kit = [q for q in found if SHARD_RE.match(q.name)]
            paths.extend(kit or found)
        elif p.is_file():
            paths.append(p)
        else:
            raise MergeError(f"{p}: no such shard file or folder")
    if exclude is not None:
        paths = [p for p in paths if p.resolve() != exclude.resolve()]
    if not paths:
        raise MergeError(f"no shard files found in {', '.join(map(str, inputs))}")
    return paths


def _read_csv(path: Path, string_columns: tuple[str, ...] = ("id",)) -> pa.Table:
    """Read a seed-pattern CSV shard by the one reader of submission-like files
    (:func:`kitlib.outputs.submission_csv.read_table`: exact string ids, quoted newlines at any size)."""
    try:
        return submission_csv.read_table(path, string_columns)
    except (submission_csv.SubmissionFileError, OSError) as e:
        raise MergeError(f"{path}: unreadable CSV ({e})" if isinstance(e, OSError) else str(e)) from None


def _string_ids(path: Path, table: pa.Table) -> tuple[pa.Table, str | None]:
    """``table`` with its ``id`` column as strings, and a note when integers were converted.

    Integer ids (pandas writes them to Parquet as int64) become their decimal strings, which
    are then compared with the sample submission's ids as written there.
    """
    t = table.schema.field("id").type
    if pa.types.is_string(t):
        return table, None
    note = None
    if pa.types.is_integer(t):
        note = f"integer ids ({t}) compared as their decimal strings"
    elif not (
        pa.types.is_large_string(t)
        or (pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)))
    ):
        raise MergeError(
            f"{path}: column 'id' is {t}; write ids as strings, exactly as the test file holds them "
            "(pandas: df['id'] = df['id'].astype(str))"
        )
    i = table.schema.get_field_index("id")
    return table.set_column(i, "id", pc.cast(table.column("id"), pa.string())), note


def _read_shard(path: Path) -> tuple[pa.Table, ShardInfo | None, str | None]:
    """Read one shard file: (table with string ids, kit metadata or None, a note or None)."""
    if path.suffix == ".parquet":
        try:
            table = pq.read_table(storage.readable(path))
        except (pa.ArrowInvalid, OSError) as e:
            raise MergeError(f"{path}: unreadable Parquet shard ({e})") from None
        info = read_shard_info(table.schema)
    else:
        table, info = _read_csv(path), None
    if "id" not in table.column_names:
        raise MergeError(f"{path}: no 'id' column (columns: {', '.join(table.column_names)})")
    if info is not None:
        if info.format > SHARD_FORMAT:
            raise MergeError(
                f"{path}: shard format {info.format} is newer than this kitlib reads ({SHARD_FORMAT}); update kitlib"
            )
        if table.num_rows != info.num_samples:
            raise MergeError(
                f"{path}: truncated shard: {table.num_rows} rows, its metadata says {info.num_samples}"
            )
    table, note = _string_ids(path, table)
    return table, info, note


def _check_finite(where: str, ids: pa.ChunkedArray | pa.Array, preds: dict[str, np.ndarray], skip: np.ndarray | None = None) -> None:
    """Refuse NaN or +-inf predictions (except where ``skip`` is True), naming the ids."""
    for c, v in preds.items():
        bad = ~np.isfinite(v)
        if skip is not None:
            bad &= ~skip
        if bad.any():
            idx = np.flatnonzero(bad)
            shown = ids.take(pa.array(idx[:_SHOW])).to_pylist()
            raise MergeError(
                f"{where}: {len(idx)} non-finite {c!r} value(s) (nan or inf) for id(s) "
                f"{_preview(shown, len(idx))}; {_NONFINITE_HINT}"
            )


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_integer(t)


def _seed_columns(path: Path, table: pa.Table, targets: tuple[str, ...] | None, notes: _Notes) -> tuple[str, ...]:
    """The prediction columns of a seed-pattern shard (see the module docstring for the rule)."""
    found = []
    for c in table.column_names:
        if c == "id":
            continue
        if submission_csv.is_index_column(c):
            notes.add(submission_csv.index_note(c), path)
        elif targets is not None:
            if c not in targets:
                notes.add(f"ignored column {c!r}: not a column of the sample submission", path)
        elif not _is_numeric(table.schema.field(c).type):
            raise MergeError(
                f"{path}: column {c!r} ({table.schema.field(c).type}) is not a prediction, and nothing names "
                f"the prediction columns: pass --sample-submission (other columns are then ignored) or drop {c!r}"
            )
        else:
            found.append(c)
    if targets is not None:
        missing = [c for c in targets if c not in table.column_names]
        if missing:
            raise MergeError(
                f"{path}: no column(s) {missing}, which the sample submission asks for "
                f"(columns: {', '.join(table.column_names)})"
            )
        found = list(targets)
    if not found:
        raise MergeError(f"{path}: no prediction column besides 'id'")
    for c in found:
        t = table.schema.field(c).type
        if not _is_numeric(t):
            raise MergeError(f"{path}: prediction column {c!r} is {t}, not numeric")
        if table.column(c).null_count:
            bad = np.flatnonzero(table.column(c).is_null().to_numpy(zero_copy_only=False))
            raise MergeError(f"{path}: column {c!r} is blank or nan at data row(s) {_preview(bad + 1)}")
    return tuple(found)


def _check_blank_ids(ids: pa.ChunkedArray | pa.Array, where: str, unit: str = "data row") -> None:
    """Refuse null, empty or whitespace-only ids; ``unit`` names what the positions count."""
    blank = pc.fill_null(pc.or_(pc.equal(pc.binary_length(ids), 0), pc.utf8_is_space(ids)), True)
    if pc.any(blank).as_py():
        bad = np.flatnonzero(np.asarray(blank))
        raise MergeError(f"{where}: blank id at {unit}(s) {_preview(bad + 1)}")


def _check_run(read: list, run_id: str, world_size: int | None) -> None:
    """Refuse any shard that is not of the run ``run_id`` (of ``world_size`` replicas, when known)."""
    for p, _, info, _ in read:
        if info is None:
            raise MergeError(f"{p} is not a shard of this run ({run_id}): not a kit shard")
        if info.run_id != run_id or (world_size is not None and info.world_size != world_size):
            raise MergeError(
                f"{p} is a shard of another run (run_id={info.run_id!r}, world size {info.world_size}), "
                f"not of this run (run_id={run_id!r}, world size {world_size or 'any'}): two runs share the shard "
                f"folder {p.parent}. Give each run its own shard_dir, and run this one again"
            )


def _check_kit_set(shards: list[tuple[Path, pa.Table, ShardInfo]]) -> list[np.ndarray | None]:
    """Refuse kit shards that are not one whole run: mixed runs, a rank twice or missing, a
    column missing, a prediction not finite. Returns each shard's padding mark (None: unmarked)."""
    p0, _, i0 = shards[0]
    for p, _, info in shards[1:]:
        for name in ("world_size", "num_rows", "run_id", "prediction_columns"):
            if getattr(info, name) != getattr(i0, name):
                raise MergeError(
                    f"shards from different runs: {p0.name} has {name}={getattr(i0, name)!r}, "
                    f"{p.name} has {getattr(info, name)!r}; clear the folder and run again"
                )
    by_rank: dict[int, Path] = {}
    for p, _, info in shards:
        if info.rank in by_rank:
            raise MergeError(f"rank {info.rank} has two shards: {by_rank[info.rank]} and {p}")
        by_rank[info.rank] = p
    world = i0.world_size
    missing = sorted(set(range(world)) - set(by_rank))
    if missing:
        names = [shard_name(r, world) for r in missing]
        raise MergeError(
            f"missing shard(s) for rank(s) {_preview(missing)} of world size {world}: "
            f"expected {_preview(names)} in {p0.parent}"
        )
    cols = i0.prediction_columns
    pads = []
    for p, t, info in shards:
        lacking = [c for c in ("row", *cols) if c not in t.column_names]
        if lacking:
            raise MergeError(f"{p}: kit shard without column(s) {lacking}")
        pad = t.column("padding").to_numpy(zero_copy_only=False).astype(bool) if "padding" in t.column_names else None
        _check_finite(f"{p} (rank {info.rank})", t.column("id"), {c: t.column(c).to_numpy() for c in cols}, skip=pad)
        pads.append(pad)
    return pads


def _representatives(rows: np.ndarray, pad: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One position per input row among those not marked as padding: the first one (rank order,
    then sampler order: the sampler's padding comes after the row it repeats).

    Returns:
        (the position of each of the ``n`` rows, the unmarked duplicates, every position dropped).

    Raises:
        MergeError: an input row has no prediction outside the padding.
    """
    positions = np.arange(len(rows), dtype=np.int64)
    real = positions[~pad]
    pick = np.full(n, -1, dtype=np.int64)
    uniq, first = np.unique(rows[real], return_index=True)
    pick[uniq] = real[first]
    if (pick < 0).any():
        absent = np.flatnonzero(pick < 0)
        only_pad = np.isin(absent, rows[pad]).sum()
        raise MergeError(
            f"{len(absent)} input row(s) have no prediction in any shard (0-based rows {_preview(absent)})"
            + (f"; {only_pad} of them appear only in rows marked as padding: the shards' padding column is wrong" if only_pad else "")
        )
    extra = real[pick[rows[real]] != real]  # unmarked duplicates of a row
    return pick, extra, np.sort(np.concatenate([positions[pad], extra]))


def _check_duplicates(ids, preds: dict[str, np.ndarray], rows, rank, marked, pick, extra, dropped) -> None:
    """Refuse dropped duplicates whose id differs from their row's, and unmarked duplicates that
    are both from marked shards or whose predictions differ by more than :data:`DUPLICATE_ATOL`."""
    if len(dropped):
        rep = pick[rows[dropped]]
        same_id = pc.equal(ids.take(pa.array(dropped)), ids.take(pa.array(rep))).to_numpy(zero_copy_only=False)
        if not same_id.all():
            bad = rows[dropped[~same_id]]
            raise MergeError(f"padding duplicates disagree on the id of input row(s) {_preview(bad)}")
    if not len(extra):
        return
    rep = pick[rows[extra]]
    both = marked[extra] & marked[rep]
    if both.any():
        raise MergeError(
            f"input row(s) {_preview(rows[extra[both]])} predicted twice, neither marked as padding "
            f"(ranks {_preview(rank[extra[both]])} and {_preview(rank[rep[both]])}): the shards' "
            "row or padding columns are wrong"
        )
    for c, v in preds.items():
        off = ~(np.abs(v[extra].astype(np.float64) - v[rep]) <= DUPLICATE_ATOL)
        if off.any():
            raise MergeError(
                f"padding duplicates disagree on {c!r} by more than {DUPLICATE_ATOL:g} for input row(s) "
                f"{_preview(rows[extra[off]])} (ranks {_preview(rank[extra[off]])} and {_preview(rank[rep[off]])}); "
                "shards without a padding column (format 1, or written without write_shard(padding=...)) "
                "are compared by value, and bfloat16/float16 runs can differ by more: write the padding mark"
            )


def _merge_kit(shards: list[tuple[Path, pa.Table, ShardInfo]]) -> tuple[pa.ChunkedArray, dict[str, np.ndarray], int]:
    """Kit shards -> (ids [N] in row order, predictions, number of padding duplicates dropped)."""
    pads = _check_kit_set(shards)
    p0, _, i0 = shards[0]
    n = i0.num_rows
    rows = np.concatenate([t.column("row").to_numpy() for _, t, _ in shards]).astype(np.int64, copy=False)
    ids = pa.chunked_array([c for _, t, _ in shards for c in t.column("id").chunks], pa.string())
    preds = {c: np.concatenate([t.column(c).to_numpy() for _, t, _ in shards]) for c in i0.prediction_columns}
    pad = np.concatenate([np.zeros(t.num_rows, bool) if m is None else m for (_, t, _), m in zip(shards, pads)])
    marked = np.concatenate([np.full(t.num_rows, m is not None) for (_, t, _), m in zip(shards, pads)])
    rank = np.concatenate([np.full(t.num_rows, info.rank) for _, t, info in shards])
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        bad = np.flatnonzero((rows < 0) | (rows >= n))
        raise MergeError(
            f"row index outside [0, {n}) in the shards of {p0.parent}: {_preview(rows[bad], len(bad))} "
            f"(rank(s) {_preview(np.unique(rank[bad]))})"
        )
    pick, extra, dropped = _representatives(rows, pad, n)
    _check_duplicates(ids, preds, rows, rank, marked, pick, extra, dropped)
    return ids.take(pa.array(pick)), {c: v[pick] for c, v in preds.items()}, len(dropped)


def _merge_seed(shards: list[tuple[Path, pa.Table]], targets: tuple[str, ...] | None, notes: _Notes) -> tuple[pa.Array, dict[str, np.ndarray], int]:
    """Seed shards (id + predictions, no row index) -> (unique ids, predictions, duplicates dropped)."""
    p0, t0 = shards[0]
    cols = _seed_columns(p0, t0, targets, notes)
    tables = []
    for p, t in shards:
        c = _seed_columns(p, t, targets, notes)
        if set(c) != set(cols):
            raise MergeError(f"{p}: prediction columns {c} differ from {p0.name}'s {cols}")
        _check_blank_ids(t.column("id"), str(p))
        _check_finite(str(p), t.column("id"), {x: t.column(x).to_numpy().astype(np.float64) for x in cols})
        tables.append(t.select(["id", *cols]).cast(pa.schema([("id", pa.string())] + [(x, pa.float64()) for x in cols])))
    table = pa.concat_tables(tables)
    aggs = [(c, f) for c in cols for f in ("min", "max")] + [("id", "count")]
    g = table.group_by("id", use_threads=False).aggregate(aggs)
    for c in cols:
        spread = pc.subtract(g.column(f"{c}_max"), g.column(f"{c}_min")).to_numpy()
        off = spread > DUPLICATE_ATOL
        if off.any():
            bad = g.column("id").to_numpy(zero_copy_only=False)[off]
            raise MergeError(f"duplicate ids disagree on {c!r} by more than {DUPLICATE_ATOL:g}: {_preview(bad)}")
    ids = g.column("id").combine_chunks()
    return ids, {c: g.column(f"{c}_min").to_numpy() for c in cols}, table.num_rows - g.num_rows


def _reference_ids(path: Path, what: str, id_col: str = "id") -> tuple[pa.Array, list[str]]:
    """The ids (exact strings) and the column names of a sample submission or test file.

    Read by the kit's CSV rules (:func:`kitlib.data.read_csv_strings`, as
    :func:`kitlib.data.read_csv_checked` reads it), only the ``id_col`` column kept in memory.
    """
    try:
        columns = csv_columns(path)
        if id_col not in columns:
            raise MergeError(f"{what}: " + submission_csv.no_id_col(path, id_col, columns))
        ids = pa.array(read_ids(path, id_col), pa.string())
    except FileNotFoundError:
        raise MergeError(f"{path}: no such file ({what})") from None
    except MergeError:
        raise
    except ValueError as e:
        raise MergeError(str(e)) from None
    _check_blank_ids(ids, str(path))
    if pc.count_distinct(ids).as_py() != len(ids):
        vc = pc.value_counts(ids)
        dups = vc.field("values").filter(pc.greater(vc.field("counts"), 1))
        raise MergeError(f"{path}: duplicate id(s) {_preview(dups.to_pylist())}")
    return ids, columns


def _align(ids: pa.Array, ref: pa.Array, ref_path: Path, src: str) -> np.ndarray:
    """Positions in ``ids`` of each reference id; refuses ids missing or extra on either side."""
    pos = pc.index_in(ref, value_set=ids)
    if pos.null_count:
        miss = ref.filter(pc.is_null(pos)).to_pylist()
        raise MergeError(f"{len(miss)} id(s) of {ref_path} have no prediction in {src}: {_preview(miss)}")
    if len(ids) != len(ref):
        extra = ids.filter(pc.invert(pc.is_in(ids, value_set=ref))).to_pylist()
        raise MergeError(f"{len(extra)} predicted id(s) are not in {ref_path}: {_preview(extra)}")
    return pos.to_numpy()


def _write_csv(table: pa.Table, path: str) -> None:
    """Write like Kaggle's own files: no quotes, unless an id holds a comma, quote or newline.

    pyarrow refuses to write a value that needs quotes unquoted (``ArrowInvalid``), possibly
    after writing part of the file; the second attempt reopens the file with ``"wb"``, which
    truncates it. Any error of the second attempt propagates, so :func:`atomic_write` never
    renames a partial file into place.
    """
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(table.column_names)

    def write(style: str) -> None:
        with pa.OSFile(str(path), "wb") as f:  # a Python file object is 3x slower here
            f.write(header.getvalue().encode())
            pacsv.write_csv(table, f, pacsv.WriteOptions(include_header=False, quoting_style=style))

    try:
        write("none")
    except pa.ArrowInvalid:
        write("needed")


def merge_shards(inputs: list[str | os.PathLike], output: str | os.PathLike, *, sample_submission: str | os.PathLike | None = None,
                 test: str | os.PathLike | None = None, run_id: str | None = None, world_size: int | None = None,
                 writer: str = "kitlib.outputs.merge.merge_shards", source: str = "", collapsed: str | None = None,
                 runs=(), id_col: str = "id") -> MergeResult:
    """Merge prediction shards into a submission CSV.

    Args:
        inputs: shard files and/or folders holding them (see :func:`expand_shard_paths`).
        output: the CSV to write (``id_col`` then the prediction columns; with a sample
            submission, exactly its columns in its order).
        sample_submission: Kaggle's ``sample_submission.csv``: the rows' order, every one of its ids
            predicted, no more, and its columns name the prediction columns.
        test: the test CSV; gives the order for seed shards and, for kit shards, is checked row by row.
        run_id: merge only the shards of this run: any other file is refused, naming it. None: every kit
            shard found must be of one run, whichever.
        world_size: with ``run_id``, the run's world size (None: read from the shards).
        writer, source: who writes ``output`` and with what model, recorded beside it; replacing a
            submission another writer recorded is said (:mod:`kitlib.outputs.provenance` holds the rule).
        runs: the training run ids the predictions came from, recorded beside ``output``. id_col: the id
            column of ``sample_submission``, ``test`` and ``output`` (:mod:`kitlib.outputs.submission_csv`).
        collapsed: ``"warn"``, ``"refuse"`` or None (:func:`kitlib.outputs.collapse.check_predictions`).

    Returns:
        A :class:`MergeResult` (its ``notes`` list the columns dropped or ignored).

    Raises:
        MergeError: a shard missing, unreadable, truncated or of another run; a row with no prediction;
            duplicates that disagree; a value not finite; an id blank, missing or extra; nothing naming the
            prediction columns. No output file is written then.
        kitlib.storage.CannotWrite: the output cannot be written; an existing output is left as it was.
    """
    output = storage.as_path(output)
    notes = _Notes()
    ss_path, ss_ids, targets = _sample_targets(sample_submission, notes, id_col)
    paths, read = _read_shards(inputs, output, run_id, world_size, notes)
    kit = any(i is not None for _, _, i, _ in read)
    ids, preds, dups = _merge_read(read, paths, targets, notes)
    src = f"{len(paths)} shard(s) in {paths[0].parent}"
    if (test := storage.as_path(test) if test is not None else None) is not None:
        ids, preds = _test_order(ids, preds, test, kit, src, id_col)
    elif not kit and sample_submission is None:
        raise MergeError("seed-pattern shards carry no row index: pass --sample-submission or --test for the order")
    ids, preds, columns = _sample_order(ids, preds, ss_path, ss_ids, targets, src, notes)
    table = _checked_table(ids, preds, columns, output, collapsed, (test, sample_submission), notes, id_col)
    replaced = provenance.write_recorded(output, lambda tmp: _write_csv(table, tmp), writer=writer,
                                         source=source or src, rows=table.num_rows, runs=runs)
    if replaced:
        notes.add(replaced)
    return MergeResult(output, table.num_rows, len(paths), dups, tuple(columns), notes.lines(), run_id)


def _sample_targets(sample_submission, notes: _Notes, id_col: str = "id") -> tuple[Path | None, pa.Array | None, tuple[str, ...] | None]:
    """The sample submission's path, ids and prediction columns (all None without one); an index
    column of it is noted."""
    if sample_submission is None:
        return None, None, None
    ss_path = storage.as_path(sample_submission)  # ~ expanded (storage.normalise)
    ss_ids, ss_columns = _reference_ids(ss_path, "the sample submission", id_col)
    for c in ss_columns:
        if c != id_col and submission_csv.is_index_column(c):
            notes.add(submission_csv.index_note(c) + " (the sample submission)", ss_path)
    try:
        return ss_path, ss_ids, submission_csv.prediction_columns(ss_columns, ss_path, id_col)  # the one rule
    except submission_csv.SubmissionFileError as e:
        raise MergeError(str(e)) from None


def _read_shards(inputs, output: Path, run_id: str | None, world_size: int | None, notes: _Notes) -> tuple[list[Path], list]:
    """Find and read every shard (in parallel), its notes kept; refuse kit shards mixed with seed
    shards, and with ``run_id`` any shard of another run.

    Returns:
        (the shard paths, (path, table, ShardInfo or None, note) for each).
    """
    try:
        paths = expand_shard_paths(list(inputs), exclude=output)
    except MergeError as e:
        if run_id is None:
            raise
        raise MergeError(f"{e}: no shard of this run ({run_id}) is there; did another run sharing the folder clear it? "
                         "Give each run its own shard_dir") from None
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1)) as pool:  # pyarrow releases the GIL
        read = [(p, *r) for p, r in zip(paths, pool.map(_read_shard, paths))]
    for p, _, _, note in read:
        if note:
            notes.add(note, p)
    kit = [p for p, _, i, _ in read if i is not None]
    if kit and len(kit) != len(read):
        other = next(p for p, _, i, _ in read if i is None)
        raise MergeError(f"{other} is not a kit shard but {kit[0]} is; merge one kind at a time")
    if run_id is not None:
        _check_run(read, run_id, world_size)
    return paths, read


def _merge_read(read: list, paths: list[Path], targets: tuple[str, ...] | None, notes: _Notes) -> tuple:
    """The shards read, merged by their kind (:func:`_merge_kit`, :func:`_merge_seed`): (ids,
    predictions, duplicates dropped)."""
    kit = [(p, t, i) for p, t, i, _ in read if i is not None]
    if not kit:
        return _merge_seed([(p, t) for p, t, _, _ in read], targets, notes)
    ids, preds, dups = _merge_kit(kit)
    _check_blank_ids(ids, f"shards in {paths[0].parent}", unit="input row")
    return ids, preds, dups


def _test_order(ids, preds: dict[str, np.ndarray], test: Path, kit: bool, src: str, id_col: str = "id") -> tuple:
    """Against the test file: kit shards' ids must match it row by row; seed shards' rows are put
    in its order. Returns (ids, predictions)."""
    test_ids, _ = _reference_ids(test, "the test file", id_col)
    if not kit:
        order = _align(ids, test_ids, test, src)
        return test_ids, {c: v[order] for c, v in preds.items()}
    if len(test_ids) != len(ids) or not pa.chunked_array([test_ids]).equals(ids):
        n_diff = len(test_ids) - len(ids)
        raise MergeError(
            f"shard ids do not match {test} row by row"
            + (f" ({len(ids)} rows in the shards, {len(test_ids)} in the test file)" if n_diff else "")
        )
    return ids, preds


def _sample_order(ids, preds: dict[str, np.ndarray], ss_path: Path | None, ss_ids, targets: tuple[str, ...] | None, src: str,
                  notes: _Notes) -> tuple:
    """The sample submission's rows and columns, in its order (a predicted column it lacks is
    noted and left out); without a sample submission (``targets`` None), as they are.
    Returns (ids, predictions, columns)."""
    columns = list(preds)
    if targets is None:
        return ids, preds, columns
    lacking = [c for c in targets if c not in preds]
    if lacking:
        raise MergeError(f"{ss_path} asks for column(s) {lacking}; the shards predict {columns}")
    for c in columns:
        if c not in targets:
            notes.add(f"left out column {c!r}: predicted by the shards, not a column of the sample submission")
    order = _align(ids, ss_ids, ss_path, src)
    return ss_ids, {c: preds[c][order] for c in targets}, list(targets)


def _checked_table(ids, preds: dict[str, np.ndarray], columns: list[str], output: Path, collapsed: str | None,
                   data_files: tuple, notes: _Notes, id_col: str = "id") -> pa.Table:
    """The submission table, after the one collapse rule (:func:`kitlib.outputs.collapse.check_predictions`):
    a warning is noted and warned, a refusal raised as :class:`MergeError`."""
    try:
        warning = check_predictions({c: preds[c] for c in columns}, str(output), policy=collapsed, data_files=data_files)
    except CollapsedModelError as e:
        raise MergeError(str(e)) from e
    if warning:
        notes.add(warning)
        warnings.warn(warning, CollapsedPredictionWarning, stacklevel=3)
    return pa.table({id_col: ids, **{c: pa.array(preds[c]) for c in columns}})
