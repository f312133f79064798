"""The replica program of a training run: ``_mp_fn(replica, plan)``, one per device, and its phases.

:func:`kitlib.training.train.train` makes the run's :class:`kitlib.training.plan.Plan` once in the calling
process and launches :func:`_mp_fn` with it; every replica reads the plan (recipe, precision, batch, steps
per epoch, the resume decision, the data fingerprint) and never works any of it out again.

One replica per device runs :func:`_mp_fn` with its :class:`kitlib.run.replica.Replica`; the launch
mode's backend (:data:`kitlib.run.runtime.MODES`, :mod:`kitlib.run.backends`) decides the collectives
(``xla`` on a TPU and ``xla-cpu``, ``nccl`` on CUDA GPUs, ``gloo`` for eager CPU replicas), how a
step is taken (``replica.optimizer_step``) and the precision (:mod:`kitlib.run.backends.precision`:
fp16 always through a ``GradScaler``). The replica program never branches on it.

Patterns (:attr:`kitlib.training.job.TrainJob.pattern`):

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
The model kind (:mod:`kitlib.models.kinds`, bound once in the plan) is asked for the rows' tokens, the loss
and the probabilities; with ``lora_r`` the model is wrapped in LoRA adapters (:mod:`kitlib.models.adapters`)
and only they and the head train. Loss is logged and tqdm shown on the master (rank 0) only. The master alone writes
``out_dir``: ``save_pretrained`` of the model (with LoRA: only the adapters and the head, beside the
base's ``config.json`` and a record naming the base) and the tokenizer (what
:func:`kitlib.models.open.open_model` opens for :mod:`kitlib.infer` and the hand-off), plus
``train_history.json`` and ``valid_predictions.csv``; the run's whole state (for resuming, and
for a later run that continues this one) is kept beside it in ``<out_dir>.state/``
(:mod:`kitlib.training.resume`), and one row per run in ``artifacts/runs.csv`` (:mod:`kitlib.training.runs`). Reading the data and saving are wrapped in
``replica.together``: a failure on one rank (a read-only folder, a full disk) ends every rank
with one error naming that rank, instead of leaving the others waiting at a barrier.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tqdm.auto import tqdm

from . import recipe as recipes
from . import resume
from .job import MONITORS, TrainJob
from .plan import Plan, trainable
from .runs import Tracker
from ..atomic import atomic_write, real_target
from ..checkpoint import HISTORY_FILE, save_checkpoint
from ..data import plan_batches, read_csv_checked, row_fields
from ..metrics import auc_text, slice_name
from ..models.model import prediction_column


def job_column(model, job: TrainJob) -> int:
    """The head's column of ``job.label_col`` (:func:`kitlib.models.model.prediction_column`;
    :func:`kitlib.training.train.train` refused a head that does not name it before any replica started)."""
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


def tokenize_rows(kind, tokenizer, texts: list[str], max_len: int, rows: list[dict] | None = None):
    """``(input_ids, attention_mask)``: int64 ``[len(texts), max_len]``, the rows as ``kind`` renders them
    (:meth:`kitlib.models.kinds.Kind.encode`: its text prefix, the answer-token prompt with ``rows``' fields:
    :func:`kitlib.data.row_fields`), right-padded to
    ``max_len`` (one training shape) and checked (:meth:`kitlib.models.kinds.Kind.check_tokens`)."""
    import torch.nn.functional as F

    enc = kind.encode(tokenizer, texts, max_len, rows)
    extra = max_len - enc["input_ids"].shape[1]
    ids = F.pad(enc["input_ids"], (0, extra), value=tokenizer.pad_token_id)
    mask = F.pad(enc["attention_mask"], (0, extra), value=0)
    kind.check_tokens(ids, mask)
    return ids, mask


def predict_valid(model, input_ids, attention_mask, rows: np.ndarray, job: TrainJob, replica, kind):
    """Probabilities for the validation rows of one replica, left on the device; ``kind`` (bound to
    ``model``'s head) reads them (:meth:`kitlib.models.kinds.Kind.probabilities`).

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
            out.append(kind.probabilities(model, ids, mask))
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
    kind: "object" = None  # the model kind, bound to the model's head (Kind.bind_model): loss and probabilities

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
    steps: int = 0  # optimizer steps taken over every call: the history's and the tracker's step axis, never going back
                    # (position.global_step counts in this call's batch, so a rebuilt schedule sets it back)
    started: float = field(default_factory=time.monotonic)
    last_save: float = field(default_factory=time.monotonic)
    save_seconds: float = 0.0  # the longest state save so far
    step_seconds: float = 0.0  # the longest step so far
    valid_seconds: float | None = None  # the longest validation so far (prediction and keeping the epoch; None: none yet)
    epoch_seconds: float = 0.0  # the epoch in progress, in this call
    first_step_seconds: float = 0.0  # the epoch's first step in this call (on XLA, its compilation; kitlib.training.deadline)
    epoch_started: float = 0.0  # when this call's part of the epoch in progress began (time.monotonic())
    epoch_steps: int = 0  # steps this call has taken in the epoch in progress
    head: list | None = None  # the head's parameters when the epoch began (None: a resumed epoch)
    rng: dict | None = None  # RNG states to set once the resumed epoch's loader has started (:func:`_train_epoch`)
    tracker: "object" = None

    @property
    def seconds(self) -> float:
        return self.seconds_before + time.monotonic() - self.started


def _mp_fn(replica, plan: Plan) -> None:
    """One replica's training: train, validate after every epoch, keep the best epoch, save the state.

    The phases, each a function: :func:`_load_model`, :func:`_read_data`, :func:`_optimization`,
    :func:`_start` (a fresh run, or a resumed one: :mod:`kitlib.training.resume`), then per epoch
    :func:`_train_epoch` (with its save points, :func:`_save_point`) and :func:`_validate` (which keeps
    the best epoch in ``out_dir``: :func:`_keep`), and last :func:`_finish`.

    Args:
        replica: the :class:`kitlib.run.replica.Replica` the launcher built (``replica.precision`` is
            ``plan.precision``: the launch hands it over).
        plan: the run's :class:`kitlib.training.plan.Plan`, made once in the calling process
            (:func:`kitlib.training.plan.make_plan`): read here, never worked out again.

    Raises:
        ValueError: the training rows give no full global batch, or a CSV fails
            :func:`kitlib.data.read_csv_checked`; the saved state cannot be resumed (:func:`kitlib.training.resume.plan`,
            on a TPU host whose world size the launch found).
        RuntimeError: an epoch changed no trained parameter (:func:`_validate`); the loader's steps per
            epoch differ from the plan's (:func:`_start`).
    """
    from .session import sigterm_saves

    with sigterm_saves():  # SIGTERM: the state saved at the next step, then the run returns (stopped "SIGTERM")
        _run(replica, plan)


def _run(replica, plan: Plan) -> None:
    """:func:`_mp_fn`'s phases, in order."""
    job = plan.job
    replica.use_compile_cache(job.compile_cache_dir)
    with replica.together("reading the data and loading the model"):
        tokenizer, model = _load_model(replica, plan)
        data = _read_data(replica, job, tokenizer, plan.kind)
    run = _optimization(replica, plan, model, data)
    with replica.together("restoring the run's state"):
        loop = _start(replica, plan, run, data)
    while loop.position.epoch < job.epochs and loop.stopped is None:
        _train_epoch(replica, job, run, data, loop)
        if loop.stopped is None:
            _validate(replica, job, tokenizer, run, data, loop)
    _finish(replica, job, tokenizer, run, data, loop)


def _load_model(replica, plan: Plan):
    """``(tokenizer, model)``: the checkpoint loaded as its kind says, made trainable as the run trains it
    (:func:`kitlib.training.plan.trainable`: the recipe's frozen parts, or with LoRA only the adapters and the
    head), the float32 head and the job's dropout, on the replica's device in train mode (the same head and adapters on
    every replica: one seed)."""
    import torch

    from ..models.open import open_model

    job, kind = plan.job, plan.kind
    torch.manual_seed(job.seed)  # a freshly initialised head is then the same on every replica
    tokenizer = kind.load_tokenizer(job.checkpoint)
    # 8/4 bits: bitsandbytes quantizes as it loads, onto the device (a quantized model is not moved after)
    model = open_model(job.checkpoint, kind=kind, width=plan.weights.width if plan.quantized else plan.weights_dtype,
                       device=replica.device, precision=plan.precision, xla=replica.xla, head_for_training=True)
    model = trainable(model, job, kind, plan.recipe)
    kind.keep_head_float32(model)
    if job.dropout is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = job.dropout
    return tokenizer, model.train() if plan.quantized else model.train().to(replica.device)


def _read_data(replica, job: TrainJob, tokenizer, kind) -> _Data:
    """The training loader (this rank's share: ``DistributedSampler(drop_last=True)``, fixed
    ``[batch_size, max_len]`` batches) and the validation rows, tokenized.

    Raises:
        ValueError: a CSV fails :func:`kitlib.data.read_csv_checked`, or the rows give no full global batch.
    """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    labels = (job.label_col,)
    train_df, valid_df = (read_csv_checked(path, text_col=job.text_col, label_cols=labels, limit=limit,
                                           fields=kind.row_columns(path))
                          for path, limit in ((job.train_csv, job.train_limit), (job.valid_csv, job.valid_limit)))
    train_set = TensorDataset(
        *tokenize_rows(kind, tokenizer, train_df["text"].tolist(), job.max_len, row_fields(train_df)),
        torch.tensor(train_df[job.label_col].to_numpy(np.float32)),
    )
    sampler = DistributedSampler(train_set, num_replicas=replica.world_size, rank=replica.rank, shuffle=True,
                                 seed=job.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=job.batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"{job.train_csv}: {len(train_df)} training rows give no full global batch of "
                         f"{job.batch_size} x {replica.world_size} replicas; lower batch_size or add rows")
    valid_ids, valid_mask = tokenize_rows(kind, tokenizer, valid_df["text"].tolist(), job.max_len, row_fields(valid_df))
    return _Data(train_df, valid_df, loader, sampler, valid_ids, valid_mask,
                 validation_rows(len(valid_df), replica.world_size, replica.rank, job.batch_size),
                 valid_df[job.label_col].to_numpy(np.float32))


def _optimization(replica, plan: Plan, model, data: _Data) -> _Training:
    """The module to call (DDP where the pattern and the collectives call for it), the recipe's
    optimizer (its schedule comes with :func:`_start`), the step (backward, gradient exchange,
    optimizer step, scaler) and the loss's positive weight."""
    import torch

    job, recipe = plan.job, plan.recipe
    net = replica.wrap_model(model, job.pattern)
    optimizer = recipes.make_optimizer(model, recipe, job.lr, job.weight_decay)
    take_step = replica.optimizer_step(optimizer, model, net)  # backward, exchange, step
    pos_weight = recipes.positive_weight(data.train_df[job.label_col].to_numpy(), recipe)
    if pos_weight is not None:
        pos_weight = torch.tensor(pos_weight, dtype=torch.float32, device=replica.device)
    return _Training(model, net, optimizer, take_step, None, pos_weight, plan.kind.bind_model(model))


def _start(replica, plan: Plan, run: _Training, data: _Data) -> _Loop:
    """The run's schedule and history, fresh or resumed as the plan decided (:mod:`kitlib.training.resume`:
    restored after every stateful object exists). A TPU host's plan gets its world size here
    (:meth:`kitlib.training.plan.Plan.for_world`; a no-op wherever the calling process knew it).

    Raises:
        RuntimeError: this replica's loader does not give the plan's steps per epoch.
    """
    import torch

    groups = tuple((len(g["params"]), int(sum(p.numel() for p in g["params"]))) for g in run.optimizer.param_groups)
    plan = plan.for_world(replica.world_size, groups)
    if len(data.loader) != plan.steps_per_epoch:
        raise RuntimeError(f"the loader gives {len(data.loader)} steps an epoch, the plan {plan.steps_per_epoch} "
                           f"({plan.train_rows} rows // global batch {plan.global_batch}): the rows read differ")
    job, settings, decision = plan.job, plan.settings(groups), plan.resume
    done = decision.position.global_step if decision else 0
    run.scheduler = recipes.make_scheduler(run.optimizer, plan.recipe, settings.total_steps, done)
    history = {"run_id": uuid.uuid4().hex[:12], "world_size": replica.world_size, "mode": replica.mode.name,
               "collectives": replica.mode.collectives, "pattern": job.pattern, "ddp_wrapped": run.net is not run.model,
               "precision": plan.precision.name, "grad_scaler": run.take_step.scaler is not None,
               "config": asdict(job), "model_settings": settings.model_settings, "tags": dict(job.tags),
               "recipe": recipes.describe(plan.recipe, job.lr),
               "steps_per_epoch": plan.steps_per_epoch, "global_batch": plan.global_batch,
               "epochs": [], "step_loss": [], "compile_counts": None if replica.compile_count() is None else [],
               "monitor": job.monitor, "best": None, "finished": False, "stopped": None}
    loop = _Loop(history, settings, decision.position if decision else resume.Position(),
                 torch.zeros((), device=replica.device))
    if decision is not None:
        _restore(replica, job, run, decision, loop)
    if replica.is_master:  # (train() printed the plan's notes); a resumed run's curves drop what came after its state
        loop.tracker = Tracker(job.tracker, Path(str(real_target(job.out_dir)) + ".tensorboard") / loop.history["run_id"],
                               purge_step=loop.steps + 1 if decision is not None else None)
    return loop


def _restore(replica, job: TrainJob, run: _Training, decision: resume.Resume, loop: _Loop) -> None:
    """Load a resumed run's weights, optimizer (scheduler, scaler when continued exactly), RNG states,
    loss sums and history into this replica (:class:`kitlib.training.resume.Resume`)."""
    import torch

    old = decision.history
    for key in ("epochs", "step_loss"):
        loop.history[key] = list(old.get(key, []))
    if loop.history["compile_counts"] is not None:
        loop.history["compile_counts"] = list(old.get("compile_counts") or [])
    loop.history["run_id"] = old.get("run_id", loop.history["run_id"])
    loop.history["resumed"] = [*old.get("resumed", []), {"from": str(decision.folder), "how": decision.how,
                                                         "at_step": decision.position.global_step, "note": decision.note}]
    loop.steps = decision.position.global_step  # (an older kit's folder: its epochs' steps)
    if decision.how == "weights":  # an older kit's folder: its weights are the model already loaded
        return
    weights, tensors = resume.load_tensors(decision.folder)
    if job.lora is None:
        run.model.load_state_dict(weights)
    else:  # the trained parameters only; the frozen base is the checkpoint's, loaded again (its fingerprint checked)
        missing = set(_trained_state(run.model, job)) - set(weights)
        if missing:
            raise RuntimeError(f"{decision.folder}: the saved state lacks {len(missing)} trained tensor(s) of this run "
                               f"(e.g. {sorted(missing)[0]}); start afresh (resume='never')")
        run.model.load_state_dict(weights, strict=False)
    # the new run's rates (set by make_scheduler to the step reached) and weight decay: loading the
    # optimizer's state brings the saved ones, which are right only when the run continues exactly
    rates = [{k: g[k] for k in ("lr", "weight_decay")} for g in run.optimizer.param_groups]
    run.optimizer.load_state_dict(tensors["optimizer"])  # moments move to the parameters' device
    if decision.restores_schedule and run.scheduler is not None and tensors.get("scheduler") is not None:
        run.scheduler.load_state_dict(tensors["scheduler"])
    elif not decision.restores_schedule:
        for group, kept in zip(run.optimizer.param_groups, rates):
            group.update(kept)
    if run.take_step.scaler is not None and tensors.get("scaler") is not None:
        run.take_step.scaler.load_state_dict(tensors["scaler"])
    saved = decision.saved
    loop.best, loop.stale, loop.done_loss = saved.get("best"), int(saved.get("stale", 0)), float(saved["done_loss"])
    loop.history["best"] = loop.best
    loop.seconds_before = float(saved.get("seconds", 0.0))
    loop.steps = int(saved.get("steps", saved["position"]["global_step"]))
    loop.loss_total += float(saved["loss_sum"]) / replica.world_size  # all-reduced, it is the saved sum again
    if decision.how == "exact":
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
    loop.head = _head_snapshot(run.model, run.kind) if skip == 0 else None
    started = loop.epoch_started = time.monotonic()
    loop.epoch_steps = 0
    for batch in tqdm(batches, total=len(data.loader), initial=skip, desc=f"epoch {epoch + 1} (master)",
                      disable=not master):
        t0 = time.monotonic()
        with replica.step():
            ids, mask, y = replica.to_device(batch)
            run.optimizer.zero_grad(set_to_none=True)
            with replica.autocast():  # the kind's float32 positive logit and its loss (kitlib.models.kinds)
                loss = run.kind.loss(run.net, ids, mask, y, run.pos_weight)
            run.take_step(loss)
            if run.scheduler is not None:
                run.scheduler.step()
            loop.loss_total += loss.detach()
            loop.steps += 1
            if master and loop.steps % job.log_every == 0:
                replica.after_step(log_loss, (loop.steps, loss))
        loop.position = resume.Position(epoch, loop.position.batch + 1, loop.position.global_step + 1)
        loop.step_seconds = max(loop.step_seconds, time.monotonic() - t0)
        loop.epoch_steps += 1
        if loop.epoch_steps == 1:
            loop.first_step_seconds = time.monotonic() - t0
        if master and history["compile_counts"] is not None:
            history["compile_counts"].append(replica.compile_count())
        if loop.position.batch < len(data.loader) and _save_point(replica, job, run, loop, data):
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


def _head_snapshot(model, kind) -> list:
    """CPU copies of the head's trained parameters (every recipe trains the head; the kind names it:
    :attr:`kitlib.models.kinds.Kind.head`; the answer-token form has none: every trained parameter): an
    epoch that leaves them as they were trained nothing (:func:`_validate`)."""
    heads = [getattr(model, name) for name in kind.head if getattr(model, name, None) is not None] or [model]
    return [p.detach().cpu().clone() for head in heads for p in head.parameters() if p.requires_grad]


def _reserve(replica, job: TrainJob, loop: _Loop, data: _Data) -> float:
    """:func:`kitlib.training.session.reserve_s` for this save point (a validation not yet measured is
    estimated at the epoch's mean step time per validation batch: a forward pass takes less than a step; the
    longest step, one slow step times every batch, stopped a run that had time: kitlib.training.deadline)."""
    from .session import reserve_s

    valid_s = loop.valid_seconds
    if valid_s is None:
        mean_step = (time.monotonic() - loop.epoch_started) / max(loop.epoch_steps, 1)
        valid_s = -(-len(data.valid_rows) // job.batch_size) * mean_step + loop.save_seconds
    return reserve_s(step_s=loop.step_seconds, save_s=loop.save_seconds, valid_s=valid_s,
                     steps_to_check=job.log_every if replica.world_size > 1 else 1,
                     steps_left_in_epoch=len(data.loader) - loop.position.batch)


def _save_point(replica, job: TrainJob, run: _Training, loop: _Loop, data: _Data) -> bool:
    """Save the run's state when a save point is due (every ``save_every_steps`` steps, every
    ``save_every_minutes``); stop (True, ``loop.stopped``) when the time budget would run out before
    the next one, or when SIGTERM arrived (:func:`kitlib.training.session.stop_requested`). These decisions are
    the master's, agreed by every rank every ``log_every`` steps (every step with one replica)."""
    from .session import STOPPED_BY_SIGTERM, stop_requested

    step = loop.position.global_step
    by_steps = job.save_every_steps and step % job.save_every_steps == 0
    timed = job.save_every_minutes or job.time_budget_s
    check = step % job.log_every == 0 or replica.world_size == 1
    if not by_steps and not check:
        return False
    save, stop, term = bool(by_steps), False, False
    if replica.is_master and timed:
        now = time.monotonic()
        save = save or bool(job.save_every_minutes and now - loop.last_save >= 60 * job.save_every_minutes)
        if job.time_budget_s:
            stop = now - loop.started + _reserve(replica, job, loop, data) >= job.time_budget_s
    if replica.is_master and stop_requested():
        stop = term = True
    if check and replica.world_size > 1:
        save, stop = replica.agree_on(save, stop)  # the master's decision, on every rank
    if stop:
        loop.stopped = STOPPED_BY_SIGTERM if term or stop_requested() else "time budget"
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
                              seconds=loop.seconds, finished=finished, model_state=_cpu(_trained_state(run.model, job)),
                              tensors=_cpu(tensors), stale=loop.stale, steps=loop.steps)
    loop.last_save = time.monotonic()
    loop.save_seconds = max(loop.save_seconds, loop.last_save - t0)


def _trained_state(model, job: TrainJob) -> dict:
    """What a run's state keeps of the model: its whole ``state_dict()``, or with LoRA the trained tensors only
    (the adapters and the head: megabytes; a base in 8/4 bits cannot even be loaded back from its state dict)."""
    state = model.state_dict()
    if job.lora is None:
        return state
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in state.items() if k in trained}


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
    if loop.head is not None and all(a.equal(b) for a, b in zip(loop.head, _head_snapshot(run.model, run.kind))):
        rates = ", ".join(f"{g['lr']:.3g}" for g in run.optimizer.param_groups)
        raise RuntimeError(f"epoch {epoch + 1} changed no trained parameter (learning rates now {rates}): every step "
                           "ran at learning rate 0 (a schedule that had ended?) or every fp16 step overflowed. The "
                           "epoch is not recorded as trained; check the resumed schedule (kitlib.training.resume) or the precision")
    t0 = time.monotonic()
    gathered = replica.all_gather(predict_valid(run.model, data.valid_ids, data.valid_mask, data.valid_rows, job, replica, run.kind))
    probs = merge_gathered(gathered.cpu().numpy(), len(data.valid_df), replica.world_size, job.batch_size)
    p, labels = np.clip(probs, 1e-7, 1 - 1e-7), data.valid_labels
    valid_loss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    auc, auc_shown = auc_text(labels, probs, slice_name(job.valid_csv, job.valid_limit), job.label_col)
    run_loss = replica.all_reduce_sum(loop.loss_total.clone()).item()  # sum over replicas and steps so far
    steps = loop.position.batch
    train_loss, loop.done_loss = (run_loss - loop.done_loss) / (steps * replica.world_size), run_loss
    record = {"epoch": epoch + 1, "train_loss": train_loss, "valid_loss": valid_loss, "valid_auc": auc,
              "train_seconds": loop.epoch_seconds, "first_step_seconds": loop.first_step_seconds,
              "valid_seconds": time.monotonic() - t0,
              "steps": steps, "compile_count": replica.compile_count()}
    loop.history["epochs"].append(record)
    loop.position = resume.Position(epoch + 1, 0, loop.position.global_step)
    improved = _is_better(record, loop.best, job.monitor)
    if improved:
        loop.best, loop.stale = _best(record, loop.history["epochs"], job.monitor), 0
        loop.history["best"] = loop.best
        _keep(replica, job, tokenizer, run, data, loop.history, probs)
    else:
        loop.stale += 1
    if job.patience and loop.stale >= job.patience and loop.position.epoch < job.epochs:
        loop.stopped = "early stopping"
    loop.valid_seconds = max(loop.valid_seconds or 0.0, time.monotonic() - t0)  # prediction and keeping (the reserve)
    if replica.is_master:
        mark = " (best so far: kept)" if improved else f" (best: epoch {loop.best['epoch']})" if loop.best else ""
        tqdm.write(f"epoch {epoch + 1}: train loss {train_loss:.4f}, valid loss {valid_loss:.4f}, "
                   f"valid ROC AUC {auc_shown}{mark}")
        loop.tracker.log(loop.steps, {"loss/train": train_loss, "loss/valid": valid_loss, "auc/valid": auc})
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


def _keep(replica, job: TrainJob, tokenizer, run: _Training, data: _Data, history: dict, probs) -> None:
    """Write the epoch that is the best so far as the run's checkpoint, ``out_dir`` (master only; every
    rank learns whether it worked): the model (with LoRA: only the adapters and the head, and the record
    naming the base, ``job.checkpoint``), the tokenizer, the history so far and this epoch's validation
    predictions (what the hand-off checks)."""
    adapter = None if job.lora is None else (job.checkpoint, run.kind, job.lora)
    with replica.together("saving the checkpoint"):
        if replica.is_master:
            save_checkpoint(run.model, tokenizer, job.out_dir, history, data.valid_df["id"].tolist(), probs,
                            job.label_col, recipe=job.recipe, kind=run.kind.config_keys(), adapter=adapter)


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
