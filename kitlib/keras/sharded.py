"""Sharded LoRA training of a decoder classifier on the JAX side: plan, mesh, ``ModelParallel``, LoRA, head, save, load.

How a run goes (the torch side's decoder kind, in Keras's terms)::

    base = Base("qwen3", config, preset="qwen3_14b_en")            # or seed=0: random weights (rehearsals)
    clf = build_sharded(base, (2, 4), batch=8, length=256, lora_rank=16)   # plan printed and checked first
    losses = train_steps(clf, batches)                              # [(token_ids, padding_mask, labels)]
    p = probabilities(clf, token_ids, padding_mask)                 # float32 [N]
    save_adapter(clf, "out/fold0")                                  # LoRA + head + the base's record
    clf2 = load_adapter("out/fold0", (1, 8), batch=8, length=256)   # any mesh; refuses another base

:func:`build_sharded` works out the plan per chip (:func:`kitlib.keras.chip_plan.plan_chips`) and refuses
one that cannot fit (:func:`kitlib.keras.chip_plan.check_fits`) before Keras builds anything, then builds
the backbone inside ``ModelParallel``'s scope (:func:`kitlib.keras.mesh.model_parallel`), so each frozen
weight is created, or loaded from the preset, in its shards. A ``(1, 1)`` mesh sets no distribution: the
kit's one-device path. ``enable_lora(rank)`` freezes the backbone and adds LoRA on its ``query`` and
``value`` kernels; the head is a float32 ``Dense(1)`` named ``score`` on the last real token's hidden state
(right padding, as the torch side's ``decoder`` kind pools: :meth:`kitlib.models.kinds.Decoder.check_tokens`
refuses left padding). The model gives the positive logit ``z``; the loss is binary cross-entropy on
``sigmoid(z)``, Adam on the LoRA matrices and the head only.

Inputs everywhere: ``token_ids`` and ``padding_mask``, int32 ``[N, length]``, right-padded; labels float32 ``[N]``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .chip_plan import LORA_TARGETS, V5E, Chip, ChipPlan, Decoder, check_fits, plan_chips

RECORD_FILE = "kitlib-keras-adapter.json"  # the torch side writes kitlib-adapter.json beside peft's files
WEIGHTS_FILE = "lora-and-head.npz"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Base:
    """The frozen base: its :data:`kitlib.keras.mesh.FAMILIES` key, its keras-hub backbone ``config``, and its
    weights: a keras-hub ``preset`` (name or folder, or a transformers folder: :func:`kitlib.keras.hf_decoder.hf_base`),
    or None for random weights drawn with ``seed``."""

    family: str
    config: dict
    preset: str | None = None
    seed: int = 0
    name: str = ""


@dataclass
class ShardedClassifier:
    """What :func:`build_sharded` gives: the Keras ``model`` (``{"token_ids", "padding_mask"}`` -> float32
    ``[N, 1]`` logits), its ``backbone``, the ``base``, the mesh, the ``distribution`` (None on one device),
    the chip ``plan`` and the LoRA ``rank``."""

    model: Any
    backbone: Any
    base: Base
    mesh_shape: tuple
    distribution: Any
    plan: ChipPlan
    rank: int
    width: str = "fp32"
    history: list = field(default_factory=list)

    def scope(self):
        """The distribution's scope (a fresh one per call), or a no-op on one device."""
        return self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()


def chip_for(devices: list) -> Chip:
    """The :class:`kitlib.keras.chip_plan.Chip` of ``devices`` (Keras device strings ``"tpu:0"``, ``"cpu:3"``):
    a TPU is :data:`~kitlib.keras.chip_plan.V5E`; a CPU or GPU is :func:`kitlib.models.memory.replica_devices`'s
    device (the CPU's available memory shared by the devices; a GPU planned as a T4), without speed figures."""
    from ..models.memory import replica_devices
    from ..run.hardware import accelerator_kind

    kind = accelerator_kind(devices[0])
    return V5E if kind == "tpu" else Chip(replica_devices(kind, len(devices))[0], 0.0, 0.0)


def _build_backbone(base: Base, dtype: str):
    """The keras-hub backbone of ``base`` at ``dtype`` (inside the caller's distribution scope): built from its
    config with random weights, or read from its preset (a keras-hub preset, or a transformers folder through
    keras-hub's converter: :mod:`kitlib.keras.hf_decoder`)."""
    import keras
    import keras_hub

    from .mesh import family

    from ..compat.keras import keras_hub_hf_overrides

    cls = getattr(keras_hub.models, family(base.family).backbone)
    keras.utils.set_random_seed(base.seed)
    if base.preset is not None:  # a transformers folder gets back what keras-hub's converter drops (rms_norm_eps)
        return cls.from_preset(base.preset, dtype=dtype, **keras_hub_hf_overrides(base.preset))
    return cls(**base.config, dtype=dtype)


def _classifier(backbone):
    """``backbone`` + last-token pooling + a float32 ``Dense(1)`` named ``score``: a functional ``keras.Model``."""
    import keras
    from keras import ops

    ids = keras.Input((None,), dtype="int32", name="token_ids")
    mask = keras.Input((None,), dtype="int32", name="padding_mask")
    seq = backbone({"token_ids": ids, "padding_mask": mask})

    def last_token(args):
        x, m = args
        last = ops.sum(ops.cast(m, "int32"), axis=1) - 1  # right padding: the last real token
        return ops.take_along_axis(x, last[:, None, None], axis=1)[:, 0, :]

    pooled = keras.layers.Lambda(last_token, name="last_token")([seq, mask])
    logit = keras.layers.Dense(1, dtype="float32", name="score")(pooled)
    return keras.Model({"token_ids": ids, "padding_mask": mask}, logit, name=f"{backbone.name}_classifier")


def build_sharded(base: Base, mesh_shape: tuple, *, batch: int, length: int, lora_rank: int = 16,
                  width: str = "fp32", learning_rate: float = 1e-3, chip: Chip | None = None,
                  log: Callable[[str], None] | None = print) -> ShardedClassifier:
    """Plan, check, then build the sharded LoRA classifier of ``base`` on the first ``batch x model`` devices.

    Args:
        base: the frozen base.
        mesh_shape: ``(batch chips, model chips)``; ``(1, 1)``: one device, no distribution.
        batch: rows per step over the mesh (divisible by the batch chips); length: tokens per row.
        lora_rank: ``enable_lora``'s rank.
        width: the frozen weights' width: ``"fp32"``, ``"bf16"`` (a TPU's), ``"fp16"``.
        learning_rate: Adam's, on the LoRA matrices and the head.
        chip: the chip to plan for (default :func:`chip_for` the devices).
        log: receives the plan's report (None: silent).

    Returns:
        A compiled :class:`ShardedClassifier`.

    Raises:
        ValueError: the plan does not fit (the figure and the fix), a bad mesh, batch or width; all before
            any weight is built or read.
        RuntimeError: the built backbone's weights are not the layout table's (:func:`kitlib.keras.mesh.check_tensors`).
    """
    import keras

    from .mesh import device_mesh, model_parallel

    b, m = (int(x) for x in mesh_shape)
    devices = keras.distribution.list_devices()
    if b * m > len(devices):
        raise ValueError(f"mesh_shape={mesh_shape} needs {b * m} devices; JAX sees {len(devices)} ({devices[0]} ...)")
    devices = devices[:b * m]
    plan = plan_chips(Decoder(base.name or base.family, base.family, base.config), (b, m), batch=batch,
                      length=length, width=width, lora_rank=lora_rank, chip=chip or chip_for(devices))
    if log is not None:
        log(plan.report())
    check_fits(plan)
    dist = model_parallel(device_mesh((b, m), devices), plan.placed) if b * m > 1 else None
    scope = dist.scope() if dist is not None else contextlib.nullcontext()
    with scope:
        model, backbone = _build_model(base, width, lora_rank, learning_rate)
    return ShardedClassifier(model, backbone, base, (b, m), dist, plan, lora_rank, width)


def _build_model(base: Base, width: str, lora_rank: int, learning_rate: float):
    """The backbone (checked against the layout table), LoRA on it, the head, compiled: ``(model, backbone)``."""
    import keras

    from .mesh import check_tensors

    backbone = _build_backbone(base, DTYPES[width])
    check_tensors(backbone, base.family, {**base.config, **_preset_config(backbone, base)})
    backbone.enable_lora(lora_rank, target_layer_names=list(LORA_TARGETS))
    model = _classifier(backbone)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    return model, backbone


def _preset_config(backbone, base: Base) -> dict:
    """A preset's own sizes (its backbone config) when ``base`` names one, else {}."""
    return backbone.get_config() if base.preset is not None else {}


def _check_inputs(token_ids, padding_mask, labels=None):
    """The inputs as int32 / float32 numpy arrays, right padding checked (the torch side's decoder rule)."""
    import numpy as np

    from ..models.kinds import Decoder as DecoderKind

    ids, mask = np.asarray(token_ids, dtype=np.int32), np.asarray(padding_mask, dtype=np.int32)
    if ids.shape != mask.shape or ids.ndim != 2:
        raise ValueError(f"token_ids {ids.shape} and padding_mask {mask.shape} must be one [N, length] shape")
    if (mask.sum(axis=1) < 1).any():
        raise ValueError(f"row {int(np.flatnonzero(mask.sum(axis=1) < 1)[0])} has no real token (padding_mask all 0)")
    DecoderKind().check_tokens(ids, mask)
    return ids, mask, None if labels is None else np.asarray(labels, dtype=np.float32).reshape(-1, 1)


def train_steps(clf: ShardedClassifier, batches) -> list[float]:
    """One optimizer step per ``(token_ids, padding_mask, labels)`` batch (each ``clf.plan.batch`` rows);
    returns each step's loss (float), also appended to ``clf.history``.

    Raises:
        ValueError: a batch of another size than the plan's (the plan would not hold), or left padding.
    """
    losses = []
    for token_ids, padding_mask, labels in batches:
        ids, mask, y = _check_inputs(token_ids, padding_mask, labels)
        if len(ids) != clf.plan.batch or ids.shape[1] > clf.plan.length:
            raise ValueError(f"a batch of {ids.shape} rows x tokens; the plan is for {clf.plan.batch} x "
                             f"{clf.plan.length}: build with the batch and length you train with")
        with clf.scope():
            loss = clf.model.train_on_batch({"token_ids": ids, "padding_mask": mask}, y)
        losses.append(float(loss if not isinstance(loss, (list, tuple)) else loss[0]))
    clf.history.extend(losses)
    return losses


def logits(clf: ShardedClassifier, token_ids, padding_mask):
    """float32 ``[N]`` positive logits, ``clf.plan.batch`` rows at a time (the last chunk padded with row 0, cut off)."""
    import numpy as np

    ids, mask, _ = _check_inputs(token_ids, padding_mask)
    n, step = len(ids), clf.plan.batch
    pad = -n % step
    ids, mask = (np.concatenate([a, np.repeat(a[:1], pad, axis=0)]) for a in (ids, mask))
    out = []
    with clf.scope():
        for i in range(0, len(ids), step):
            out.append(np.asarray(clf.model.predict_on_batch({"token_ids": ids[i:i + step],
                                                              "padding_mask": mask[i:i + step]}), dtype=np.float32))
    return np.concatenate(out)[:n, 0]


def probabilities(clf: ShardedClassifier, token_ids, padding_mask):
    """float32 ``[N]`` in [0, 1]: ``sigmoid`` of :func:`logits`."""
    import numpy as np

    z = logits(clf, token_ids, padding_mask).astype(np.float64)
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def trained_weights(clf: ShardedClassifier) -> dict:
    """``{path: numpy array}`` of what trains: the LoRA matrices and the head (gathered from their shards)."""
    import numpy as np

    return {v.path: np.asarray(v.value) for v in clf.model.trainable_weights}


def base_fingerprint(backbone) -> str:
    """sha256 (hex) of the frozen weights' paths, shapes, dtypes and first 8 values of each (mesh-independent)."""
    import numpy as np

    h = hashlib.sha256()
    for v in sorted((w for w in backbone.weights if "lora_kernel" not in w.path), key=lambda w: w.path):
        first = np.asarray(v.value[(0,) * (len(v.shape) - 1)][:8], dtype=np.float32)
        h.update(f"{v.path}:{tuple(v.shape)}:{v.dtype}:".encode() + first.tobytes())
    return h.hexdigest()


def save_adapter(clf: ShardedClassifier, folder: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write the LoRA matrices and the head (:data:`WEIGHTS_FILE`) and the base's record (:data:`RECORD_FILE`), atomically.

    The record names the family, the backbone config, the preset or seed, :func:`base_fingerprint`, the rank,
    the width and the weights' paths; the base's weights are not written. ``extra``: ``{file name: text}`` written
    in the same atomic folder (a run's history and held-out predictions: :func:`kitlib.keras.sharded_run.save_run`).
    Returns ``folder``.
    """
    import numpy as np

    from ..atomic import atomic_dir

    weights = trained_weights(clf)
    record = {"format": "kitlib keras sharded LoRA classifier", "base": asdict(clf.base),
              "base_fingerprint": base_fingerprint(clf.backbone), "lora_rank": clf.rank,
              "lora_targets": list(LORA_TARGETS), "head": "score", "width": clf.width,
              "trained_on_mesh": list(clf.mesh_shape), "weights": list(weights)}
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        np.savez(tmp / WEIGHTS_FILE, *weights.values())
        (tmp / RECORD_FILE).write_text(json.dumps(record, indent=1))
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
    return folder


def read_record(folder: str | os.PathLike) -> dict:
    """The record :func:`save_adapter` wrote.

    Raises:
        FileNotFoundError: ``folder`` has no :data:`RECORD_FILE` (naming what writes it).
    """
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; a sharded Keras adapter folder is written by "
                                "kitlib.keras.sharded.save_adapter")
    return json.loads(path.read_text())


def load_adapter(folder: str | os.PathLike, mesh_shape: tuple, *, batch: int, length: int, base: Base | None = None,
                 chip: Chip | None = None, log: Callable[[str], None] | None = print) -> ShardedClassifier:
    """The classifier :func:`save_adapter` wrote, rebuilt on its base (any mesh) with its LoRA matrices and head.

    Args:
        folder: what :func:`save_adapter` wrote.
        mesh_shape, batch, length, chip, log: as :func:`build_sharded` (planned and checked first).
        base: the base to load on (default: the record's).

    Raises:
        FileNotFoundError: no record; ValueError: the plan does not fit, or the base's weights are not the
            ones the adapters were trained on (the fingerprints differ), or the saved weights do not match the model.
    """
    import numpy as np

    record = read_record(folder)
    base = base or Base(**record["base"])
    clf = build_sharded(base, mesh_shape, batch=batch, length=length, lora_rank=record["lora_rank"],
                        width=record["width"], chip=chip, log=log)
    have = base_fingerprint(clf.backbone)
    if have != record["base_fingerprint"]:
        raise ValueError(f"{folder}: its adapters were trained on another base ({record['base']}, fingerprint "
                         f"{record['base_fingerprint'][:12]}); this base ({asdict(base)}) has {have[:12]}. "
                         "Load them on the base they were trained on (the record's preset or seed).")
    saved = np.load(Path(folder) / WEIGHTS_FILE)
    arrays = dict(zip(record["weights"], (saved[f"arr_{i}"] for i in range(len(record["weights"])))))
    variables = {v.path: v for v in clf.model.trainable_weights}
    if set(arrays) != set(variables):
        raise ValueError(f"{folder}: its weights {sorted(set(arrays) ^ set(variables))[:4]} do not match the "
                         "model's LoRA matrices and head (another rank or keras-hub version?)")
    with clf.scope():
        for path, value in arrays.items():
            variables[path].assign(value)
    return clf
