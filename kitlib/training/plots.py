"""The training notebooks' figures: the held-out ROC curve, and the figure file saved beside the checkpoint.

Both training notebooks (torch: ``xla_ddp_train``; Keras: ``keras_xlmr_train``) draw their curves
(loss and ROC AUC per epoch) and the held-out rows' ROC curve (:func:`plot_roc`) in one figure
and save it as :data:`CURVES_FILE` next to the checkpoint (:func:`save_figure`): inside the torch
checkpoint folder, beside the Keras model file. matplotlib and scikit-learn are imported here only.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

CURVES_FILE = "curves.png"


def plot_roc(ax, labels, probs, *, name: str = "held-out") -> float | None:
    """Draw the ROC curve of ``probs`` against ``labels`` on the matplotlib axes ``ax``.

    Args:
        ax: a matplotlib ``Axes``.
        labels: int or bool ``[n]``, 1 for the positive class (toxic).
        probs: float ``[n]``, the predicted probability of the positive class.
        name: what the rows are, for the legend and title (e.g. ``"held-out English"``).

    Returns:
        The ROC AUC (``sklearn.metrics.roc_auc_score``), or None when ``labels`` hold one class:
        the curve is undefined then, and the axes say so instead of drawing one.

    Raises:
        ValueError: ``labels`` and ``probs`` differ in length.
    """
    from sklearn.metrics import roc_auc_score, roc_curve

    y, p = np.asarray(labels).astype(int).ravel(), np.asarray(probs, dtype=np.float64).ravel()
    if len(y) != len(p):
        raise ValueError(f"plot_roc: {len(y)} labels but {len(p)} predictions")
    ax.plot([0, 1], [0, 1], ":", color="grey", label="chance")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title=f"ROC curve ({name})",
           xlim=(0, 1), ylim=(0, 1.01))
    if len(np.unique(y)) < 2:
        ax.text(0.5, 0.5, f"undefined: {len(y)} rows, one class only", ha="center", va="center")
        return None
    fpr, tpr, _ = roc_curve(y, p)
    auc = float(roc_auc_score(y, p))
    ax.plot(fpr, tpr, "-", label=f"{name}: AUC {auc:.4f} ({len(y)} rows)")
    ax.legend(loc="lower right")
    return auc


def save_figure(fig, folder: str | os.PathLike, name: str = CURVES_FILE) -> Path:
    """Save ``fig`` as PNG to ``folder/name``, atomically (:func:`kitlib.atomic.atomic_write`).

    Returns:
        The file written.
    """
    from ..atomic import atomic_write

    path = Path(folder) / name
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=80))
    return path
