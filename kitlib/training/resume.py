"""Runs that survive: the state a training run saves as it goes, and resuming from it (the rule, stated here only).

**The state.** Beside its ``out_dir`` (the kept checkpoint, :mod:`kitlib.checkpoint`) a run keeps its
state in ``<out_dir>.state/`` (:func:`state_dir`), rewritten atomically (:func:`kitlib.atomic.atomic_dir`)
by the master at every save point: every ``save_every_steps`` steps, every ``save_every_minutes``
minutes, at the end of every epoch, and when the run stops for its ``time_budget``
(:class:`kitlib.training.job.TrainJob`). It holds:

* :data:`RUN_FILE` (``run.json``, read in the calling process without torch): the run's
  :class:`Settings` (among them what it started from and the rows it trains and validates on), its position (epoch, batch within it, global step), the history so far, the
  best epoch so far, the loss summed so far, the seconds trained, and whether the run finished;
* :data:`TENSORS_FILE`: the ``state_dict()`` of the optimizer, the scheduler and the ``GradScaler``,
  and the RNG states (torch's CPU generator and the device's), as CPU tensors;
* :data:`WEIGHTS_FILE`: every weight of the model at that step.

**Resuming** (``resume="auto"``, the default). A run continues the state it finds, checked first:

1. ``<out_dir>.state/`` of a run that did not finish (cut off: killed, preempted, a session that
   ended, or stopped by its time budget): the same command again continues it;
2. otherwise, when the run starts from a kit-trained folder (its ``checkpoint`` is an earlier run's
   ``out_dir``), that folder's ``.state/``: the earlier run continues, ``epochs`` counting the whole
   run (``epochs`` at or below the epochs done is refused: nothing left to train);
3. otherwise, a kit-trained starting folder without a state (an older kit): its weights, with the
   epoch count and history continued and a fresh optimizer, and a note saying so;
4. otherwise the run starts afresh. ``resume="never"`` always starts afresh.

Before any replica starts, :func:`plan` checks the saved :class:`Settings` against the new run's:

* **continued exactly** when nothing that shapes the schedule or the data order changed: the
  weights, optimizer, scheduler, scaler and RNG states are restored and training goes on from the
  saved batch of the saved epoch (the batches before it are skipped, not trained again), so a run
  killed mid-epoch ends with the weights of a run that was never interrupted, within float noise;
* **rebuilt, with a note**, when the global batch, the world size, the batch per replica, the
  steps per epoch, the number of epochs (the schedule's length) or the learning rates changed: the
  weights and optimizer moments are restored, the schedule is built again for the new run and set
  to the step reached (the rows done in the epoch, counted in the new global batch), e.g. "the
  schedule is rebuilt for global batch 32: 87 steps an epoch, 174 in all, 65 done". A schedule
  that had ended is never restored as it was (every step would run at learning rate 0);
* **refused**, naming the cause and the fix, when the state cannot belong to this run (:func:`belongs`):
  another starting model (its folder's fingerprint differs, and it is not the state's own run's folder),
  a model made another way (another kind, prompt, answer tokens, LoRA setting or weights' width:
  :data:`kitlib.checkpoint.MODEL_SETTINGS`, each named with its saved and new value),
  other training or validation rows (another file, limit, fold, folds file or pseudo rows: a fold's
  validation rows are never rows its weights trained on), another
  recipe, parameter groups of other counts or sizes (what torch would report inside a replica as
  "loaded state dict has a different number of parameter groups"), or nothing left to train.

An epoch in which no trained parameter changed (a learning rate of 0 throughout, every fp16 step
skipped) is an error, never recorded as trained (:func:`kitlib.training.loop._validate`).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

STATE_SUFFIX = ".state"
RUN_FILE = "run.json"
TENSORS_FILE = "tensors.pt"
WEIGHTS_FILE = "model.pt"
STATE_FORMAT = 4  # 3: Settings record the run's model and validation rows (issue 33); 4: its content and how it makes its model (issue 39)
RESUME_MODES = ("auto", "never")


def state_dir(out_dir: str | os.PathLike) -> Path:
    """The state folder of the run that writes ``out_dir``: ``<out_dir>.state`` beside it (beside the
    folder a linked ``out_dir`` points to, so the state lives where the checkpoint does:
    :func:`kitlib.atomic.real_target`)."""
    from ..atomic import real_target

    out_dir = real_target(out_dir)
    return out_dir.with_name(out_dir.name + STATE_SUFFIX)


@dataclass(frozen=True)
class Settings:
    """What a run's schedule, optimizer state and data order depend on (compared on resume).

    The last six say which run this is (:func:`belongs`): a state continues only a run that starts from
    what it started from, makes its model the same way and trains and validates on the rows it did.

    Attributes:
        recipe: the recipe trained with (:data:`kitlib.training.recipe.RECIPES`).
        lr, head_lr, weight_decay: the optimizer's rates.
        param_groups: ``(tensors, elements)`` of each optimizer parameter group, in order.
        world_size, batch_size: replicas and rows per replica per step.
        steps_per_epoch, epochs: the schedule's shape.
        precision: the compute precision's name.
        train_rows, valid_rows: fingerprints of the training and validation rows (:func:`rows_fingerprint`:
            file content and row limit; a fold's rows, pseudo-labelled rows added, are in them).
        model: the folder the run started from (``TrainJob.checkpoint``).
        model_print: :func:`model_identity`'s fingerprint of it (16 hex digits of its content).
        model_settings: how the run makes its model from it, each :data:`kitlib.checkpoint.MODEL_SETTINGS` value
            (:attr:`kitlib.training.plan.Plan.model_settings`: kind, prompt, answer tokens, LoRA, weights' width).
        model_run: the ``run_id`` in that folder's history when it is kit-trained (a run continued from
            its own folder starts from itself), else None.
        fold: ``"fold i of K (cv <id>)"`` from ``TrainJob.tags`` for one fold of a cross-validation, else ``""``.
    """

    recipe: str
    lr: float
    head_lr: float
    weight_decay: float
    param_groups: tuple
    world_size: int
    batch_size: int
    steps_per_epoch: int
    epochs: int
    precision: str
    train_rows: str
    valid_rows: str | None = None
    model: str = ""
    model_print: str = ""
    model_settings: dict = field(default_factory=dict)
    model_run: str | None = None
    fold: str = ""

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def to_json(self) -> dict:
        return {**asdict(self), "param_groups": [list(g) for g in self.param_groups]}

    @classmethod
    def from_json(cls, d: dict) -> "Settings":
        return cls(**{**d, "param_groups": tuple(tuple(g) for g in d["param_groups"])})


def rows_fingerprint(path: str | os.PathLike, limit: int | None) -> str:
    """16 hex digits of sha256 over the file's bytes and the row limit: the same rows, the same print."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    h.update(f"limit={limit}".encode())
    return h.hexdigest()[:16]


def model_identity(checkpoint: str | os.PathLike, history_file: str) -> tuple[str, str | None]:
    """``(model_print, model_run)`` of a starting folder for :class:`Settings`: 16 hex digits of its content
    (:func:`kitlib.models.identity.digest`: sampled tensors, so two fine-tunes of one base differ, and the same
    weights whose config.json was written again do not), and the ``run_id`` of its history when it is
    kit-trained (else None)."""
    from ..models import identity

    history = Path(checkpoint) / history_file
    try:
        run_id = json.loads(history.read_text()).get("run_id") if history.is_file() else None
    except (ValueError, AttributeError):
        run_id = None
    return identity.digest(identity.identity(checkpoint)), run_id


def fold_label(tags: dict) -> str:
    """:attr:`Settings.fold` of ``TrainJob.tags``: ``"fold i of K (cv <id>)"``, or ``""`` when not a fold."""
    return f"fold {tags['fold']} of {tags.get('folds')} (cv {tags.get('cv')})" if "fold" in tags else ""


@dataclass(frozen=True)
class Position:
    """Where a run is: ``epoch`` (0-based) in progress, ``batch`` of its batches done, ``global_step`` in all."""

    epoch: int = 0
    batch: int = 0
    global_step: int = 0


@dataclass(frozen=True)
class Resume:
    """How a run starts from a saved state (:func:`plan`).

    Attributes:
        folder: the state folder (or, for ``how="weights"``, the kit-trained folder of an older kit).
        how: ``"exact"``, ``"rebuilt"`` or ``"weights"`` (an older kit's folder: weights and history only).
        position: where this run starts, in this run's batches.
        note: the paragraph to print.
        saved: the state's :data:`RUN_FILE` contents (history, best, loss sum, ...).
    """

    folder: Path
    how: str
    position: Position
    note: str
    saved: dict

    @property
    def history(self) -> dict:
        return self.saved.get("history") or {}

    @property
    def restores_schedule(self) -> bool:
        """The saved scheduler state is loaded as it is (only when continued exactly)."""
        return self.how == "exact"


def read_run(folder: str | os.PathLike) -> dict | None:
    """The :data:`RUN_FILE` of a state folder, or None when there is none.

    Raises:
        ValueError: the file does not parse, or is of another format (the message names it).
    """
    p = Path(folder) / RUN_FILE
    if not p.is_file():
        return None
    try:
        run = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"{p}: not a readable run state ({e}); delete {Path(folder)} to start afresh") from None
    if run.get("format") != STATE_FORMAT:
        raise ValueError(f"{p}: run state format {run.get('format')!r}, this kit reads {STATE_FORMAT}; "
                         f"delete {Path(folder)} (or pass resume='never') to start afresh")
    return run


def find(out_dir: str | os.PathLike, checkpoint: str | os.PathLike, history_file: str) -> tuple[Path, dict] | None:
    """The state a run would continue, by the module's rule (cases 1-3): ``(folder, run)`` or None.

    For case 3 ``run`` is ``{"history": ..., "format": None}`` read from the older kit's history.
    """
    own = state_dir(out_dir)
    run = read_run(own)
    if run is not None and not run.get("finished"):
        return own, run
    start = Path(checkpoint)
    if (start / history_file).is_file():
        earlier = read_run(state_dir(start))
        if earlier is not None:
            return state_dir(start), earlier
        try:
            history = json.loads((start / history_file).read_text())
        except ValueError as e:
            raise ValueError(f"{start / history_file}: not a readable training history ({e}); "
                             "start from another checkpoint") from None
        return start, {"format": None, "history": history, "finished": True}
    return None


def _fmt_groups(groups) -> str:
    return ", ".join(f"{t} tensors ({e:,} values)" for t, e in groups)


def plan(new: Settings, found: tuple[Path, dict] | None) -> Resume | None:
    """How a run with ``new`` settings starts from ``found`` (:func:`find`), by the module's rule.

    Returns:
        None (start afresh), or a :class:`Resume`.

    Raises:
        ValueError: the state cannot belong to this run (another recipe, other parameter groups,
            nothing left to train); the message names the state folder, the cause and the fix.
    """
    if found is None:
        return None
    folder, run = found
    history = run.get("history") or {}
    if run.get("format") is None:  # an older kit's folder: weights and history only
        done = len(history.get("epochs", []))
        _check_left(folder, done, new.epochs)
        steps = sum(int(e.get("steps", 0)) for e in history.get("epochs", []))
        return Resume(folder, "weights", Position(done, 0, steps),
                      f"resuming the run in {folder}: epoch(s) 1-{done} done, training epoch(s) {done + 1}-{new.epochs}; "
                      "no saved state there (written by an older kit): the optimizer starts fresh", run)
    old = Settings.from_json(run["settings"])
    pos = Position(**run["position"])
    fix = f"or pass resume='never' to start afresh (the state in {folder} is then replaced)"
    belongs(folder, old, new, (run.get("history") or {}).get("run_id"), fix)
    if old.recipe != new.recipe:
        raise ValueError(f"{folder}: that run trained with recipe {old.recipe!r}, this one asks for {new.recipe!r}; "
                         f"pass recipe={old.recipe!r} to continue it, {fix}")
    if tuple(old.param_groups) != tuple(new.param_groups):
        raise ValueError(f"{folder}: its optimizer state has {len(old.param_groups)} parameter group(s), "
                         f"{_fmt_groups(old.param_groups)}; this run's model and recipe make {len(new.param_groups)}, "
                         f"{_fmt_groups(new.param_groups)}. Start from the model it trained (model=...) with recipe "
                         f"{old.recipe!r}, {fix}")
    _check_left(folder, pos.epoch, new.epochs)  # pos.epoch: the epochs finished (the one in progress is not)
    where = (f"epoch {pos.epoch + 1}, batch {pos.batch} of {old.steps_per_epoch}" if pos.batch else
             f"the end of epoch {pos.epoch}")
    head = f"resuming the run in {folder} from {where} (step {pos.global_step})"
    changed = [f"{k} {getattr(old, k)!r} -> {getattr(new, k)!r}" for k in
               ("world_size", "batch_size", "steps_per_epoch", "epochs", "lr", "head_lr", "weight_decay")
               if getattr(old, k) != getattr(new, k)]
    notes = [f"precision {old.precision} -> {new.precision}"] if old.precision != new.precision else []
    if not changed:
        note = (f"{head}: continued exactly (weights, optimizer, schedule, scaler and RNG states restored); "
                f"training epoch(s) {pos.epoch + 1}-{new.epochs}")
        return Resume(folder, "exact", pos, "; ".join([note, *notes]), run)
    rows_done = pos.batch * old.global_batch
    batch = min(rows_done // new.global_batch, new.steps_per_epoch)
    epoch, batch = (pos.epoch + 1, 0) if batch >= new.steps_per_epoch else (pos.epoch, batch)
    start = Position(epoch, batch, epoch * new.steps_per_epoch + batch)
    _check_left(folder, start.epoch, new.epochs)
    note = (f"{head}: weights and optimizer restored; changed since: {', '.join(changed)}: the schedule is rebuilt "
            f"for global batch {new.global_batch}: {new.steps_per_epoch} steps an epoch, {new.total_steps} in all, "
            f"{start.global_step} done" + (f" (epoch {epoch + 1} from batch {batch}: the {rows_done:,} rows done in "
                                          "the epoch)" if rows_done else "") +
            f"; training epoch(s) {epoch + 1}-{new.epochs}")
    return Resume(folder, "rebuilt", start, "; ".join([note, *notes]), run)


def _rows(s: Settings) -> str:
    return f"trains on rows {s.train_rows} and validates on rows {s.valid_rows}" + (f" ({s.fold})" if s.fold else "")


def belongs(folder: Path, old: Settings, new: Settings, run_id: str | None, fix: str) -> None:
    """Refuse to continue a saved state (``old``, of run ``run_id``) with a run (``new``) it does not belong to.

    The rule (issue 33): a state continues only the run it belongs to. That run starts from the state's
    model (the same folder fingerprint, or the state's own run's folder: ``new.model_run == run_id``), makes
    its model the same way (every :data:`kitlib.checkpoint.MODEL_SETTINGS` value: issue 39) and
    trains and validates on the same rows (the fingerprints, so the same fold of the same folds file with
    the same pseudo-labelled rows). Anything else is refused, never continued with a note: the state's
    weights are another model's, or were trained on rows the new run validates on (and the best epoch
    would be picked across two row sets). Refusing keeps the state (a cut-off run's only copy of its work).

    Raises:
        ValueError: naming both models, the setting and both its values, or both row sets; the state folder and the fix.
    """
    from ..checkpoint import MODEL_SETTINGS

    same_run = run_id is not None and new.model_run == run_id
    if not same_run and old.model_print != new.model_print:
        raise ValueError(f"{folder}: that run started from {old.model} (fingerprint {old.model_print}); this one starts "
                         f"from {new.model} (fingerprint {new.model_print}): a saved state continues only the run it "
                         f"belongs to. Start from {old.model} to continue it (model=...), {fix}")
    for key in MODEL_SETTINGS:
        was, now = old.model_settings.get(key), new.model_settings.get(key)
        if was != now:
            again = ("start from the tokenizer it trained with (its yes/no answer variants' ids)" if key == "answer_tokens"
                     else f"pass {key}={was!r}")
            raise ValueError(f"{folder}: that run made its model with {key} {was!r}; this one makes it with {now!r}: a "
                             f"saved state continues only the model it trained. To continue it {again}, {fix}")
    if (old.train_rows, old.valid_rows, old.fold) != (new.train_rows, new.valid_rows, new.fold):
        raise ValueError(f"{folder}: that run {_rows(old)}; this one {_rows(new)}: continuing it would validate on rows "
                         "its weights may have trained on and pick the best epoch across two row sets. Train on the rows "
                         f"it trained on (the same files, split, folds and pseudo rows) to continue it, {fix}")


def _check_left(folder: Path, done: int, epochs: int) -> None:
    if epochs <= done:
        raise ValueError(f"{folder}: this run already trained {done} epoch(s), and epochs={epochs} counts the "
                         f"whole run; set epochs above {done} to continue it, or start from another checkpoint")


def save_state(folder: str | os.PathLike, *, settings: Settings, position: Position, history: dict,
               best: dict | None, loss_sum: float, done_loss: float, seconds: float, finished: bool,
               model_state: dict, tensors: dict, stale: int = 0, steps: int | None = None) -> Path:
    """Write the run's state folder atomically (the module doc's three files); master only.

    Args:
        folder: :func:`state_dir` of the run's ``out_dir``.
        settings, position: the run's :class:`Settings` and where it is.
        history, best: the history so far (JSON) and the best epoch so far (or None).
        loss_sum, done_loss: the step losses summed over every replica so far, and that sum at the last
            epoch's end (for the epoch's mean training loss).
        seconds: seconds trained so far, over every resumption.
        finished: the run trained every epoch (or stopped early by its patience).
        stale: epochs since the best (early stopping's count).
        steps: optimizer steps taken over every call (the history's step axis, which never goes back when a
            rebuilt schedule counts ``position.global_step`` in a new batch); None: ``position.global_step``.
        model_state: the model's ``state_dict()`` (CPU tensors).
        tensors: name -> state (``optimizer``, ``scheduler``, ``scaler`` state_dicts; ``rng``), CPU tensors.
    """
    import torch

    from ..atomic import atomic_dir

    run = {"format": STATE_FORMAT, "settings": settings.to_json(), "position": asdict(position),
           "history": history, "best": best, "loss_sum": float(loss_sum), "done_loss": float(done_loss),
           "seconds": float(seconds), "finished": bool(finished), "stale": int(stale),
           "steps": int(position.global_step if steps is None else steps)}
    with atomic_dir(folder) as tmp:
        torch.save(model_state, tmp / WEIGHTS_FILE)
        torch.save(tensors, tmp / TENSORS_FILE)
        (tmp / RUN_FILE).write_text(json.dumps(run, indent=1))
    return Path(folder)


def load_tensors(folder: str | os.PathLike) -> tuple[dict, dict]:
    """``(model_state, tensors)`` of a state folder (CPU tensors; :func:`save_state`)."""
    import torch

    folder = Path(folder)
    return (torch.load(folder / WEIGHTS_FILE, map_location="cpu", weights_only=True),
            torch.load(folder / TENSORS_FILE, map_location="cpu", weights_only=True))


def with_position(resume: Resume, position: Position) -> Resume:
    """``resume`` starting at ``position`` instead (a replica that re-plans with the world size it found)."""
    return replace(resume, position=position)
