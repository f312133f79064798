"""Everything about a trained folder: what a checkpoint folder written by :mod:`kitlib.training.train` holds besides
the model, its file names, writing it (:func:`save_checkpoint`), reading it (:func:`read_history`, :func:`kept_epoch`,
:func:`run_ids_of`), the report (:func:`checkpoint_report`), the refusal marker (:func:`refusal`) and the rule of
ready (:func:`not_ready`).

Beside ``save_pretrained``'s files (model, tokenizer) a kit-trained folder holds the epoch the run
kept (``TrainJob.monitor``: the best held-out ROC AUC by default) and:

* :data:`HISTORY_FILE` (``train_history.json``): the run's whole history (:func:`read_history`); its
  presence marks a folder as kit-trained;
* :data:`VALID_PREDICTIONS_FILE` (``valid_predictions.csv``): the kept epoch's held-out predictions
  (``id`` and the label column), which the hand-off checks (:mod:`kitlib.training.handoff`);
* :data:`SCORES_FILE` (``heldout_scores.json``): the held-out scores measured through the inference path
  (:func:`kitlib.training.runs.save_scores`);
* :data:`REFUSED_FILE` (``handoff_refused.json``), only in a folder the hand-off refused: why
  (:func:`kitlib.training.marks.refusal_marked`);
* :data:`READY_FILE` (``handoff_passed.json``), written last when every check of the hand-off passed
  (:func:`kitlib.training.marks.mark_passed`).

**Ready** (:func:`not_ready`, the rule's one home): a kit-trained folder is ready only when its run finished
and its hand-off passed; ``model="auto"`` never picks one that is not, and naming one is refused.

What a run needs to continue is in its state folder beside it, ``<folder>.state/`` (:mod:`kitlib.training.resume`).

The kit's own ``config.json`` keys (stated here only; a fine-tuned folder keeps them, since
``save_pretrained`` writes the config it loaded): :data:`POOLING_KEY` (``"mean"``: the
mean-pooled head, :class:`kitlib.models.mean_pooling.BertMeanPooledClassifier`), :data:`PREFIX_KEY`
(text put before every row, :func:`text_prefix`), :data:`RECIPE_KEY` (the fine-tune recipe,
:func:`kitlib.training.recipe.recipe_for`: the one the weights were trained with, written by
:func:`save_checkpoint`). :mod:`kitlib.models.e5_convert` writes all three.

A packaged or converted checkpoint (:mod:`kitlib.models.packaged`, :mod:`kitlib.models.e5_convert`,
:mod:`kitlib.models.smollm2`) holds :data:`SOURCE_FILE` (``kitlib-source.json``, written last): where it came
from, and the ``model`` name ``python -m kaggle_kit publish`` and :func:`kitlib.models.model.attached_packaged` read.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

HISTORY_FILE = "train_history.json"
VALID_PREDICTIONS_FILE = "valid_predictions.csv"
SCORES_FILE = "heldout_scores.json"
POOLING_KEY = "kitlib_pooling"  # config.json: "mean" -> BertMeanPooledClassifier
PREFIX_KEY = "kitlib_text_prefix"  # config.json: put before every text the model reads
RECIPE_KEY = "kitlib_recipe"  # config.json: the recipe name (kitlib.training.recipe.RECIPES)
REFUSED_FILE = "handoff_refused.json"  # written into a folder the hand-off refused: {"error", "reason"}
READY_FILE = "handoff_passed.json"  # written last by the hand-off when it passed: {"run_id", "epochs", "checks"}
# not_ready's kinds: "refused" and "unfinished" are never used by model="auto"; "unchecked" is named in a warning
NOT_READY_KINDS = ("refused", "unfinished", "unchecked")
SOURCE_FILE = "kitlib-source.json"  # written last into a packaged or converted checkpoint: where it came from
MODEL_SETTINGS = ("kind", "prompt", "answer_tokens", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "weights",
                  "mesh")
"""What makes the trained model besides its starting folder and rows (the rule's one home, issue 39): the kind, the
prompt and yes/no token ids it asks, LoRA's settings and the base's width under them, and the device mesh a sharded run
lays its frozen weights over (``[batch, model]`` chips: :mod:`kitlib.keras.sharded_run`; None on the torch side, one
copy per device), as the run resolved them (:attr:`kitlib.training.plan.Plan.model_settings`,
:func:`kitlib.keras.sharded_run.model_settings`; the history's and the state's ``model_settings``). A state
continues only a run that makes its model so (else refused: :func:`kitlib.training.resume.belongs`), and a
group's members agree on each (:func:`kitlib.infer.check_settings`): never continued or blended across."""


def refusal(folder: str | os.PathLike) -> str | None:
    """Why the training notebook's hand-off refused ``folder`` (its :data:`REFUSED_FILE`), or None.

    An unreadable mark still marks the folder refused (its reason then says so).
    """
    mark = Path(folder) / REFUSED_FILE
    if not mark.is_file():
        return None
    try:
        data = json.loads(mark.read_text(encoding="utf-8"))
        return f"{data['error']}: {data['reason']}"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{mark} is unreadable ({e})"


def not_ready(folder: str | os.PathLike) -> tuple[str, str] | None:
    """Why a kit-trained ``folder`` is not ready, as ``(kind, reason)`` (:data:`NOT_READY_KINDS`), or None: ready,
    or not kit-trained (no :data:`HISTORY_FILE`: a packaged or pretrained checkpoint, which no hand-off checks).

    * ``"refused"``: the hand-off refused it (:func:`refusal`);
    * ``"unfinished"``: its history says the run did not finish (``finished`` false: cut off after a kept
      epoch, or stopped by its time budget or SIGTERM); a history without the key (an older kit) counts as finished;
    * ``"unchecked"``: no :data:`READY_FILE`, or one for another run or epoch count than the history's.
    """
    folder = Path(folder)
    refused = refusal(folder)
    if refused is not None:
        return "refused", f"the training notebook's hand-off refused it ({refused})"
    path = folder / HISTORY_FILE
    if not path.is_file():
        return None
    try:
        history = json.loads(path.read_text(encoding="utf-8"))
        mark = json.loads((folder / READY_FILE).read_text(encoding="utf-8")) if (folder / READY_FILE).is_file() else None
    except (OSError, ValueError) as e:
        return "unchecked", f"its {HISTORY_FILE} or {READY_FILE} is unreadable ({e})"
    epochs = len(history.get("epochs") or [])
    if history.get("finished") is False:
        why = f"stopped: {history['stopped']}" if history.get("stopped") else "cut off"
        return "unfinished", (f"its run did not finish ({why}, {epochs} of {(history.get('config') or {}).get('epochs', '?')} "
                              f"epoch(s) done); its state is in {folder}.state: train again with the same settings "
                              "to continue it")
    if not isinstance(mark, dict):
        return "unchecked", (f"its hand-off has not passed (no {READY_FILE}: trained outside the training notebook, or the "
                             "notebook stopped before its hand-off check)")
    if (mark.get("run_id"), mark.get("epochs")) != (history.get("run_id"), epochs):
        return "unchecked", (f"its hand-off passed run {mark.get('run_id')} at {mark.get('epochs')} epoch(s); the folder now "
                             f"holds run {history.get('run_id')} at {epochs}: run the training notebook's hand-off again")
    return None


def text_prefix(checkpoint: str | os.PathLike) -> str:
    """What the checkpoint's model expects before every text (``config.json`` :data:`PREFIX_KEY`), else ``""``.

    multilingual-e5-small: ``"query: "`` (:mod:`kitlib.models.e5_convert`). Training (:mod:`kitlib.training.train`)
    and inference (:mod:`kitlib.infer`) both put it there, so a fine-tuned checkpoint reads text as
    it was trained.
    """
    from .models.config import read_config  # the one reader of config.json

    return read_config(checkpoint, missing={}).get(PREFIX_KEY, "")


def with_text_prefix(checkpoint: str | os.PathLike, texts: list[str]) -> list[str]:
    """``texts`` with :func:`text_prefix` put before each (the same list when there is none)."""
    prefix = text_prefix(checkpoint)
    return [prefix + t for t in texts] if prefix else texts


def replacing_message(out_dir: str | os.PathLike, checkpoint: str | os.PathLike) -> str | None:
    """A note when a fresh run (from ``checkpoint``) will replace an earlier run's folder ``out_dir``; else None.

    None when ``out_dir`` holds no kit-trained run, or when the run starts from ``out_dir`` itself
    (that continues it: :mod:`kitlib.training.resume`).
    """
    p = Path(out_dir) / HISTORY_FILE
    if not p.is_file() or Path(out_dir).resolve() == Path(checkpoint).resolve():
        return None
    try:
        done = len(json.loads(p.read_text()).get("epochs", []))
    except ValueError:
        done = "?"
    return (f"note: {out_dir} holds a run of {done} epoch(s); this run starts afresh from {checkpoint} "
            f"and replaces it when it finishes. To continue that run instead, start from it (model={out_dir})")


def save_checkpoint(model, tokenizer, out_dir: str | os.PathLike, history: dict, valid_ids: list[str],
                    valid_probs: np.ndarray, label_col: str, recipe: str | None = None, kind: dict | None = None,
                    adapter: tuple | None = None) -> Path:
    """Write a trained checkpoint folder atomically (master only) and return its path.

    The folder holds ``save_pretrained`` of ``model`` (a CPU copy of its weights) and ``tokenizer``,
    :data:`HISTORY_FILE` (``history``) and :data:`VALID_PREDICTIONS_FILE` (``id`` and ``label_col``). ``recipe``:
    written as ``config.json``'s :data:`RECIPE_KEY`. ``kind``: the model kind's ``config.json`` keys
    (:meth:`kitlib.models.kinds.Kind.config_keys`). ``adapter``: ``(base, kind, spec)`` of a LoRA run: the
    folder then holds only the adapters and the head (:func:`kitlib.models.adapters.write_adapter`) beside the
    base's ``config.json`` and the tokenizer. Written atomically (:func:`kitlib.atomic.atomic_dir`).
    """
    import pandas as pd
    import torch

    from .atomic import atomic_dir

    out_dir = Path(out_dir)
    if recipe is not None:
        setattr(model.config, RECIPE_KEY, recipe)
    for key, value in (kind or {}).items():
        setattr(model.config, key, value)
    with atomic_dir(out_dir) as tmp:
        if adapter is None:
            model.save_pretrained(tmp, state_dict={k: v.detach().cpu() if isinstance(v, torch.Tensor) else v
                                                   for k, v in model.state_dict().items()})
        else:
            _save_adapter_folder(model, tmp, *adapter)
        tokenizer.save_pretrained(tmp)
        (tmp / HISTORY_FILE).write_text(json.dumps(history, indent=1))
        pd.DataFrame({"id": valid_ids, label_col: valid_probs}).to_csv(tmp / VALID_PREDICTIONS_FILE, index=False)
    return out_dir


def _save_adapter_folder(model, folder: Path, base, kind, spec) -> None:
    """The adapters and head of the peft-wrapped ``model`` and the base's ``config.json`` (its architecture
    the loaded class's, so the preflight builds what inference loads) into ``folder``."""
    from .models.adapters import write_adapter

    write_adapter(model, folder, base=base, kind=kind, spec=spec)
    inner = model.get_base_model()
    inner.config.architectures = [type(inner).__name__]
    inner.config.save_pretrained(folder)


def read_history(out_dir: str | os.PathLike) -> dict:
    """The ``train_history.json`` of a trained checkpoint folder (written by :func:`kitlib.training.train._mp_fn`).

    Keys: ``run_id``, ``world_size``, ``mode``, ``collectives``, ``pattern``, ``ddp_wrapped``, ``precision``,
    ``grad_scaler`` (True: fp16 steps went through a ``GradScaler``), ``config``, ``tags``, ``recipe``,
    ``steps_per_epoch``, ``global_batch``, ``epochs`` (one dict per epoch: ``train_loss``, ``valid_loss``,
    ``valid_auc``, ``train_seconds``, ``valid_seconds``, ``steps``, ``compile_count``),
    ``step_loss`` (``[step, loss]`` pairs logged by the master), ``compile_counts`` (XLA: the
    master's compile count after each step; None otherwise), ``monitor`` and ``best`` (the epoch kept
    in the folder: ``epoch``, ``monitor``, ``value``, ``why``), ``finished``, ``stopped`` (None,
    ``"early stopping"`` or ``"time budget"``), ``train_seconds``, and ``resumed`` when it did.

    Raises:
        FileNotFoundError: no history in ``out_dir`` (training did not finish).
    """
    p = Path(out_dir) / HISTORY_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no training history (did the training launch finish?)")
    return json.loads(p.read_text())


def kept_epoch(history: dict) -> dict:
    """The epoch record whose weights a checkpoint folder holds: ``history["best"]``'s epoch (older
    histories: the last epoch); ``{}`` when none was recorded."""
    epochs = history.get("epochs") or []
    best = (history.get("best") or {}).get("epoch")
    return next((e for e in epochs if e.get("epoch") == best), epochs[-1] if epochs else {})


def run_ids_of(checkpoint: str | os.PathLike) -> list[str]:
    """The training run(s) a checkpoint folder holds: its ``train_history.json``'s ``run_id``; [] for a
    folder the kit did not train (a packaged or hub model) or that cannot be read."""
    try:
        run_id = json.loads((Path(checkpoint) / HISTORY_FILE).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    return [run_id] if isinstance(run_id, str) and run_id else []


def checkpoint_report(checkpoint: str | os.PathLike) -> dict | None:
    """What a checkpoint trained by this kit recorded about its training, or None for any other folder.

    Returns:
        ``trained_from`` (the starting checkpoint), ``recipe`` and ``lr``, ``epochs``, ``max_len``,
        ``batch_size``, ``world_size``, ``train_csv``, ``valid_csv``, ``run_id``, ``epochs_trained``,
        ``best`` (why that epoch was kept), ``kept_epoch`` (the epoch whose weights the folder holds:
        its ``train_loss``, ``valid_loss``, ``valid_auc``, ``train_seconds``), ``seconds_per_step``,
        and ``heldout`` (``heldout_scores.json``, or None).
    """
    p = Path(checkpoint)
    if not (p / HISTORY_FILE).is_file():
        return None
    h = read_history(p)
    cfg, kept = h.get("config", {}), kept_epoch(h)
    steps = sum(e.get("steps", 0) for e in h.get("epochs", []))
    seconds = sum(e.get("train_seconds", 0.0) for e in h.get("epochs", []))
    scores = p / SCORES_FILE
    return {"checkpoint": str(p), "trained_from": cfg.get("checkpoint"), "recipe": cfg.get("recipe"), "lr": cfg.get("lr"),
            "epochs": cfg.get("epochs"), "max_len": cfg.get("max_len"), "batch_size": cfg.get("batch_size"),
            "world_size": h.get("world_size"), "train_csv": cfg.get("train_csv"), "valid_csv": cfg.get("valid_csv"),
            "run_id": h.get("run_id"), "epochs_trained": len(h.get("epochs", [])), "best": h.get("best"),
            "kept_epoch": {k: kept.get(k) for k in ("epoch", "train_loss", "valid_loss", "valid_auc", "train_seconds")},
            "seconds_per_step": seconds / steps if steps else None,
            "heldout": json.loads(scores.read_text()) if scores.is_file() else None}
