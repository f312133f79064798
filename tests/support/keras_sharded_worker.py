"""Subprocess body for tests/test_keras_sharded.py: tiny random decoders LoRA-trained on 8 virtual JAX CPU devices.

Usage: ``python tests/support/keras_sharded_worker.py OUT_DIR [FAMILY ...]``. Sets
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` and ``KERAS_BACKEND=jax`` before JAX or Keras is
imported (:func:`kitlib.keras.runtime.select_backend`), then for each family builds the same tiny base
(hidden 32, 2 layers, 8 query heads, 4 key/value heads, vocabulary 128) on one device (mesh (1, 1), no
distribution: the reference) and on meshes (1, 8), (2, 4) and (8, 1), trains 3 LoRA steps of 8 rows x 16
tokens on each, and records: per-step losses, logits before and after, each device's bytes of frozen
weights (``addressable_shards``) and the plan's figure, each tensor's shard shape against the plan's,
which weights changed, a save on (2, 4) reloaded on (1, 8) and (1, 1), a reload on another base, and a
plan refused before any weight is built. Writes ``OUT_DIR/result.json``.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import jax_mesh_worker  # noqa: E402,F401  (kitlib on the path; JAX with 8 virtual devices, before JAX starts)

import numpy as np  # noqa: E402

from kitlib.keras import sharded  # noqa: E402
from kitlib.keras.chip_plan import Chip, Decoder, plan_chips  # noqa: E402
from kitlib.models.memory import Device  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
COMMON = dict(vocabulary_size=128, num_layers=2, num_query_heads=8, num_key_value_heads=4, hidden_dim=32,
              intermediate_dim=64)
GEMMA2 = dict(head_dim=4, use_post_ffw_norm=True, use_post_attention_norm=True, attention_logit_soft_cap=50.0,
              final_logit_soft_cap=30.0, use_sliding_window_attention=True, sliding_window_size=8)
CONFIGS = {
    "gemma": {**COMMON, **GEMMA2},
    "gemma3": {**COMMON, "head_dim": 4, "image_size": None, "use_post_ffw_norm": True, "use_post_attention_norm": True,
               "use_sliding_window_attention": True, "sliding_window_size": 8},
    "llama": dict(COMMON),
    "qwen3": {**COMMON, "head_dim": 4},
}
MESHES = [(1, 8), (2, 4), (8, 1)]
BATCH, LENGTH, STEPS, RANK = 8, 16, 3, 2
families = sys.argv[2:] or list(CONFIGS)


def data(seed: int, n: int):
    """Random right-padded rows (ids 1..127, 4..16 real tokens) and 0/1 labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, LENGTH + 1, n)
    mask = (np.arange(LENGTH)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, 128, (n, LENGTH)).astype(np.int32) * mask
    return ids, mask, rng.integers(0, 2, n).astype(np.float32)


TRAIN = data(0, BATCH * STEPS)
PROBE = data(1, 2 * BATCH)[:2]


def device_bytes(clf) -> dict:
    """Bytes of frozen weights each device holds, read from the arrays' addressable shards, by ``"cpu:0"`` (platform
    and id: ``str()`` of a device is ``cpu:0`` in jax 0.10, ``TFRT_CPU_0`` in the TPU image's 0.7.2)."""
    held: dict = {}
    for v in clf.model.non_trainable_weights:
        for s in v.value.addressable_shards:
            name = f"{s.device.platform}:{s.device.id}"
            held[name] = held.get(name, 0) + s.data.nbytes
    return held


def shard_mismatches(clf) -> list:
    """Tensors whose shard shape (``sharding.shard_shape``) is not the plan's."""
    want = {p.tensor.path: tuple(p.shard) for p in clf.plan.placed}
    return [(v.path, tuple(v.value.sharding.shard_shape(tuple(v.shape))), want.get(v.path))
            for v in clf.backbone.weights if "lora_kernel" not in v.path
            and tuple(v.value.sharding.shard_shape(tuple(v.shape))) != want.get(v.path)]


def run(base, mesh) -> tuple:
    t0 = time.perf_counter()
    clf = sharded.build_sharded(base, mesh, batch=BATCH, length=LENGTH, lora_rank=RANK, log=None)
    report = clf.plan.report()
    before = {v.path: np.asarray(v.value) for v in clf.model.weights}
    z0 = sharded.logits(clf, *PROBE)
    steps = [(TRAIN[0][i:i + BATCH], TRAIN[1][i:i + BATCH], TRAIN[2][i:i + BATCH]) for i in range(0, BATCH * STEPS, BATCH)]
    losses = sharded.train_steps(clf, steps)
    z1 = sharded.logits(clf, *PROBE)
    trainable = {v.path for v in clf.model.trainable_weights}
    changed = sorted(p for p, v in ((v.path, np.asarray(v.value)) for v in clf.model.weights)
                     if not np.array_equal(v, before[p]))
    res = dict(mesh=list(mesh), losses=losses, logits_before=z0.tolist(), logits_after=z1.tolist(),
               device_bytes=device_bytes(clf), planned_frozen=clf.plan.frozen, shard_mismatches=shard_mismatches(clf),
               trainable=sorted(trainable), changed=changed, frozen_count=len(clf.model.non_trainable_weights),
               seconds=time.perf_counter() - t0, report=report,
               replicated=[p.tensor.path for p in clf.plan.placed if p.note][:2])
    return clf, res


def save_and_reload(clf, name: str, base) -> dict:
    folder = sharded.save_adapter(clf, out / f"adapter-{name}")
    want = sharded.logits(clf, *PROBE)
    res = {"files": sorted(p.name for p in folder.iterdir()), "bytes": sum(p.stat().st_size for p in folder.iterdir())}
    for mesh in [(1, 8), (1, 1)]:
        again = sharded.load_adapter(folder, mesh, batch=BATCH, length=LENGTH, log=None)
        res[f"reload_{mesh[0]}x{mesh[1]}_max_diff"] = float(np.abs(sharded.logits(again, *PROBE) - want).max())
    try:
        other = sharded.Base(base.family, base.config, seed=base.seed + 1)
        sharded.load_adapter(folder, (1, 1), batch=BATCH, length=LENGTH, base=other, log=None)
        res["other_base_error"] = None
    except ValueError as e:
        res["other_base_error"] = str(e)
    return res


def refusal(base) -> dict:
    """A chip 1% smaller than the (8, 1) plan's total: (8, 1) must be refused before anything is built."""
    dec = Decoder(base.family, base.family, base.config)
    need = {m: plan_chips(dec, m, batch=BATCH, length=LENGTH, width="fp32", lora_rank=RANK).total for m in MESHES}
    chip = Chip(Device("a test chip", "cpu", need[(8, 1)] * 0.99 / 1e9), 0.0, 0.0)
    built = []
    real = sharded._build_backbone
    sharded._build_backbone = lambda *a, **k: built.append(1) or real(*a, **k)
    try:
        sharded.build_sharded(base, (8, 1), batch=BATCH, length=LENGTH, lora_rank=RANK, chip=chip, log=None)
        err = None
    except ValueError as e:
        err = str(e)
    finally:
        sharded._build_backbone = real
    return {"need": {str(m): v for m, v in need.items()}, "chip_gb": chip.device.gb, "error": err, "built": len(built)}


result = {"xla_flags": os.environ["XLA_FLAGS"]}
t_all = time.perf_counter()
for fam in families:
    base = sharded.Base(fam, CONFIGS[fam], seed=7, name=f"tiny {fam}")
    ref_clf, ref = run(base, (1, 1))
    runs = {"1x1": ref}
    for mesh in MESHES:
        clf, r = run(base, mesh)
        runs[f"{mesh[0]}x{mesh[1]}"] = r
        if mesh == (2, 4):
            runs["save_reload"] = save_and_reload(clf, fam, base)
    runs["refusal"] = refusal(base)
    result[fam] = runs
    print(fam, {k: round(v.get("seconds", 0), 1) for k, v in runs.items() if isinstance(v, dict)}, flush=True)
result["seconds"] = time.perf_counter() - t_all
(out / "result.json").write_text(json.dumps(result, indent=1))
