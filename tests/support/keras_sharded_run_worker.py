"""Subprocess body for tests/test_keras_sharded_run.py: a sharded run through the kit's surfaces on 8 virtual JAX CPU devices.

Usage: ``python tests/support/keras_sharded_run_worker.py OUT_DIR``. On the bundled sample (the first 96 training
rows, 32 validation rows, 40 test rows) the tiny random decoder (:func:`kitlib.keras.sharded_run.tiny_base`) on mesh
(2, 4), batch 8, 16 tokens, LoRA rank 2, 6 steps:

1. ``uncut``: the 6 steps in one call;
2. ``cut``: the same job into another folder, stopped after 4 steps (``stop_after=4``: a session's end), then the same
   call again continues the state (the model rebuilt: a new process would do the same);
3. the continued run is saved (:func:`save_run`), the trained copy dropped, the folder loaded and handed off
   (:func:`handoff_check`: the ready mark), recorded in the runs table, and predicts 40 test rows into a submission
   naming its run.

Writes ``OUT_DIR/result.json`` (the figures) beside the run's folders, states, runs table and submission.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax_mesh_worker  # noqa: E402,F401  (kitlib on the path; JAX with 8 virtual devices, before JAX starts)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kitlib.checkpoint import not_ready  # noqa: E402
from kitlib.data import read_csv_checked  # noqa: E402
from kitlib.keras import sharded, sharded_predict, sharded_run  # noqa: E402
from kitlib.metrics import auc_text  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
SAMPLE = jax_mesh_worker.ROOT / "data" / "jigsaw-sample"
MESH, BATCH, LENGTH = (2, 4), 8, 16


def job(folder: str, **kw) -> sharded_run.ShardedJob:
    return sharded_run.ShardedJob(model="tiny-random", mesh=MESH, lora_rank=2, max_len=LENGTH, batch_size=BATCH, steps=6,
                                  lr=1e-2, width="fp32", out_dir=str(out / folder), train_csv=str(SAMPLE / "train.csv"),
                                  valid_csv=str(SAMPLE / "validation.csv"), train_limit=96, valid_limit=32,
                                  save_every=2, **kw)


train = read_csv_checked(SAMPLE / "train.csv", label_cols=("toxic",), limit=96)
valid = read_csv_checked(SAMPLE / "validation.csv", label_cols=("toxic",), limit=32)
base = sharded_run.tiny_base(seed=3)
ids, mask = sharded_run.byte_encode(train["text"].tolist(), LENGTH)
y = train["toxic"].to_numpy()


def build():
    return sharded.build_sharded(base, MESH, batch=BATCH, length=LENGTH, lora_rank=2, learning_rate=1e-2, log=None)


def run(j, stop_after=0):
    settings = sharded_run.run_settings(j, base, len(train))
    state = sharded_run.find_state(j, settings, log=None)
    clf = build()
    history = sharded_run.train_run(clf, j, settings, state, ids, mask, y, stop_after=stop_after, log=None)
    return clf, settings, history


result = {}
uncut, _, h_uncut = run(job("uncut"))
result["uncut"] = {"losses": [loss for _, loss in h_uncut["step_loss"]], "weights": sharded.trained_weights(uncut)}
started = time.time()
_, _, h_cut = run(job("cut"), stop_after=4)
result["cut"] = {"finished": h_cut["finished"], "steps": len(h_cut["step_loss"]), "stopped": h_cut["stopped"],
                 "state": json.loads((out / "cut.state" / "run.json").read_text())["position"]}
cont, settings, h = run(job("cut"))
result["continued"] = {"losses": [loss for _, loss in h["step_loss"]], "resumed": h["resumed"],
                       "run_id": h["run_id"], "cut_run_id": h_cut["run_id"], "weights": sharded.trained_weights(cont)}
result["max_weight_gap"] = max(float(np.abs(result["uncut"]["weights"][k] - result["continued"]["weights"][k]).max())
                               for k in result["uncut"]["weights"])
for key in ("uncut", "continued"):
    result[key]["weights"] = sorted(result[key]["weights"])

j = job("cut")
v_ids, v_mask = sharded_run.byte_encode(valid["text"].tolist(), LENGTH)
v_prob = sharded.probabilities(cont, v_ids, v_mask)
auc = auc_text(valid["toxic"], v_prob, "validation")[0]
folder = sharded_run.save_run(cont, j, h, valid["id"], v_prob, auc)
del cont
loaded = sharded.load_adapter(folder, MESH, batch=BATCH, length=LENGTH, base=base, log=None)
result["handoff"] = sharded_run.handoff_check(loaded, folder, v_ids, v_mask, auc, refuse_collapse=False)
result["not_ready"] = not_ready(folder)
result["table"] = str(sharded_run.record_run(j, h, started, settings))
test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False).iloc[:40]
test.to_csv(out / "test.csv", index=False)
pred = sharded_predict.predict_csv(loaded, out / "test.csv", sharded_run.byte_encode, out / "pred", column="toxic",
                                   runs=[h["run_id"]], output_csv=out / "sharded_submission.csv", log=None)
result["submission"] = str(pred.submission)
(out / "result.json").write_text(json.dumps(result, indent=1, default=float))
