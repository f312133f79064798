"""Data-parallel training as one call: ``train(job, rt)`` -> the master's history.

::

    rt = detect_runtime(num_devices, accelerator)          # touches no device
    job = TrainJob(checkpoint=..., train_csv=..., valid_csv=..., out_dir=..., pattern="optimizer_step")
    history = train(job, rt)                               # launch(_mp_fn, job, rt), then the history

One replica per device runs :func:`_mp_fn` with its :class:`kitlib.replica.Replica`; the launch
mode's backend (:data:`kitlib.runtime.MODES`, :mod:`kitlib.backends`) decides the collectives
(``xla`` on a TPU and ``xla-cpu``, ``nccl`` on CUDA GPUs, ``gloo`` for eager CPU replicas), how a
step is taken (``replica.optimizer_step``) and the precision (:mod:`kitlib.backends.precision`:
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
:func:`kitlib.model.load_classifier` and :mod:`kitlib.infer` load), plus
``train_history.json``, ``valid_predictions.csv`` and ``training_state.pt`` (the optimizer's
state, for resuming: :mod:`kitlib.checkpoint`). Reading the data and saving are wrapped in
``replica.together``: a failure on one rank (a read-only folder, a full disk) ends every rank
with one error naming that rank, instead of leaving the others waiting at a barrier.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import recipe as recipes
from .atomic import atomic_dir
from .checkpoint import (HISTORY_FILE, SCORES_FILE, VALID_PREDICTIONS_FILE, continue_history,  # noqa: F401
                         replacing_message, restore_training_state, resume_message, resume_point,
                         save_training_state)
from .data import plan_batches, read_csv_checked
from .metrics import auc_text, check_two_classes, one_class_reason, roc_auc, slice_name  # noqa: F401 (roc_auc: kept here)
from .model import check_max_len, keep_head_float32, load_classifier, probabilities, with_text_prefix
from .backends.collectives import average_gradients  # noqa: F401  (was defined here)
from .backends.precision import check as check_precision
from .runtime import Runtime, holds_global_rank0, launch

PATTERNS = ("optimizer_step", "ddp")


@dataclass(frozen=True)
class TrainJob:
    """What to train (nothing about the devices: that is the runtime's); picklable for ``spawn``.

    Attributes:
        checkpoint: local transformers folder to start from (model + tokenizer), e.g. from
            :func:`kitlib.model.resolve_checkpoint`. A folder an earlier run of this module wrote
            resumes that run (:mod:`kitlib.checkpoint` states the rule).
        train_csv: training CSV (``id``, a text column, the label column).
        valid_csv: validation CSV, same columns; ROC AUC is reported on it after every epoch.
        out_dir: folder the master writes the trained checkpoint to (replaced atomically).
        pattern: ``"optimizer_step"`` or ``"ddp"``.
        epochs: passes over the training rows.
        batch_size: rows per step on each replica (global batch = batch_size x world size).
        max_len: tokens per row (longer texts truncated, shorter padded): the fixed sequence length.
        lr: AdamW learning rate of the body; 0: the recipe's (:data:`kitlib.recipe.RECIPES`).
        recipe: ``"auto"`` (the one the checkpoint calls for, :func:`kitlib.recipe.recipe_for`) or a
            name in :data:`kitlib.recipe.RECIPES`: head learning rate, schedule, frozen parameters,
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
            and what ``"auto"`` is on each device, is :mod:`kitlib.backends.precision`'s.
        tags: what this run is part of, recorded in the history (``tags``) as given: e.g.
            ``{"cv": "<id>", "fold": 2, "folds": 5}`` for one fold of a cross-validation run
            (:mod:`kitlib.folds`), or ``{"seed_group": "<id>"}``. JSON-serialisable values only.
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

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, not {self.pattern!r}")
        if self.recipe != recipes.AUTO and self.recipe not in recipes.RECIPES:
            raise ValueError(f"recipe must be {recipes.AUTO!r} or one of {', '.join(recipes.RECIPES)}, not {self.recipe!r}")
        check_precision(self.precision, "TrainJob.precision")
        for name in ("epochs", "batch_size", "max_len", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")


def classification_loss(logits, labels, pos_weight=None):
    """Mean loss of a one- or two-logit classifier head.

    Args:
        logits: float tensor ``[batch, 1]`` (sigmoid head) or ``[batch, 2]`` (softmax head).
        labels: float32 tensor ``[batch]`` in [0, 1] (soft labels allowed).
        pos_weight: None, or a float32 scalar tensor weighting the positive term of the one-logit
            loss (``binary_cross_entropy_with_logits(pos_weight=...)``; :func:`kitlib.recipe.positive_weight`).

    Returns:
        A float32 scalar tensor: binary cross-entropy with logits for one logit, cross-entropy
        against ``[1 - y, y]`` for two.

    Raises:
        ValueError: any other number of logits.
    """
    import torch
    import torch.nn.functional as F

    if logits.shape[-1] == 1:
        return F.binary_cross_entropy_with_logits(logits[:, 0].float(), labels, pos_weight=pos_weight)
    if logits.shape[-1] == 2:
        return F.cross_entropy(logits.float(), torch.stack([1 - labels, labels], dim=1))
    raise ValueError(f"expected 1 or 2 logits per row, got {logits.shape[-1]}")


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
            out.append(probabilities(model(input_ids=ids, attention_mask=mask).logits))
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

    @property
    def stateful(self) -> dict:
        """The objects whose state a checkpoint keeps, by name (:func:`kitlib.checkpoint.save_training_state`)."""
        return {"optimizer": self.optimizer, "scaler": self.take_step.scaler,
                **({"scheduler": self.scheduler} if self.scheduler else {})}


def _mp_fn(replica, job: TrainJob) -> None:
    """One replica's training: train, validate after every epoch, and (master) save the checkpoint.

    The phases, each a function: :func:`_load_model`, :func:`_read_data`, :func:`_optimization`,
    :func:`_start_history` (resuming, :mod:`kitlib.checkpoint`), then per epoch :func:`_train_epoch` and
    :func:`_validate`, and last :func:`_save`.

    Args:
        replica: the :class:`kitlib.replica.Replica` the launcher built.
        job: a :class:`TrainJob`.

    Raises:
        ValueError: the training rows give no full global batch, or a CSV fails
            :func:`kitlib.data.read_csv_checked`.
    """
    import torch

    replica.use_compile_cache(job.compile_cache_dir)
    job = recipes.resolve(job)  # (train() has already; _mp_fn may also be launched directly)
    with replica.together("reading the data and loading the model"):
        tokenizer, model = _load_model(replica, job)
        data = _read_data(replica, job, tokenizer)
    run = _optimization(replica, job, model, data)
    history, resumed = _start_history(replica, job, run, data)
    global_step, done_loss = resumed.steps_done if resumed else 0, 0.0
    # One running total for the whole run: a fresh zero tensor per epoch would be a new little
    # XLA graph at the next epoch's first step.
    loss_total = torch.zeros((), device=replica.device)
    probs = None
    for epoch in range(resumed.epochs_done if resumed else 0, job.epochs):
        t0 = time.perf_counter()
        global_step = _train_epoch(replica, job, run, data, epoch, global_step, loss_total, history)
        run_loss = replica.all_reduce_sum(loss_total.clone()).item()  # sum over replicas and steps so far
        train_loss, done_loss = (run_loss - done_loss) / (len(data.loader) * replica.world_size), run_loss
        probs = _validate(replica, job, run, data, epoch, train_loss, time.perf_counter() - t0, history)
    _save(replica, job, tokenizer, run, data, history, probs, global_step)


def _load_model(replica, job: TrainJob):
    """``(tokenizer, model)``: the checkpoint with the recipe's frozen parts, the float32 head and the
    job's dropout, on the replica's device in train mode (the same head on every replica: one seed)."""
    import torch

    torch.manual_seed(job.seed)  # a freshly initialised head is then the same on every replica
    tokenizer, model = load_classifier(job.checkpoint, xla=replica.xla, head_for_training=True)
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
    optimizer and schedule, the step (backward, gradient exchange, optimizer step, scaler) and the
    loss's positive weight."""
    import torch

    recipe = recipes.RECIPES[job.recipe]
    net = replica.wrap_model(model, job.pattern)
    optimizer = recipes.make_optimizer(model, recipe, job.lr, job.weight_decay)
    take_step = replica.optimizer_step(optimizer, model, net)  # backward, exchange, step
    scheduler = recipes.make_scheduler(optimizer, recipe, len(data.loader) * job.epochs)
    pos_weight = recipes.positive_weight(data.train_df[job.label_col].to_numpy(), recipe)
    if pos_weight is not None:
        pos_weight = torch.tensor(pos_weight, dtype=torch.float32, device=replica.device)
    return _Training(model, net, optimizer, take_step, scheduler, pos_weight)


def _start_history(replica, job: TrainJob, run: _Training, data: _Data):
    """``(history, resumed)``: the run's history, continued from the earlier run when this one resumes
    (:mod:`kitlib.checkpoint`: restored after every stateful object exists), and the resume point or None."""
    from tqdm.auto import tqdm

    resumed = resume_point(job.checkpoint)
    restored = restore_training_state(job.checkpoint, **run.stateful)[1] if resumed else []
    history = {"world_size": replica.world_size, "mode": replica.mode.name, "collectives": replica.mode.collectives,
               "pattern": job.pattern, "ddp_wrapped": run.net is not run.model, "precision": replica.precision.name,
               "grad_scaler": run.take_step.scaler is not None, "config": asdict(job),
               "recipe": recipes.describe(recipes.RECIPES[job.recipe], job.lr),
               "tags": dict(job.tags),
               "steps_per_epoch": len(data.loader), "global_batch": job.batch_size * replica.world_size,
               "epochs": [], "step_loss": [], "compile_counts": None if replica.compile_count() is None else []}
    continue_history(history, resumed)
    if replica.is_master and resumed:
        tqdm.write(f"resumed from {job.checkpoint} after epoch {resumed.epochs_done}; restored: {', '.join(restored) or 'nothing'}")
    return history, resumed


def _train_epoch(replica, job: TrainJob, run: _Training, data: _Data, epoch: int, global_step: int,
                 loss_total, history: dict) -> int:
    """One pass over this rank's training rows; returns the global step count after it.

    ``loss_total`` (a scalar tensor on the device) gains every step's loss; the master logs the step
    loss every ``log_every`` steps and, on XLA, the compile count after every step."""
    from tqdm.auto import tqdm

    master = replica.is_master

    def log_loss(step: int, loss) -> None:
        value = float(loss.item())
        history["step_loss"].append([step, value])
        tqdm.write(f"step {step}: loss {value:.4f}")

    data.sampler.set_epoch(epoch)
    for batch in tqdm(replica.loader(data.loader), total=len(data.loader), desc=f"epoch {epoch + 1} (master)",
                      disable=not master):
        with replica.step():
            ids, mask, y = replica.to_device(batch)
            run.optimizer.zero_grad(set_to_none=True)
            with replica.autocast():
                logits = run.net(input_ids=ids, attention_mask=mask).logits
            loss = classification_loss(logits, y, run.pos_weight)
            run.take_step(loss)
            if run.scheduler is not None:
                run.scheduler.step()
            loss_total += loss.detach()
            global_step += 1
            if master and global_step % job.log_every == 0:
                replica.after_step(log_loss, (global_step, loss))
        if master and history["compile_counts"] is not None:
            history["compile_counts"].append(replica.compile_count())
    return global_step


def _validate(replica, job: TrainJob, run: _Training, data: _Data, epoch: int, train_loss: float,
              train_seconds: float, history: dict) -> np.ndarray:
    """Predict the validation rows on every replica, gather them (each row once), record the epoch's
    figures in ``history`` and return the probabilities (float32 ``[validation rows]``)."""
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    gathered = replica.all_gather(predict_valid(run.model, data.valid_ids, data.valid_mask, data.valid_rows, job, replica))
    probs = merge_gathered(gathered.cpu().numpy(), len(data.valid_df), replica.world_size, job.batch_size)
    p = np.clip(probs, 1e-7, 1 - 1e-7)
    labels = data.valid_labels
    valid_loss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    auc, auc_shown = auc_text(labels, probs, slice_name(job.valid_csv, job.valid_limit), job.label_col)
    history["epochs"].append({"epoch": epoch + 1, "train_loss": train_loss, "valid_loss": valid_loss,
                              "valid_auc": auc, "train_seconds": train_seconds,
                              "valid_seconds": time.perf_counter() - t0, "steps": len(data.loader),
                              "compile_count": replica.compile_count()})
    if replica.is_master:
        tqdm.write(f"epoch {epoch + 1}: train loss {train_loss:.4f}, valid loss {valid_loss:.4f}, "
                   f"valid ROC AUC {auc_shown}, {train_seconds:.1f} s training")
    return probs


def _save(replica, job: TrainJob, tokenizer, run: _Training, data: _Data, history: dict, probs, global_step: int):
    """Every rank's final parameters when asked (``rank_states_dir``), then the master's checkpoint
    (every rank learns whether the save worked: ``replica.together``)."""
    import torch

    if job.rank_states_dir:
        Path(job.rank_states_dir).mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in run.model.state_dict().items()}
        torch.save(state, Path(job.rank_states_dir) / f"rank-{replica.rank}.pt")
    with replica.together("saving the checkpoint"):
        if replica.is_master:
            save_checkpoint(run.model, tokenizer, job.out_dir, history, data.valid_df["id"].tolist(), probs,
                            job.label_col, training_state=dict(global_step=global_step, **run.stateful))


def save_checkpoint(model, tokenizer, out_dir: str | os.PathLike, history: dict, valid_ids: list[str],
                    valid_probs: np.ndarray, label_col: str, training_state: dict | None = None) -> Path:
    """Write the trained checkpoint folder atomically (master only) and return its path.

    The folder holds ``save_pretrained`` of ``model`` (moved to CPU) and ``tokenizer``,
    ``train_history.json`` (``history``), ``valid_predictions.csv`` (``id`` and ``label_col``:
    the in-memory model's last-epoch validation probabilities) and, given ``training_state``
    (the keyword arguments of :func:`kitlib.checkpoint.save_training_state`: ``global_step``,
    ``optimizer``, ...), ``training_state.pt``, from which a later run resumes. It is built under
    a temporary name beside ``out_dir`` and renamed into place, replacing an older one.
    """
    import pandas as pd

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        if training_state is not None:  # before the model moves: the optimizer state is taken as it is
            save_training_state(tmp, **training_state)
        model.to("cpu").save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / HISTORY_FILE).write_text(json.dumps(history, indent=1))
        pd.DataFrame({"id": valid_ids, label_col: valid_probs}).to_csv(tmp / VALID_PREDICTIONS_FILE, index=False)
    return out_dir


def read_history(out_dir: str | os.PathLike) -> dict:
    """The ``train_history.json`` of a trained checkpoint folder (see :func:`_mp_fn`).

    Keys: ``world_size``, ``mode``, ``collectives``, ``pattern``, ``ddp_wrapped``, ``precision``,
    ``grad_scaler`` (True: fp16 steps went through a ``GradScaler``), ``config``, ``steps_per_epoch``,
    ``global_batch``, ``epochs`` (one dict per epoch: ``train_loss``, ``valid_loss``,
    ``valid_auc``, ``train_seconds``, ``valid_seconds``, ``steps``, ``compile_count``),
    ``step_loss`` (``[step, loss]`` pairs logged by the master), ``compile_counts`` (XLA: the
    master's compile count after each step; None otherwise).

    Raises:
        FileNotFoundError: no history in ``out_dir`` (training did not finish).
    """
    p = Path(out_dir) / HISTORY_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no training history (did the training launch finish?)")
    return json.loads(p.read_text())


def save_scores(out_dir: str | os.PathLike, scores: dict) -> Path:
    """Write ``scores`` (the saved checkpoint's held-out ROC AUC, overall and per language, as the
    training notebook measures it through the inference path) to ``<out_dir>/heldout_scores.json``,
    atomically (:func:`kitlib.atomic.atomic_write`)."""
    from .atomic import atomic_write

    path = Path(out_dir) / SCORES_FILE
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(scores, indent=1)))
    return path


def checkpoint_report(checkpoint: str | os.PathLike) -> dict | None:
    """What a checkpoint trained by this kit recorded about its training, or None for any other folder.

    Returns:
        ``trained_from`` (the starting checkpoint), ``recipe`` and ``lr``, ``epochs``, ``max_len``,
        ``batch_size``, ``world_size``, ``train_rows_csv``, ``last_epoch`` (its ``train_loss``,
        ``valid_loss``, ``valid_auc``, ``train_seconds``), ``seconds_per_step``, and
        ``heldout`` (``heldout_scores.json``, or None).
    """
    p = Path(checkpoint)
    if not (p / HISTORY_FILE).is_file():
        return None
    h = read_history(p)
    cfg, last = h.get("config", {}), h["epochs"][-1] if h.get("epochs") else {}
    steps = sum(e.get("steps", 0) for e in h.get("epochs", []))
    seconds = sum(e.get("train_seconds", 0.0) for e in h.get("epochs", []))
    scores = p / SCORES_FILE
    return {"checkpoint": str(p), "trained_from": cfg.get("checkpoint"), "recipe": cfg.get("recipe"), "lr": cfg.get("lr"),
            "epochs": cfg.get("epochs"), "max_len": cfg.get("max_len"), "batch_size": cfg.get("batch_size"),
            "world_size": h.get("world_size"), "train_csv": cfg.get("train_csv"), "valid_csv": cfg.get("valid_csv"),
            "last_epoch": {k: last.get(k) for k in ("epoch", "train_loss", "valid_loss", "valid_auc", "train_seconds")},
            "seconds_per_step": seconds / steps if steps else None,
            "heldout": json.loads(scores.read_text()) if scores.is_file() else None}


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


def train(job: TrainJob, rt: Runtime, start_method: str = "fork") -> dict | None:
    """Launch :func:`_mp_fn` on every replica of ``rt`` and return the master's training history.

    In a multi-host run (torchrun, TPU pod) only the process of global rank 0 returns it (the
    master wrote ``out_dir`` on its host); the others return None.

    Args:
        job: a :class:`TrainJob`.
        rt: from :func:`kitlib.runtime.detect_runtime`.
        start_method: ``"fork"`` or ``"spawn"``.

    Starting from a folder an earlier run wrote resumes that run (:mod:`kitlib.checkpoint` states
    the rule) and prints so.

    Raises:
        ValueError: ``max_len`` is above the model's position table; ``rt``'s launch mode has
            no collectives for more than one replica (``xla-cpu-processes``); the precision cannot
            train there (fp16 on XLA: :mod:`kitlib.backends.precision`); the training labels
            hold one class (:func:`check_labels`); a resumed run has no epoch left to train; the
            recipe is unknown (:func:`kitlib.recipe.resolve`).
        kitlib.runtime.ReplicaError: a replica failed; names its rank and the original error.
    """
    check_max_len(job.checkpoint, job.max_len)
    job = recipes.resolve(job)
    check_labels(job)
    resumed = resume_point(job.checkpoint)
    if resumed:
        print(resume_message(resumed, job.epochs, asdict(job)))
    elif note := replacing_message(job.out_dir, job.checkpoint):
        print(note)
    rt.backend.check_training(rt, job.precision)
    launch(_mp_fn, job, rt, start_method, precision=job.precision)
    return read_history(job.out_dir) if holds_global_rank0(rt) else None
