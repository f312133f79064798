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


def plan_batches(rows: np.ndarray, batch_size: int, seq_len: int) -> list[BatchPlan]:
    """Split ``rows`` (a rank's sampler indices, in order) into full batches of one shape.

    The last batch is filled up to ``batch_size`` with ``-1`` slots, so every model call has the
    shape ``[batch_size, seq_len]``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    plans = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        if len(chunk) < batch_size:
            chunk = np.concatenate([chunk, np.full(batch_size - len(chunk), -1, dtype=np.int64)])
        plans.append(BatchPlan(chunk, seq_len))
    return plans


class PlannedBatches:
    """A map-style dataset whose item ``i`` is the tokenized batch ``plans[i]``.

    Returns dicts of CPU tensors: ``input_ids`` and ``attention_mask``, int64 ``[batch_size,
    seq_len]``. Filler slots hold ``<s></s>`` (a real two-token sequence, so no attention row is
    fully masked) and are dropped after the forward pass. Use with ``DataLoader(batch_size=None)``.
    """

    def __init__(self, texts: list[str], plans: list[BatchPlan], tokenizer):
        self.texts, self.plans, self.tokenizer = texts, plans, tokenizer

    def __len__(self) -> int:
        return len(self.plans)

    def __getitem__(self, i: int):
        plan = self.plans[i]
        texts = [self.texts[r] if r >= 0 else "" for r in plan.rows]
        enc = self.tokenizer(
            texts, padding="max_length", truncation=True, max_length=plan.seq_len, return_tensors="pt"
        )
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
