"""Data-parallel training as one call: ``train(job, rt)`` -> the master's history.

::

    rt = detect_runtime(num_devices, accelerator)          # touches no device
    job = TrainJob(checkpoint=..., train_csv=..., valid_csv=..., out_dir=..., pattern="optimizer_step")
    history = train(job, rt)                               # launch(_mp_fn, job, rt), then the history

One replica per device runs :func:`_mp_fn` with its :class:`kitlib.run.replica.Replica`; the launch
mode's backend (:data:`kitlib.run.runtime.MODES`, :mod:`kitlib.run.backends`) decides the collectives
(``xla`` on a TPU and ``xla-cpu``, ``nccl`` on CUDA GPUs, ``gloo`` for eager CPU replicas), how a
step is taken (``replica.optimizer_step``) and the precision (:mod:`kitlib.run.backends.precision`:
fp16 always through a ``GradScaler``). The replica program never branches on it.

Patterns (``TrainJob.pattern``):

* ``"optimizer_step"``: plain model; after ``backward()`` the gradients are all-reduced (mean
  over replicas) and the optimizer steps: ``xm.optimizer_step`` on XLA, the same thing by hand
  with ``replica.all_reduce_sum`` elsewhere.
* ``"ddp"``: ``DistributedDataParallel(model, gradient_as_bucket_view=True)``, whose backward
  averages the gradients; on XLA over the ``xla`` process group (``init_method="xla://"``). With
  one eager replica there is nothing to average and the plain model is used.

Shapes are fixed so XLA compiles one training graph: every training batch is ``[batch_size,
max_len]`` (``DistributedSampler(drop_last=True)`` + ``DataLoader(drop_last=True)``, padding to
``max_len``), and validation batches are the same shape (the last one filled up and the filler
dropped). With per-replica batch ``B`` and ``W`` replicas, step ``j`` of an epoch sees exactly
the rows that step ``j`` of a one-replica run with batch ``W * B`` sees, so both runs take the
same gradient (the mean over the global batch) up to float rounding.

Metrics are reduced across replicas: the epoch's training loss is the all-reduced mean of
every replica's step losses; validation ROC AUC is computed on the predictions of all replicas
gathered together, each validation row once (the sampler's padding duplicates are dropped).
Loss is logged and tqdm shown on the master (rank 0) only. The master alone writes
``out_dir``: ``save_pretrained`` of the model and the tokenizer (what
:func:`kitlib.models.model.load_classifier` and :mod:`kitlib.infer` load), plus
``train_history.json`` and ``valid_predictions.csv``; the run's whole state (for resuming, and
for a later run that continues this one) is kept beside it in ``<out_dir>.state/``
(:mod:`kitlib.training.resume`), and one row per run in ``artifacts/runs.csv`` (:mod:`kitlib.training.runs`). Reading the data and saving are wrapped in
``replica.together``: a failure on one rank (a read-only folder, a full disk) ends every rank
with one error naming that rank, instead of leaving the others waiting at a barrier.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from tqdm.auto import tqdm

from . import recipe as recipes
from . import resume
from ..atomic import atomic_write, check_replaceable, real_target
from ..checkpoint import HISTORY_FILE, kept_epoch, read_history, replacing_message, save_checkpoint, with_text_prefix
from .resume import RESUME_MODES
from .runs import TRACKERS, Tracker, append_run, code_fingerprint, git_commit, runs_table
from ..data import plan_batches, read_csv_checked
from ..metrics import auc_text, check_two_classes, one_class_reason, slice_name
from ..models.limits import preflight
from ..models.model import keep_head_float32, load_classifier, prediction_column, probabilities
from ..run.backends.precision import check as check_precision
from ..run.runtime import Runtime, holds_global_rank0, launch
from ..storage import normalise

PATTERNS = ("optimizer_step", "ddp")
# monitor -> whether higher is better (TrainJob.monitor: the epoch kept)
MONITORS = {"valid_auc": True, "valid_loss": False}


PATH_FIELDS = ("checkpoint", "train_csv", "valid_csv", "out_dir", "compile_cache_dir", "rank_states_dir")  # TrainJob's paths


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
            loss weighting. :func:`train` makes ``recipe`` and ``lr`` concrete before launching.
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
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise ValueError(f"TrainJob.time_budget_s must be > 0 seconds (None: no limit), not {self.time_budget_s}")


def classification_loss(logits, labels, pos_weight=None, column: int = 1):
    """Mean loss of a one- or two-logit classifier head.

    Args:
        logits: float tensor ``[batch, 1]`` (sigmoid head) or ``[batch, 2]`` (softmax head).
        labels: float32 tensor ``[batch]`` in [0, 1] (soft labels allowed).
        pos_weight: None, or a float32 scalar tensor weighting the positive term of the one-logit
            loss (``binary_cross_entropy_with_logits(pos_weight=...)``; :func:`kitlib.training.recipe.positive_weight`).
        column: a two-logit head's column of the label (:func:`kitlib.models.model.prediction_column`:
            the head's own label map; a replica passes what it says).

    Returns:
        A float32 scalar tensor: binary cross-entropy with logits for one logit, cross-entropy
        against ``y`` in ``column`` and ``1 - y`` in the other for two.

    Raises:
        ValueError: any other number of logits.
    """
    import torch
    import torch.nn.functional as F

    if logits.shape[-1] == 1:
        return F.binary_cross_entropy_with_logits(logits[:, 0].float(), labels, pos_weight=pos_weight)
    if logits.shape[-1] == 2:
        pair = [labels, 1 - labels] if column == 0 else [1 - labels, labels]
        return F.cross_entropy(logits.float(), torch.stack(pair, dim=1))
    raise ValueError(f"expected 1 or 2 logits per row, got {logits.shape[-1]}")


def job_column(model, job: TrainJob) -> int:
    """The head's column of ``job.label_col`` (:func:`kitlib.models.model.prediction_column`; :func:`train`
    refused a head that does not name it before any replica started)."""
    return prediction_column(model.config, job.label_col)[0]


def validation_rows(num_rows: int, world: int, rank: int, batch_size: int) -> np.ndarray:
    """Dataset rows replica ``rank`` predicts, in order, ``-1`` marking filler slots.

    ``DistributedSampler(shuffle=False, drop_last=False)`` (rank ``r`` takes rows ``r, r + W, ...``,
    padded by repeating the first rows), then filled up to a multiple of ``batch_size`` with ``-1``.
    Returns int64 ``[ceil(ceil(num_rows / world) / batch_size) * batch_size]``: the same length on
    every rank, so the predictions can be all-gathered.
    """
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(num_rows), num_replicas=world, rank=rank, shuffle=False, drop_last=False)
    rows = np.fromiter(iter(sampler), dtype=np.int64)
    return np.concatenate([p.rows for p in plan_batches(rows, batch_size, 0)])


def merge_gathered(probs: np.ndarray, num_rows: int, world: int, batch_size: int) -> np.ndarray:
    """Turn all-gathered validation predictions into one prediction per dataset row.

    Args:
        probs: float ``[world * n]``: every replica's predictions in rank order, each laid out
            as :func:`validation_rows` says.
        num_rows, world, batch_size: as given to :func:`validation_rows`.

    Returns:
        float32 ``[num_rows]``, row ``i`` the prediction for dataset row ``i`` (a row predicted
        twice, as sampler padding, is taken once).

    Raises:
        ValueError: the sizes disagree, or a row is missing.
    """
    rows = np.concatenate([validation_rows(num_rows, world, r, batch_size) for r in range(world)])
    if len(rows) != len(probs):
        raise ValueError(f"gathered {len(probs)} predictions, expected {len(rows)} ({world} replicas)")
    keep = rows >= 0
    uniq, first = np.unique(rows[keep], return_index=True)
    if len(uniq) != num_rows:
        raise ValueError(f"gathered predictions cover {len(uniq)} of {num_rows} validation rows")
    return probs[keep][first].astype(np.float32)


def _tokenize(tokenizer, texts: list[str], max_len: int):
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def predict_valid(model, input_ids, attention_mask, rows: np.ndarray, job: TrainJob, replica):
    """Probabilities for the validation rows of one replica, left on the device.

    Args:
        input_ids, attention_mask: int64 CPU tensors ``[num_valid_rows, max_len]``.
        rows: from :func:`validation_rows` (``-1`` = filler, predicted on row 0 and dropped later).

    Returns:
        float32 tensor ``[len(rows)]`` on the replica's device.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    idx = torch.from_numpy(np.maximum(rows, 0))
    loader = replica.loader(DataLoader(TensorDataset(input_ids[idx], attention_mask[idx]), batch_size=job.batch_size, shuffle=False))
    out = []
    model.eval()
    with torch.no_grad(), replica.autocast():
        for batch in loader:
            ids, mask = replica.to_device(batch)
            out.append(probabilities(model(input_ids=ids, attention_mask=mask).logits, job_column(model, job)))
    model.train()
    return torch.cat(out)


@dataclass
class _Data:
    """What one replica trains and validates on (:func:`_read_data`)."""

    train_df: "object"
    valid_df: "object"
    loader: "object"
    sampler: "object"
    valid_ids: "object"
    valid_mask: "object"
    valid_rows: np.ndarray
    valid_labels: np.ndarray


@dataclass
class _Training:
    """One replica's model and what steps it (:func:`_optimization`)."""

    model: "object"
    net: "object"
    optimizer: "object"
    take_step: "object"
    scheduler: "object"
    pos_weight: "object"
    column: int = 0  # the head's column of the label (job_column)

    @property
    def stateful(self) -> dict:
        """The objects whose state the run's state keeps, by name (:func:`kitlib.training.resume.save_state`)."""
        return {"optimizer": self.optimizer, "scaler": self.take_step.scaler, "scheduler": self.scheduler}


@dataclass
class _Loop:
    """Where one replica's run is, and what it has recorded (the same on every replica)."""

    history: dict
    settings: "resume.Settings"
    position: "resume.Position"
    loss_total: "object"  # this replica's step losses summed (a scalar tensor on the device)
    done_loss: float = 0.0  # the all-reduced sum at the last epoch's end
    best: dict | None = None
    stale: int = 0  # epochs since the best
    stopped: str | None = None  # why the run stopped before its last epoch ("time budget", "early stopping")
    seconds_before: float = 0.0  # trained in earlier calls of a resumed run
    started: float = field(default_factory=time.monotonic)
    last_save: float = field(default_factory=time.monotonic)
    save_seconds: float = 0.0  # the longest state save so far
    step_seconds: float = 0.0  # the longest step so far
    epoch_seconds: float = 0.0  # the epoch in progress, in this call
    head: list | None = None  # the head's parameters when the epoch began (None: a resumed epoch)
    rng: dict | None = None  # RNG states to set once the resumed epoch's loader has started (:func:`_train_epoch`)
    tracker: "object" = None

    @property
    def seconds(self) -> float:
        return self.seconds_before + time.monotonic() - self.started


def _mp_fn(replica, job: TrainJob) -> None:
    """One replica's training: train, validate after every epoch, keep the best epoch, save the state.

    The phases, each a function: :func:`_load_model`, :func:`_read_data`, :func:`_optimization`,
    :func:`_start` (a fresh run, or a resumed one: :mod:`kitlib.training.resume`), then per epoch
    :func:`_train_epoch` (with its save points, :func:`_save_point`) and :func:`_validate` (which keeps
    the best epoch in ``out_dir``: :func:`_keep`), and last :func:`_finish`.

    Args:
        replica: the :class:`kitlib.run.replica.Replica` the launcher built.
        job: a :class:`TrainJob` (:func:`train` has made its recipe and learning rate concrete).

    Raises:
        ValueError: the training rows give no full global batch, or a CSV fails
            :func:`kitlib.data.read_csv_checked`; the saved state cannot be resumed (:func:`kitlib.training.resume.plan`).
        RuntimeError: an epoch changed no trained parameter (:func:`_validate`).
    """
    replica.use_compile_cache(job.compile_cache_dir)
    job = recipes.resolve(job)  # (train() has already; _mp_fn may also be launched directly)
    with replica.together("reading the data and loading the model"):
        tokenizer, model = _load_model(replica, job)
        data = _read_data(replica, job, tokenizer)
    run = _optimization(replica, job, model, data)
    with replica.together("restoring the run's state"):
        loop = _start(replica, job, run, data)
    while loop.position.epoch < job.epochs and loop.stopped is None:
        _train_epoch(replica, job, run, data, loop)
        if loop.stopped is None:
            _validate(replica, job, tokenizer, run, data, loop)
    _finish(replica, job, tokenizer, run, data, loop)


def _load_model(replica, job: TrainJob):
    """``(tokenizer, model)``: the checkpoint with the recipe's frozen parts, the float32 head and the
    job's dropout, on the replica's device in train mode (the same head on every replica: one seed)."""
    import torch

    torch.manual_seed(job.seed)  # a freshly initialised head is then the same on every replica
    tokenizer, model = load_classifier(job.checkpoint, xla=replica.xla, head_for_training=True, label=job.label_col)
    recipes.prepare_model(model, recipes.RECIPES[job.recipe])
    keep_head_float32(model)
    if job.dropout is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = job.dropout
    return tokenizer, model.train().to(replica.device)


def _read_data(replica, job: TrainJob, tokenizer) -> _Data:
    """The training loader (this rank's share: ``DistributedSampler(drop_last=True)``, fixed
    ``[batch_size, max_len]`` batches) and the validation rows, tokenized.

    Raises:
        ValueError: a CSV fails :func:`kitlib.data.read_csv_checked`, or the rows give no full global batch.
    """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    labels = (job.label_col,)
    train_df = read_csv_checked(job.train_csv, text_col=job.text_col, label_cols=labels, limit=job.train_limit)
    valid_df = read_csv_checked(job.valid_csv, text_col=job.text_col, label_cols=labels, limit=job.valid_limit)
    train_set = TensorDataset(
        *_tokenize(tokenizer, with_text_prefix(job.checkpoint, train_df["text"].tolist()), job.max_len),
        torch.tensor(train_df[job.label_col].to_numpy(np.float32)),
    )
    sampler = DistributedSampler(train_set, num_replicas=replica.world_size, rank=replica.rank, shuffle=True,
                                 seed=job.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=job.batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"{job.train_csv}: {len(train_df)} training rows give no full global batch of "
                         f"{job.batch_size} x {replica.world_size} replicas; lower batch_size or add rows")
    valid_ids, valid_mask = _tokenize(tokenizer, with_text_prefix(job.checkpoint, valid_df["text"].tolist()), job.max_len)
    return _Data(train_df, valid_df, loader, sampler, valid_ids, valid_mask,
                 validation_rows(len(valid_df), replica.world_size, replica.rank, job.batch_size),
                 valid_df[job.label_col].to_numpy(np.float32))


def _optimization(replica, job: TrainJob, model, data: _Data) -> _Training:
    """The module to call (DDP where the pattern and the collectives call for it), the recipe's
    optimizer (its schedule comes with :func:`_start`), the step (backward, gradient exchange,
    optimizer step, scaler) and the loss's positive weight."""
    import torch

    recipe = recipes.RECIPES[job.recipe]
    net = replica.wrap_model(model, job.pattern)
    optimizer = recipes.make_optimizer(model, recipe, job.lr, job.weight_decay)
    take_step = replica.optimizer_step(optimizer, model, net)  # backward, exchange, step
    pos_weight = recipes.positive_weight(data.train_df[job.label_col].to_numpy(), recipe)
    if pos_weight is not None:
        pos_weight = torch.tensor(pos_weight, dtype=torch.float32, device=replica.device)
    return _Training(model, net, optimizer, take_step, None, pos_weight, job_column(model, job))


def run_settings(job: TrainJob, world_size: int, steps_per_epoch: int, param_groups, precision: str):
    """The :class:`kitlib.training.resume.Settings` of a run of ``job`` (a resolved recipe and learning rate)."""
    recipe = recipes.RECIPES[job.recipe]
    return resume.Settings(recipe=job.recipe, lr=job.lr, head_lr=recipe.head_lr or job.lr, weight_decay=job.weight_decay,
                           param_groups=tuple(param_groups), world_size=world_size, batch_size=job.batch_size,
                           steps_per_epoch=steps_per_epoch, epochs=job.epochs, precision=precision,
                           train_rows=resume.rows_fingerprint(job.train_csv, job.train_limit))


def _start(replica, job: TrainJob, run: _Training, data: _Data) -> _Loop:
    """The run's schedule and history, fresh or resumed (:mod:`kitlib.training.resume`: planned again here with
    the world size the launch found, restored after every stateful object exists)."""
    import torch

    groups = tuple((len(g["params"]), int(sum(p.numel() for p in g["params"]))) for g in run.optimizer.param_groups)
    settings = run_settings(job, replica.world_size, len(data.loader), groups, replica.precision.name)
    found = resume.find(job.out_dir, job.checkpoint, HISTORY_FILE) if job.resume == "auto" else None
    plan = resume.plan(settings, found)
    recipe = recipes.RECIPES[job.recipe]
    done = plan.position.global_step if plan else 0
    run.scheduler = recipes.make_scheduler(run.optimizer, recipe, settings.total_steps, done)
    history = {"run_id": uuid.uuid4().hex[:12], "world_size": replica.world_size, "mode": replica.mode.name,
               "collectives": replica.mode.collectives, "pattern": job.pattern, "ddp_wrapped": run.net is not run.model,
               "precision": replica.precision.name, "grad_scaler": run.take_step.scaler is not None,
               "config": asdict(job), "tags": dict(job.tags), "recipe": recipes.describe(recipe, job.lr),
               "steps_per_epoch": len(data.loader), "global_batch": settings.global_batch,
               "epochs": [], "step_loss": [], "compile_counts": None if replica.compile_count() is None else [],
               "monitor": job.monitor, "best": None, "finished": False, "stopped": None}
    loop = _Loop(history, settings, plan.position if plan else resume.Position(), torch.zeros((), device=replica.device))
    if plan is not None:
        _restore(replica, run, plan, loop)
    if replica.is_master:  # (train() printed the plan's note)
        loop.tracker = Tracker(job.tracker, Path(str(real_target(job.out_dir)) + ".tensorboard") / loop.history["run_id"])
    return loop


def _restore(replica, run: _Training, plan, loop: _Loop) -> None:
    """Load a resumed run's weights, optimizer (scheduler, scaler when continued exactly), RNG states,
    loss sums and history into this replica (:class:`kitlib.training.resume.Resume`)."""
    import torch

    old = plan.history
    for key in ("epochs", "step_loss"):
        loop.history[key] = list(old.get(key, []))
    if loop.history["compile_counts"] is not None:
        loop.history["compile_counts"] = list(old.get("compile_counts") or [])
    loop.history["run_id"] = old.get("run_id", loop.history["run_id"])
    loop.history["resumed"] = [*old.get("resumed", []), {"from": str(plan.folder), "how": plan.how,
                                                         "at_step": plan.position.global_step, "note": plan.note}]
    if plan.how == "weights":  # an older kit's folder: its weights are the model already loaded
        return
    weights, tensors = resume.load_tensors(plan.folder)
    run.model.load_state_dict(weights)
    # the new run's rates (set by make_scheduler to the step reached) and weight decay: loading the
    # optimizer's state brings the saved ones, which are right only when the run continues exactly
    rates = [{k: g[k] for k in ("lr", "weight_decay")} for g in run.optimizer.param_groups]
    run.optimizer.load_state_dict(tensors["optimizer"])  # moments move to the parameters' device
    if plan.restores_schedule and run.scheduler is not None and tensors.get("scheduler") is not None:
        run.scheduler.load_state_dict(tensors["scheduler"])
    elif not plan.restores_schedule:
        for group, kept in zip(run.optimizer.param_groups, rates):
            group.update(kept)
    if run.take_step.scaler is not None and tensors.get("scaler") is not None:
        run.take_step.scaler.load_state_dict(tensors["scaler"])
    saved = plan.saved
    loop.best, loop.stale, loop.done_loss = saved.get("best"), int(saved.get("stale", 0)), float(saved["done_loss"])
    loop.history["best"] = loop.best
    loop.seconds_before = float(saved.get("seconds", 0.0))
    loop.loss_total += float(saved["loss_sum"]) / replica.world_size  # all-reduced, it is the saved sum again
    if plan.how == "exact":
        loop.rng = tensors["rng"]  # set after the epoch's loader has started: starting it draws a random number


def _train_epoch(replica, job: TrainJob, run: _Training, data: _Data, loop: _Loop) -> None:
    """This rank's training rows of the epoch in progress, from the batch the run is at; sets
    ``loop.stopped`` when a save point says the time budget is used up.

    The master logs the step loss every ``log_every`` steps and, on XLA, the compile count after every step."""
    import torch

    master, history = replica.is_master, loop.history
    epoch, skip = loop.position.epoch, loop.position.batch

    def log_loss(step: int, loss) -> None:
        value = float(loss.item())
        history["step_loss"].append([step, value])
        loop.tracker.log(step, {"loss/step": value})
        tqdm.write(f"step {step}: loss {value:.4f}")

    data.sampler.set_epoch(epoch)
    batches = iter(replica.loader(_Skipped(data.loader, skip)))  # a resumed run goes on from the saved batch
    if loop.rng is not None:  # as they were at the saved step (the uninterrupted run's loader had started too)
        torch.set_rng_state(loop.rng["cpu"])
        replica.accelerator.set_rng_state(loop.rng["device"], replica.device)
        loop.rng = None
    loop.head = _head_snapshot(run.model) if skip == 0 else None
    started = time.monotonic()
    for batch in tqdm(batches, total=len(data.loader), initial=skip, desc=f"epoch {epoch + 1} (master)",
                      disable=not master):
        t0 = time.monotonic()
        with replica.step():
            ids, mask, y = replica.to_device(batch)
            run.optimizer.zero_grad(set_to_none=True)
            with replica.autocast():
                logits = run.net(input_ids=ids, attention_mask=mask).logits
            loss = classification_loss(logits, y, run.pos_weight, run.column)
            run.take_step(loss)
            if run.scheduler is not None:
                run.scheduler.step()
            loop.loss_total += loss.detach()
            step = loop.position.global_step + 1
            if master and step % job.log_every == 0:
                replica.after_step(log_loss, (step, loss))
        loop.position = resume.Position(epoch, loop.position.batch + 1, step)
        loop.step_seconds = max(loop.step_seconds, time.monotonic() - t0)
        if master and history["compile_counts"] is not None:
            history["compile_counts"].append(replica.compile_count())
        if loop.position.batch < len(data.loader) and _save_point(replica, job, run, loop):
            break
    loop.epoch_seconds = time.monotonic() - started


class _Skipped:
    """``loader`` without its first ``skip`` batches (they are read, not trained: a resumed epoch)."""

    def __init__(self, loader, skip: int):
        self.loader, self.skip = loader, skip

    def __len__(self) -> int:
        return len(self.loader) - self.skip

    def __iter__(self):
        import itertools

        return itertools.islice(iter(self.loader), self.skip, None)


def _head_snapshot(model) -> list:
    """CPU copies of the head's trained parameters (every recipe trains the head): an epoch that leaves
    them as they were trained nothing (:func:`_validate`)."""
    head = getattr(model, "classifier", model)
    return [p.detach().cpu().clone() for p in head.parameters() if p.requires_grad]


def _save_point(replica, job: TrainJob, run: _Training, loop: _Loop) -> bool:
    """Save the run's state when a save point is due (every ``save_every_steps`` steps, every
    ``save_every_minutes``); stop (True, ``loop.stopped``) when the time budget would run out before
    the next one. Time-based decisions are the master's, agreed by every rank every ``log_every`` steps."""
    step = loop.position.global_step
    by_steps = job.save_every_steps and step % job.save_every_steps == 0
    timed = job.save_every_minutes or job.time_budget_s
    if not by_steps and not (timed and (step % job.log_every == 0 or replica.world_size == 1)):
        return False
    save, stop = bool(by_steps), False
    if replica.is_master and timed:
        now = time.monotonic()
        save = save or bool(job.save_every_minutes and now - loop.last_save >= 60 * job.save_every_minutes)
        if job.time_budget_s:
            reserve = 2 * loop.save_seconds + job.log_every * loop.step_seconds + 30  # room to save and leave
            stop = now - loop.started + reserve >= job.time_budget_s
    if timed and replica.world_size > 1:
        save, stop = replica.agree_on(save, stop)  # the master's decision, on every rank
    if stop:
        loop.stopped = "time budget"
    if save or stop:
        _save_state(replica, job, run, loop, finished=False)
    return stop


def _save_state(replica, job: TrainJob, run: _Training, loop: _Loop, finished: bool) -> None:
    """Write the run's state (:mod:`kitlib.training.resume`) on the master; every rank learns whether it worked."""
    import torch

    t0 = time.monotonic()
    loop.history.update(finished=finished, stopped=loop.stopped, train_seconds=loop.seconds)
    loss_sum = replica.all_reduce_sum(loop.loss_total.clone()).item()
    with replica.together("saving the run's state"):
        if replica.is_master:
            tensors = {name: obj.state_dict() for name, obj in run.stateful.items() if obj is not None}
            tensors["rng"] = {"cpu": torch.get_rng_state(), "device": replica.accelerator.rng_state(replica.device)}
            resume.save_state(resume.state_dir(job.out_dir), settings=loop.settings, position=loop.position,
                              history=loop.history, best=loop.best, loss_sum=loss_sum, done_loss=loop.done_loss,
                              seconds=loop.seconds, finished=finished, model_state=_cpu(run.model.state_dict()),
                              tensors=_cpu(tensors), stale=loop.stale)
    loop.last_save = time.monotonic()
    loop.save_seconds = max(loop.save_seconds, loop.last_save - t0)


def _cpu(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


def _validate(replica, job: TrainJob, tokenizer, run: _Training, data: _Data, loop: _Loop) -> None:
    """After an epoch: predict the validation rows on every replica (each row once), record the epoch,
    keep it in ``out_dir`` when it is the best so far (:func:`_keep`), stop early after ``patience``
    epochs without a better one, and save the run's state.

    Raises:
        RuntimeError: the epoch changed none of the head's trained parameters (nothing is recorded).
    """
    epoch = loop.position.epoch
    if loop.head is not None and all(a.equal(b) for a, b in zip(loop.head, _head_snapshot(run.model))):
        rates = ", ".join(f"{g['lr']:.3g}" for g in run.optimizer.param_groups)
        raise RuntimeError(f"epoch {epoch + 1} changed no trained parameter (learning rates now {rates}): every step "
                           "ran at learning rate 0 (a schedule that had ended?) or every fp16 step overflowed. The "
                           "epoch is not recorded as trained; check the resumed schedule (kitlib.training.resume) or the precision")
    t0 = time.monotonic()
    gathered = replica.all_gather(predict_valid(run.model, data.valid_ids, data.valid_mask, data.valid_rows, job, replica))
    probs = merge_gathered(gathered.cpu().numpy(), len(data.valid_df), replica.world_size, job.batch_size)
    p, labels = np.clip(probs, 1e-7, 1 - 1e-7), data.valid_labels
    valid_loss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    auc, auc_shown = auc_text(labels, probs, slice_name(job.valid_csv, job.valid_limit), job.label_col)
    run_loss = replica.all_reduce_sum(loop.loss_total.clone()).item()  # sum over replicas and steps so far
    steps = loop.position.batch
    train_loss, loop.done_loss = (run_loss - loop.done_loss) / (steps * replica.world_size), run_loss
    record = {"epoch": epoch + 1, "train_loss": train_loss, "valid_loss": valid_loss, "valid_auc": auc,
              "train_seconds": loop.epoch_seconds, "valid_seconds": time.monotonic() - t0,
              "steps": steps, "compile_count": replica.compile_count()}
    loop.history["epochs"].append(record)
    loop.position = resume.Position(epoch + 1, 0, loop.position.global_step)
    improved = _is_better(record, loop.best, job.monitor)
    if improved:
        loop.best, loop.stale = _best(record, loop.history["epochs"], job.monitor), 0
        loop.history["best"] = loop.best
        _keep(replica, job, tokenizer, run.model, data, loop.history, probs)
    else:
        loop.stale += 1
    if job.patience and loop.stale >= job.patience and loop.position.epoch < job.epochs:
        loop.stopped = "early stopping"
    if replica.is_master:
        mark = " (best so far: kept)" if improved else f" (best: epoch {loop.best['epoch']})" if loop.best else ""
        tqdm.write(f"epoch {epoch + 1}: train loss {train_loss:.4f}, valid loss {valid_loss:.4f}, "
                   f"valid ROC AUC {auc_shown}{mark}")
        loop.tracker.log(loop.position.global_step, {"loss/train": train_loss, "loss/valid": valid_loss, "auc/valid": auc})
    _save_state(replica, job, run, loop, finished=loop.position.epoch >= job.epochs or loop.stopped == "early stopping")


def _is_better(record: dict, best: dict | None, monitor: str) -> bool:
    """Whether ``record`` (an epoch) beats ``best`` by ``monitor`` (:data:`MONITORS`); an undefined value
    (NaN: a validation set of one class) never beats a defined one, and the first epoch is always kept."""
    value = record[monitor]
    if best is None:
        return True
    if value != value:
        return best["value"] != best["value"]  # both undefined: the later epoch
    if best["value"] != best["value"]:
        return True
    return value > best["value"] if MONITORS[monitor] else value < best["value"]


def _best(record: dict, epochs: list[dict], monitor: str) -> dict:
    """What the history records of the epoch kept: ``epoch``, ``monitor``, ``value`` and why."""
    word = "highest" if MONITORS[monitor] else "lowest"
    others = ", ".join(f"epoch {e['epoch']}: {e[monitor]:.4f}" for e in epochs if e is not record)
    return {"epoch": record["epoch"], "monitor": monitor, "value": record[monitor],
            "why": f"the {word} {monitor} so far ({record[monitor]:.4f}" + (f"; {others})" if others else ")")}


def _keep(replica, job: TrainJob, tokenizer, model, data: _Data, history: dict, probs) -> None:
    """Write the epoch that is the best so far as the run's checkpoint, ``out_dir`` (master only; every
    rank learns whether it worked): the model, the tokenizer, the history so far and this epoch's
    validation predictions (what the hand-off checks)."""
    with replica.together("saving the checkpoint"):
        if replica.is_master:
            save_checkpoint(model, tokenizer, job.out_dir, history, data.valid_df["id"].tolist(), probs, job.label_col,
                            recipe=job.recipe)


def _finish(replica, job: TrainJob, tokenizer, run: _Training, data: _Data, loop: _Loop) -> None:
    """Every rank's final parameters when asked (``rank_states_dir``); the whole history into the kept
    checkpoint's ``train_history.json`` (its weights stay the best epoch's); the tracker closed."""
    import torch

    if job.rank_states_dir:
        Path(job.rank_states_dir).mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in run.model.state_dict().items()}
        torch.save(state, Path(job.rank_states_dir) / f"rank-{replica.rank}.pt")
    loop.history.update(finished=loop.stopped in (None, "early stopping"), stopped=loop.stopped,
                        train_seconds=loop.seconds)
    with replica.together("recording the history"):
        if replica.is_master:
            if (Path(job.out_dir) / HISTORY_FILE).is_file():  # (no epoch kept yet: the state holds the history)
                atomic_write(Path(job.out_dir) / HISTORY_FILE,
                             lambda tmp: Path(tmp).write_text(json.dumps(loop.history, indent=1)))
            loop.tracker.close()


def _label_values(path: str, label_col: str, limit: int | None) -> np.ndarray | None:
    """The ``label_col`` values of the first ``limit`` rows of ``path``, or None when they cannot be
    read as numbers (a missing file or column, a bad value: the replicas' read names it)."""
    import pandas as pd

    try:
        raw = pd.read_csv(path, usecols=[label_col], dtype=str, keep_default_na=False, nrows=limit)[label_col]
    except (OSError, ValueError):
        return None
    values = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    return None if np.isnan(values).any() else values


def check_labels(job: TrainJob) -> None:
    """Before any replica starts: refuse training labels of one class; say so of validation labels.

    The rows read are those the replicas will read (``train_limit``, ``valid_limit``); the rule
    and its wording are :mod:`kitlib.metrics`'. A validation set of one class is allowed (the
    loss is still measured) and printed as a note: its ROC AUC will be undefined, and why.

    Raises:
        ValueError: every training label is one class; names the file (and slice) and the class missing.
    """
    train_labels = _label_values(job.train_csv, job.label_col, job.train_limit)
    if train_labels is not None:
        check_two_classes(train_labels, slice_name(job.train_csv, job.train_limit), job.label_col)
    valid_labels = _label_values(job.valid_csv, job.label_col, job.valid_limit)
    if valid_labels is not None:
        reason = one_class_reason(valid_labels, slice_name(job.valid_csv, job.valid_limit), job.label_col)
        if reason:
            print(f"note: {reason}: its ROC AUC will be undefined (the validation loss is still reported)")


def _train_rows(job: TrainJob) -> int | None:
    """How many training rows the replicas will read (``train_limit`` applied), or None when the file
    cannot be read here (the replicas' read names the problem)."""
    values = _label_values(job.train_csv, job.label_col, job.train_limit)
    return None if values is None else len(values)


def plan_resume(job: TrainJob, rt: Runtime):
    """In the calling process, before any replica starts: the :class:`kitlib.training.resume.Resume` the run will
    take (None: a fresh run), planned with the settings the new run will have (:func:`kitlib.training.resume.plan`).

    The world size must be known (not a TPU host whose chips torch_xla counts at launch: the replicas
    then plan alone). Raises what :func:`kitlib.training.resume.plan` raises, naming the state and the fix.
    """
    found = resume.find(job.out_dir, job.checkpoint, HISTORY_FILE) if job.resume == "auto" else None
    rows = _train_rows(job)
    if found is None or rt.world_size is None or rows is None:
        return None
    from ..models.model import skeleton

    groups = recipes.param_groups(skeleton(job.checkpoint), recipes.RECIPES[job.recipe])
    steps = rows // (job.batch_size * rt.world_size)
    return resume.plan(run_settings(job, rt.world_size, steps, groups, rt.backend.precision(job.precision)), found)


def _recipe_of_run(job: TrainJob) -> TrainJob:
    """``job`` with ``recipe="auto"`` taken from the run it would continue (its state records the recipe
    it trained with), so a run trained with ``e5-fast`` continues with ``e5-fast``."""
    if job.recipe != recipes.AUTO or job.resume != "auto":
        return job
    found = resume.find(job.out_dir, job.checkpoint, HISTORY_FILE)
    recipe = (found[1].get("settings") or {}).get("recipe") if found else None
    return replace(job, recipe=recipe) if recipe in recipes.RECIPES else job


def train(job: TrainJob, rt: Runtime, start_method: str = "fork") -> dict | None:
    """Launch :func:`_mp_fn` on every replica of ``rt`` and return the master's training history.

    In a multi-host run (torchrun, TPU pod) only the process of global rank 0 returns it (the
    master wrote ``out_dir`` on its host); the others return None.

    Args:
        job: a :class:`TrainJob`.
        rt: from :func:`kitlib.run.runtime.detect_runtime`.
        start_method: ``"fork"`` or ``"spawn"``.

    ``out_dir`` ends up holding the epoch kept by ``job.monitor`` (the history says which, and why).
    A run that was cut off, or a run started from an earlier run's folder, continues that run
    (:mod:`kitlib.training.resume` states the rule) and prints how; a run stopped by its ``time_budget_s``
    returns with ``history["finished"]`` False, to be continued by the same call. Every run appends a
    row to the runs table beside ``out_dir`` (:mod:`kitlib.training.runs`).

    Raises:
        kitlib.atomic.NotOwnedError: ``out_dir`` (or its state folder), or the folder it links to, holds
            entries the kit did not write (checked first: the kit replaces only what it owns).
        ValueError: the model cannot take the run (:func:`kitlib.models.limits.preflight`: ``max_len`` above
            its positions, token ids past its embedding, a head whose labels do not name
            ``label_col``, an attention the device lacks); ``rt``'s launch mode has
            no collectives for more than one replica (``xla-cpu-processes``); the precision cannot
            train there (fp16 on XLA: :mod:`kitlib.run.backends.precision`); the training labels
            hold one class (:func:`check_labels`); the saved state cannot be continued by this run
            (another recipe, other parameter groups, no epoch left: :func:`kitlib.training.resume.plan`); the
            recipe is unknown (:func:`kitlib.training.recipe.resolve`).
        kitlib.run.runtime.ReplicaError: a replica failed; names its rank and the original error.
        kitlib.locks.FolderLocked: another run writes ``out_dir`` (its lock names the holder).
    """
    import contextlib

    from ..locks import output_lock

    locked = holds_global_rank0(rt)  # the process that writes out_dir (torchrun's other workers on this host too run train)
    with output_lock(job.out_dir, "training output folder") if locked else contextlib.nullcontext():
        return _train(job, rt, start_method)


def _train(job: TrainJob, rt: Runtime, start_method: str) -> dict | None:
    """:func:`train`'s work, under the lock of its output folder."""
    check_replaceable(job.out_dir, "the training output folder (out_dir)")
    check_replaceable(resume.state_dir(job.out_dir), "the run's state folder")
    preflight(job.checkpoint, max_len=job.max_len, device=rt.backend.device, target=job.label_col, head_for_training=True)
    job = recipes.resolve(_recipe_of_run(job))
    check_labels(job)
    rt.backend.check_training(rt, job.precision)
    plan = plan_resume(job, rt)
    if plan is not None:
        print(plan.note)
    elif job.resume == "auto" and (note := replacing_message(job.out_dir, job.checkpoint)):
        print(note)
    started = time.time()
    launch(_mp_fn, job, rt, start_method, precision=job.precision)
    if not holds_global_rank0(rt):
        return None
    kept = Path(job.out_dir) / HISTORY_FILE
    history = read_history(job.out_dir) if kept.is_file() else resume.read_run(resume.state_dir(job.out_dir))["history"]
    _record_run(job, history, started)
    if not history.get("finished"):
        print(f"note: the run stopped ({history.get('stopped')}) before its last epoch; its state is in "
              f"{resume.state_dir(job.out_dir)}: run the same again to continue it")
    return history


def _record_run(job: TrainJob, history: dict, started: float) -> None:
    """Append the run's row to the runs table beside ``out_dir`` (:mod:`kitlib.training.runs`)."""
    import datetime as dt

    best, kept = history.get("best") or {}, kept_epoch(history)

    def stamp(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    stopped = history.get("stopped")
    status = "finished" if not stopped else stopped if history.get("finished") else f"stopped: {stopped}"
    append_run(runs_table(job.out_dir), {
        "run_id": history.get("run_id"), "started": stamp(started), "ended": stamp(time.time()), "status": status,
        "git_commit": git_commit(), "kitlib": code_fingerprint(),
        "data": resume.rows_fingerprint(job.train_csv, job.train_limit), "train_csv": job.train_csv,
        "valid_csv": job.valid_csv, "checkpoint": job.checkpoint, "out_dir": job.out_dir, "recipe": job.recipe,
        "lr": job.lr, "epochs": len(history.get("epochs", [])), "batch_size": job.batch_size,
        "world_size": history.get("world_size"), "precision": history.get("precision"), "seed": job.seed,
        "tags": job.tags, "best_epoch": best.get("epoch"), "monitor": best.get("monitor"), "best_value": best.get("value"),
        "valid_auc": kept.get("valid_auc"), "train_seconds": round(float(history.get("train_seconds") or 0.0), 1),
        "params": asdict(job)})
