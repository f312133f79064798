"""Subprocess body for tests/test_keras_pretrained.py: a transformers folder through keras-hub, one backend per process.

Usage: ``python tests/support/keras_pretrained_worker.py {jax,tensorflow} FOLDER OUT_DIR``. Builds the
classifier of :mod:`kitlib.keras.pretrained` on FOLDER and reads the texts of ``OUT_DIR/texts.json``
(max_len 16, the recipe's frozen word embeddings),
and writes ``OUT_DIR/result.json`` plus ``probs.npy`` (``[N]``) and ``pooled.npy`` (``[N, hidden]``:
the backbone's sequence output mean-pooled over the padding mask, for comparison with torch). It also
checks the recipe's optimizer pieces on a two-layer model: the schedule against
``kitlib.training.recipe.lr_factor`` and the head's learning-rate multiplier.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kitlib.keras.runtime import keras_runtime  # noqa: E402

backend, folder, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
rt = keras_runtime(backend, 4, log=None)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from kitlib.keras.model import KerasModelConfig, build_classifier, recipe_for_preset  # noqa: E402
from kitlib.keras.pretrained import HFPreprocessor, HeadLRAdamW, RecipeSchedule  # noqa: E402
from kitlib.training.recipe import lr_factor  # noqa: E402

TEXTS = json.loads((out / "texts.json").read_text())
t0 = time.perf_counter()
recipe = recipe_for_preset(str(folder))
model, pre = build_classifier(KerasModelConfig(preset=str(folder), max_len=16), data_dir=ROOT, cache_dir=ROOT,
                              scope=rt.scope, freeze_word_embeddings=recipe.freeze_word_embeddings)
built = time.perf_counter() - t0
x = pre(TEXTS)
probs = np.asarray(model.predict(x, batch_size=4, verbose=0))[:, 0]
backbone = next(layer for layer in model.layers if isinstance(layer, keras.Model))
seq = np.asarray(backbone({**x, "segment_ids": np.zeros_like(x["token_ids"])})["sequence_output"])
mask = x["padding_mask"][..., None].astype(np.float32)
np.save(out / "probs.npy", probs)
np.save(out / "pooled.npy", (seq * mask).sum(1) / mask.sum(1))

# The optimizer pieces: the schedule is the torch side's lr_factor; the head steps head_multiplier times more.
sched = RecipeSchedule.for_recipe(recipe, 3e-5, 50)
sched_err = max(abs(float(sched(s)) - 3e-5 * lr_factor(s, recipe, 50)) for s in (0, 1, 19, 20, 21, 49, 60))
inp = keras.Input((3,))
two = keras.Model(inp, keras.layers.Dense(1, name="head_logit")(keras.layers.Dense(3, name="body")(inp)))
before = [np.array(v) for v in two.trainable_weights]
opt = HeadLRAdamW(1e-3, weight_decay=0.0, head_multiplier=10.0)
opt.apply_gradients([(keras.ops.ones(v.shape), v) for v in two.trainable_weights])
moved = {v.path: float(np.abs(np.array(v) - b).max()) for v, b in zip(two.trainable_weights, before)}

res = {
    "backend": keras.backend.backend(), "recipe": recipe.name, "prefix": pre.text_prefix if isinstance(pre, HFPreprocessor) else None,
    "token_ids_row0": x["token_ids"][0].tolist(), "build_seconds": built,
    "frozen": not backbone.get_layer("token_embedding").trainable,
    "pooler_trainable": backbone.get_layer("pooled_dense").trainable,
    "trainable": sum(int(np.prod(v.shape)) for v in model.trainable_weights), "params": model.count_params(),
    "probs_std": float(probs.std()), "sched_err": sched_err, "moved": moved,
}
(out / "result.json").write_text(json.dumps(res, indent=1))
print(json.dumps(res))
