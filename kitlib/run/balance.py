"""Rows balanced by tokens: split over replicas by token count (what ``predict`` does), batched to a token budget.

A decoder's time grows with the tokens it reads, not the rows: a replica handed longer rows finishes
later, and the job waits for the slowest (issue 32). :func:`split_by_tokens` (greedy longest first,
Graham 1969), :func:`token_batches`, :func:`token_imbalance`: pure numpy, the same result in every process.
"""
from __future__ import annotations

import heapq

import numpy as np


def _lengths(lengths) -> np.ndarray:
    """``lengths`` as int64 ``[n]``, each >= 0. Raises ValueError (naming the first bad row)."""
    out = np.asarray(lengths)
    if out.ndim != 1:
        raise ValueError(f"lengths: need one token count per row (a 1-D array), got shape {out.shape}")
    out = out.astype(np.int64)
    if len(out) and out.min() < 0:
        raise ValueError(f"lengths: row {int(np.argmin(out))} has a negative token count {int(out.min())}")
    return out


def split_by_tokens(lengths, world_size: int) -> list[np.ndarray]:
    """Split rows over ``world_size`` replicas so each gets about the same number of tokens.

    Args:
        lengths: int ``[n]``: tokens per row (after truncation, e.g. the attention mask's sum).
        world_size: replicas, >= 1.

    Returns:
        ``world_size`` int64 arrays of row indices (into ``lengths``), each sorted by length,
        longest first (ties by row index); together they hold every row exactly once. A replica
        may get no row (fewer rows than replicas).

    Raises:
        ValueError: ``world_size < 1``, or ``lengths`` not 1-D or negative.
    """
    lengths = _lengths(lengths)
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: need at least one replica")
    order = np.lexsort((np.arange(len(lengths)), -lengths))  # longest first, ties by row index
    heap = [(0, r) for r in range(world_size)]  # (tokens so far, rank): the lightest replica on top
    parts: list[list[int]] = [[] for _ in range(world_size)]
    for row in order.tolist():
        tokens, rank = heapq.heappop(heap)
        parts[rank].append(row)
        heapq.heappush(heap, (tokens + int(lengths[row]), rank))
    return [np.asarray(p, dtype=np.int64) for p in parts]


def token_batches(lengths, budget: int, *, rows=None, max_rows: int | None = None,
                  multiple_of: int = 1) -> list[np.ndarray]:
    """Batches of rows, longest first, each within ``budget`` padded tokens.

    A batch's padded length is its longest row rounded up to ``multiple_of``; rows join a batch
    while ``rows x padded length <= budget`` (and ``rows <= max_rows``).

    Args:
        lengths: int ``[n]``: tokens per row, for every row.
        budget: padded tokens per batch (e.g. 32 rows x 256 tokens = 8192).
        rows: int row indices to batch (one replica's, from :func:`split_by_tokens`); None: all rows.
        max_rows: at most this many rows per batch; None: no cap.
        multiple_of: pad each batch to a multiple of this (8 for tensor cores; 1: the longest row).

    Returns:
        int64 arrays of row indices (values of ``rows``), every row exactly once, the longest rows first.

    Raises:
        ValueError: a row longer than ``budget`` alone (naming it and the fix), a budget, cap or
            multiple below 1.
    """
    lengths = _lengths(lengths)
    if budget < 1 or multiple_of < 1 or (max_rows is not None and max_rows < 1):
        raise ValueError(f"token_batches: budget={budget}, max_rows={max_rows}, multiple_of={multiple_of}: each must be >= 1")
    rows = np.arange(len(lengths), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    rows = rows[np.lexsort((rows, -lengths[rows]))]
    padded = -(-np.maximum(lengths[rows], 1) // multiple_of) * multiple_of
    if len(rows) and padded[0] > budget:
        raise ValueError(f"row {int(rows[0])} has {int(lengths[rows[0]])} tokens (padded {int(padded[0])}), more than the "
                         f"token budget {budget} of a whole batch; raise the budget or lower max_length")
    batches, start = [], 0
    cap = max_rows or len(rows)
    while start < len(rows):
        size = min(cap, budget // int(padded[start]), len(rows) - start)  # the first row is the batch's longest
        batches.append(rows[start:start + size])
        start += size
    return batches


def padded_tokens(lengths, batch, multiple_of: int = 1) -> int:
    """Tokens of ``batch``'s padded tensor: rows x its longest row (rounded up to ``multiple_of``)."""
    lengths = _lengths(lengths)
    if len(batch) == 0:
        return 0
    longest = max(int(lengths[np.asarray(batch)].max()), 1)
    return len(batch) * (-(-longest // multiple_of) * multiple_of)


def token_imbalance(lengths, parts) -> float:
    """How far the busiest replica's tokens are above the mean: ``max / mean - 1`` (0.0: perfectly even).

    Args:
        lengths: int ``[n]`` tokens per row; parts: per-replica row indices (e.g. :func:`split_by_tokens`'s).
    """
    lengths = _lengths(lengths)
    tokens = np.array([int(lengths[np.asarray(p, dtype=np.int64)].sum()) for p in parts], dtype=np.float64)
    mean = tokens.mean() if len(tokens) else 0.0
    return float(tokens.max() / mean - 1.0) if mean > 0 else 0.0
