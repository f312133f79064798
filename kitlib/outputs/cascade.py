"""A confidence cascade: model A scores every row, model B re-scores the rows A is least sure of.

``python -m kitlib cascade A.csv B.csv -o submission.csv --fraction 0.2 [--rule replace|mean|reorder]
[--weight 0.5] [--by probability|rank] [--center 0.5] [--sample-submission FILE]``

The point is the time saved: B (a bigger, slower model) runs only on the picked rows. A notebook
picks them from A's submission with :func:`pick_ids`, writes that subset of the test file with
:func:`write_picked_rows`, predicts it with B, and combines with :func:`cascade` (MAP 3rd and
18th, WSDM 7th; issue 32).

**Which rows** (:func:`uncertain_rows`): the ``ceil(fraction x rows)`` rows whose score is nearest
``center``, ties by row order. The score (:data:`SCORES`, ``by``):

* ``"probability"``: A's value itself, ``center`` 0.5: the rows with the smallest ``|p - 0.5|``,
  right for a calibrated probability;
* ``"rank"``: A's rank / row count (ties share their average rank), so the scale does not
  matter (a rank blend, an over-confident model); ``center`` is then a quantile: with a positive
  rate ``r``, ``center = 1 - r`` picks the rows around the boundary between the top ``r`` share
  and the rest.

With several prediction columns a row's uncertainty is its most uncertain column's, and every
column of a picked row is combined.

**How B's value enters** (:data:`RULES`, ``rule``), for the picked rows only (the others keep A's):

* ``"replace"``: B's value replaces A's (B must be on A's scale: both probabilities);
* ``"mean"``: ``(1 - weight) x A + weight x B``;
* ``"reorder"``: the picked rows keep A's values as a set, handed out in B's order (the row B
  scores lowest gets the lowest of those A values; ties by row order): B decides the order inside
  the uncertain band, A's scale is kept, so a cascade of two differently scaled kinds (an encoder's
  probabilities, a decoder's answer-token score) still ranks right for ROC AUC.

**B's file** holds exactly the picked rows, or every row of A (B scored them all; the others are
not used); anything else is refused naming B's file and the ids. Both files pass the blend's
checks (:func:`kitlib.outputs.blend.read_aligned`: the one reader, exact-string ids, each once,
finite numbers), the output the one collapse rule (:mod:`kitlib.outputs.collapse`), and it is
written atomically and recorded (:data:`kitlib.outputs.provenance.CASCADE`).
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .blend import BlendError, read_aligned
from .collapse import CollapsedModelError, CollapsedPredictionWarning, check_predictions
from ..storage import normalise

RULES = ("replace", "mean", "reorder")


def _rank_share(values: np.ndarray) -> np.ndarray:
    """float64 ``[n]``: rank / n, ties sharing their average rank (as the blend's ``--rank``)."""
    import pandas as pd

    return pd.Series(values).rank(method="average").to_numpy() / max(len(values), 1)


SCORES = {"probability": lambda v: np.asarray(v, dtype=np.float64), "rank": _rank_share}
"""How A's values are scored before the distance to ``center`` is taken (module docstring)."""


class CascadeError(BlendError):
    """Inputs or parameters that cannot give a correct cascade (the message names the file or the parameter)."""


def check_parameters(fraction: float, rule: str = "replace", weight: float = 0.5, by: str = "probability",
                     center: float = 0.5) -> None:
    """Refuse parameters the cascade cannot use.

    Raises:
        CascadeError: ``fraction`` not in (0, 1], ``weight`` or ``center`` not in [0, 1], or an
            unknown ``rule`` / ``by`` (naming the parameter, the value and what it takes).
    """
    try:
        fraction = float(fraction)
    except (TypeError, ValueError):
        raise CascadeError(f"fraction={fraction!r}: give the share of rows B re-scores, a number in (0, 1]") from None
    if not (math.isfinite(fraction) and 0 < fraction <= 1):
        raise CascadeError(f"fraction={fraction!r}: the share of rows B re-scores must be in (0, 1] (0.2: the least "
                           "certain fifth)")
    for name, v in (("weight", weight), ("center", center)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1):
            raise CascadeError(f"{name}={v!r} must be a number in [0, 1]")
    if rule not in RULES:
        raise CascadeError(f"rule={rule!r} is not one of {', '.join(map(repr, RULES))}")
    if by not in SCORES:
        raise CascadeError(f"by={by!r} is not one of {', '.join(map(repr, SCORES))}")


def uncertain_rows(values, fraction: float, *, by: str = "probability", center: float = 0.5) -> np.ndarray:
    """The rows B must re-score: the ``ceil(fraction x n)`` rows whose score is nearest ``center``.

    Args:
        values: float ``[n]`` or ``[n, columns]``: A's predictions (several columns: a row's most
            uncertain column counts).
        fraction: share of rows, in (0, 1].
        by: ``"probability"`` or ``"rank"`` (:data:`SCORES`).
        center: the score the least certain rows are nearest (0.5; a quantile for ``"rank"``).

    Returns:
        int64 row positions, ascending; ties in distance go to the earlier row.

    Raises:
        CascadeError: a parameter out of range (:func:`check_parameters`).
    """
    check_parameters(fraction, by=by, center=center)
    values = np.asarray(values, dtype=np.float64)
    values = values[:, None] if values.ndim == 1 else values
    n = len(values)
    distance = np.min([np.abs(SCORES[by](values[:, j]) - center) for j in range(values.shape[1])], axis=0) if n else []
    take = min(n, math.ceil(fraction * n - 1e-9))
    return np.sort(np.argsort(distance, kind="stable")[:take]).astype(np.int64)


def combine(a, b, rows, *, rule: str = "replace", weight: float = 0.5) -> np.ndarray:
    """A's values with B's entered for ``rows`` by ``rule`` (module docstring).

    Args:
        a: float ``[n]``: A's values, every row. b: float ``[m]``: B's values for ``rows``, in that order.
        rows: int ``[m]`` distinct row positions into ``a``.
        rule: ``"replace"``, ``"mean"`` or ``"reorder"`` (:data:`RULES`). weight: B's share for ``"mean"``.

    Returns:
        float64 ``[n]``; ``a`` is not changed.

    Raises:
        CascadeError: a bad ``rule`` or ``weight``, or ``b`` and ``rows`` of different lengths.
    """
    check_parameters(1.0, rule=rule, weight=weight)
    out = np.array(a, dtype=np.float64)
    rows, b = np.asarray(rows, dtype=np.int64), np.asarray(b, dtype=np.float64)
    if len(rows) != len(b):
        raise CascadeError(f"combine: {len(b)} B value(s) for {len(rows)} row(s); give one per picked row")
    if rule == "replace":
        out[rows] = b
    elif rule == "mean":
        out[rows] = (1 - weight) * out[rows] + weight * b
    else:  # reorder: A's values of these rows, handed out in B's order
        out[rows[np.argsort(b, kind="stable")]] = np.sort(out[rows], kind="stable")
    return out


def pick_ids(a_csv: str | os.PathLike, fraction: float, *, by: str = "probability", center: float = 0.5,
             sample_submission: str | os.PathLike | None = None):
    """The ids of the rows of A's submission that B must score (:func:`uncertain_rows`), in A's row order.

    Returns:
        ``pandas.Index`` of exact-string ids.

    Raises:
        BlendError: A's file fails the blend's checks (naming it). CascadeError: a bad parameter.
    """
    check_parameters(fraction, by=by, center=center)
    ids, columns, (a,) = read_aligned([a_csv], sample_submission)
    return ids[uncertain_rows(np.column_stack([a[c] for c in columns]), fraction, by=by, center=center)]


def write_picked_rows(test_csv: str | os.PathLike, ids, output: str | os.PathLike, id_col: str = "id") -> int:
    """Write the rows of ``test_csv`` whose id is in ``ids`` (file order kept, every field its exact string)
    to ``output``, atomically, so B's inference reads only them. Returns the row count.

    Raises:
        CascadeError: an id of ``ids`` not in ``test_csv`` (naming both), or ``test_csv`` without ``id_col``.
    """
    from ..data import read_csv_strings
    from ..storage import atomic_write

    df = read_csv_strings(test_csv)
    if id_col not in df.columns:
        raise CascadeError(f"{test_csv}: no {id_col!r} column (columns {', '.join(df.columns)})")
    wanted = set(map(str, ids))
    missing = wanted - set(df[id_col])
    if missing:
        raise CascadeError(f"{test_csv}: {len(missing)} picked id(s) not in the test file: {sorted(missing)[:5]}; "
                           "pick from the submission of this test file")
    keep = df[df[id_col].isin(wanted)]
    atomic_write(output, lambda tmp: keep.to_csv(tmp, index=False))
    return len(keep)


@dataclass(frozen=True)
class CascadeResult:
    """What :func:`cascade` wrote: ``output``, ``num_rows``, ``rescored`` (rows B entered), ``columns``, the parameters."""

    output: Path
    num_rows: int
    rescored: int
    columns: tuple[str, ...]
    fraction: float
    rule: str
    replaced: str | None = None  # another writer's submission replaced (kitlib.outputs.provenance)
    notes: tuple[str, ...] = ()


def _b_values(b_path: Path, ids, picked, columns, notes: list, what: str, id_col: str = "id") -> dict:
    """B's columns for the ``picked`` rows (positions into ``ids``), after the blend's checks: B holds
    exactly the picked ids, or exactly every id (module docstring). Raises BlendError naming B's file."""
    import pandas as pd

    from . import submission_csv

    try:
        b_ids = set(submission_csv.read(b_path, id_col).table.column("id").to_pylist())
    except (FileNotFoundError, submission_csv.SubmissionFileError) as e:
        raise CascadeError(str(e) if not isinstance(e, FileNotFoundError) else f"{b_path}: no such file") from None
    every = b_ids == set(ids)
    ref_rows = np.arange(len(ids)) if every else picked
    expected = pd.DataFrame({"id": ids[ref_rows], **{c: 0.0 for c in columns}})
    name = "A's rows" if every else what
    _, _, (b,) = read_aligned([b_path], expected=expected, expected_name=name, notes=notes, id_col=id_col)
    return {c: v[picked] for c, v in b.items()} if every else b


def cascade(a_csv: str | os.PathLike, b_csv: str | os.PathLike, output: str | os.PathLike, *, fraction: float,
            rule: str = "replace", weight: float = 0.5, by: str = "probability", center: float = 0.5,
            sample_submission: str | os.PathLike | None = None, collapsed: str | None = None,
            id_col: str = "id") -> CascadeResult:
    """Write A's predictions with B's entered for A's least certain ``fraction`` of rows.

    Args:
        a_csv: A's submission (every row). b_csv: B's, for the picked rows (or every row).
        output: the CSV to write (``id`` + the prediction columns, rows in A's, or the sample's, order).
        fraction, by, center: which rows (:func:`uncertain_rows`). rule, weight: how (:func:`combine`).
        sample_submission: row order and id set, as for the blend. collapsed, id_col: as for the blend.

    Returns:
        :class:`CascadeResult`.

    Raises:
        CascadeError / BlendError: a bad parameter; a file that fails the blend's checks; B's ids
            neither the picked rows nor every row (naming B's file and the ids); a collapsed result
            under ``"refuse"``. Nothing is written.
        OSError: ``output`` cannot be written (an existing file is left as it was).
    """
    import pandas as pd

    from . import provenance

    check_parameters(fraction, rule, weight, by, center)
    a_path, b_path, output = (Path(normalise(p)) for p in (a_csv, b_csv, output))
    notes: list[str] = []
    ids, columns, (a,) = read_aligned([a_path], sample_submission, notes=notes, id_col=id_col)
    picked = uncertain_rows(np.column_stack([a[c] for c in columns]), fraction, by=by, center=center)
    what = f"the {len(picked)} rows the cascade picked from {a_path} (fraction {fraction:g}, by {by})"
    b = _b_values(b_path, ids, picked, columns, notes, what, id_col)
    total = {c: combine(a[c], b[c], picked, rule=rule, weight=weight) for c in columns}
    try:
        warning = check_predictions(total, str(output), policy=collapsed,
                                    data_files=(sample_submission,) if sample_submission is not None else ())
    except CollapsedModelError as e:
        raise CascadeError(str(e)) from e
    if warning:
        notes.append(warning)
        warnings.warn(warning, CollapsedPredictionWarning, stacklevel=2)
    out = pd.DataFrame({id_col: ids.to_numpy(), **total})
    runs = [r for p in (a_path, b_path) for r in provenance.recorded_runs(p, say=notes.append)]
    replaced = provenance.write_recorded(
        output, lambda tmp: out.to_csv(tmp, index=False, float_format="%.9g"), writer=provenance.CASCADE,
        source=f"cascade: {a_path} on every row, {b_path} on {len(picked)} ({fraction:g}, by {by}, rule {rule})",
        rows=len(out), runs=runs)
    return CascadeResult(output, len(out), len(picked), columns, float(fraction), rule, replaced, tuple(notes))
