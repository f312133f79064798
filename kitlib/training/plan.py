"""What a training run works out once, in the calling process, for every replica: the :class:`Plan`.

::

    plan = make_plan(job, rt)        # the saved-run lookup, the recipe, the labels, the precision, ...
    launch(_mp_fn, plan, rt, ...)    # every replica reads the plan (kitlib.training.loop), never re-derives it

Each fact has one home here and is resolved once per run (``tests/test_train.py`` counts the calls):

* the saved state the run would continue (:func:`kitlib.training.resume.find`, read once);
* the recipe and learning rate (:func:`kitlib.training.recipe.resolve`; ``"auto"`` takes the recipe of the
  run it continues, else the checkpoint's: :func:`_recipe_of_run`);
* the training labels (:func:`kitlib.training.job.check_labels`: the one read of the training CSV here),
  their row count and the data fingerprints (:func:`kitlib.training.resume.rows_fingerprint`: the training
  rows, then the validation rows, each hashed once), and the starting model's identity
  (:func:`kitlib.training.resume.model_identity`): what the run's state records and a later run is checked against;
* the compute precision (:meth:`kitlib.run.backends.base.Backend.resolve_precision`: the hardware probed
  once; the launch hands the same object to every replica as ``replica.precision``);
* the world size, the global batch and the steps per epoch (:func:`steps_per_epoch`, the one formula);
* the resume decision (:func:`kitlib.training.resume.plan`: a ``Resume`` or None) and the notes to print.

On a TPU host whose chips torch_xla counts only at launch (``rt.world_size`` None) the world-dependent
facts are left None here and every replica fills them with :meth:`Plan.for_world` (the same functions).
The plan is a frozen, picklable dataclass: the ``spawn`` start method (Colab) sends it to each replica.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from . import recipe as recipes
from . import resume
from .job import TrainJob, check_labels
from ..checkpoint import HISTORY_FILE, MODEL_SETTINGS, replacing_message
from ..models.kinds import PROMPT_KEY, Encoder, Kind
from ..models.weights import WeightsChoice
from ..run.backends.precision import Precision


def steps_per_epoch(rows: int | None, batch_size: int, world_size: int | None) -> int | None:
    """Optimizer steps in one epoch: ``rows // (batch_size * world_size)`` (None when either is unknown).

    The one formula: ``DistributedSampler(drop_last=True)`` gives each of the ``W`` replicas ``rows // W``
    rows and ``DataLoader(drop_last=True)`` makes ``(rows // W) // B`` batches of them, which is
    ``rows // (W * B)`` (nested floor division); a replica checks its loader against it.
    """
    if rows is None or world_size is None:
        return None
    return rows // (batch_size * world_size)


@dataclass(frozen=True)
class Plan:
    """What :func:`make_plan` works out once, in the calling process, for every replica.

    Attributes:
        job: the :class:`kitlib.training.job.TrainJob`, its ``recipe`` and ``lr`` made concrete.
        recipe: ``kitlib.training.recipe.RECIPES[job.recipe]``.
        precision: the compute precision, resolved once (``replica.precision`` is this object).
        train_rows: the training rows the replicas will read (``train_limit`` applied); None when the
            CSV cannot be read here (the replicas' read then names the problem).
        data_fingerprint: :func:`kitlib.training.resume.rows_fingerprint` of those rows (None with them).
        valid_fingerprint: the same of the validation rows (None when the training rows are).
        model_identity: ``(fingerprint, run_id)`` of the starting folder (:func:`kitlib.training.resume.model_identity`).
        found: the saved state the run would continue, ``(folder, run)`` (:func:`kitlib.training.resume.find`),
            or None (``resume="never"``, or nothing saved).
        world_size: replicas in all; None until a TPU host's launch counts its chips (:meth:`for_world`).
        global_batch: ``job.batch_size * world_size`` rows per optimizer step (None with ``world_size``).
        steps_per_epoch: :func:`steps_per_epoch` (None with ``world_size`` or ``train_rows``).
        resume: the resume decision, a :class:`kitlib.training.resume.Resume` (its ``note`` says how) or
            None: start afresh.
        notes: the lines :func:`kitlib.training.train.train` prints before launching (the recipe; how the
            run resumes, or that it replaces an earlier run's folder).
        kind: the model kind (:mod:`kitlib.models.kinds`), bound to the checkpoint's tokenizer: the replicas
            ask it for the tokens, the loss and the probabilities.
        weights: the weights' width and each device's memory plan (:func:`kitlib.models.weights.resolve_weights`),
            for a kind that plans its memory; None for encoders.
    """

    job: TrainJob
    recipe: recipes.Recipe
    precision: Precision
    train_rows: int | None
    data_fingerprint: str | None
    found: tuple[Path, dict] | None
    valid_fingerprint: str | None = None
    model_identity: tuple = ("", None)
    world_size: int | None = None
    global_batch: int | None = None
    steps_per_epoch: int | None = None
    resume: resume.Resume | None = None
    notes: tuple[str, ...] = ()
    kind: Kind = Encoder()
    weights: WeightsChoice | None = None

    @property
    def weights_dtype(self) -> str | None:
        """The width the base's weights are loaded at: the plan's 16-bit width when LoRA trains adapters on a
        frozen base (the adapters and the head stay float32), else None (float32: a full fine-tune's AdamW;
        8/4-bit weights: :func:`kitlib.models.open.open_model`)."""
        width = self.weights.width if self.weights is not None else None
        return width if self.job.lora_r and width in ("bf16", "fp16") else None

    @property
    def model_settings(self) -> dict:
        """Each :data:`kitlib.checkpoint.MODEL_SETTINGS` value as this run makes its model (JSON values): the kind's
        name, the prompt it asks (``""`` but for answer tokens) and its yes/no token ids (``[[], []]`` but for answer
        tokens), ``lora_r`` and, with LoRA, its other settings (else None), and with LoRA the width the memory plan
        chose for the frozen base (else ``"as saved"``: a full fine-tune or an encoder loads its weights as saved), and no
        ``mesh`` (None)."""
        job, lora = self.job, self.job.lora_r > 0
        held = self.weights.width if lora and self.weights is not None else "as saved"
        made = {"kind": self.kind.name, "prompt": self.kind.config_keys().get(PROMPT_KEY, ""),
                "answer_tokens": [list(getattr(self.kind, "yes_ids", ())), list(getattr(self.kind, "no_ids", ()))],
                "lora_r": job.lora_r, "lora_alpha": job.lora_alpha if lora else None,
                "lora_dropout": job.lora_dropout if lora else None, "lora_targets": job.lora_targets if lora else None,
                "weights": held, "mesh": None}  # one copy per device: no mesh (the sharded Keras run's is its own)
        return {key: made[key] for key in MODEL_SETTINGS}

    @property
    def quantized(self) -> bool:
        """Whether bitsandbytes holds the base's weights in 8 or 4 bits (:attr:`WeightsChoice.quantized`)."""
        return self.weights is not None and self.weights.quantized

    def skeleton(self):
        """What a replica trains, on the meta device: the kind's model (:meth:`kitlib.models.kinds.Kind.skeleton`)
        made trainable as the run makes it (:func:`trainable`; to count the optimizer's groups)."""
        return trainable(self.kind.skeleton(self.job.checkpoint), self.job, self.kind, self.recipe)

    def for_world(self, world_size: int | None, param_groups: tuple | None = None) -> "Plan":
        """This plan for ``world_size`` replicas: itself when it was made for them, else with the global
        batch, the steps per epoch and the resume decision worked out for that world size.

        ``param_groups``: the ``(tensors, elements)`` of each optimizer group (a replica passes its own);
        None: counted on a skeleton of the checkpoint (:func:`kitlib.models.model.skeleton`), only when
        there is a saved state to plan against.

        Raises:
            ValueError: the saved state cannot be continued by this run (:func:`kitlib.training.resume.plan`).
        """
        if world_size is None or world_size == self.world_size:
            return self
        planned = replace(self, world_size=world_size, global_batch=self.job.batch_size * world_size,
                          steps_per_epoch=steps_per_epoch(self.train_rows, self.job.batch_size, world_size))
        if self.found is None or planned.steps_per_epoch is None:
            return replace(planned, resume=None)
        if param_groups is None:
            param_groups = recipes.param_groups(self.skeleton(), self.recipe)
        return replace(planned, resume=resume.plan(planned.settings(param_groups), self.found))

    def settings(self, param_groups) -> resume.Settings:
        """The :class:`kitlib.training.resume.Settings` of this run (what its saved state records and a
        later run is compared with), for the optimizer's ``param_groups``; the world size must be known."""
        job = self.job
        return resume.Settings(recipe=job.recipe, lr=job.lr, head_lr=self.recipe.head_lr or job.lr,
                               weight_decay=job.weight_decay, param_groups=tuple(param_groups),
                               world_size=self.world_size, batch_size=job.batch_size,
                               steps_per_epoch=self.steps_per_epoch, epochs=job.epochs,
                               precision=self.precision.name, train_rows=self.data_fingerprint,
                               valid_rows=self.valid_fingerprint, model=job.checkpoint,
                               model_print=self.model_identity[0], model_settings=self.model_settings,
                               model_run=self.model_identity[1],
                               fold=resume.fold_label(job.tags))


def trainable(model, job: TrainJob, kind: Kind, recipe: recipes.Recipe):
    """``model`` (``kind``'s, loaded or a skeleton) with what the run trains left requiring grad, as every replica
    makes it: with ``job.lora``, the adapters and the kind's head (:func:`kitlib.models.adapters.wrap`: a new model),
    else every parameter but what ``recipe`` freezes (:func:`kitlib.training.recipe.prepare_model`, in place)."""
    from ..models import adapters

    if job.lora is not None:
        return adapters.wrap(model, kind, job.lora)
    recipes.prepare_model(model, recipe)
    return model


def _recipe_of_run(job: TrainJob, found: tuple[Path, dict] | None) -> TrainJob:
    """``job`` with ``recipe="auto"`` taken from the run it would continue (``found``: its state records
    the recipe it trained with), so a run trained with ``e5-fast`` continues with ``e5-fast``."""
    if job.recipe != recipes.AUTO or found is None:
        return job
    recipe = (found[1].get("settings") or {}).get("recipe")
    return replace(job, recipe=recipe) if recipe in recipes.RECIPES else job


def make_plan(job: TrainJob, rt) -> Plan:
    """The run's :class:`Plan`, worked out once in the calling process before any replica starts.

    Args:
        job: a :class:`kitlib.training.job.TrainJob` (``recipe`` may be ``"auto"``, ``lr`` 0).
        rt: the :class:`kitlib.run.runtime.Runtime` the run launches on.

    Raises:
        ValueError: the saved state cannot be read or continued (:func:`kitlib.training.resume.find`,
            :func:`kitlib.training.resume.plan`); the recipe is unknown or ``lr`` negative
            (:func:`kitlib.training.recipe.resolve`); the training labels hold one class
            (:func:`kitlib.training.job.check_labels`); ``rt``'s launch mode cannot train (no collectives
            for several replicas, fp16 on XLA: :meth:`kitlib.run.backends.base.Backend.check_training`).
    """
    found = resume.find(job.out_dir, job.checkpoint, HISTORY_FILE) if job.resume == "auto" else None
    job = recipes.resolve(_recipe_of_run(job, found))
    labels = check_labels(job)
    precision = rt.backend.resolve_precision(job.precision)
    rt.backend.check_training(rt, precision)
    kind, tokenizer = bound_kind(job)
    weights = memory_plan(job, rt, precision, kind)
    rows = None if labels is None else len(labels)
    fingerprint = None if rows is None else resume.rows_fingerprint(job.train_csv, job.train_limit)
    valid = None if rows is None or not Path(job.valid_csv).is_file() else resume.rows_fingerprint(job.valid_csv, job.valid_limit)
    recipe = recipes.RECIPES[job.recipe]
    plan = Plan(job, recipe, precision, rows, fingerprint, found, valid,
                resume.model_identity(job.checkpoint, HISTORY_FILE), kind=kind, weights=weights).for_world(rt.world_size)
    return replace(plan, notes=_notes(plan) + _seen(job, kind, tokenizer))


def bound_kind(job: TrainJob) -> tuple[Kind, "object"]:
    """``(kind, tokenizer)``: the checkpoint's model kind (``job.kind``, ``job.prompt``, ``job.label_col``) bound to
    its tokenizer, and the tokenizer.

    Raises:
        ValueError: an unknown kind, or one ``"auto"`` cannot tell; a tokenizer the kind cannot read; a prompt
            field neither the training or validation CSV nor the prompt's defaults give
            (:meth:`kitlib.models.kinds.Prompt.columns`).
    """
    from ..models.kinds import Prompt, kind_for

    kind = kind_for(job.checkpoint, job.kind, prompt=Prompt(template=job.prompt) if job.prompt else None,
                    label=job.label_col)
    for path in (job.train_csv, job.valid_csv):
        if Path(path).is_file():
            kind.row_columns(path)  # a prompt field a CSV gives nowhere: refused before any work
    tokenizer = kind.load_tokenizer(job.checkpoint)
    return kind.bind(tokenizer), tokenizer


def _seen(job: TrainJob, kind: Kind, tokenizer) -> tuple[str, ...]:
    """What a decoder or answer-token model sees for the first training row (:meth:`kitlib.models.kinds.Kind.seen`),
    printed before the run (issue 32); nothing for encoders, whose rows are their text."""
    from ..data import read_csv_checked, row_fields

    if kind.name == "encoder":
        return ()
    df = read_csv_checked(job.train_csv, text_col=job.text_col, limit=1, fields=kind.row_columns(job.train_csv))
    return (kind.seen(tokenizer, df["text"].iloc[0], job.max_len, **(row_fields(df) or [{}])[0]),)


def memory_plan(job: TrainJob, rt, precision: Precision, kind: Kind) -> WeightsChoice | None:
    """The weights' width and each replica's memory plan, printed (one line a device), for a kind that plans
    its memory (:attr:`kitlib.models.kinds.Kind.plans_memory`); None for the others.

    The plan is counted on the model a replica builds (:func:`run_shape`).

    Raises:
        ValueError: the run cannot fit a device (the figure and the fix: :func:`kitlib.models.memory.check_fits`);
            8/4-bit weights off CUDA (:func:`kitlib.models.memory.check_width`), without LoRA, or for an encoder
            (:func:`kitlib.models.memory.check_kind_width`, inference's rule too).
    """
    from ..models import memory
    from ..models.weights import resolve_weights

    memory.check_kind_width(job.weights, kind, job.checkpoint)
    if not kind.plans_memory:
        return None
    devices = memory.replica_devices(rt.backend.hardware, rt.world_size)
    choice = resolve_weights(job.weights, precision, run_shape(job, kind), devices, batch=job.batch_size,
                             length=job.max_len, train=True, lora_r=job.lora_r or None)
    if choice.quantized and not job.lora_r:
        raise ValueError(f"weights={choice.width!r} ({choice.reason}): 8/4-bit weights are frozen, so only adapters "
                         "can train on them; set lora_r (e.g. 16), or use a smaller model, batch_size or max_len")
    return choice


def run_shape(job: TrainJob, kind: Kind):
    """The :class:`kitlib.models.memory.Shape` of the model a replica of ``job`` trains: counted on ``kind``'s
    skeleton (:meth:`kitlib.models.kinds.Kind.skeleton`, the meta device: a decoder's 1-logit score, no LM head),
    and :attr:`~kitlib.models.memory.Shape.trained` the parameters that require grad once it is made
    :func:`trainable` (LoRA on the targeted modules and the kind's head; a frozen LM head is not among them).
    ``job.recipe`` as :func:`make_plan` resolved it (``"auto"``: resolved here)."""
    import os

    from ..models import memory

    model = kind.skeleton(job.checkpoint)
    shape = memory.model_shape(model.config, os.path.basename(os.path.normpath(job.checkpoint)), model=model)
    recipe = recipes.RECIPES.get(job.recipe) or recipes.RECIPES[recipes.resolve(job).recipe]
    made = trainable(model, job, kind, recipe)
    return replace(shape, trained=sum(p.numel() for p in made.parameters() if p.requires_grad))


def _notes(plan: Plan) -> tuple[str, ...]:
    """What :func:`kitlib.training.train.train` prints of ``plan``: the recipe, then how the run resumes
    (the decision's note) or, starting afresh into an earlier run's folder, that it replaces it."""
    job = plan.job
    recipe = f"recipe {job.recipe!r}: {recipes.describe(plan.recipe, job.lr)}"
    if plan.resume is not None:
        return recipe, plan.resume.note
    note = replacing_message(job.out_dir, job.checkpoint) if job.resume == "auto" else None
    return (recipe, note) if note else (recipe,)
