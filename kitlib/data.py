"""Reading the competition CSVs and turning text into fixed-shape batches.

Ids are read as the exact strings of the file (``dtype=str``, no NA parsing), so ``"007"``
stays ``"007"`` and ``"NA"`` stays ``"NA"``. Every batch the model sees is ``[batch_size,
seq_len]`` int64 for one of a few configured ``seq_len`` values: XLA compiles one graph per
input shape.
"""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

TEXT_COLUMNS = ("content", "comment_text", "text")  # Jigsaw's test.csv / train.csv + validation.csv; then a plain "text"
KIT_ID = "id"  # the id column of every file the kit writes (splits, predictions, submissions)
# Rows read and tokenized at a time: transformers keeps a Python list per row of a call.
CHUNK_ROWS = 2048


def csv_columns(path: str | os.PathLike) -> list[str]:
    """The header of a CSV, read by the kit's CSV rules (:func:`read_csv_strings`).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: not a readable UTF-8 CSV (the file named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return list(read_csv_strings(path, nrows=0).columns)


def read_csv_strings(path: str | os.PathLike, *, usecols: list[str] | None = None, nrows: int | None = None,
                     chunk_rows: int | None = None):
    """Read a CSV by the kit's one set of CSV rules, whatever the file's size.

    The rules: pandas' C parser (RFC 4180 quoting), UTF-8, every field kept as its exact string
    (``dtype=str``, no NA parsing), blank lines skipped. Every CSV of the competition is read through
    here, so a file one reader accepts is never unreadable to another.

    Args:
        path: the CSV.
        usecols: only these columns (the others are parsed, then dropped).
        nrows: only the first ``nrows`` data rows.
        chunk_rows: None: one DataFrame; else an iterator of DataFrames of at most this many rows
            (the index counts data rows from 0 over the whole file).

    Raises:
        ValueError: not a readable UTF-8 CSV, naming the file (with ``chunk_rows``, raised while
            iterating).
    """
    kw = dict(dtype=str, keep_default_na=False, encoding="utf-8", usecols=usecols, nrows=nrows)
    if chunk_rows is None:
        try:
            return pd.read_csv(path, **kw)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a readable UTF-8 CSV ({e})") from None
    return _csv_chunks(path, kw, chunk_rows)


def _csv_chunks(path, kw: dict, chunk_rows: int) -> Iterator[pd.DataFrame]:
    try:
        with pd.read_csv(path, chunksize=chunk_rows, **kw) as reader:
            yield from reader
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable UTF-8 CSV ({e})") from None


def kit_id_copy(path: str | os.PathLike, id_col: str, folder: str | os.PathLike) -> Path:
    """``path`` itself when its id column is the kit's (``id_col == "id"``); else a copy of it in
    ``folder`` whose column ``id_col`` is named ``id``, every other column and string as written.

    The notebooks' ``id_col`` parameter goes through here once, so every reader after (splits,
    folds, the replicas, the merge) reads the kit's ``id``.

    Raises:
        FileNotFoundError: no ``path``.
        ValueError: no column ``id_col`` (the columns found named), or the file also has an ``id``
            column (which of the two is the id would be ambiguous).
    """
    path = Path(path)
    if id_col == KIT_ID:
        return path
    columns = csv_columns(path)
    if id_col not in columns:
        raise ValueError(f"{path}: no id column {id_col!r} (id_col; found {', '.join(columns)})")
    if KIT_ID in columns:
        raise ValueError(f"{path}: has both {id_col!r} (id_col) and {KIT_ID!r} columns; pass id_col={KIT_ID!r}, "
                         f"or drop one of them")
    out = Path(folder) / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    read_csv_strings(path).rename(columns={id_col: KIT_ID}).to_csv(out, index=False)
    return out


def read_ids(path: str | os.PathLike, id_col: str = "id") -> np.ndarray:
    """object ``[num_rows]``: the id column as exact strings, in file order, by the kit's CSV rules.

    Raises:
        FileNotFoundError: no such file. ValueError: unreadable, or no ``id_col`` column (file named).
    """
    columns = csv_columns(path)
    if id_col not in columns:
        raise ValueError(f"{path}: missing column {id_col!r} (found {', '.join(columns)})")
    # in chunks: one call holds the whole file's parsed text (about its size) while it keeps one column
    chunks = [c[id_col].to_numpy(object) for c in read_csv_strings(path, usecols=[id_col], chunk_rows=CHUNK_ROWS)]
    return np.concatenate(chunks) if chunks else np.zeros(0, object)


def check_unique_ids(ids, path, id_col: str = "id") -> None:
    """Refuse a repeated id, naming the first one (in file order) and every data row (1-based) holding it.

    Args:
        ids: the whole id column, as strings (a sequence, ``pandas.Series`` or pyarrow array).

    Raises:
        ValueError: ``{path}: id '7' repeated at data rows [1, 3]``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = ids if isinstance(ids, (pa.Array, pa.ChunkedArray)) else pa.array(list(ids), pa.string())
    if len(ids) == 0 or pc.count_distinct(ids).as_py() == len(ids):
        return
    counts = pc.value_counts(ids)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    first = ids.filter(pc.is_in(ids, value_set=repeated))[0].as_py()
    rows = (np.flatnonzero(pc.equal(ids, first).to_numpy(zero_copy_only=False)) + 1).tolist()
    raise ValueError(f"{path}: id {first!r} repeated at data rows {rows}")


def iter_csv_checked(
    path: str | os.PathLike,
    *,
    id_col: str = "id",
    text_col: str | None = None,
    label_cols: tuple[str, ...] = (),
    limit: int | None = None,
    chunk_rows: int = CHUNK_ROWS,
    fields: tuple[str, ...] = (),
) -> Iterator[pd.DataFrame]:
    """:func:`read_csv_checked`, chunk by chunk: the same checks, the same columns.

    Memory holds one chunk's fields plus the ids seen so far (packed as one pyarrow string
    array), never the whole file's texts. Each chunk's index counts data rows from 0 over the
    whole file. The repeated-id check needs every id: it runs after the last chunk, so take every
    chunk before trusting any.

    Raises:
        as :func:`read_csv_checked`; a bad chunk stops the iteration with the row named.
    """
    import pyarrow as pa

    path = Path(path)
    columns = csv_columns(path)
    if text_col is None:
        text_col = next((c for c in TEXT_COLUMNS if c in columns), None)
        if text_col is None:
            raise ValueError(f"{path}: no text column (looked for {', '.join(TEXT_COLUMNS)}; found {', '.join(columns)})")
    for col in (id_col, text_col, *label_cols, *fields):
        if col not in columns:
            what = {id_col: "id_col", text_col: "text_col", **dict.fromkeys(fields, "prompt")}.get(col, "label_col")  # the notebooks' parameter naming it
            raise ValueError(f"{path}: missing column {col!r} (found {', '.join(columns)}); name the file's column "
                             f"with the {what} parameter (docs/own-data.md)")
    seen, total = [], 0
    for df in read_csv_strings(path, usecols=list(dict.fromkeys([id_col, text_col, *label_cols, *fields])), nrows=limit,
                               chunk_rows=chunk_rows):
        ids = df[id_col]
        blank = ids.str.strip() == ""
        if blank.any():
            rows = (np.flatnonzero(blank.to_numpy()) + total + 1).tolist()[:5]
            raise ValueError(f"{path}: blank {id_col!r} at data row(s) {rows}")
        out = pd.DataFrame({"id": ids, "text": df[text_col], **{f"field:{c}": df[c] for c in fields}})
        for col in label_cols:
            vals = pd.to_numeric(df[col], errors="coerce")
            bad = vals.isna() | (vals < 0) | (vals > 1)
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raise ValueError(f"{path}: column {col!r} at data row {total + i + 1} is {df[col].iloc[i]!r}, "
                                 "not a number in [0, 1]")
            out[col] = vals.astype(np.float32)
        seen.append(pa.array(ids.to_numpy(object), pa.string()))
        total += len(df)
        yield out
    if total == 0:
        raise ValueError(f"{path}: no data rows")
    check_unique_ids(pa.chunked_array(seen, pa.string()), path, id_col)


def read_csv_checked(
    path: str | os.PathLike,
    *,
    id_col: str = "id",
    text_col: str | None = None,
    label_cols: tuple[str, ...] = (),
    limit: int | None = None,
    fields: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Read a competition CSV and check the fields the kit relies on.

    Parsed by the kit's CSV rules (:func:`read_csv_strings`); :func:`iter_csv_checked` gives the
    same frames chunk by chunk.

    Args:
        path: the CSV (UTF-8; quoted fields may span lines).
        id_col: the id column, kept as exact strings.
        text_col: the text column; None picks the first of ``content``, ``comment_text``, ``text``.
        label_cols: label columns that must be present, numeric and in [0, 1].
        limit: keep only the first ``limit`` rows (for quick runs).
        fields: columns a model kind reads from each row besides its text
            (:meth:`kitlib.models.kinds.Kind.row_columns`), kept as strings (:func:`row_fields`).

    Returns:
        A DataFrame with columns ``id`` (str), ``text`` (str; blank text becomes ``""``), the
        label columns (float32) and ``field:<name>`` per field (str), in file order, with a fresh 0-based index.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: not a readable UTF-8 CSV, a column is missing, an id is blank or repeated, or a
            label is not a number in [0, 1]; the message names the file, the column and the data
            row (1-based, header not counted).
    """
    chunks = list(iter_csv_checked(path, id_col=id_col, text_col=text_col, label_cols=label_cols, limit=limit,
                                   fields=fields))
    return pd.concat(chunks, ignore_index=True) if len(chunks) > 1 else chunks[0].reset_index(drop=True)


def row_fields(df: pd.DataFrame) -> list[dict] | None:
    """The ``field:<name>`` columns of a checked frame (:func:`read_csv_checked`) as one ``{name: value}`` per row,
    what :meth:`kitlib.models.kinds.Kind.encode` takes as ``rows``; None when there are none."""
    cols = [c for c in df.columns if c.startswith("field:")]
    return df[cols].rename(columns=lambda c: c[6:]).to_dict("records") if cols else None


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
        for b in range(1, m):  # the last bucket takes candidates a+1..b; the first a+1 by k-1 buckets (vectorised over a)
            c = best[k - 1][:b] + (cands[b] * (ccnt[b + 1] - ccnt[1 : b + 1]) - (ctot[b + 1] - ctot[1 : b + 1]))
            a = int(np.argmin(c))
            if c[a] < best[k][b]:
                best[k][b], back[k][b] = c[a], a
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


def token_lengths(tokenizer, texts: list[str], max_len: int, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
    """int64 ``[len(texts)]``: tokens per text after truncation to ``max_len``, special tokens included."""
    return np.concatenate([_encode(tokenizer, texts[s : s + chunk_rows], max_len)[0]
                           for s in range(0, len(texts), chunk_rows)] or [np.zeros(0, np.int64)])


def _encode(tokenizer, texts: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """One tokenizer call: (int64 ``[len(texts)]`` lengths, int32 ``[sum(lengths)]`` packed ids).

    transformers' per-row encodings live only inside this call, for at most a chunk of rows.
    """
    enc = tokenizer(list(texts), truncation=True, max_length=max_len, return_attention_mask=False,
                    return_token_type_ids=False)["input_ids"]
    lengths = np.fromiter((len(x) for x in enc), dtype=np.int64, count=len(enc))
    ids = np.fromiter(itertools.chain.from_iterable(enc), dtype=np.int32, count=int(lengths.sum()))
    return lengths, ids


@dataclass(frozen=True)
class Tokens:
    """Every row of a text column tokenized once (truncated to ``max_len``, not padded), packed flat.

    Attributes:
        ids: int32 ``[total_tokens]``: the rows' token ids one after another (4 bytes a token; a
            read-only memory map when loaded from a folder, shared by every replica that loads it).
        offsets: int64 ``[num_rows + 1]``: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.
        pad_id: the tokenizer's padding id.
        filler: int32 ``[k]``: the ids of an empty text (``<s></s>``), for filler slots of a last batch.
    """

    ids: np.ndarray
    offsets: np.ndarray
    pad_id: int
    filler: np.ndarray

    IDS, OFFSETS, META = "ids.int32", "offsets.npy", "meta.json"  # the files of a saved folder

    @property
    def lengths(self) -> np.ndarray:
        """int64 ``[num_rows]``: tokens per row."""
        return np.diff(self.offsets)

    @property
    def num_rows(self) -> int:
        return len(self.offsets) - 1

    def save(self, folder: str | os.PathLike) -> None:
        """Write to ``folder`` (created): ``ids.int32`` (raw little-endian int32), ``offsets.npy``, ``meta.json``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.asarray(self.ids, dtype="<i4").tofile(folder / self.IDS)
        _save_index(folder, self.offsets, self.pad_id, self.filler)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "Tokens":
        """Read what :meth:`save` or :func:`tokenize_csv` wrote; ``ids`` is memory-mapped (read-only)."""
        folder = Path(folder)
        meta = json.loads((folder / cls.META).read_text())
        offsets = np.load(folder / cls.OFFSETS)
        n = int(offsets[-1])
        ids = np.memmap(folder / cls.IDS, dtype="<i4", mode="r", shape=(n,)) if n else np.zeros(0, np.int32)
        return cls(ids, offsets, int(meta["pad_id"]), np.asarray(meta["filler"], dtype=np.int32))


def _save_index(folder: Path, offsets: np.ndarray, pad_id: int, filler: np.ndarray) -> None:
    np.save(folder / Tokens.OFFSETS, np.asarray(offsets, dtype=np.int64))
    (folder / Tokens.META).write_text(json.dumps({"pad_id": int(pad_id), "filler": [int(t) for t in filler]}))


def _filler(tokenizer, max_len: int) -> np.ndarray:
    return np.asarray(tokenizer("", truncation=True, max_length=max_len)["input_ids"], dtype=np.int32)


def _offsets(lengths: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.concatenate(lengths or [np.zeros(0, np.int64)]))]).astype(np.int64)


def tokenize(tokenizer, texts: list[str], max_len: int, chunk_rows: int = CHUNK_ROWS) -> Tokens:
    """Tokenize ``texts`` once, truncated to ``max_len`` (special tokens included), for every replica.

    The same ids as ``tokenizer(text, truncation=True, max_length=L, padding="max_length")`` gives
    for any padded length ``L`` that holds the row (right padding with ``pad_token_id``). Works
    ``chunk_rows`` rows at a time (:data:`CHUNK_ROWS`), keeping only the packed ids: the same
    tokens as one call over every row, without transformers' per-row lists for the whole set.
    """
    parts = [_encode(tokenizer, texts[s : s + chunk_rows], max_len) for s in range(0, len(texts), chunk_rows)]
    ids = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32)
    return Tokens(ids, _offsets([p[0] for p in parts]), int(tokenizer.pad_token_id), _filler(tokenizer, max_len))


def tokenize_csv(tokenizer, path: str | os.PathLike, folder: str | os.PathLike, max_len: int, *,
                 text_col: str | None = None, chunk_rows: int = CHUNK_ROWS, prefix: str = "", encode=None,
                 fields: tuple[str, ...] = (), id_col: str = "id") -> Tokens:
    """Read ``path`` (:func:`iter_csv_checked`) and tokenize it chunk by chunk into ``folder``.

    What :func:`tokenize` gives for the file's text column, written as :meth:`Tokens.save` writes it,
    with bounded memory (one chunk at a time; the packed ids go to ``folder`` as they come). ``prefix``
    is put before every text (:func:`kitlib.checkpoint.text_prefix`). ``encode``: None (the tokenizer),
    or a callable ``(texts, rows) -> (lengths, ids)`` (:meth:`kitlib.models.kinds.Kind.packed`, ``rows``
    each row's ``fields``: :func:`row_fields`); the filler slot is then the empty text's row with the
    first row's fields.

    Returns:
        ``Tokens.load(folder)`` (ids memory-mapped, not read back into memory).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_csv_checked` (file, row and field named);
            nothing is left in ``folder`` then.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lengths, first = [], None
    try:
        with open(folder / Tokens.IDS, "wb") as f:
            for chunk in iter_csv_checked(path, text_col=text_col, chunk_rows=chunk_rows, fields=fields, id_col=id_col):
                texts, rows = [prefix + t for t in chunk["text"].tolist()], row_fields(chunk)
                n, ids = _encode(tokenizer, texts, max_len) if encode is None else encode(texts, rows)
                ids.astype("<i4", copy=False).tofile(f)
                lengths.append(n)
                first = first or (rows or [None])[:1]
        filler = _filler(tokenizer, max_len) if encode is None else encode([prefix], first if fields else None)[1]
        _save_index(folder, _offsets(lengths), int(tokenizer.pad_token_id), filler)
    except BaseException:
        for name in (Tokens.IDS, Tokens.OFFSETS, Tokens.META):
            (folder / name).unlink(missing_ok=True)
        raise
    return Tokens.load(folder)


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
