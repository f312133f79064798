"""Reading the competition CSVs and turning text into fixed-shape batches.

Ids are read as the exact strings of the file (``dtype=str``, no NA parsing), so ``"007"``
stays ``"007"`` and ``"NA"`` stays ``"NA"``. Every batch the model sees is ``[batch_size,
seq_len]`` int64 for one of a few configured ``seq_len`` values: XLA compiles one graph per
input shape, so a ragged tail or per-batch dynamic padding would recompile (torch_xla
"Performance" guide: avoid dynamic shapes).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TEXT_COLUMNS = ("content", "comment_text")  # test.csv / train.csv + validation.csv


def read_csv_checked(
    path: str | os.PathLike,
    *,
    id_col: str = "id",
    text_col: str | None = None,
    label_cols: tuple[str, ...] = (),
    limit: int | None = None,
) -> pd.DataFrame:
    """Read a competition CSV and check the fields the kit relies on.

    Args:
        path: the CSV (UTF-8; quoted fields may span lines).
        id_col: the id column, kept as exact strings.
        text_col: the text column; None picks the first of ``content``, ``comment_text``.
        label_cols: label columns that must be present, numeric and in [0, 1].
        limit: keep only the first ``limit`` rows (for quick runs).

    Returns:
        A DataFrame with columns ``id`` (str), ``text`` (str; blank text becomes ``""``) and the
        label columns (float32), in file order, with a fresh 0-based index.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a column is missing, an id is blank or repeated, or a label is not a number
            in [0, 1]; the message names the file, the column and the data row (1-based, header
            not counted).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, nrows=limit)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable UTF-8 CSV ({e})") from None
    if text_col is None:
        text_col = next((c for c in TEXT_COLUMNS if c in df.columns), None)
        if text_col is None:
            raise ValueError(f"{path}: no text column (looked for {', '.join(TEXT_COLUMNS)}; found {', '.join(df.columns)})")
    for col in (id_col, text_col, *label_cols):
        if col not in df.columns:
            raise ValueError(f"{path}: missing column {col!r} (found {', '.join(df.columns)})")
    ids = df[id_col]
    blank = ids.str.strip() == ""
    if blank.any():
        rows = (np.flatnonzero(blank.to_numpy()) + 1).tolist()[:5]
        raise ValueError(f"{path}: blank {id_col!r} at data row(s) {rows}")
    dup = ids.duplicated(keep=False)
    if dup.any():
        first = ids[dup].iloc[0]
        rows = (np.flatnonzero((ids == first).to_numpy()) + 1).tolist()
        raise ValueError(f"{path}: id {first!r} repeated at data rows {rows}")
    out = pd.DataFrame({"id": ids, "text": df[text_col]})
    for col in label_cols:
        vals = pd.to_numeric(df[col], errors="coerce")
        bad = vals.isna() | (vals < 0) | (vals > 1)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{path}: column {col!r} at data row {i + 1} is {df[col].iloc[i]!r}, not a number in [0, 1]")
        out[col] = vals.astype(np.float32)
    if out.empty:
        raise ValueError(f"{path}: no data rows")
    return out.reset_index(drop=True)


@dataclass(frozen=True)
class BatchPlan:
    """One model call: dataset rows (``-1`` for filler) and the sequence length to pad to."""

    rows: np.ndarray  # int64 [batch_size]; -1 marks a filler slot of a padded last batch
    seq_len: int

    @property
    def valid(self) -> np.ndarray:
        """bool [batch_size]: which slots hold real rows."""
        return self.rows >= 0


def choose_bucket_lengths(lengths: np.ndarray, max_len: int, num_buckets: int, multiple: int = 8) -> tuple[int, ...]:
    """Sequence lengths to pad to, chosen to waste the fewest padding tokens.

    An exact dynamic program over the candidate lengths ``multiple, 2*multiple, ...``: it picks
    at most ``num_buckets`` of them so that padding every row up to the smallest chosen length
    that holds it costs the fewest tokens in total. Each chosen length is one XLA graph.

    Args:
        lengths: int array ``[n]``, tokens per row after truncation to ``max_len`` (special tokens
            included), over the whole input so that every replica uses the same shapes.
        max_len: no bucket is longer.
        num_buckets: at most this many lengths; ``<= 1`` gives ``(max_len,)``.
        multiple: every length is a multiple of this, or ``max_len`` (8 suits TPU and tensor-core tiles).

    Returns:
        Sorted distinct lengths; the last holds the longest row.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if num_buckets <= 1 or len(lengths) == 0:
        return (max_len,)
    cands = np.unique(np.minimum(-(-lengths // multiple) * multiple, max_len))  # the lengths worth using
    m = len(cands)
    if m <= num_buckets:
        return tuple(int(c) for c in cands)
    idx = np.searchsorted(cands, np.minimum(-(-lengths // multiple) * multiple, max_len))
    cnt = np.bincount(idx, minlength=m).astype(np.int64)
    tot = np.bincount(idx, weights=lengths, minlength=m)
    ccnt, ctot = np.concatenate([[0], np.cumsum(cnt)]), np.concatenate([[0.0], np.cumsum(tot)])

    def cost(a: int, b: int) -> float:  # candidates a..b (inclusive) all padded to cands[b]
        return float(cands[b] * (ccnt[b + 1] - ccnt[a]) - (ctot[b + 1] - ctot[a]))

    inf = float("inf")
    best = np.full((num_buckets + 1, m), inf)  # best[k][b]: candidates 0..b covered by k buckets, the last = cands[b]
    back = np.zeros((num_buckets + 1, m), dtype=np.int64)
    for b in range(m):
        best[1][b] = cost(0, b)
    for k in range(2, num_buckets + 1):
        for b in range(m):
            for a in range(b):
                c = best[k - 1][a] + cost(a + 1, b)
                if c < best[k][b]:
                    best[k][b], back[k][b] = c, a
    k = int(np.argmin(best[:, m - 1]))
    chosen, b = [], m - 1
    while k >= 1:
        chosen.append(int(cands[b]))
        b, k = int(back[k][b]), k - 1
    return tuple(sorted(chosen))


def plan_batches(rows: np.ndarray, batch_size: int, seq_len: int, lengths: np.ndarray | None = None, buckets: tuple[int, ...] = (),
                 fill_last: bool = True) -> list[BatchPlan]:
    """Split ``rows`` (a rank's sampler indices) into full batches of a few fixed shapes.

    Without ``buckets`` every batch is ``[batch_size, seq_len]`` and rows keep their order. With
    ``buckets`` (from :func:`choose_bucket_lengths`) and ``lengths`` (int ``[num_rows]``, indexed by row),
    the rows are sorted by length (stable) and each batch is padded to the smallest bucket that
    holds its longest row, so short comments are not padded to ``seq_len``; the merger restores
    the input order. In both cases only the last batch is partial: it is filled up to
    ``batch_size`` with ``-1`` slots (one shape for XLA), or left short with ``fill_last=False``
    (eager devices, where a smaller batch costs nothing but its rows).
    """
    rows = np.asarray(rows, dtype=np.int64)
    if buckets:
        if lengths is None:
            raise ValueError("plan_batches: buckets need the row lengths")
        rows = rows[np.argsort(np.asarray(lengths)[rows], kind="stable")]
    edges = np.asarray(buckets or (seq_len,))
    plans = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        longest = int(np.asarray(lengths)[chunk].max()) if buckets else seq_len
        length = int(edges[min(np.searchsorted(edges, longest), len(edges) - 1)])
        if len(chunk) < batch_size and fill_last:
            chunk = np.concatenate([chunk, np.full(batch_size - len(chunk), -1, dtype=np.int64)])
        plans.append(BatchPlan(chunk, length))
    return plans


def token_lengths(tokenizer, texts: list[str], max_len: int) -> np.ndarray:
    """int64 ``[len(texts)]``: tokens per text after truncation to ``max_len``, special tokens included."""
    enc = tokenizer(texts, truncation=True, max_length=max_len)
    return np.fromiter((len(ids) for ids in enc["input_ids"]), dtype=np.int64, count=len(texts))


@dataclass(frozen=True)
class Tokens:
    """Every row of a text column tokenized once (truncated to ``max_len``, not padded), packed flat.

    Attributes:
        ids: int32 ``[total_tokens]``: the rows' token ids one after another.
        offsets: int64 ``[num_rows + 1]``: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.
        pad_id: the tokenizer's padding id.
        filler: int32 ``[k]``: the ids of an empty text (``<s></s>``), for filler slots of a last batch.
    """

    ids: np.ndarray
    offsets: np.ndarray
    pad_id: int
    filler: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``[num_rows]``: tokens per row."""
        return np.diff(self.offsets)

    def save(self, path: str | os.PathLike) -> None:
        """Write to ``path`` (``.npy`` arrays in an uncompressed ``.npz``), atomically."""
        from .atomic import atomic_write

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, ids=self.ids, offsets=self.offsets, pad_id=np.int64(self.pad_id), filler=self.filler)

        atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokens":
        """Read what :meth:`save` wrote."""
        with np.load(path) as z:
            return cls(z["ids"], z["offsets"], int(z["pad_id"]), z["filler"])


def tokenize(tokenizer, texts: list[str], max_len: int) -> Tokens:
    """Tokenize ``texts`` once, truncated to ``max_len`` (special tokens included), for every replica.

    The same ids as ``tokenizer(text, truncation=True, max_length=L, padding="max_length")`` gives
    for any padded length ``L`` that holds the row (right padding with ``pad_token_id``).
    """
    enc = tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]
    lengths = np.fromiter((len(x) for x in enc), dtype=np.int64, count=len(enc))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.fromiter((t for row in enc for t in row), dtype=np.int32, count=int(offsets[-1]))
    filler = np.asarray(tokenizer("", truncation=True, max_length=max_len)["input_ids"], dtype=np.int32)
    return Tokens(ids, offsets, int(tokenizer.pad_token_id), filler)


def padding_waste(plans: list[BatchPlan], lengths: np.ndarray) -> float:
    """Share of computed tokens (batch x padded length, filler slots included) that are padding."""
    computed = sum(len(p.rows) * p.seq_len for p in plans)
    real = sum(int(np.asarray(lengths)[p.rows[p.valid]].sum()) for p in plans)
    return 1.0 - real / computed if computed else 0.0


class PlannedBatches:
    """A map-style dataset whose item ``i`` is the batch ``plans[i]``, built from pre-tokenized rows.

    Returns dicts of CPU tensors: ``input_ids`` and ``attention_mask``, int64 ``[batch_size,
    seq_len]``, right-padded with the pad id. Filler slots hold ``<s></s>`` (a real two-token
    sequence, so no attention row is fully masked) and are dropped after the forward pass. Use
    with ``DataLoader(batch_size=None)``.
    """

    def __init__(self, tokens: Tokens, plans: list[BatchPlan], index: np.ndarray | None = None):
        """``index``: int ``[m]``; when given, a plan slot ``p >= 0`` means token row ``index[p]``."""
        self.tokens, self.plans, self.index = tokens, plans, index

    def __len__(self) -> int:
        return len(self.plans)

    def __getitem__(self, i: int):
        import torch

        plan, t = self.plans[i], self.tokens
        ids = np.full((len(plan.rows), plan.seq_len), t.pad_id, dtype=np.int64)
        mask = np.zeros((len(plan.rows), plan.seq_len), dtype=np.int64)
        for j, r in enumerate(plan.rows):
            if r >= 0 and self.index is not None:
                r = self.index[r]
            row = t.ids[t.offsets[r] : t.offsets[r + 1]] if r >= 0 else t.filler
            row = row[: plan.seq_len]
            ids[j, : len(row)] = row
            mask[j, : len(row)] = 1
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
