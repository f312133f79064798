"""The training notebooks' figures: the held-out ROC curve, a torch run's curves (:func:`plot_run`), and the figure
file saved beside the checkpoint.

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


def plot_run(history: dict, job, heldout_name: str = "held-out"):
    """The torch training notebook's figure of a run: the loss (the master's step loss, each epoch's training and
    validation loss), the held-out ROC AUC per epoch with the kept one starred, and the kept epoch's ROC curve
    (:func:`plot_roc`) on the held-out rows (``job.valid_csv`` against :data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`).

    Args:
        history: what :func:`kitlib.training.train.train` returned.
        job: the run's :class:`kitlib.training.job.TrainJob`.
        heldout_name: what the held-out rows are called (:data:`kitlib.cv.heldout.HELDOUT_NAMES`).

    Returns:
        The matplotlib figure (three axes), for :func:`save_figure`.
    """
    import matplotlib.pyplot as plt
    import pandas as pd

    from ..checkpoint import VALID_PREDICTIONS_FILE, kept_epoch
    from ..data import read_csv_checked

    epochs = pd.DataFrame(history["epochs"]).set_index("epoch")
    best = kept_epoch(history)
    fig, (ax_loss, ax_auc, ax_roc) = plt.subplots(1, 3, figsize=(16, 3.8))
    if history["step_loss"]:
        steps, losses = zip(*history["step_loss"])
        ax_loss.plot(steps, losses, ".-", alpha=0.5, label="step loss (master)")
    per_epoch = [e * history["steps_per_epoch"] for e in epochs.index]
    ax_loss.plot(per_epoch, epochs["train_loss"], "o-", label="train loss (all replicas)")
    ax_loss.plot(per_epoch, epochs["valid_loss"], "s-", label="validation loss")
    ax_loss.set(xlabel="step", ylabel="binary cross-entropy", title="Loss")
    ax_loss.legend()
    ax_auc.plot(epochs.index, epochs["valid_auc"], "o-")
    ax_auc.plot([best["epoch"]], [best["valid_auc"]], "*", markersize=14, label=f"kept (epoch {best['epoch']})")
    ax_auc.legend()
    ax_auc.set(xlabel="epoch", ylabel="ROC AUC", title="Validation ROC AUC", xticks=list(epochs.index))
    kept = pd.read_csv(Path(job.out_dir) / VALID_PREDICTIONS_FILE, dtype={"id": str}, keep_default_na=False)
    truth = read_csv_checked(job.valid_csv, text_col=job.text_col, label_cols=(job.label_col,), limit=job.valid_limit)
    kept = kept.merge(truth[["id", job.label_col]].rename(columns={job.label_col: "truth"}), on="id")
    plot_roc(ax_roc, kept["truth"], kept[job.label_col], name=f"{heldout_name}, epoch {best['epoch']}")
    fig.tight_layout()
    return fig
