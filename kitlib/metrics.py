"""ROC AUC, and why it is undefined: the one rule for labels of one class (torch-free).

A binary label column whose rows all hold one class cannot train a classifier (the model learns
a constant) and gives no ROC AUC (``sklearn.metrics.roc_auc_score`` raises; the kit reported
``nan``). Labels are 0/1 or soft labels in [0, 1]; a row counts as class 1 when its label is
>= 0.5 (the rule the Jigsaw competitions score with: toxic = 1 when at least half the raters said so).

Both sides use these functions: :mod:`kitlib.training.train` and the torch training notebook, and the
Keras notebook (through :mod:`kitlib.keras`), so the rule and its wording live here only.
"""
from __future__ import annotations

import numpy as np


def hard_labels(labels) -> np.ndarray:
    """int64 ``[n]``: 1 where ``labels`` (float ``[n]``, 0/1 or soft in [0, 1]) is >= 0.5, else 0."""
    return (np.asarray(labels, dtype=np.float64) >= 0.5).astype(np.int64)


def one_class_reason(labels, where: str, label_col: str = "toxic") -> str | None:
    """Why ``labels`` cannot train or score a binary classifier, or None when both classes are there.

    Args:
        labels: float ``[n]`` label values (0/1 or soft in [0, 1]).
        where: the file or slice they come from, as the message should name it (e.g.
            ``"train.csv (first 128 rows)"``).
        label_col: the label column's name.

    Returns:
        None when both classes occur; else one sentence naming ``where``, the row count, the class
        present and the class missing, e.g. ``"validation.csv (first 50 rows): all 50 rows have
        toxic = 0; no row has toxic = 1"``.
    """
    y = hard_labels(labels)
    if len(y) == 0:
        return f"{where}: no rows, so neither {label_col} = 0 nor {label_col} = 1"
    present = np.unique(y)
    if len(present) == 2:
        return None
    have = int(present[0])
    return f"{where}: all {len(y)} rows have {label_col} = {have}; no row has {label_col} = {1 - have}"


def check_two_classes(labels, where: str, label_col: str = "toxic") -> None:
    """Refuse to train on labels of one class (see :func:`one_class_reason`).

    Raises:
        ValueError: every label is one class (or there are none); the message names ``where``,
            the missing class and what to change.
    """
    reason = one_class_reason(labels, where, label_col)
    if reason is not None:
        raise ValueError(f"{reason}. A classifier trained on one class learns a constant; give rows of both "
                         "classes (a larger limit, another slice or file)")


def roc_auc(labels, probs) -> float:
    """``sklearn.metrics.roc_auc_score`` of :func:`hard_labels` of ``labels`` ``[n]`` and ``probs`` ``[n]``.

    Returns NaN when the labels hold one class (the AUC is undefined); :func:`auc_text` says why.
    """
    from sklearn.metrics import roc_auc_score

    y = hard_labels(labels)
    return float(roc_auc_score(y, np.asarray(probs))) if len(np.unique(y)) == 2 else float("nan")


def auc_gain_interval(labels, base, other, *, resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """The paired bootstrap interval of ``roc_auc(labels, other) - roc_auc(labels, base)`` on the same rows.

    Rows are drawn with replacement ``resamples`` times (seeded: the same interval every run), both models scored on
    each draw, and the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the differences returned (the
    percentile bootstrap; draws of one class are skipped). An interval that holds 0 says the rows cannot tell the two
    models apart: a gain of 0.005 on 500 rows with 88 positives usually does (make decoder prints it).

    Args:
        labels, base, other: ``[n]`` labels (:func:`hard_labels`' rule) and the two models' scores for the same rows.

    Returns:
        ``(low, high)``, floats.

    Raises:
        ValueError: the lengths differ, or the labels hold one class.
    """
    y, a, b = hard_labels(labels), np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if not len(y) == len(a) == len(b):
        raise ValueError(f"auc_gain_interval: {len(y)} labels, {len(a)} and {len(b)} scores: not the same rows")
    if len(np.unique(y)) < 2:
        raise ValueError("auc_gain_interval: the labels hold one class, so no ROC AUC")
    def auc(yi, scores):  # Mann-Whitney: ranks with ties averaged, as roc_auc_score counts a tie as half
        _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
        ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # 1-based, a tie's average
        pos = int(yi.sum())
        return (ranks[yi == 1].sum() - pos * (pos + 1) / 2) / (pos * (len(yi) - pos))

    rng = np.random.default_rng(seed)
    gains = []
    for _ in range(resamples):
        i = rng.integers(0, len(y), len(y))
        if 0 < y[i].sum() < len(i):
            gains.append(auc(y[i], b[i]) - auc(y[i], a[i]))
    low, high = np.quantile(gains, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def auc_text(labels, probs, where: str, label_col: str = "toxic") -> tuple[float, str]:
    """``(roc_auc, text)``: the AUC and how to print it, ``"0.8123"`` or ``"undefined (<reason>)"``.

    Args:
        labels, probs: as for :func:`roc_auc`.
        where: the set scored (a file, a slice, a language), named in the reason.
        label_col: the label column's name.
    """
    auc = roc_auc(labels, probs)
    reason = one_class_reason(labels, where, label_col)
    return auc, (f"{auc:.4f}" if reason is None else f"undefined ({reason})")


def slice_name(path, limit: int | None = None) -> str:
    """How messages name a CSV read with ``limit``: ``"<path>"`` or ``"<path> (first <limit> rows)"``."""
    return f"{path}" + (f" (first {limit} rows)" if limit else "")
