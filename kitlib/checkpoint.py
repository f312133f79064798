"""What a checkpoint folder written by :mod:`kitlib.train` holds besides the model, and resuming from one.

Beside ``save_pretrained``'s files (model, tokenizer) a kit-trained folder holds:

* :data:`HISTORY_FILE` (``train_history.json``): the run's history. Its presence is what marks a
  folder as kit-trained (:func:`kitlib.model.find_checkpoints` looks for it);
* :data:`TRAINING_STATE_FILE` (``training_state.pt``): what the next run needs to continue: the
  ``state_dict()`` of the optimizer (and of the scheduler and ``GradScaler`` when a run has them)
  as CPU tensors, and the optimizer step count. It is written inside the checkpoint's atomic
  folder swap (:func:`kitlib.atomic.atomic_dir`), so it always belongs to the weights beside it;
* :data:`VALID_PREDICTIONS_FILE` (``valid_predictions.csv``): the in-memory model's last-epoch
  predictions of the held-out rows (``id`` and the label column), which the training notebook's
  hand-off checks (:func:`kitlib.collapse.check_checkpoint_ready`);
* :data:`SCORES_FILE` (``heldout_scores.json``): the saved checkpoint's held-out scores measured
  through the inference path, overall and per language (:func:`kitlib.train.save_scores`).

Resuming (the rule, stated here only): training that *starts from* a kit-trained folder (its
``checkpoint`` is such a folder, for instance the ``out_dir`` of the run before) continues that
run. ``epochs`` counts the whole run: a run that has done ``k`` epochs trains epochs ``k + 1 ..
epochs``, the history goes on from the earlier one (epoch numbers, step numbers, step losses),
the optimizer (scheduler, scaler) state is restored, and the run says that it resumed, in its
output and in the history's ``resumed`` list. The job's ``lr`` and ``weight_decay`` apply to the
resumed epochs (a restored scheduler sets the learning rate itself). A folder with a history but
no training state (an older kit) continues the count and the history with a fresh optimizer,
and says so. ``epochs <= k`` is refused: there is nothing left to train.

The kit's own ``config.json`` keys (stated here only; a fine-tuned folder keeps them, since
``save_pretrained`` writes the config it loaded): :data:`POOLING_KEY` (``"mean"``: the
mean-pooled head, :class:`kitlib.mean_pooling.BertMeanPooledClassifier`), :data:`PREFIX_KEY`
(text put before every row, :func:`text_prefix`), :data:`RECIPE_KEY` (the fine-tune recipe,
:func:`kitlib.recipe.recipe_for`). :mod:`kitlib.e5_convert` writes all three.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

HISTORY_FILE = "train_history.json"
TRAINING_STATE_FILE = "training_state.pt"
VALID_PREDICTIONS_FILE = "valid_predictions.csv"
SCORES_FILE = "heldout_scores.json"
POOLING_KEY = "kitlib_pooling"  # config.json: "mean" -> BertMeanPooledClassifier
PREFIX_KEY = "kitlib_text_prefix"  # config.json: put before every text the model reads
RECIPE_KEY = "kitlib_recipe"  # config.json: the recipe name (kitlib.recipe.RECIPES)
STATE_FORMAT = 1
# config entries that may differ between a run and its resumption without a note
_RUN_KEYS = ("checkpoint", "out_dir", "epochs", "rank_states_dir", "compile_cache_dir", "log_every")


def text_prefix(checkpoint: str | os.PathLike) -> str:
    """What the checkpoint's model expects before every text (``config.json`` :data:`PREFIX_KEY`), else ``""``.

    multilingual-e5-small: ``"query: "`` (:mod:`kitlib.e5_convert`). Training (:mod:`kitlib.train`)
    and inference (:mod:`kitlib.infer`) both put it there, so a fine-tuned checkpoint reads text as
    it was trained.
    """
    p = Path(checkpoint) / "config.json"
    return json.loads(p.read_text()).get(PREFIX_KEY, "") if p.is_file() else ""


def with_text_prefix(checkpoint: str | os.PathLike, texts: list[str]) -> list[str]:
    """``texts`` with :func:`text_prefix` put before each (the same list when there is none)."""
    prefix = text_prefix(checkpoint)
    return [prefix + t for t in texts] if prefix else texts


@dataclass(frozen=True)
class ResumePoint:
    """Where an earlier run in a kit-trained folder stopped (read in the parent, torch-free).

    Attributes:
        folder: the kit-trained folder.
        history: its :data:`HISTORY_FILE` contents.
        epochs_done: epochs it trained (``len(history["epochs"])``).
        has_state: it holds :data:`TRAINING_STATE_FILE`.
    """

    folder: Path
    history: dict
    epochs_done: int
    has_state: bool

    @property
    def steps_done(self) -> int:
        """Optimizer steps the earlier run took (the sum of its epochs' ``steps``)."""
        return sum(int(e.get("steps", 0)) for e in self.history.get("epochs", []))


def resume_point(folder: str | os.PathLike) -> ResumePoint | None:
    """The :class:`ResumePoint` of ``folder``, or None when it is not kit-trained (no history).

    Raises:
        ValueError: the history is not readable JSON (the message names the file).
    """
    folder = Path(folder)
    p = folder / HISTORY_FILE
    if not p.is_file():
        return None
    try:
        history = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"{p}: not a readable training history ({e}); start from another checkpoint") from None
    return ResumePoint(folder, history, len(history.get("epochs", [])), (folder / TRAINING_STATE_FILE).is_file())


def resume_message(point: ResumePoint, epochs: int, config: dict | None = None) -> str:
    """One paragraph saying what a resumed run continues and what it restores (see the module rule).

    Args:
        point: from :func:`resume_point`.
        epochs: the new run's ``epochs`` (the whole run's count).
        config: the new run's config (``dataclasses.asdict`` of the job); entries that differ from
            the earlier run's (other than where it reads and writes) are listed.

    Raises:
        ValueError: ``epochs`` is not above the epochs already done (nothing to train).
    """
    k = point.epochs_done
    if epochs <= k:
        raise ValueError(f"{point.folder}: this run already trained {k} epoch(s), and epochs={epochs} counts the "
                         f"whole run; set epochs above {k} to continue it, or start from another checkpoint")
    state = ("optimizer state restored" if point.has_state else
             f"no {TRAINING_STATE_FILE} there (written by an older kit): the optimizer starts fresh")
    msg = f"resuming the run in {point.folder}: epoch(s) 1-{k} done, training epoch(s) {k + 1}-{epochs}; {state}"
    old = point.history.get("config") or {}
    changed = [f"{key} {old[key]!r} -> {value!r}" for key, value in (config or {}).items()
               if key in old and key not in _RUN_KEYS and old[key] != value]
    if changed:
        msg += f"; changed since: {', '.join(changed)}"
    return msg


def replacing_message(out_dir: str | os.PathLike, checkpoint: str | os.PathLike) -> str | None:
    """A note when a fresh run (from ``checkpoint``) will replace an earlier run's folder ``out_dir``; else None.

    None when ``out_dir`` holds no kit-trained run, or when the run starts from ``out_dir`` itself
    (that resumes it).
    """
    point = resume_point(out_dir)
    if point is None or Path(out_dir).resolve() == Path(checkpoint).resolve():
        return None
    return (f"note: {out_dir} holds a run of {point.epochs_done} epoch(s); this run starts afresh from {checkpoint} "
            f"and replaces it when it finishes. To continue that run instead, start from it (model={out_dir})")


def continue_history(history: dict, point: ResumePoint | None) -> dict:
    """Carry an earlier run's epochs, step losses and compile counts into a new ``history`` (in place).

    ``history["resumed"]`` lists every resumption: ``{"from", "epochs_done", "config"}`` (the earlier
    run's config). Returns ``history``.
    """
    if point is None:
        return history
    old = point.history
    history["epochs"] = list(old.get("epochs", []))
    history["step_loss"] = list(old.get("step_loss", []))
    if history.get("compile_counts") is not None:
        history["compile_counts"] = list(old.get("compile_counts") or [])
    history["resumed"] = [*old.get("resumed", []),
                          {"from": str(point.folder), "epochs_done": point.epochs_done, "config": old.get("config")}]
    return history


def _to_cpu(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def save_training_state(folder: str | os.PathLike, global_step: int, **objects) -> Path:
    """Write :data:`TRAINING_STATE_FILE` in ``folder``: each object's ``state_dict()`` (CPU tensors).

    Call it inside the checkpoint's :func:`kitlib.atomic.atomic_dir` (as :func:`kitlib.train.save_checkpoint`
    does), so the state and the weights are replaced together.

    Args:
        folder: the (temporary) checkpoint folder.
        global_step: optimizer steps taken so far in the whole run.
        objects: name -> object with ``state_dict()`` (``optimizer=``, and ``scheduler=``,
            ``scaler=`` when the run has them); None values are skipped.
    """
    import torch

    state = {"format": STATE_FORMAT, "global_step": int(global_step),
             **{name: _to_cpu(obj.state_dict()) for name, obj in objects.items() if obj is not None}}
    path = Path(folder) / TRAINING_STATE_FILE
    torch.save(state, path)
    return path


def restore_training_state(folder: str | os.PathLike, keep=("lr", "weight_decay"), **objects) -> tuple[int, list[str]]:
    """Load :data:`TRAINING_STATE_FILE` of ``folder`` into the given objects.

    Args:
        folder: a kit-trained folder (the run's starting checkpoint).
        keep: optimizer hyperparameters whose current values (the new job's) stay after loading,
            unless a scheduler is restored too (its state sets the learning rate).
        objects: name -> object with ``load_state_dict`` (``optimizer=``, ``scheduler=``, ``scaler=``);
            None values are skipped, and so are names the file holds no state for (a scaler the
            earlier run did not use starts fresh). Optimizer state moves to its parameters' device.

    Returns:
        ``(global_step, restored names)``; ``(0, [])`` when there is no state file.

    Raises:
        ValueError: the file's format is unknown.
    """
    import torch

    path = Path(folder) / TRAINING_STATE_FILE
    if not path.is_file():
        return 0, []
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: training state format {state.get('format')!r}, expected {STATE_FORMAT}")
    objects = {k: v for k, v in objects.items() if v is not None and k in state}  # absent: starts fresh
    opt = objects.get("optimizer")
    kept = [{k: g[k] for k in keep if k in g} for g in opt.param_groups] if opt is not None else []
    for name, obj in objects.items():
        obj.load_state_dict(state[name])
    if opt is not None and "scheduler" not in objects:
        for group, values in zip(opt.param_groups, kept):
            group.update(values)
    return int(state["global_step"]), list(objects)
