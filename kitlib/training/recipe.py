"""How a checkpoint is fine-tuned: one table of recipes (:data:`RECIPES`), chosen by the checkpoint.

=========  ==========================  ===========================  =====================================
recipe     chosen for                  learning rate (AdamW)        also
=========  ==========================  ===========================  =====================================
tiny       the random ``tiny-random``  1e-3, constant               (nothing to spoil: it starts random)
standard   any other checkpoint        2e-5, constant               (xlm-roberta-base, all-MiniLM-L6-v2)
e5         multilingual-e5-small       3e-5 body, 1e-3 head;        word embeddings frozen; ``pos_weight``
                                       20 warm-up steps, then       = negatives / positives in the loss;
                                       linear decay to 0            mean-pooled head, ``"query: "`` prefix
lora       any checkpoint trained with 2e-4, constant               only the adapters and the head train
           ``lora_r > 0`` (LoRA)                                    (:mod:`kitlib.models.adapters`)
=========  ==========================  ===========================  =====================================

A checkpoint names its recipe in ``config.json`` (``kitlib_recipe``, written by
:mod:`kitlib.models.e5_convert` and kept by every fine-tuned copy); the tiny model is known by its
``kitlib-tiny.json``; anything else is ``standard``. The mean pooling and the text prefix are facts
of the E5 model, recorded in its ``config.json`` (:mod:`kitlib.models.model`), not of the recipe.

Where the e5 row comes from (issue 18, measured on the bundled sample, 2 CPU cores): a plain
fine-tune of the converted folder (pooler head, lr 5e-5, every parameter) nearly collapsed
(held-out prediction interquartile range 1e-4, multilingual AUC 0.596). E5 has no pooler, so the
head is mean-pooled; toxic rows are 8.7 % of the English rows, hence ``pos_weight``; the word
embedding is 96 M of the 117.5 M parameters and a dense AdamW update of it on every step of a
few hundred only adds noise, hence frozen. With these, 2 epochs at max_len 64, batch 16, on the
English rows plus validation.csv rows 0-499 reached ROC AUC 0.900 on rows 500-999.

``lr = 0`` (the training notebook's default) means "the recipe's"; a learning rate given by hand
replaces the recipe's body rate (the head keeps its own).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..checkpoint import RECIPE_KEY
from ..models.config import read_config

AUTO = "auto"
TINY_MARKER = "kitlib-tiny.json"  # written by kitlib.models.model.build_tiny_checkpoint


@dataclass(frozen=True)
class Recipe:
    """One row of :data:`RECIPES`.

    Attributes:
        name: the key.
        lr: AdamW learning rate of the body (and of the head when ``head_lr`` is None).
        head_lr: the classifier head's own rate (a new head learns faster than a pretrained body).
        warmup_steps: steps of linear warm-up from 0; with ``decay="linear"`` the rate then falls
            linearly to 0 at the last step. ``decay="constant"``: the rate never changes.
        decay: ``"constant"`` or ``"linear"``.
        freeze_word_embeddings: leave the input embedding matrix as it is (no gradient, no AdamW state).
        freeze_layers: also leave the whole embedding block and the first ``freeze_layers``
            transformer layers as they are; backward then stops above them, so a step of a
            12-layer body costs about ``(12 + 2 * (12 - freeze_layers)) / 36`` of a full one.
            Torch notebook only (:mod:`kitlib.training.train`, by ``recipe=`` name); the Keras notebook
            takes the folder's own recipe, which freezes no layers.
        pos_weight: weight the positive rows' loss by negatives / positives of the training rows
            (``BCEWithLogitsLoss(pos_weight=...)``).
    """

    name: str
    lr: float
    head_lr: float | None = None
    warmup_steps: int = 0
    decay: str = "constant"
    freeze_word_embeddings: bool = False
    freeze_layers: int = 0
    pos_weight: bool = False


RECIPES = {r.name: r for r in (
    Recipe("tiny", lr=1e-3),
    Recipe("standard", lr=2e-5),
    Recipe("e5", lr=3e-5, head_lr=1e-3, warmup_steps=20, decay="linear", freeze_word_embeddings=True, pos_weight=True),
    # e5 with the embedding block and the bottom 8 of 12 layers frozen, for a CPU in a hurry. Measured
    # on a quiet 2-core AVX2 machine (make submission's settings, 2 epochs): 1.71 s a step against
    # e5's 2.95 s, the training notebook 11 min 51 s against 19 min 04 s, held-out multilingual
    # ROC AUC 0.8979 (es 0.894, it 0.867, tr 0.938) against 0.9017. Chosen by name: recipe="e5-fast".
    Recipe("e5-fast", lr=3e-5, head_lr=1e-3, warmup_steps=20, decay="linear", freeze_word_embeddings=True,
           freeze_layers=8, pos_weight=True),
    # LoRA adapters (TrainJob.lora_r > 0) on a frozen base: peft's and the 2025 Jigsaw write-ups' rate
    # (1e-4 to 2e-4), adapters and head alike
    Recipe("lora", lr=2e-4),
)}


def recipe_for(checkpoint: str | os.PathLike) -> str:
    """The recipe a checkpoint folder calls for (see the module docstring)."""
    checkpoint = Path(checkpoint)
    name = read_config(checkpoint, missing={}).get(RECIPE_KEY)
    if name:
        if name not in RECIPES:
            raise ValueError(f"{checkpoint / 'config.json'}: {RECIPE_KEY} {name!r} is not one of {', '.join(RECIPES)}")
        return name
    return "tiny" if (checkpoint / TINY_MARKER).is_file() else "standard"


def resolve(job):
    """``job`` (a :class:`kitlib.training.job.TrainJob`) with ``recipe="auto"`` and ``lr=0`` made concrete.

    Raises:
        ValueError: a recipe name not in :data:`RECIPES`, or a negative learning rate.
    """
    name = (("lora" if getattr(job, "lora_r", 0) else recipe_for(job.checkpoint)) if job.recipe == AUTO
            else job.recipe)
    if name not in RECIPES:
        raise ValueError(f"recipe must be 'auto' or one of {', '.join(RECIPES)}, not {name!r}")
    if job.lr < 0:
        raise ValueError(f"lr must be > 0, or 0 for the recipe's ({RECIPES[name].lr:g} for {name!r}), not {job.lr}")
    return replace(job, recipe=name, lr=job.lr or RECIPES[name].lr)


def prepare_model(model, recipe: Recipe) -> None:
    """Freeze what the recipe freezes (in place): the input word embeddings, the embedding block and
    the first ``freeze_layers`` layers of ``model.base_model.encoder.layer`` (BERT, XLM-R).

    Raises:
        ValueError: ``freeze_layers`` is more than the body's layers, or the body has no
            ``embeddings`` / ``encoder.layer`` to freeze.
    """
    if recipe.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    if recipe.freeze_layers:
        body = model.base_model
        layers = getattr(getattr(body, "encoder", None), "layer", None)
        if layers is None or not hasattr(body, "embeddings"):
            raise ValueError(f"recipe {recipe.name!r} freezes layers, but {type(model).__name__} has no "
                             "base_model.embeddings / base_model.encoder.layer")
        if recipe.freeze_layers > len(layers):
            raise ValueError(f"recipe {recipe.name!r}: freeze_layers={recipe.freeze_layers} is more than "
                             f"the body's {len(layers)} layers")
        for module in (body.embeddings, *layers[: recipe.freeze_layers]):
            module.requires_grad_(False)


def make_optimizer(model, recipe: Recipe, lr: float, weight_decay: float):
    """``torch.optim.AdamW`` over the trainable parameters: the body at ``lr``, the head at ``recipe.head_lr``.

    The head is ``model.classifier`` (every classifier this kit loads has one); with
    ``head_lr=None`` there is one group at ``lr``.
    """
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    head = getattr(model, "classifier", None)
    if recipe.head_lr is None or head is None:
        return torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay)
    head_ids = {id(p) for p in head.parameters()}
    groups = [{"params": [p for p in trainable if id(p) not in head_ids], "lr": lr},
              {"params": [p for p in trainable if id(p) in head_ids], "lr": recipe.head_lr}]
    return torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)


def param_groups(model, recipe: Recipe) -> tuple[tuple[int, int], ...]:
    """``(tensors, elements)`` of each parameter group :func:`make_optimizer` makes for ``model`` once
    :func:`prepare_model` has frozen what the recipe freezes (``model`` may live on the meta device:
    :func:`kitlib.models.model.skeleton`). What a saved optimizer state must match (:mod:`kitlib.training.resume`)."""
    prepare_model(model, recipe)
    groups = make_optimizer(model, recipe, 1.0, 0.0).param_groups
    return tuple((len(g["params"]), int(sum(p.numel() for p in g["params"]))) for g in groups)


def lr_factor(step: int, recipe: Recipe, total_steps: int) -> float:
    """The multiplier of every group's rate before optimizer step ``step`` (0-based) of ``total_steps``."""
    if recipe.decay == "constant":
        return 1.0
    if step < recipe.warmup_steps:
        return (step + 1) / recipe.warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - recipe.warmup_steps))


def make_scheduler(optimizer, recipe: Recipe, total_steps: int, done: int = 0):
    """A ``LambdaLR`` following :func:`lr_factor` (step it after every optimizer step), or None when constant.

    ``done``: steps already taken (a resumed run whose schedule is rebuilt, :mod:`kitlib.training.resume`): the
    rates are set to where the schedule is after them.
    """
    if recipe.decay == "constant":
        return None
    if recipe.decay != "linear":
        raise ValueError(f"recipe {recipe.name!r}: decay must be 'constant' or 'linear', not {recipe.decay!r}")
    from torch.optim.lr_scheduler import LambdaLR

    scheduler = LambdaLR(optimizer, lambda step: lr_factor(step, recipe, total_steps))
    if done:
        factor = lr_factor(done, recipe, total_steps)
        for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
            group["lr"] = base * factor
        scheduler.last_epoch = done
        scheduler._last_lr = [g["lr"] for g in optimizer.param_groups]
    return scheduler


def positive_weight(labels: np.ndarray, recipe: Recipe) -> float | None:
    """``pos_weight`` for the loss: negatives / positives of the training ``labels`` (rounded at 0.5), or None.

    Raises:
        ValueError: the recipe weights positives but ``labels`` has none.
    """
    if not recipe.pos_weight:
        return None
    positives = int((np.asarray(labels) >= 0.5).sum())
    if positives == 0:
        raise ValueError(f"recipe {recipe.name!r} weights the positive rows, but the training rows have none")
    return (len(labels) - positives) / positives


def describe(recipe: Recipe, lr: float) -> dict:
    """What the history records of the recipe used (``train_history.json`` key ``recipe``)."""
    return {"name": recipe.name, "lr": lr, "head_lr": recipe.head_lr or lr, "warmup_steps": recipe.warmup_steps,
            "decay": recipe.decay, "freeze_word_embeddings": recipe.freeze_word_embeddings,
            "freeze_layers": recipe.freeze_layers,
            "pos_weight": recipe.pos_weight}
