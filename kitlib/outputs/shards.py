"""Prediction shards: one Parquet file per rank, written atomically.

A shard holds, for every sample the rank's ``DistributedSampler`` gave it (padding
duplicates included):

===========  =========  ===============================================================
column       dtype      meaning
===========  =========  ===============================================================
``row``      int64      0-based row index in the input CSV (the dataset index)
``id``       string     the input CSV's id, exactly as written there (never parsed as a
                        number)
<pred>       float32    one column per prediction, e.g. ``toxic``: a probability in [0, 1]
``padding``  bool       format 2, optional: True where the row is the sampler's padding
                        duplicate (:func:`sampler_padding`); the merger drops those rows
                        after checking their id, without comparing values
===========  =========  ===============================================================

Shards without ``padding`` carry no mark: the merger compares duplicates by value.

The Parquet schema metadata key ``kitlib.shard`` holds a JSON object with ``format``,
``rank``, ``world_size``, ``num_rows`` (rows of the whole input, before padding),
``num_samples`` (rows in this shard), ``run_id`` and ``prediction_columns``. The merger
(:mod:`kitlib.outputs.merge`) uses it to prove that every rank of one run is present.

A shard is written atomically (:func:`kitlib.storage.atomic_write`): a rank that dies mid-write leaves
no shard, never a truncated one.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import storage

SHARD_FORMAT = 2  # 2: the optional ``padding`` column
META_KEY = b"kitlib.shard"
SHARD_RE = re.compile(r"^shard-(\d{5})-of-(\d{5})\.parquet$")


@dataclass(frozen=True)
class ShardInfo:
    """The metadata a kit shard carries (see the module docstring)."""

    format: int
    rank: int
    world_size: int
    num_rows: int
    num_samples: int
    run_id: str
    prediction_columns: tuple[str, ...]
    stats: dict


def shard_name(rank: int, world_size: int) -> str:
    """File name of ``rank``'s shard, e.g. ``shard-00003-of-00008.parquet``."""
    return f"shard-{rank:05d}-of-{world_size:05d}.parquet"


def sampler_padding(rank: int, world_size: int, num_rows: int, num_samples: int) -> np.ndarray:
    """Which of a rank's samples are ``DistributedSampler`` padding, in the sampler's order.

    ``torch.utils.data.DistributedSampler(shuffle=False, drop_last=False)`` lists the indices
    ``0 .. N-1`` and then repeats the first ones up to ``num_samples * world_size`` (its
    ``total_size``); rank ``r`` takes global positions ``r, r + W, r + 2W, ...``. Position ``k``
    of rank ``r`` is padding when its global position ``r + k * W >= N``.

    Args:
        rank, world_size: the replica and the number of replicas, ``0 <= rank < world_size``.
        num_rows: ``N``, rows in the whole input.
        num_samples: samples this rank gets (the sampler's ``num_samples``, ``ceil(N / W)``).

    Returns:
        bool ``[num_samples]``: True where the sample is a padding duplicate. Reorder it with the
        samples when the replica reorders them (e.g. length buckets).

    Raises:
        ValueError: rank outside ``[0, world_size)``, or negative sizes.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"sampler_padding: rank {rank} outside [0, {world_size})")
    if num_rows < 0 or num_samples < 0:
        raise ValueError(f"sampler_padding: negative size (num_rows={num_rows}, num_samples={num_samples})")
    return rank + np.arange(num_samples, dtype=np.int64) * world_size >= num_rows


def _check_shard(rank: int, num_rows: int, rows: np.ndarray, ids, predictions: dict, padding) -> np.ndarray | None:
    """Refuse what :func:`write_shard` cannot store (see its Raises); returns ``padding`` as an array."""
    n = len(rows)
    if not predictions:
        raise ValueError("write_shard: no prediction columns given")
    reserved = sorted(set(predictions) & {"row", "id", "padding"})
    if reserved:
        raise ValueError(f"write_shard(rank={rank}): prediction column name(s) {reserved} are the shard's own columns")
    if padding is not None:
        padding = np.asarray(padding)
        if padding.dtype != np.bool_ or padding.shape != (n,):
            raise ValueError(
                f"write_shard(rank={rank}): padding must be a bool array of shape ({n},), "
                f"got {padding.dtype} {padding.shape}"
            )
    if len(ids) != n or any(len(v) != n for v in predictions.values()):
        raise ValueError(
            f"write_shard(rank={rank}): rows, ids and predictions must have one length; got "
            f"{n} rows, {len(ids)} ids, " + ", ".join(f"{k}={len(v)}" for k, v in predictions.items())
        )
    if n and (rows.min() < 0 or rows.max() >= num_rows):
        raise ValueError(f"write_shard(rank={rank}): row index outside [0, {num_rows})")
    return padding


def write_shard(out_dir: str | os.PathLike, *, rank: int, world_size: int, num_rows: int, rows: np.ndarray,
                ids: list[str] | np.ndarray | pa.Array, predictions: dict[str, np.ndarray], run_id: str,
                stats: dict | None = None, padding: np.ndarray | None = None) -> Path:
    """Write one rank's predictions atomically and return the shard's path.

    Args:
        out_dir: folder for the shards (created if missing), or a URL (:mod:`kitlib.storage`).
        rank, world_size: this replica's rank and the number of replicas.
        num_rows: rows in the whole input (before the sampler's padding).
        rows: int array ``[n]`` of dataset row indices, ``0 <= row < num_rows``.
        ids: ``[n]`` id strings, exactly as read from the input CSV.
        predictions: column name -> float array ``[n]``.
        run_id: identifies the launch; every shard of one run carries the same value.
        stats: optional JSON-serialisable facts about the run (batches, seconds, XLA compiles),
            stored in the metadata under ``stats`` for benchmarks and notebooks.
        padding: optional bool ``[n]``, True where the row is the sampler's padding duplicate
            (:func:`sampler_padding`, reordered like ``rows``). Stored as the ``padding``
            column; without it the merger compares duplicates by value.

    Non-finite predictions are stored as they are: the merger refuses them, naming the ids.

    Raises:
        ValueError: lengths disagree, a row index is out of range, ``padding`` is not bool
            ``[n]``, no prediction column, or one is named ``row``, ``id`` or ``padding``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    padding = _check_shard(rank, num_rows, rows, ids, predictions, padding)
    info = {
        "format": SHARD_FORMAT,
        "rank": rank,
        "world_size": world_size,
        "num_rows": num_rows,
        "num_samples": len(rows),
        "run_id": run_id,
        "prediction_columns": list(predictions),
        "stats": stats or {},
    }
    columns = {"row": pa.array(rows, pa.int64()), "id": pa.array(ids, pa.string())}
    for name, values in predictions.items():
        columns[name] = pa.array(np.asarray(values, dtype=np.float32))
    if padding is not None:
        columns["padding"] = pa.array(padding, pa.bool_())
    table = pa.table(columns).replace_schema_metadata({META_KEY: json.dumps(info).encode()})
    out_dir = storage.as_path(out_dir)  # a local folder or a URL (kitlib.storage)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / shard_name(rank, world_size)
    # Plain encodings read about 2x faster than dictionary pages for unique ids; the row index,
    # an arithmetic sequence per rank, packs to almost nothing with delta encoding.
    storage.atomic_write(
        final,
        lambda tmp: pq.write_table(table, tmp, use_dictionary=False, column_encoding={"row": "DELTA_BINARY_PACKED"}),
    )
    return final


def read_shard_info(schema: pa.Schema) -> ShardInfo | None:
    """The :class:`ShardInfo` in a Parquet schema, or None for a shard without kit metadata."""
    meta = schema.metadata or {}
    if META_KEY not in meta:
        return None
    d = json.loads(meta[META_KEY])
    return ShardInfo(
        format=int(d.get("format", 1)),
        rank=int(d["rank"]),
        world_size=int(d["world_size"]),
        num_rows=int(d["num_rows"]),
        num_samples=int(d["num_samples"]),
        run_id=str(d["run_id"]),
        prediction_columns=tuple(d["prediction_columns"]),
        stats=dict(d.get("stats", {})),
    )


def clear_shards(out_dir: str | os.PathLike) -> int:
    """Delete kit shard files (``shard-*-of-*.parquet``) left in ``out_dir`` by an earlier run.

    Only files whose names match the shard pattern are removed. Returns how many were.
    """
    out_dir = storage.as_path(out_dir)
    if not out_dir.is_dir():
        return 0
    removed = 0
    for p in out_dir.iterdir():
        if SHARD_RE.match(p.name) and p.is_file():
            p.unlink()
            removed += 1
    return removed
