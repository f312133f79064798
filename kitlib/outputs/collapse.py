"""Predictions that barely vary: a collapsed model, caught before its output is trusted.

A fine-tune whose learning rate is too high can end predicting nearly the same probability for every
row (issue 18). Such a model must neither be called ready nor give a submission without a word:

* :func:`check_ready` (the training notebook's hand-off): refuses a checkpoint whose held-out ROC
  AUC is at most :data:`MIN_AUC` or whose held-out predictions barely vary (:func:`barely_varies`),
  unless :func:`refuses_collapse` (the hand-off rule, one function) says its recipe is random on purpose.
* :func:`check_predictions`, the one decision every writer of a submission calls (the torch
  inference notebook and the Keras notebook through :func:`kitlib.outputs.merge.merge_shards`,
  ``python -m kitlib merge``, ``python -m kitlib blend``): a loud warning, or a refusal;
  :func:`policy_for` says which: a warning only where chance-level output is expected (the
  ``tiny-random`` model named on purpose, or the bundled sample, recognised by content:
  :mod:`kitlib.sample`); anything else is refused.

"Barely vary": the standard deviation of the predictions is below :data:`MIN_STD` (0.005); a working
classifier spreads them over tenths.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

MIN_STD = 0.005
MIN_AUC = 0.5
POLICIES = ("warn", "refuse")  # what a submission that barely varies gets


class CollapsedModelError(ValueError):
    """A model whose predictions say nothing: held-out AUC at or below chance, or no spread."""


def spread(probs) -> dict:
    """Summary of predictions ``probs`` (float ``[n]``): ``rows``, ``std``, ``iqr``, ``min``, ``max``, ``distinct``."""
    p = np.asarray(probs, dtype=np.float64)
    if p.size == 0:
        return {"rows": 0, "std": 0.0, "iqr": 0.0, "min": float("nan"), "max": float("nan"), "distinct": 0}
    q1, q3 = np.quantile(p, [0.25, 0.75])
    return {"rows": int(p.size), "std": float(p.std()), "iqr": float(q3 - q1), "min": float(p.min()),
            "max": float(p.max()), "distinct": int(np.unique(p).size)}


def barely_varies(probs) -> bool:
    """True when the predictions' standard deviation is below :data:`MIN_STD`."""
    return spread(probs)["std"] < MIN_STD


def _describe(s: dict) -> str:
    return (f"std {s['std']:.2g}, interquartile range {s['iqr']:.2g}, from {s['min']:.6g} to {s['max']:.6g} "
            f"over {s['rows']:,} rows")


RANDOM_RECIPE = "tiny"  # the recipe of the random tiny model (tests, rehearsals): collapsed on purpose


def refuses_collapse(recipe: str | None, random_on_purpose: bool = False) -> bool:
    """The hand-off rule: whether a collapsed model trained with ``recipe`` is refused (``check_ready(refuse=...)``).

    Every recipe but :data:`RANDOM_RECIPE` is; the random tiny model gets a warning instead, and so does a
    run of it asked for by name (``random_on_purpose``: ``model="tiny-random"``) under another recipe (LoRA's).
    """
    return recipe != RANDOM_RECIPE and not random_on_purpose


def check_ready(auc: float, probs, *, lr: float | None = None, recipe: str | None = None, what: str = "held-out",
                refuse: bool = True) -> dict:
    """Refuse to call a checkpoint ready when its held-out predictions say nothing.

    Args:
        auc: ROC AUC on the held-out rows (NaN when they hold one class only: not refused here).
        probs: the held-out predictions, float ``[n]``.
        lr, recipe: the run's learning rate and recipe, named in the message as the likely cause.
        what: what the rows are, for the message.
        refuse: False for a model that is random on purpose (:func:`refuses_collapse`: the ``tiny``
            recipe of tests and rehearsals): the problem is returned instead of raised.

    Returns:
        :func:`spread` of ``probs`` (for the notebook to print), with ``problem``: None, or (with
        ``refuse=False``) the message that would have been raised, starting ``WARNING``.

    Raises:
        CollapsedModelError: ``auc <= MIN_AUC`` or :func:`barely_varies`; the message names the
            figure and the likely cause.
    """
    s = spread(probs)
    cause = (f"the likely cause is a learning rate too high for a pretrained model (lr={lr:g}"
             + (f", recipe {recipe!r}" if recipe else "") + "): train again with lr=0, the recipe's rate "
             "(kitlib.training.recipe), or lower it" if lr is not None else "the likely cause is a learning rate too high")
    problems = []
    if auc == auc and auc <= MIN_AUC:
        problems.append(f"its {what} ROC AUC is {auc:.4f}, no better than chance (<= {MIN_AUC})")
    if s["std"] < MIN_STD:
        problems.append(f"its {what} predictions barely vary ({_describe(s)}; a working model's std is above {MIN_STD})")
    s["problem"] = None
    if problems:
        msg = f"checkpoint not ready: {'; '.join(problems)}. The model has collapsed; {cause}."
        if refuse:
            raise CollapsedModelError(msg)
        s["problem"] = "WARNING: " + msg + " (not refused: a random model on purpose)"
    return s


def check_checkpoint_ready(out_dir: str | os.PathLike, *, id_col: str = "id") -> dict:
    """:func:`check_ready` on a trained checkpoint folder's own record of its held-out rows.

    Reads ``train_history.json`` (the last epoch's ``valid_auc``, the run's ``lr`` and recipe) and
    ``valid_predictions.csv`` (the in-memory model's last-epoch predictions), as
    :func:`kitlib.checkpoint.save_checkpoint` wrote them.

    Args:
        out_dir: the checkpoint folder.
        id_col: the id column of ``valid_predictions.csv`` (the other column is the prediction).

    Raises:
        FileNotFoundError: the folder lacks either file.
        CollapsedModelError: see :func:`check_ready`.
    """
    import pandas as pd

    from ..checkpoint import HISTORY_FILE, VALID_PREDICTIONS_FILE

    out_dir = Path(out_dir)
    history = json.loads((out_dir / HISTORY_FILE).read_text())

    preds = pd.read_csv(out_dir / VALID_PREDICTIONS_FILE, dtype={id_col: str}, keep_default_na=False)
    column = next(c for c in preds.columns if c != id_col)
    config = history.get("config", {})
    return check_ready(history["epochs"][-1]["valid_auc"], preds[column].to_numpy(), lr=config.get("lr"),
                       recipe=config.get("recipe"), refuse=refuses_collapse(config.get("recipe")))


SAMPLE_ROWS_FILES = ("test.csv", "sample_submission.csv")  # bundled sample files that name its test rows


class CollapsedPredictionWarning(UserWarning):
    """The warning a submission whose predictions barely vary is written with (where expected)."""


def policy_for(*files: str | os.PathLike | None, random_on_purpose: bool = False) -> str:
    """What a submission that barely varies gets, for a run over ``files`` (the rule: module docstring).

    Args:
        files: the test file predicted and/or the sample submission (None entries are skipped).
        random_on_purpose: the random model was asked for by name (``model="tiny-random"``).

    Returns:
        ``"warn"`` when ``random_on_purpose`` or one of ``files`` is the bundled sample's
        ``test.csv`` or ``sample_submission.csv`` by content (:func:`kitlib.sample.sample_file_name`),
        else ``"refuse"``.
    """
    from ..sample import sample_file_name

    if random_on_purpose:
        return "warn"
    return "warn" if any(sample_file_name(f) in SAMPLE_ROWS_FILES for f in files if f is not None) else "refuse"


def check_predictions(preds: dict, where: str, *, data_files=(), random_on_purpose: bool = False,
                      policy: str | None = None) -> str | None:
    """The one collapse decision for every writer of a submission, called just before it writes.

    Args:
        preds: column -> float ``[n]`` predictions about to be written.
        where: the output, for the message.
        data_files: the test file and/or the sample submission of the rows (:func:`policy_for`).
        random_on_purpose: the random model was named on purpose (:func:`policy_for`).
        policy: ``"warn"`` or ``"refuse"``, when the caller decided already by :func:`policy_for`
            (the inference notebook); None: decided here from ``data_files``.

    Returns:
        None when every column varies; else the warning (starting ``WARNING``) the writer shows once.

    Raises:
        CollapsedModelError: the predictions barely vary and the policy is ``"refuse"``; nothing
            may be written.
    """
    if policy is None:
        policy = policy_for(*data_files, random_on_purpose=random_on_purpose)
    return submission_problem(preds, policy, where)


def submission_problem(preds: dict, policy: str, where: str) -> str | None:
    """A warning for prediction columns that barely vary, or a refusal under ``policy="refuse"``.

    Args:
        preds: column -> float ``[n]`` predictions about to be written.
        policy: ``"warn"`` (return the warning) or ``"refuse"`` (raise it).
        where: the output, for the message.

    Returns:
        None when every column varies; else the warning text (starting ``WARNING``).

    Raises:
        CollapsedModelError: ``policy="refuse"`` and a column barely varies.
        ValueError: ``policy`` is not one of :data:`POLICIES`.
    """
    if policy not in POLICIES:
        raise ValueError(f"collapsed-prediction policy must be one of {POLICIES}, not {policy!r}")
    flat = {c: spread(v) for c, v in preds.items() if len(v) > 1 and spread(v)["std"] < MIN_STD}
    if not flat:
        return None
    detail = "; ".join(f"column {c!r}: {_describe(s)}" for c, s in flat.items())
    msg = (f"{where}: the predictions barely vary ({detail}): a chance-level submission, from a collapsed or "
           "untrained model (the random tiny-random model, or a fine-tune whose learning rate was too high). "
           "Check the checkpoint's held-out AUC (its train_history.json)")
    if policy == "refuse":
        raise CollapsedModelError(msg + "; nothing was written")
    return "WARNING: " + msg
