"""Subprocess body for tests/test_keras_sharded_predict.py: sharded inference on 8 virtual JAX CPU devices.

Usage: ``python tests/support/keras_sharded_predict_worker.py OUT_DIR``. A tiny random Qwen3 (hidden 32,
2 layers, 8 query heads, 4 key/value heads, vocabulary 128) is LoRA-trained one step on one device and
saved; the adapter is loaded on mesh (2, 4) with a global batch of 8 (2 batch-axis chips x 4 rows) and
predicts a 21-row test CSV (not a multiple of 8) through :func:`kitlib.keras.sharded_predict.predict_csv`,
against a sample submission in another order. The reference is the unsharded classifier's
:func:`kitlib.keras.sharded.probabilities` on the same rows. Also: the same at bf16 on (2, 4) and (1, 1),
and a repeated id refused before any prediction. Writes ``OUT_DIR/result.json``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import jax_mesh_worker  # noqa: E402,F401  (kitlib on the path; JAX with 8 virtual devices, before JAX starts)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kitlib.keras import sharded, sharded_predict  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
CONFIG = dict(vocabulary_size=128, num_layers=2, num_query_heads=8, num_key_value_heads=4, hidden_dim=32,
              intermediate_dim=64, head_dim=4)
BATCH, LENGTH, ROWS = 8, 16, 21
TEXTS = [("quite short" if i % 5 == 0 else f"row {i}: " + "abcdefghij"[: 1 + i % 10] * (1 + i % 3)) for i in range(ROWS)]
IDS = [f"{i:03d}" for i in range(ROWS)]  # exact strings: "007" must stay "007"


def encode(texts, length):
    """Characters -> ids 1..127, cut to ``length``, right-padded with 0."""
    ids = np.zeros((len(texts), length), np.int32)
    mask = np.zeros((len(texts), length), np.int32)
    for r, t in enumerate(texts):
        codes = [ord(c) % 127 + 1 for c in t[:length]]
        ids[r, :len(codes)], mask[r, :len(codes)] = codes, 1
    return ids, mask


test_csv, ss_csv = out / "test.csv", out / "sample_submission.csv"
pd.DataFrame({"id": IDS, "content": TEXTS}).to_csv(test_csv, index=False)
order = np.random.default_rng(3).permutation(ROWS)
pd.DataFrame({"id": [IDS[i] for i in order], "prediction": 0.5}).to_csv(ss_csv, index=False)

base = sharded.Base("qwen3", CONFIG, seed=7, name="tiny qwen3")
clf = sharded.build_sharded(base, (1, 1), batch=BATCH, length=LENGTH, lora_rank=2, log=None)
rng = np.random.default_rng(0)
train_ids, train_mask = encode([TEXTS[i] for i in rng.integers(0, ROWS, BATCH)], LENGTH)
sharded.train_steps(clf, [(train_ids, train_mask, rng.integers(0, 2, BATCH).astype(np.float32))])
folder = sharded.save_adapter(clf, out / "adapter")
ids, mask = encode(TEXTS, LENGTH)
reference = sharded.probabilities(clf, ids, mask)

lines: list = []
on_mesh = sharded.load_adapter(folder, (2, 4), batch=BATCH, length=LENGTH, log=None)
res = sharded_predict.predict_csv(on_mesh, test_csv, encode, out / "pred", sample_submission=ss_csv, log=lines.append)
sub = pd.read_csv(res.submission, dtype={"id": str})
result = dict(reference=reference.tolist(), probabilities=res.probabilities.tolist(), rows=res.rows,
              padding=res.padding, width=res.width, stats=res.stats, log=lines, sample_order=[IDS[i] for i in order],
              submission_ids=sub["id"].tolist(), submission_values=sub["prediction"].tolist(),
              columns=list(sub.columns), shards=sorted(p.name for p in (out / "pred" / "shards").iterdir()),
              merged_rows=res.merge.num_rows, merged_padding=res.merge.num_padding_duplicates)

try:  # a repeated id: refused before anything is predicted (no shard, no submission)
    sharded_predict.predict_submission(on_mesh, ids[:3], mask[:3], ["a", "b", "a"], out / "refused", log=None)
    result["repeated_id_error"] = None
except ValueError as e:
    result["repeated_id_error"] = str(e)
result["refused_dir_exists"] = (out / "refused").exists()

# bf16 weights and compute (a TPU's width) on the mesh and on one device: the same random base drawn at bf16
# (keras draws bf16 weights directly: not the fp32 base rounded, so only the two bf16 runs compare)
bf16 = {}
for mesh in ((2, 4), (1, 1)):
    c = sharded.build_sharded(base, mesh, batch=BATCH, length=LENGTH, lora_rank=2, width="bf16", log=None)
    r = sharded_predict.predict_submission(c, ids, mask, IDS, out / f"bf16-{mesh[0]}x{mesh[1]}", log=None)
    bf16[f"{mesh[0]}x{mesh[1]}"] = dict(probabilities=r.probabilities.tolist(), width=r.width,
                                        dtype=str(c.backbone.compute_dtype))
result["bf16"] = bf16
(out / "result.json").write_text(json.dumps(result, indent=1))
