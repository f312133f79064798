"""Subprocess body for the Keras backend tests: one backend per process (Keras reads KERAS_BACKEND once).

Usage: ``python tests/support/keras_worker.py {jax,tensorflow} OUT_DIR [JAX_MODEL_DIR]``. Writes ``OUT_DIR/result.json``
and ``OUT_DIR/*.npy``; the tests assert on them. Both modes train a tiny XLM-R on a slice of the sample
across 2 emulated replicas (JAX: 2 host devices; TF: 2 logical CPUs under MirroredStrategy).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kitlib.keras.runtime import keras_runtime  # noqa: E402

backend, out = sys.argv[1], Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
rt = keras_runtime(backend, 8, virtual_replicas=2)

import numpy as np  # noqa: E402

from kitlib.data import read_csv_checked  # noqa: E402
from kitlib.keras.data import make_dataset, predict_probabilities  # noqa: E402
from kitlib.keras.model import (  # noqa: E402
    KerasModelConfig,
    build_classifier,
    compile_classifier,
    epoch_timer,
    load_classifier,
    save_classifier,
)
from kitlib.compat.keras import keras_guarded as guarded  # noqa: E402
from kitlib.keras.runtime import count_compiles  # noqa: E402

DATA = ROOT / "data" / "jigsaw-sample"
CACHE = ROOT / ".cache"
train = read_csv_checked(DATA / "train.csv", label_cols=("toxic",))
valid = read_csv_checked(DATA / "validation.csv", label_cols=("toxic",))
probe = valid.text.tolist()[:50]
res: dict = {"backend": rt.backend, "replicas": rt.num_replicas, "global_batch": rt.global_batch, "accelerator": rt.accelerator, "virtual_replicas": rt.virtual_replicas}

if backend == "tensorflow" and len(sys.argv) > 3:
    # the .keras file saved under 2 JAX devices, reloaded under TF
    jmodel, jpre = load_classifier(Path(sys.argv[3]) / "model.keras", scope=rt.scope)
    np.save(out / "reloaded_probe.npy", predict_probabilities(jmodel, probe, jpre, rt.global_batch))

cfg = KerasModelConfig(max_len=32, seed=1)
model, pre = build_classifier(cfg, data_dir=DATA, cache_dir=CACHE, scope=rt.scope)
compile_classifier(model, 1e-3, jit_compile=rt.jit_compile, scope=rt.scope)
head_before = np.array(model.trainable_weights[-2])
timer = epoch_timer()
sl = train.iloc[:96]
hist = guarded(model, "fit", make_dataset(sl.text, sl.toxic, pre, rt.global_batch, shuffle=True), epochs=2, callbacks=[timer], verbose=0)
head_after = np.array(model.trainable_weights[-2])
res.update(
    epoch_seconds=timer.times,
    loss=hist.history["loss"],
    steps_per_epoch=len(sl) // rt.global_batch,
    head_change=float(np.abs(head_after - head_before).sum()),
)

# Spread the outputs before comparing predictions: the trained tiny model predicts every row within
# 1e-4 of one value, so "same predictions" would pass for the wrong reason. Weight matrices redrawn
# at std 0.2 (seeded) make the outputs differ per row.
rng = np.random.default_rng(0)
for v in model.weights:
    if len(v.shape) > 1:
        v.assign(rng.normal(0.0, 0.2, tuple(v.shape)).astype("float32"))

texts = train.text.tolist()
n_big = 1001 if backend == "jax" else 37  # TF: a ragged tail of 37 = 2 x 16 + 5
with count_compiles(model) as cc:
    big = predict_probabilities(model, texts[:n_big], pre, rt.global_batch)
    small = predict_probabilities(model, texts[:7], pre, rt.global_batch)
    rev = predict_probabilities(model, texts[:n_big][::-1], pre, rt.global_batch)
res["predict_compiles"] = cc.count
with count_compiles(model) as cc2:
    predict_probabilities(model, texts[:n_big], pre, rt.global_batch)
res["predict_compiles_again"] = cc2.count
np.save(out / "big.npy", big)
np.save(out / "small.npy", small)
np.save(out / "rev.npy", rev)

if backend == "jax":
    # an uneven batch (7 rows on 2 devices) raises; guarded() must leave the model usable
    import keras

    x = {k: np.asarray(v).astype("int32") for k, v in pre(texts[:7]).items()}
    try:
        guarded(model, "predict", x, batch_size=7, verbose=0)
        res["uneven_error"] = None
    except Exception as e:  # noqa: BLE001 - the type is what we record
        res["uneven_error"] = type(e).__name__
        res["uneven_note"] = " ".join(getattr(e, "__notes__", []))
    after = predict_probabilities(model, texts[:7], pre, rt.global_batch)
    res["after_error_max_diff"] = float(np.abs(after - small).max())
    save_classifier(model, pre, out / "model" / "model.keras")
    np.save(out / "probe.npy", predict_probabilities(model, probe, pre, rt.global_batch))
    res["keras"] = keras.__version__

(out / "result.json").write_text(json.dumps(res, indent=1))
print(json.dumps(res))
