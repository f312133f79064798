"""The training notebook's hand-off: the saved checkpoint predicts what the trained model predicted.

The replicas record the in-memory model's predictions of the held-out rows
(:data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`) at the run's compute precision. The hand-off
reloads the saved folder the way inference loads it (:func:`kitlib.models.open.open_model`), predicts
the first rows again at the same precision (compare like with like: a bf16 run is checked under
bf16 autocast), and allows the gap that precision and the weights' width imply
(:func:`kitlib.run.backends.precision.reload_tolerance`). A larger gap means the folder is not
the trained model (a head not saved, weights of another run): :class:`HandoffMismatch`, naming both
figures. Whether the predictions say anything at all is :func:`kitlib.outputs.collapse.check_ready`'s rule.

A folder the hand-off refused must not be used later by accident: :func:`refusal_marked` writes
:data:`kitlib.checkpoint.REFUSED_FILE` into it, which ``model="auto"`` skips and an inference run
that names the folder refuses (:func:`kitlib.models.model.resolve_checkpoint`), and the error says so. A folder
every check passed is marked ready by :func:`mark_passed` (:data:`kitlib.checkpoint.READY_FILE`): the rule of
ready is :func:`kitlib.checkpoint.not_ready`'s. Both training notebooks run the hand-off as one call,
:func:`run_handoff`: its checks inside :func:`handoff`, which writes one mark or the other (the three live in
:mod:`kitlib.training.marks`, imported here by name, so a Keras kernel need not carry the torch loop).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..run.backends.precision import named
from .loop import tokenize_rows
from .marks import RELOAD_ROWS, HandoffMismatch, handoff, mark_passed, refusal_marked  # noqa: F401 (their home: kitlib.training.marks)


def check_reload(checkpoint: str | os.PathLike, texts: list[str], saved: np.ndarray, max_len: int,
                 precision: str, rows: int = RELOAD_ROWS, label: str = "toxic", fields: list[dict] | None = None) -> dict:
    """Reload ``checkpoint`` on the CPU and compare its predictions with the in-memory model's.

    Args:
        checkpoint: the folder the training run saved.
        texts: the held-out texts in the order of ``saved`` (without the model's text prefix: it is
            put before each here, :func:`kitlib.checkpoint.with_text_prefix`).
        saved: float ``[len(texts)]``, the in-memory model's probabilities of those rows.
        max_len: tokens per row, as trained (rows are padded to it, as the replicas padded them).
        precision: the run's compute precision as recorded (``"fp32"``, ``"bf16"``, ``"fp16"``:
            ``train_history.json``'s ``precision``); the reload runs under it.
        rows: how many of the first rows to predict again.
        label: the label trained (``TrainJob.label_col``): its head column is read as training read it
            (:func:`kitlib.models.model.prediction_column`).
        fields: each text's prompt fields, as training read them (:func:`kitlib.data.row_fields` of the
            held-out frame read with the kind's ``row_columns``); None: the prompt's defaults.

    Returns:
        ``{"rows", "gap", "tolerance", "precision"}``: the largest |difference| of the probabilities
        and the tolerance it was held to.

    Raises:
        HandoffMismatch: the gap is above the precision's tolerance; the message gives both figures.
        ValueError: ``precision`` is not a resolved precision name.
    """
    import torch

    p = named(precision, "cpu")
    n = min(rows, len(texts), len(saved))
    kind, model, tok = reload(checkpoint, label)
    with torch.no_grad(), p.autocast():
        again = kind.probabilities(model, *tokenize_rows(kind, tok, list(texts[:n]), max_len, fields and fields[:n])).numpy()
    return compare(checkpoint, np.asarray(saved, dtype=np.float64)[:n], again, p, "reloaded")


def compare(checkpoint, saved: np.ndarray, again: np.ndarray, p, how: str) -> dict:
    """``{"rows", "gap", "tolerance", "precision"}`` of the trained model's predictions ``saved`` against the saved
    folder's ``again`` (float ``[rows]`` each, the same rows), held to the reload tolerance at ``p`` and the width
    the folder's adapters record (:func:`kitlib.run.backends.precision.reload_tolerance`).

    Raises:
        HandoffMismatch: the largest gap is above it (both figures, and ``how`` the folder predicted, named).
    """
    from ..models import adapters
    from ..run.backends.precision import reload_tolerance

    width = adapters.read_record(checkpoint).get("weights") if adapters.is_adapter(checkpoint) else None
    tolerance = reload_tolerance(p.name, width)
    n = len(saved)
    gap = float(np.abs(np.asarray(again, dtype=np.float64) - saved).max()) if n else 0.0
    result = {"rows": n, "gap": gap, "tolerance": tolerance, "precision": p.name}
    if not gap <= tolerance:
        at = f"{p.name}, weights at {width}" if width else p.name
        raise HandoffMismatch(
            f"{checkpoint}: {how}, it predicts the first {n} held-out rows up to {gap:.3g} away from the trained "
            f"model (both at {at}; a correct reload stays within {tolerance:g}, "
            "kitlib.run.backends.precision.reload_tolerance). The folder is not the model that was trained: train again, "
            "and check that nothing else writes this folder")
    return result


def check_predicted(job, valid_csv: str | os.PathLike, precision: str, rt, start_method: str = "fork",
                    rows: int = RELOAD_ROWS) -> dict:
    """The saved folder ``job.checkpoint`` predicted again through :func:`kitlib.infer.predict`, the path the
    submission takes (its replicas and devices, the weights' width, adapters merged or not), on the first ``rows``
    held-out rows the training run kept predictions of (:data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`),
    compared as :func:`check_reload` compares (the test-time training kernel's hand-off: nothing loads on the
    CPU of the notebook's process).

    Args:
        job: the :class:`kitlib.infer.InferJob` the submission is predicted with (its test set, outputs and
            sample submission are replaced here by the held-out rows and a temporary folder).
        valid_csv: the run's held-out CSV (``TrainJob.valid_csv``: the texts of those rows, by id).
        precision: the run's compute precision as recorded (``train_history.json``'s ``precision``).

    Returns:
        As :func:`check_reload`.

    Raises:
        HandoffMismatch: the gap is above the precision's tolerance.
    """
    import dataclasses
    import tempfile

    import pandas as pd

    from ..checkpoint import VALID_PREDICTIONS_FILE
    from ..data import read_csv_checked
    from ..infer import model_kind, predict

    kept = pd.read_csv(Path(job.checkpoint) / VALID_PREDICTIONS_FILE, dtype={"id": str}, keep_default_na=False).iloc[:rows]
    fields = model_kind(job)[0].row_columns(valid_csv)  # the prompt's fields, carried with the texts
    held = read_csv_checked(valid_csv, text_col=job.text_col, fields=fields).set_index("id").loc[kept["id"]]
    with tempfile.TemporaryDirectory(prefix="kitlib-reload-") as tmp:
        pd.DataFrame({"id": kept["id"], "text": held["text"].to_numpy(),
                      **{c: held[f"field:{c}"].to_numpy() for c in fields}}).to_csv(Path(tmp) / "rows.csv", index=False)
        predict(dataclasses.replace(job, test_csv=str(Path(tmp) / "rows.csv"), text_col="text", shard_dir=str(Path(tmp) / "shards"),
                                    output_csv=str(Path(tmp) / "again.csv"), sample_submission=None, collapsed="warn"),
                rt, start_method)
        again = pd.read_csv(Path(tmp) / "again.csv", dtype={"id": str}, keep_default_na=False)
    return compare(job.checkpoint, kept[job.head_label].to_numpy(np.float64), again[job.prediction_column].to_numpy(),
                   named(precision, "cpu"), "predicted again on the run's devices")


def check_before_training(job, valid_csv: str | os.PathLike, rt) -> None:
    """What the test-time kernel's hand-off (:func:`check_predicted`) and its prediction read after training,
    checked before training, so a bad input costs no training time: the held-out rows read with ``job.text_col`` as
    the hand-off reads them (the split's parts name their text column so too: :func:`kitlib.cv.splits.ttt_split`),
    and the run's end (:func:`kitlib.infer.check_outputs`: the shard and
    submission folders writable, the sample submission fits the test set).

    Args:
        job: the :class:`kitlib.infer.InferJob` the submission is predicted with (its checkpoint need not exist yet).
        valid_csv: the run's held-out CSV (``TrainJob.valid_csv``).
        rt: the runtime it predicts on.

    Raises:
        ValueError: the held-out CSV lacks the text column or has a bad id (:func:`kitlib.data.read_csv_checked`:
            file, column and fix named); the sample submission does not fit the test set.
        FileNotFoundError: no held-out CSV, test set or sample submission.
        kitlib.storage.CannotWrite: a folder the prediction writes cannot be written.
    """
    from ..data import read_csv_checked
    from ..infer import check_outputs

    read_csv_checked(valid_csv, text_col=job.text_col)
    check_outputs(job, rt)


def reload(checkpoint: str | os.PathLike, label: str = "toxic"):
    """``(kind, model, tokenizer)``: a trained folder loaded on the CPU as inference loads it: through its
    kind (:func:`kitlib.models.kinds.kind_for`: the ``kitlib_kind`` it was trained as), an adapter
    checkpoint's base with the adapters on top (:func:`kitlib.models.open.open_model`, as predict opens it), the head
    float32 and the kind bound to it."""
    from ..models.kinds import kind_for
    from ..models.open import open_model

    kind = kind_for(checkpoint, label=label)
    tok = kind.load_tokenizer(checkpoint)
    kind = kind.bind(tok)
    model = open_model(checkpoint, kind=kind)  # an adapter checkpoint: the base its record names, checked
    kind = kind.bind_model(model)
    kind.keep_head_float32(model)
    return kind, model, tok


def run_handoff(job, history: dict, heldout_name: str = "held-out", *, scores: dict | None = None,
                random_on_purpose: bool = False, predict_job=None, rt=None, start_method: str = "fork") -> dict:
    """The hand-off as one call, the same in both training notebooks: every check inside :func:`handoff`, so the
    folder ``job.out_dir`` ends marked ready (every check passed, with what each found) or refused, printing each.

    1. ``predictions``: the kept epoch's held-out predictions (:data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`) say
       something (:func:`kitlib.outputs.collapse.check_ready`: ROC AUC above chance, a spread); a model random on
       purpose (:func:`kitlib.outputs.collapse.refuses_collapse`) gets a warning instead.
    2. With ``scores`` (:func:`kitlib.cv.heldout.score_heldout`): the rows scored at the end say something too.
    3. The saved folder is the trained model: ``reload``, reloaded on the CPU as the inference notebook loads it
       (:func:`check_reload`), or, with ``predict_job``, ``predicted`` again through :func:`kitlib.infer.predict` on
       ``rt``, the path the submission takes (:func:`check_predicted`: the test-time kernel).

    Args:
        job: the run's :class:`kitlib.training.job.TrainJob`.
        history: what :func:`kitlib.training.train.train` returned (its kept epoch, recipe and precision are read).
        heldout_name: what the held-out rows are called (:data:`kitlib.cv.heldout.HELDOUT_NAMES`), in the messages.
        scores: the scores of the rows scored at the end, or None.
        random_on_purpose: the model was asked for as the random tiny one (``model="tiny-random"``).
        predict_job, rt, start_method: the :class:`kitlib.infer.InferJob` the submission is predicted with and its
            runtime; None: the CPU reload.

    Returns:
        The checks as the ready mark records them: ``predictions``, ``reload`` or ``predicted``, ``heldout_auc``
        (the rows scored at the end, else the kept epoch's held-out ROC AUC).

    Raises:
        kitlib.outputs.collapse.CollapsedModelError, HandoffMismatch: refused (the folder marked so: :func:`refusal_marked`).
    """
    import pandas as pd

    from ..checkpoint import VALID_PREDICTIONS_FILE, kept_epoch
    from ..outputs.collapse import check_ready, refuses_collapse

    recipe, label = history["recipe"], job.label_col
    kept_auc = kept_epoch(history).get("valid_auc", float("nan"))
    saved = pd.read_csv(Path(job.out_dir) / VALID_PREDICTIONS_FILE, dtype={"id": str}, keep_default_na=False)
    ready = dict(lr=recipe["lr"], recipe=recipe["name"], refuse=refuses_collapse(recipe["name"], random_on_purpose))
    with handoff(job.out_dir) as passed:
        held = passed["predictions"] = check_ready(kept_auc, saved[label].to_numpy(), what=heldout_name, **ready)
        print(held["problem"] or f"{heldout_name} ROC AUC {kept_auc:.4f} ({held['rows']} rows); predictions: std "
              f"{held['std']:.3f}, interquartile range {held['iqr']:.3f}")
        if scores is not None:
            final = pd.read_csv(scores["predictions"], dtype={"id": str}, keep_default_na=False)
            check_ready(scores["roc_auc"], final[label].to_numpy(), what=scores["rows"], **ready)
        if predict_job is None:
            again = passed["reload"] = _reload_kept(job, saved, history["precision"])
            print(f"reloaded checkpoint vs in-memory model on {again['rows']} validation rows, both at {again['precision']}: "
                  f"max |diff| = {again['gap']:.2e} (a correct reload stays within {again['tolerance']:g})")
        else:
            again = passed["predicted"] = check_predicted(predict_job, job.valid_csv, history["precision"], rt, start_method)
            print(f"predicted again: the first {again['rows']} held-out rows within {again['gap']:.2g} of the trained "
                  f"model's (tolerance {again['tolerance']:g} at {again['precision']})")
        passed["heldout_auc"] = scores["roc_auc"] if scores is not None else kept_auc
    return passed


def _reload_kept(job, saved, precision: str) -> dict:
    """:func:`check_reload` of ``job.out_dir`` on the held-out rows the run kept predictions of (``saved``: ``id`` and
    the label column), their texts and prompt fields read from ``job.valid_csv`` as training read them, by id."""
    from ..data import read_csv_checked, row_fields
    from .plan import bound_kind

    fields = bound_kind(job)[0].row_columns(job.valid_csv)  # the prompt's per-row fields
    held = read_csv_checked(job.valid_csv, text_col=job.text_col, limit=job.valid_limit, fields=fields)
    held = held.set_index("id").loc[saved["id"]].reset_index()
    return check_reload(job.out_dir, held["text"].tolist(), saved[job.label_col].to_numpy(), job.max_len, precision,
                        label=job.label_col, fields=row_fields(held))
