"""What to train: :class:`TrainJob` (a frozen job config, nothing about the devices), its checks, and the job a
training notebook's parameters ask for (:func:`job_from_params`; the test-time kernel's prediction job:
:func:`predict_job_from_params`).

``train(job, rt)`` (:mod:`kitlib.training.train`) takes a :class:`TrainJob`; :func:`check_labels` reads
the labels the replicas will train on, in the calling process, before any of them starts (the one read
of the training CSV there: :mod:`kitlib.training.plan` counts its rows from it).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from . import recipe as recipes
from .resume import RESUME_MODES
from .runs import TRACKERS
from ..metrics import check_two_classes, one_class_reason, slice_name
from ..run.backends.precision import check as check_precision
from ..storage import normalise

PATTERNS = ("optimizer_step", "ddp")
# monitor -> whether higher is better (TrainJob.monitor: the epoch kept)
MONITORS = {"valid_auc": True, "valid_loss": False}


PATH_FIELDS = ("checkpoint", "train_csv", "valid_csv", "out_dir", "compile_cache_dir", "rank_states_dir")  # TrainJob's paths
# TrainJob fields no notebook parameter sets by name: the split, the model folder, the runtime and the cache give them
# (job_from_params); every other field is set by the notebook parameter of its name, where the notebook has one.
DERIVED_FIELDS = (*PATH_FIELDS, "time_budget_s", "tags")
UNSET_FIELDS = ("text_col", "train_limit", "valid_limit")  # a notebook's "" or 0 is the job's None (the kit's choice, all rows)


@dataclass(frozen=True)
class TrainJob:
    """What to train (nothing about the devices: that is the runtime's); picklable for ``spawn``.

    Attributes:
        checkpoint: local transformers folder to start from (model + tokenizer), e.g. from
            :func:`kitlib.models.model.resolve_checkpoint`. A folder an earlier run of this module wrote
            resumes that run (:mod:`kitlib.checkpoint` states the rule).
        train_csv: training CSV (``id``, a text column, the label column).
        valid_csv: validation CSV, same columns; ROC AUC is reported on it after every epoch.
        out_dir: folder the master writes the trained checkpoint to (replaced atomically).
        pattern: ``"optimizer_step"`` or ``"ddp"``.
        epochs: passes over the training rows.
        batch_size: rows per step on each replica (global batch = batch_size x world size).
        max_len: tokens per row (longer texts truncated, shorter padded): the fixed sequence length.
        lr: AdamW learning rate of the body; 0: the recipe's (:data:`kitlib.training.recipe.RECIPES`).
        recipe: ``"auto"`` (the one the checkpoint calls for, :func:`kitlib.training.recipe.recipe_for`) or a
            name in :data:`kitlib.training.recipe.RECIPES`: head learning rate, schedule, frozen parameters,
            loss weighting. :func:`kitlib.training.plan.make_plan` makes ``recipe`` and ``lr`` concrete.
        weight_decay: AdamW weight decay.
        label_col: the 0/1 (or [0, 1]) label column.
        text_col: text column; None picks ``content`` or ``comment_text``.
        train_limit, valid_limit: use only the first rows of each CSV (quick runs).
        seed: seeds the model head initialisation and the per-epoch shuffle (same on every replica).
        dropout: if set, the ``p`` of every dropout layer while training (0.0 makes a run
            deterministic, for comparisons); None keeps the checkpoint's.
        log_every: master logs the step loss every this many steps.
        compile_cache_dir: XLA only: root of the persistent compilation cache; process ``i``
            uses ``<root>/proc-<i>`` (not with ``xla-cpu`` thread replicas, which share a process).
            None: no persistent cache.
        rank_states_dir: if set, every replica saves its final ``state_dict`` (CPU tensors) to
            ``<dir>/rank-<r>.pt`` (to check that replicas hold identical parameters).
        precision: ``"auto"``, ``"fp32"``, ``"bf16"`` or ``"fp16"`` (with a ``GradScaler``): the rule,
            and what ``"auto"`` is on each device, is :mod:`kitlib.run.backends.precision`'s.
        tags: what this run is part of, recorded in the history (``tags``) as given: e.g.
            ``{"cv": "<id>", "fold": 2, "folds": 5}`` for one fold of a cross-validation run
            (:mod:`kitlib.cv.folds`), or ``{"seed_group": "<id>"}``. JSON-serialisable values only.
        monitor: what picks the epoch kept in ``out_dir`` (:data:`MONITORS`): ``"valid_auc"`` (the
            highest validation ROC AUC) or ``"valid_loss"`` (the lowest validation loss), as Keras's
            ``ModelCheckpoint(save_best_only=True, monitor=...)`` and Lightning's ``ModelCheckpoint``.
        patience: stop after this many epochs without a better ``monitor`` (Keras' and Lightning's
            ``EarlyStopping(patience=...)``); 0: train every epoch.
        save_every_steps, save_every_minutes: also save the run's state (:mod:`kitlib.training.resume`) every
            this many optimizer steps / minutes (0: only at each epoch's end).
        time_budget_s: seconds this call may train; before it runs out the run saves its state and
            stops cleanly, to be continued by the same call again (:mod:`kitlib.training.resume`). None: no limit.
        resume: ``"auto"`` (continue a run that was cut off, or the run the starting folder holds:
            :mod:`kitlib.training.resume` states the rule) or ``"never"`` (always start afresh).
        tracker: ``"none"``, or ``"tensorboard"``: the curves as TensorBoard event files
            (``tensorboardX``) under ``<out_dir>.tensorboard/<run_id>/`` (:mod:`kitlib.training.runs`).
        kind: the model kind (:data:`kitlib.models.kinds.KINDS`); ``"auto"``: what ``config.json`` says
            (:func:`kitlib.models.kinds.detect`). It gives the loss and the probabilities the replicas compute.
        prompt: the answer-token form's template (``{text}`` once); ``""``: :data:`kitlib.models.kinds.DEFAULT_TEMPLATE`.
        lora_r: LoRA rank (:mod:`kitlib.models.adapters`): only the adapters and the head train, and ``out_dir``
            holds only them (megabytes) with a record naming the base; 0: a full fine-tune.
        lora_alpha, lora_dropout: LoRA's scale (``alpha / r``) and dropout.
        lora_targets: ``"all-linear"`` (every Linear but the output embedding), or module names separated
            by commas (``"q_proj,v_proj"``).
        weights: the width the weights are held at (:data:`kitlib.models.weights.WEIGHTS`;
            :func:`kitlib.models.weights.resolve_weights`); planned against each device's memory before
            any replica starts (decoder kinds), the plan printed and a run that cannot fit refused.

    ``kind``, ``prompt``, the ``lora_*`` settings and ``weights`` make the model: a saved state is never continued,
    nor a group blended, across them (:data:`kitlib.checkpoint.MODEL_SETTINGS` states the rule).
    """

    checkpoint: str
    train_csv: str
    valid_csv: str
    out_dir: str
    pattern: str = "optimizer_step"
    epochs: int = 1
    batch_size: int = 16
    max_len: int = 128
    lr: float = 2e-5
    weight_decay: float = 0.0
    recipe: str = recipes.AUTO
    label_col: str = "toxic"
    text_col: str | None = None
    train_limit: int | None = None
    valid_limit: int | None = None
    seed: int = 0
    dropout: float | None = None
    log_every: int = 10
    compile_cache_dir: str | None = None
    rank_states_dir: str | None = None
    precision: str = "auto"
    tags: dict = field(default_factory=dict)
    monitor: str = "valid_auc"
    patience: int = 0
    save_every_steps: int = 0
    save_every_minutes: float = 30.0
    time_budget_s: float | None = None
    resume: str = "auto"
    tracker: str = "none"
    kind: str = "auto"
    prompt: str = ""
    lora_r: int = 0
    lora_alpha: float = 32.0
    lora_dropout: float = 0.05
    lora_targets: str = "all-linear"
    weights: str = "auto"

    @property
    def lora(self):
        """The :class:`kitlib.models.adapters.LoraSpec` of the run, or None (``lora_r`` 0: a full fine-tune)."""
        from ..models.adapters import LoraSpec

        if not self.lora_r:
            return None
        targets = self.lora_targets if self.lora_targets == "all-linear" else tuple(
            t.strip() for t in self.lora_targets.split(",") if t.strip())
        return LoraSpec(r=self.lora_r, alpha=self.lora_alpha, dropout=self.lora_dropout, target_modules=targets)

    def __post_init__(self):
        for name in PATH_FIELDS:  # once, up front: every reader and writer gets the same path (storage.normalise)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, normalise(getattr(self, name)))
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, not {self.pattern!r}")
        if self.recipe != recipes.AUTO and self.recipe not in recipes.RECIPES:
            raise ValueError(f"recipe must be {recipes.AUTO!r} or one of {', '.join(recipes.RECIPES)}, not {self.recipe!r}")
        check_precision(self.precision, "TrainJob.precision")
        for name in ("epochs", "batch_size", "max_len", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")
        for name, allowed in (("monitor", MONITORS), ("resume", RESUME_MODES), ("tracker", TRACKERS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"TrainJob.{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        for name in ("patience", "save_every_steps", "save_every_minutes"):
            if getattr(self, name) < 0:
                raise ValueError(f"TrainJob.{name} must be >= 0 (0: off), not {getattr(self, name)}")
        if self.lora_r < 0:
            raise ValueError(f"TrainJob.lora_r must be >= 1 (LoRA's rank) or 0 (a full fine-tune), not {self.lora_r}")
        self.lora  # noqa: B018 - LoraSpec checks alpha and dropout
        from ..models.weights import WEIGHTS

        if self.weights not in WEIGHTS:
            raise ValueError(f"TrainJob.weights must be one of {', '.join(WEIGHTS)}, not {self.weights!r}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"TrainJob.time_budget_s must be > 0 seconds (None: no limit), not {self.time_budget_s}")


def label_values(path: str, label_col: str, limit: int | None) -> np.ndarray | None:
    """The ``label_col`` values of the first ``limit`` rows of ``path``, or None when they cannot be
    read as numbers (a missing file or column, a bad value: the replicas' read names it)."""
    import pandas as pd

    try:
        raw = pd.read_csv(path, usecols=[label_col], dtype=str, keep_default_na=False, nrows=limit)[label_col]
    except (OSError, ValueError):
        return None
    values = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    return None if np.isnan(values).any() else values


def check_labels(job: TrainJob) -> np.ndarray | None:
    """Before any replica starts: refuse training labels of one class; say so of validation labels.

    The rows read are those the replicas will read (``train_limit``, ``valid_limit``); the rule
    and its wording are :mod:`kitlib.metrics`'. A validation set of one class is allowed (the
    loss is still measured) and printed as a note: its ROC AUC will be undefined, and why.

    Returns:
        The training labels read, float64 ``[rows]`` (:func:`label_values`: the one read of the training
        CSV in the calling process), or None when they cannot be read here (the replicas' read names why).

    Raises:
        ValueError: every training label is one class; names the file (and slice) and the class missing.
    """
    train_labels = label_values(job.train_csv, job.label_col, job.train_limit)
    if train_labels is not None:
        check_two_classes(train_labels, slice_name(job.train_csv, job.train_limit), job.label_col)
    valid_labels = label_values(job.valid_csv, job.label_col, job.valid_limit)
    if valid_labels is not None:
        reason = one_class_reason(valid_labels, slice_name(job.valid_csv, job.valid_limit), job.label_col)
        if reason:
            print(f"note: {reason}: its ROC AUC will be undefined (the validation loss is still reported)")
    return train_labels


def job_from_params(params: Mapping, rt, split, *, default_out_dir: str | Path | None = None, **fields) -> TrainJob:
    """The :class:`TrainJob` a training notebook's parameters ask for: one call, both training notebooks.

    Every field of :class:`TrainJob` but :data:`DERIVED_FIELDS` is the notebook parameter of its name, where the
    notebook has one (``""`` or ``0`` for :data:`UNSET_FIELDS` read as None); else the field's default. The others:

    * ``checkpoint``: the ``model`` parameter resolved once, here, to a local folder that every replica loads
      (:func:`kitlib.models.model.resolve_checkpoint` for training: ``"auto"`` looks under ``/kaggle/input``);
    * ``train_csv``, ``valid_csv``, ``tags``: the split's (:func:`kitlib.cv.heldout.make_split`: the training rows,
      the held-out rows scored every epoch, a fold's tags);
    * ``out_dir``: a fold's folder (the split's), else the ``output_dir`` parameter, else ``default_out_dir`` in the
      working folder (:func:`kitlib.paths.working_dir`; None: :data:`kitlib.paths.TRAINED_CHECKPOINT`);
    * ``compile_cache_dir``: ``<cache_dir>/xla-compile`` (``cache_dir`` ``""``: :func:`kitlib.paths.scratch_dir`);
    * ``time_budget_s``: the ``time_budget_minutes`` parameter on ``rt``'s hardware
      (:func:`kitlib.training.session.time_budget`; none without that parameter).

    Args:
        params: the notebook's parameters (its ``globals()``); ``model`` is required.
        rt: the runtime (:func:`kitlib.run.runtime.detect_runtime`).
        split: the run's rows, a :class:`kitlib.cv.heldout.Split` (its ``train_csv``, ``heldout_csv``, ``out_dir``,
            ``tags``, ``data_dir`` and ``sources`` are read).
        default_out_dir: the notebook's checkpoint folder, relative to the working folder.
        fields: TrainJob fields set here, over all of the above (the test-time kernel's ``resume="never"``).

    Raises:
        ValueError: a parameter :class:`TrainJob` refuses (named: ``TrainJob.<field>``); FileNotFoundError:
            ``model="auto"`` found no checkpoint off the bundled sample (what to attach named).
    """
    from .. import paths
    from ..models.model import resolve_checkpoint
    from ..storage import as_path
    from .session import time_budget

    named = {f.name: params[f.name] for f in dataclasses.fields(TrainJob) if f.name in params and f.name not in DERIVED_FIELDS}
    named.update({k: named[k] or None for k in UNSET_FIELDS if k in named})
    root = paths.project_root()
    cache = as_path(params["cache_dir"]) if params.get("cache_dir") else paths.scratch_dir(root)
    out_dir = split.out_dir or (as_path(params["output_dir"]) if params.get("output_dir") else
                                paths.working_dir(root) / (default_out_dir or paths.TRAINED_CHECKPOINT))
    checkpoint = resolve_checkpoint(params["model"], data_dir=split.data_dir, cache_dir=cache, search_dir=paths.kaggle_input_dir(),
                                    real_data=paths.is_competition_data(split.data_dir), purpose="training",
                                    data_files=list(split.sources))
    if "time_budget_s" not in fields:
        minutes = params.get("time_budget_minutes", 0)
        fields["time_budget_s"] = time_budget(minutes, rt.backend.hardware)
    return TrainJob(**{**named, "checkpoint": str(checkpoint), "train_csv": str(split.train_csv),
                       "valid_csv": str(split.heldout_csv), "out_dir": str(out_dir), "tags": dict(split.tags),
                       "compile_cache_dir": str(cache / "xla-compile"), **fields})


def predict_job_from_params(params: Mapping, job: TrainJob, split):
    """The test-time kernel's prediction job: the folder ``job`` trains (``job.out_dir``, not there yet) predicts the
    test set ``split.test_csv`` into the submission, with the run's settings (batch, length, precision, kind, prompt,
    weights, label and text column).

    The submission is the ``output_csv`` parameter (``""``: ``<working folder>/submission.csv``), checked against
    ``sample_submission`` (``""``: ``<data_dir>/sample_submission.csv``; ``"none"``: none, the test set's order), its
    column by the one rule (:func:`kitlib.outputs.submission_csv.choose_prediction_column`), and a submission that
    barely varies refused unless the model is random on purpose (:func:`kitlib.outputs.collapse.policy_for`).

    Args:
        params: the notebook's parameters (its ``globals()``).
        job: the run's :class:`TrainJob` (:func:`job_from_params`).
        split: the run's :class:`kitlib.cv.heldout.Split` (the test-time split: ``test_csv`` and ``data_dir`` are read).

    Returns:
        A :class:`kitlib.infer.InferJob`.

    Raises:
        ValueError: ``id_col`` other than ``id`` (:func:`kitlib.outputs.submission_csv.check_id_col`), or a sample
            submission with no one prediction column.
    """
    from .. import paths
    from ..infer import InferJob
    from ..models.model import TINY
    from ..outputs.collapse import policy_for
    from ..outputs.submission_csv import check_id_col, choose_prediction_column
    from ..storage import as_path

    check_id_col(params.get("id_col", "id"))
    sample = params.get("sample_submission", "")
    sample = None if sample.lower() == "none" else as_path(sample) if sample else split.data_dir / "sample_submission.csv"
    output = as_path(params["output_csv"]) if params.get("output_csv") else paths.working_dir() / "submission.csv"
    column = choose_prediction_column("", sample, job.label_col, label_parameter="label_col")
    return InferJob(checkpoint=job.out_dir, test_csv=str(split.test_csv), shard_dir=str(paths.scratch_dir() / "shards" / "ttt"),
                    output_csv=str(output), sample_submission=str(sample) if sample else "none", batch_size=job.batch_size,
                    max_len=job.max_len, precision=job.precision, prediction_column=column, label=job.label_col,
                    text_col=job.text_col, kind=job.kind, prompt=job.prompt, weights=job.weights,
                    collapsed=policy_for(split.test_csv, random_on_purpose=params.get("model") == TINY))
