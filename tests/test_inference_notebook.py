"""The multicore inference notebook, executed end to end with papermill on a slice of the sample."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import papermill as pm
import pytest

from conftest import ROOT, write_slice
from kitlib.keras.data import write_submission

pytestmark = pytest.mark.slow


def test_notebook_end_to_end(tmp_path, tiny_checkpoint):
    test_csv, sample_csv = write_slice(tmp_path / "data", 45, start=500)
    out_csv = tmp_path / "submission.csv"
    # the Keras notebook's submission was there first (issue 21.10: replacing it is said)
    ids = pd.read_csv(sample_csv, dtype={"id": str}, keep_default_na=False)["id"]
    write_submission(ids, np.linspace(0.1, 0.4, len(ids)), out_csv, sample_submission=sample_csv, test=None,
                     source="model artifacts/keras-xlmr/model.keras")
    pm.execute_notebook(
        str(ROOT / "notebooks" / "xla_multicore_inference.ipynb"),
        str(tmp_path / "executed.ipynb"),
        cwd=str(ROOT / "notebooks"),
        kernel_name="python3",
        parameters=dict(
            model="tiny-random",
            test_csv=str(test_csv),
            sample_submission=str(sample_csv),
            output_csv=str(out_csv),
            cache_dir=str(tiny_checkpoint.parent),  # reuse the session's tiny model
            num_devices=2,
            batch_size=8,
            max_len=64,
        ),
        progress_bar=False,
    )
    sub = pd.read_csv(out_csv, dtype={"id": str}, keep_default_na=False)
    expected = pd.read_csv(sample_csv, dtype={"id": str}, keep_default_na=False)
    assert list(sub.columns) == ["id", "toxic"]
    assert sub["id"].tolist() == expected["id"].tolist()  # one row per input row, sample-submission order
    assert sub["toxic"].between(0, 1).all()
    executed = json.loads((tmp_path / "executed.ipynb").read_text())
    text = "".join(
        "".join(o.get("text", "")) for c in executed["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
    )
    assert "runtime: cpu, 2 replica(s)" in text and "45 rows from 2 shard(s)" in text
    assert re.search(r"replaced .*submission.csv \(written by kitlib.keras write_submission \(the Keras notebook.*"
                     r"model artifacts/keras-xlmr/model.keras at .*, 45 rows\) with the output of kitlib.infer.predict", text)
    assert "Defaulting to PJRT_DEVICE" not in text and "can conflict with" not in text
    assert any("image/png" in o.get("data", {}) for c in executed["cells"] for o in c.get("outputs", []))


def test_notebook_on_xla_cpu_runs_the_tpus_precision(tmp_path, sharp_checkpoint):
    """Issue 28.1: a rehearsal runs its target's precision. On xla-cpu (the TPU path on PJRT CPU, 2
    devices as threads) ``precision="auto"`` is the TPU's bf16, end to end: every replica predicts under
    bf16 autocast, the head stays float32 (checked in the replicas) and the submission spreads."""
    test_csv, sample_csv = write_slice(tmp_path / "data", 30, start=200)
    out_csv = tmp_path / "submission.csv"
    shards = tmp_path / "shards"
    pm.execute_notebook(
        str(ROOT / "notebooks" / "xla_multicore_inference.ipynb"),
        str(tmp_path / "executed.ipynb"),
        cwd=str(ROOT / "notebooks"),
        kernel_name="python3",
        parameters=dict(model=str(sharp_checkpoint), test_csv=str(test_csv), sample_submission=str(sample_csv),
                        output_csv=str(out_csv), shard_dir=str(shards), accelerator="xla-cpu", num_devices=2,
                        batch_size=8, max_len=32, num_buckets=1),
        progress_bar=False,
    )
    from kitlib.infer import replica_stats

    stats = replica_stats(shards)
    assert [s["precision"] for s in stats] == ["bf16", "bf16"]
    sub = pd.read_csv(out_csv, dtype={"id": str}, keep_default_na=False)
    assert len(sub) == 30 and sub["toxic"].std() > 0.05 and sub["toxic"].nunique() > 25
