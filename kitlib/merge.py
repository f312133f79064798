"""Merge per-rank prediction shards into one submission with exactly one row per input row.

Two kinds of shard are accepted (never mixed in one merge):

* kit shards (:mod:`kitlib.shards`): Parquet with ``row``, ``id`` and prediction columns plus
  metadata naming the rank, the world size and the input's row count. Every rank must be
  present, every input row must be covered, and the ``DistributedSampler`` padding duplicates
  (``torch.utils.data.DistributedSampler`` with ``drop_last=False`` repeats the first
  ``ceil(N / W) * W - N`` indices) must agree with the row they repeat.
* seed-pattern shards: CSV (or Parquet) files with an ``id`` column and prediction columns,
  no row index, as most Kaggle multicore notebooks write them. Duplicated ids must agree;
  the output order then comes from ``--sample-submission`` or ``--test``.

Output order: the sample submission's order when one is given, else the test set's order
(the row index for kit shards, the ``--test`` file for seed shards). Ids are compared as the
exact strings of the input files. On any problem :class:`MergeError` names it, and no output
file is written (the CSV is written to a temporary file and renamed into place at the end).
"""
from __future__ import annotations

import csv
import io
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from . import storage
from .shards import SHARD_RE, ShardInfo, read_shard_info, shard_name

DUPLICATE_ATOL = 1e-4  # padding duplicates are the same text on another replica: equal up to float noise
_SHOW = 5  # how many offending values an error lists


class MergeError(ValueError):
    """A shard set or reference file that cannot give a correct submission."""


@dataclass
class MergeResult:
    """What :func:`merge_shards` wrote: the path, the row count and the shard bookkeeping."""

    output: Path
    num_rows: int
    num_shards: int
    num_padding_duplicates: int
    prediction_columns: tuple[str, ...]


def _preview(values) -> str:
    values = list(values)
    more = f" and {len(values) - _SHOW} more" if len(values) > _SHOW else ""
    return ", ".join(repr(v) for v in values[:_SHOW]) + more


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
    """Read a CSV keeping ``string_columns`` as exact strings ("007", "NA" and "" stay as written)."""
    try:
        return pacsv.read_csv(
            storage.readable(path),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.string() for c in string_columns},
                strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, OSError) as e:
        raise MergeError(f"{path}: unreadable CSV ({e})") from None


def _read_shard(path: Path) -> tuple[pa.Table, ShardInfo | None]:
    if path.suffix == ".parquet":
        try:
            table = pq.read_table(storage.readable(path))
        except (pa.ArrowInvalid, OSError) as e:
            raise MergeError(f"{path}: unreadable or truncated Parquet shard ({e})") from None
        info = read_shard_info(table.schema)
    else:
        table, info = _read_csv(path), None
    if "id" not in table.column_names:
        raise MergeError(f"{path}: no 'id' column (columns: {', '.join(table.column_names)})")
    if info is not None and table.num_rows != info.num_samples:
        raise MergeError(
            f"{path}: truncated shard: {table.num_rows} rows, its metadata says {info.num_samples}"
        )
    return table, info


def _prediction_columns(path: Path, table: pa.Table) -> tuple[str, ...]:
    cols = tuple(c for c in table.column_names if c not in ("id", "row"))
    if not cols:
        raise MergeError(f"{path}: no prediction column besides 'id'")
    for c in cols:
        t = table.schema.field(c).type
        if not (pa.types.is_floating(t) or pa.types.is_integer(t)):
            raise MergeError(f"{path}: prediction column {c!r} is {t}, not numeric")
        if table.column(c).null_count:
            bad = np.flatnonzero(table.column(c).is_null().to_numpy(zero_copy_only=False))
            raise MergeError(f"{path}: column {c!r} is blank at data row(s) {_preview(bad + 1)}")
    return cols


def _check_blank_ids(ids: pa.ChunkedArray | pa.Array, where: str, unit: str = "data row") -> None:
    """Refuse null, empty or whitespace-only ids; ``unit`` names what the positions count."""
    blank = pc.fill_null(pc.or_(pc.equal(pc.binary_length(ids), 0), pc.utf8_is_space(ids)), True)
    if pc.any(blank).as_py():
        bad = np.flatnonzero(np.asarray(blank))
        raise MergeError(f"{where}: blank id at {unit}(s) {_preview(bad + 1)}")


def _merge_kit(shards: list[tuple[Path, pa.Table, ShardInfo]]) -> tuple[pa.ChunkedArray, dict[str, np.ndarray], int]:
    """Kit shards -> (ids [N] in row order, predictions, number of padding duplicates dropped)."""
    p0, _, i0 = shards[0]
    for p, _, info in shards[1:]:
        for field in ("world_size", "num_rows", "run_id", "prediction_columns"):
            if getattr(info, field) != getattr(i0, field):
                raise MergeError(
                    f"shards from different runs: {p0.name} has {field}={getattr(i0, field)!r}, "
                    f"{p.name} has {getattr(info, field)!r}; clear the folder and run again"
                )
    by_rank: dict[int, Path] = {}
    for p, _, info in shards:
        if info.rank in by_rank:
            raise MergeError(f"rank {info.rank} has two shards: {by_rank[info.rank]} and {p}")
        by_rank[info.rank] = p
    world, n = i0.world_size, i0.num_rows
    missing = sorted(set(range(world)) - set(by_rank))
    if missing:
        names = [shard_name(r, world) for r in missing]
        raise MergeError(
            f"missing shard(s) for rank(s) {_preview(missing)} of world size {world}: "
            f"expected {_preview(names)} in {p0.parent}"
        )
    cols = i0.prediction_columns
    rows = np.concatenate([t.column("row").to_numpy() for _, t, _ in shards]).astype(np.int64, copy=False)
    ids = pa.chunked_array([c for _, t, _ in shards for c in t.column("id").chunks], pa.string())
    preds = {c: np.concatenate([t.column(c).to_numpy() for _, t, _ in shards]) for c in cols}
    if len(rows) and (rows.min() < 0 or rows.max() >= n):
        raise MergeError(f"row index outside [0, {n}) in the shards of {p0.parent}")
    # one representative position per row (the last one written); padding duplicates must agree with it
    positions = np.arange(len(rows), dtype=np.int64)
    pick = np.full(n, -1, dtype=np.int64)
    pick[rows] = positions
    if (pick < 0).any():
        absent = np.flatnonzero(pick < 0)
        raise MergeError(
            f"{len(absent)} input row(s) have no prediction in any shard (0-based rows {_preview(absent)})"
        )
    dup = np.flatnonzero(pick[rows] != positions)
    ids_out = ids.take(pa.array(pick))
    if len(dup):
        rep = pick[rows[dup]]
        same_id = pc.equal(ids.take(pa.array(dup)), ids.take(pa.array(rep)))
        if not pc.all(same_id).as_py():
            bad = rows[dup[~same_id.to_numpy(zero_copy_only=False)]]
            raise MergeError(f"padding duplicates disagree on the id of input row(s) {_preview(bad)}")
        for c, v in preds.items():
            off = np.abs(v[dup].astype(np.float64) - v[rep]) > DUPLICATE_ATOL
            if off.any():
                raise MergeError(
                    f"padding duplicates disagree on {c!r} for input row(s) {_preview(rows[dup[off]])}"
                )
    return ids_out, {c: v[pick] for c, v in preds.items()}, len(dup)


def _merge_seed(shards: list[tuple[Path, pa.Table]]) -> tuple[pa.Array, dict[str, np.ndarray], int]:
    """Seed shards (id + predictions, no row index) -> (unique ids, predictions, duplicates dropped)."""
    p0, t0 = shards[0]
    cols = _prediction_columns(p0, t0)
    tables = []
    for p, t in shards:
        c = _prediction_columns(p, t)
        if set(c) != set(cols):
            raise MergeError(f"{p}: prediction columns {c} differ from {p0.name}'s {cols}")
        _check_blank_ids(t.column("id"), str(p))
        tables.append(t.select(["id", *cols]).cast(pa.schema([("id", pa.string())] + [(x, pa.float64()) for x in cols])))
    table = pa.concat_tables(tables)
    aggs = [(c, f) for c in cols for f in ("min", "max")] + [("id", "count")]
    g = table.group_by("id", use_threads=False).aggregate(aggs)
    for c in cols:
        spread = pc.subtract(g.column(f"{c}_max"), g.column(f"{c}_min")).to_numpy()
        off = spread > DUPLICATE_ATOL
        if off.any():
            raise MergeError(f"duplicate ids disagree on {c!r}: {_preview(g.column('id').to_numpy(zero_copy_only=False)[off])}")
    ids = g.column("id").combine_chunks()
    return ids, {c: g.column(f"{c}_min").to_numpy() for c in cols}, table.num_rows - g.num_rows


def _reference_ids(path: Path, what: str) -> tuple[pa.Array, pa.Table]:
    table = _read_csv(path)
    if "id" not in table.column_names:
        raise MergeError(f"{path}: {what} has no 'id' column")
    ids = table.column("id").combine_chunks()
    _check_blank_ids(ids, str(path))
    if pc.count_distinct(ids).as_py() != len(ids):
        vc = pc.value_counts(ids)
        dups = vc.field("values").filter(pc.greater(vc.field("counts"), 1))
        raise MergeError(f"{path}: duplicate id(s) {_preview(dups.to_pylist())}")
    return ids, table


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
    """Write like Kaggle's own files: no quotes, unless an id holds a comma, quote or newline."""
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(table.column_names)
    for style in ("none", "needed"):  # pyarrow refuses to write a value that needs quotes unquoted
        try:
            with pa.OSFile(str(path), "wb") as f:  # a Python file object is 3x slower here
                f.write(header.getvalue().encode())
                pacsv.write_csv(table, f, pacsv.WriteOptions(include_header=False, quoting_style=style))
            return
        except pa.ArrowInvalid:
            continue


def merge_shards(
    inputs: list[str | os.PathLike],
    output: str | os.PathLike,
    *,
    sample_submission: str | os.PathLike | None = None,
    test: str | os.PathLike | None = None,
) -> MergeResult:
    """Merge prediction shards into a submission CSV.

    Args:
        inputs: shard files and/or folders holding them (see :func:`expand_shard_paths`).
        output: the CSV to write (``id`` then the prediction columns; with a sample
            submission, exactly its columns in its order).
        sample_submission: Kaggle's ``sample_submission.csv``; rows are written in its order and
            every one of its ids must be predicted, no more.
        test: the test CSV (column ``id``); gives the order for seed shards and, for kit shards,
            is checked row by row against the shards' ids.

    Returns:
        A :class:`MergeResult`.

    Raises:
        MergeError: a shard is missing, unreadable or truncated; shards of different runs are
            mixed; an input row has no prediction; duplicates disagree; an id is blank, missing
            or extra against the sample submission. No output file is written then.
    """
    output = storage.as_path(output)
    paths = expand_shard_paths(list(inputs), exclude=output)
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1)) as pool:  # pyarrow releases the GIL
        read = [(p, *r) for p, r in zip(paths, pool.map(_read_shard, paths))]
    kit = [(p, t, i) for p, t, i in read if i is not None]
    if kit and len(kit) != len(read):
        other = next(p for p, _, i in read if i is None)
        raise MergeError(f"{other} is not a kit shard but {kit[0][0]} is; merge one kind at a time")
    if kit:
        ids, preds, dups = _merge_kit(kit)
        _check_blank_ids(ids, f"shards in {paths[0].parent}", unit="input row")
    else:
        ids, preds, dups = _merge_seed([(p, t) for p, t, _ in read])

    src = f"{len(paths)} shard(s) in {paths[0].parent}"
    columns = list(preds)
    if test is not None:
        test_ids, _ = _reference_ids(Path(test), "the test file")
        if kit:
            if len(test_ids) != len(ids) or not pa.chunked_array([test_ids]).equals(ids):
                n_diff = len(test_ids) - len(ids)
                raise MergeError(
                    f"shard ids do not match {test} row by row"
                    + (f" ({len(ids)} rows in the shards, {len(test_ids)} in the test file)" if n_diff else "")
                )
        else:
            order = _align(ids, test_ids, Path(test), src)
            ids, preds = test_ids, {c: v[order] for c, v in preds.items()}
    elif not kit and sample_submission is None:
        raise MergeError("seed-pattern shards carry no row index: pass --sample-submission or --test for the order")
    if sample_submission is not None:
        ss_path = Path(sample_submission)
        ss_ids, ss = _reference_ids(ss_path, "the sample submission")
        want = [c for c in ss.column_names if c != "id"]
        lacking = [c for c in want if c not in preds]
        if lacking:
            raise MergeError(f"{ss_path} asks for column(s) {lacking}; the shards predict {columns}")
        order = _align(ids, ss_ids, ss_path, src)
        ids, preds, columns = ss_ids, {c: preds[c][order] for c in want}, want

    table = pa.table({"id": ids, **{c: pa.array(preds[c]) for c in columns}})
    storage.atomic_write(output, lambda tmp: _write_csv(table, tmp))
    return MergeResult(output, table.num_rows, len(paths), dups, tuple(columns))
