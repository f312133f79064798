"""Blend submissions into one: a weighted mean of their predictions, or of their ranks.

``python -m kitlib blend A.csv B.csv ... -o submission.csv [--weights 2 1] [--rank] [--sample-submission FILE]``

For ROC AUC rank averaging is the common choice (AUC depends only on the order). With ``--rank`` each
file's column is replaced by its rank divided by the row count (ties share their average rank), so
blended values lie in (0, 1].

The guarantees are the merger's (:mod:`kitlib.outputs.merge`): every input holds exactly the same ids
(exact strings), each once, and the same prediction columns; every value is a finite number; rows come
in the sample submission's order (without one, the first file's); anything else is refused and nothing
is written. The output is written through :func:`kitlib.outputs.provenance.write_recorded`.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import NamedTuple
from pathlib import Path

from .collapse import CollapsedModelError, CollapsedPredictionWarning, check_predictions
from ..storage import normalise

_SHOW = 5  # ids shown in a message


class BlendError(ValueError):
    """Inputs that cannot give a correct blended submission (the message names file, column and ids)."""


@dataclass(frozen=True)
class BlendResult:
    """What :func:`blend` wrote: ``output``, ``num_rows``, ``columns`` (predictions), ``weights`` (normalised, per input), ``rank``."""

    output: Path
    num_rows: int
    columns: tuple[str, ...]
    weights: tuple[float, ...]
    rank: bool
    replaced: str | None = None  # what the write replaced, when another writer's file (kitlib.outputs.provenance)
    notes: tuple[str, ...] = ()  # index columns dropped (kitlib.outputs.submission_csv), a collapse warning


def _preview(values, total: int | None = None) -> str:
    values = list(values)
    total = len(values) if total is None else total
    shown = ", ".join(repr(v) for v in values[:_SHOW])
    return shown + (f" and {total - _SHOW} more" if total > _SHOW else "")


def _read(path: Path, notes: list[str] | None = None, id_col: str = "id"):
    """One submission as a DataFrame (ids the exact strings of the file), read by the one reader of
    submission-like files (:func:`kitlib.outputs.submission_csv.read`): an index column (``Unnamed: 0``) is
    dropped, its note appended to ``notes``; the file's ``id_col`` is the frame's ``id``."""
    from . import submission_csv

    try:
        sub = submission_csv.read(path, id_col)
    except FileNotFoundError:
        raise BlendError(f"{path}: no such file") from None
    except submission_csv.SubmissionFileError as e:
        raise BlendError(str(e)) from None
    if notes is not None:
        notes.extend(n for n in sub.notes if n not in notes)
    df = sub.table.to_pandas()
    blank = df.index[df["id"].str.strip() == ""]
    if len(blank):
        raise BlendError(f"{path}: blank id in data row(s) {_preview([int(i) + 1 for i in blank])}")
    dup = df["id"][df["id"].duplicated()]
    if len(dup):
        raise BlendError(f"{path}: duplicate id(s) {_preview(dup.unique())}")
    return df


def _prediction_columns(ref_path: Path, ref) -> tuple[str, ...]:
    """The reference's prediction columns (:func:`kitlib.outputs.submission_csv.prediction_columns`)."""
    from . import submission_csv

    try:
        return submission_csv.prediction_columns(list(ref.columns), ref_path)
    except submission_csv.SubmissionFileError as e:
        raise BlendError(str(e)) from None


def _numbers(path: Path, df, column: str):
    import numpy as np
    import pandas as pd

    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        idx = np.flatnonzero(bad)
        raise BlendError(f"{path}: column {column!r}: {len(idx)} value(s) that are not finite numbers, for id(s) "
                         f"{_preview(df['id'].iloc[idx[:_SHOW]], len(idx))} (got {_preview(df[column].iloc[idx[:_SHOW]], len(idx))})")
    return values


def _aligned(path: Path, df, ref_path: Path, ref, columns: tuple[str, ...]) -> dict:
    """``df``'s prediction columns in ``ref``'s row order, after the checks every input passes:
    each column present, exactly ``ref``'s ids (each once: :func:`_read`), finite numbers.

    Raises:
        BlendError: naming the file, the column and the ids.
    """
    import pandas as pd

    missing_cols = [c for c in columns if c not in df.columns]
    if missing_cols:
        raise BlendError(f"{path}: no column(s) {', '.join(map(repr, missing_cols))} (columns of {ref_path}: "
                         f"{', '.join(ref.columns)})")
    ref_ids = pd.Index(ref["id"])
    pos = pd.Index(df["id"]).get_indexer(ref_ids)
    if (pos < 0).any():
        miss = ref_ids[pos < 0]
        raise BlendError(f"{path}: {len(miss)} id(s) of {ref_path} missing: {_preview(miss)}")
    if len(df) != len(ref_ids):
        extra = df["id"][~df["id"].isin(ref_ids)]
        raise BlendError(f"{path}: {len(extra)} id(s) not in {ref_path}: {_preview(extra)}")
    return {c: _numbers(path, df, c)[pos] for c in columns}


class Checked(NamedTuple):
    """What :func:`check_submission` found: ``rows``, ``columns`` (predictions), ``notes``."""

    rows: int
    columns: tuple[str, ...]
    notes: tuple[str, ...] = ()


def check_submission(path: str | os.PathLike, sample_submission: str | os.PathLike,
                     value_range: tuple[float, float] | None = (0.0, 1.0)) -> tuple[int, tuple[str, ...]]:
    """Check one submission file by the rules every blend input passes (the merger's guarantees),
    without writing anything: exactly the sample submission's ids, each once, no blank id; every
    prediction column of the sample submission; every value a finite number, and within
    ``value_range`` (the kit's predictions are probabilities; None: any finite value).

    Returns:
        :class:`Checked`: ``rows``, ``columns`` (the prediction columns), ``notes`` (an index column
        dropped: :mod:`kitlib.outputs.submission_csv`; the file itself is sent as it is).

    Raises:
        BlendError: naming the file, the column and the ids (or rows).
    """
    path, ref_path = Path(normalise(path)), Path(normalise(sample_submission))
    notes: list[str] = []
    df, ref = _read(path, notes), _read(ref_path, notes)
    columns = _prediction_columns(ref_path, ref)
    values = _aligned(path, df, ref_path, ref, columns)
    if value_range is not None:
        lo, hi = value_range
        for c, v in values.items():
            out = [i for i, x in enumerate(v) if not lo <= x <= hi]
            if out:
                ids = [ref["id"].iloc[i] for i in out]
                raise BlendError(f"{path}: column {c!r}: {len(out)} value(s) outside [{lo:g}, {hi:g}], for id(s) "
                                 f"{_preview(ids)} (got {_preview([float(v[i]) for i in out[:_SHOW]], len(out))})")
    return Checked(len(df), columns, tuple(notes))


def _weights(weights, n: int) -> tuple[float, ...]:
    if weights is None:
        return tuple([1.0 / n] * n)
    weights = [float(w) for w in weights]
    if len(weights) != n:
        raise BlendError(f"--weights: {len(weights)} weight(s) for {n} input file(s); give one per file")
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise BlendError(f"--weights: {weights}: each must be a finite number >= 0, and their sum > 0")
    return tuple(w / sum(weights) for w in weights)


def read_aligned(inputs: list[str | os.PathLike], sample_submission: str | os.PathLike | None = None, *,
                 expected=None, expected_name: str = "the expected rows", notes: list[str] | None = None,
                 id_col: str = "id"):
    """Read prediction files by the rules every blend input passes, in one row order.

    Args:
        inputs: submission-like CSVs, each read by :func:`kitlib.outputs.submission_csv.read`.
        sample_submission: its ids give the row order and must equal every input's; its columns other
            than ``id`` are the prediction columns. None: the first input's.
        expected: instead of ``sample_submission``, a DataFrame of the same shape (``id`` as strings +
            the prediction columns), named ``expected_name`` in messages (e.g. the held-out rows).
        notes: a list the readers' notes are appended to (an index column dropped).
        id_col: every file's id column (:mod:`kitlib.outputs.submission_csv`'s rule).

    Returns:
        ``(ids, columns, values)``: the reference ids (a ``pandas.Index`` of exact strings), the
        prediction columns, and per input ``{column: float64 [n]}`` in the ids' order.

    Raises:
        BlendError: an unreadable file, a missing column, a blank, repeated, missing or extra id, a value
            that is not a finite number; naming the file, the column and the ids.
    """
    import pandas as pd

    notes = [] if notes is None else notes
    paths = [Path(normalise(p)) for p in inputs]
    if not paths:
        raise BlendError("no prediction file given")
    frames = [_read(p, notes, id_col) for p in paths]
    if expected is not None:
        ref_path, ref = expected_name, expected
    elif sample_submission is not None:
        ref_path = Path(normalise(sample_submission))
        ref = _read(ref_path, notes, id_col)
    else:
        ref_path, ref = paths[0], frames[0]
    columns = _prediction_columns(ref_path, ref)  # the sample submission's (kitlib.outputs.submission_csv)
    return pd.Index(ref["id"]), columns, [_aligned(p, df, ref_path, ref, columns) for p, df in zip(paths, frames)]


def blend(inputs: list[str | os.PathLike], output: str | os.PathLike, *, weights=None, rank: bool = False,
          sample_submission: str | os.PathLike | None = None, collapsed: str | None = None,
          id_col: str = "id") -> BlendResult:
    """Write the weighted mean of ``inputs``' predictions (or of their ranks) to ``output``.

    Args:
        inputs: two or more submission CSVs (``id`` + prediction columns).
        output: the CSV to write (``id`` + the prediction columns, as float64 text).
        weights: one weight >= 0 per input (normalised to sum to 1); None: equal weights.
        rank: blend each column's rank / row count instead of the values (see the module docstring).
        sample_submission: its ids give the row order and must equal every input's id set;
            its columns other than ``id`` are the prediction columns.
        collapsed: ``"warn"``, ``"refuse"`` or None (:func:`kitlib.outputs.collapse.check_predictions`).
        id_col: the id column of every input, the sample and ``output`` (:mod:`kitlib.outputs.submission_csv`).

    Returns:
        :class:`BlendResult`.

    Raises:
        BlendError: fewer than two inputs; bad weights; an input that fails :func:`read_aligned`; blended
            predictions that barely vary, under the ``"refuse"`` policy. Nothing is written.
        OSError: ``output`` cannot be written (an existing file is left as it was).
    """
    import numpy as np
    import pandas as pd

    from . import provenance

    paths = [Path(normalise(p)) for p in inputs]
    if len(paths) < 2:
        raise BlendError(f"blend needs two or more submissions, got {len(paths)}")
    w = _weights(weights, len(paths))
    notes: list[str] = []
    ref_ids, columns, aligned = read_aligned(paths, sample_submission, notes=notes, id_col=id_col)
    total = {c: np.zeros(len(ref_ids)) for c in columns}
    for values, weight in zip(aligned, w):
        for c in columns:
            v = values[c]
            if rank:
                v = pd.Series(v).rank(method="average").to_numpy() / len(v)
            total[c] += weight * v
    output = Path(normalise(output))
    try:  # the one collapse rule (kitlib.outputs.collapse.check_predictions): a blend of collapsed files is one too
        warning = check_predictions(total, str(output), policy=collapsed,
                                    data_files=(sample_submission,) if sample_submission is not None else ())
    except CollapsedModelError as e:
        raise BlendError(str(e)) from e
    if warning:
        notes.append(warning)
        warnings.warn(warning, CollapsedPredictionWarning, stacklevel=2)
    out = pd.DataFrame({id_col: ref_ids.to_numpy(), **total})
    replaced = provenance.write_recorded(output, lambda tmp: out.to_csv(tmp, index=False, float_format="%.9g"),
                                         writer=provenance.BLEND, source=f"blend of {', '.join(map(str, paths))}",
                                         rows=len(out), runs=[r for p in paths for r in provenance.recorded_runs(p, say=notes.append)])
    return BlendResult(output, len(out), columns, w, rank, replaced, tuple(notes))
