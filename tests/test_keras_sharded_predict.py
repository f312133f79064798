"""Sharded inference (issue 40 item 3): rows on the mesh's batch axis, one row per input row through the kit's
shard writer and merger, at the width the precision rule gives.

The checks that need no JAX run here; the prediction runs in a subprocess
(tests/support/keras_sharded_predict_worker.py: 8 virtual JAX CPU devices, KERAS_BACKEND=jax; TensorFlow,
which keras-hub imports, never enters this process) and the tests read what it recorded.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from support.child_process import run_jax_worker

from kitlib.keras.sharded_predict import check_rows, inference_width, pad_rows
from kitlib.run.backends.precision import reload_tolerance

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "keras_sharded_predict_worker.py"
TOL = 1e-5  # float32 on CPU: sharded matmuls sum in another order (tests/test_keras_sharded.py)


def test_rows_are_padded_to_the_global_batch():
    assert [pad_rows(n, 8) for n in (1, 7, 8, 9, 21, 24)] == [7, 1, 0, 7, 3, 0]
    with pytest.raises(ValueError, match="0 rows in global batches of 8"):
        pad_rows(0, 8)


def test_the_width_is_the_tpu_rule_on_a_tpu_and_the_built_one_elsewhere():
    assert inference_width("tpu", "bf16")[0] == "bf16"
    with pytest.raises(ValueError, match=r"holds its frozen weights at fp32; on a TPU the precision rule gives bf16.*width='bf16'"):
        inference_width("tpu", "fp32")
    width, why = inference_width("cpu", "fp32")
    assert width == "fp32" and "rehearsal" in why and "bf16" in why


def test_rows_are_refused_naming_the_input_and_the_fix():
    ids = np.array([[5, 6, 0], [7, 0, 0]])
    mask = (ids > 0).astype(int)
    assert check_rows([1, "b"], ids, mask, 3)[0] == ["1", "b"]
    with pytest.raises(ValueError, match="3 ids for 2 rows of token_ids: give one id per row"):
        check_rows(["a", "b", "c"], ids, mask, 3)
    with pytest.raises(ValueError, match="id 'a' is repeated"):
        check_rows(["a", "a"], ids, mask, 3)
    with pytest.raises(ValueError, match="row 1 has a blank id"):
        check_rows(["a", " "], ids, mask, 3)
    with pytest.raises(ValueError, match="rows of 3 tokens; the classifier was planned for 2: cut the rows to 2"):
        check_rows(["a", "b"], ids, mask, 2)
    with pytest.raises(ValueError, match="(?i)left"):  # the torch side's decoder rule: right padding only
        check_rows(["a", "b"], ids[:, ::-1], mask[:, ::-1], 3)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded-predict")
    return run_jax_worker(WORKER, out, "sharded predict")


@pytest.mark.slow
def test_each_id_once_in_the_samples_order_equal_to_one_device(run):
    assert run["rows"] == 21 and run["padding"] == 3  # 21 rows, global batch 8 (2 batch chips x 4 rows)
    assert run["shards"] == ["shard-00000-of-00001.parquet"] and run["merged_rows"] == 21
    assert run["columns"] == ["id", "prediction"]
    assert run["submission_ids"] == run["sample_order"] and len(set(run["submission_ids"])) == 21
    assert "007" in run["submission_ids"]  # ids kept as written
    ref = np.array(run["reference"])  # one device, unsharded, in the test rows' order
    assert ref.std() > 0.01  # rows predicted differently: a mix-up of rows would show
    assert np.abs(np.array(run["probabilities"]) - ref).max() < TOL
    by_id = dict(zip(run["submission_ids"], run["submission_values"]))
    assert np.abs(np.array([by_id[f"{i:03d}"] for i in range(21)]) - ref).max() < TOL


@pytest.mark.slow
def test_rows_go_over_the_batch_axis_and_the_width_is_printed(run):
    s = run["stats"]
    assert s["steps"] == 3 and s["row_shard"] == [4, 16]  # each chip holds 4 of a batch's 8 rows, whole rows
    assert s["tokens"] < s["padded_tokens"] == 24 * 16
    assert run["width"] == "fp32" and "weights and compute at fp32" in run["log"][0]
    assert "21 rows + 3 padding rows (copies of row 0) = 3 global batches of 8 (2 batch-axis chips x 4 rows)" in run["log"][0]


@pytest.mark.slow
def test_a_repeated_id_is_refused_before_any_prediction(run):
    assert "id 'a' is repeated" in run["repeated_id_error"] and not run["refused_dir_exists"]


@pytest.mark.slow
def test_bf16_on_the_mesh_matches_bf16_on_one_device(run):
    a, b = run["bf16"]["2x4"], run["bf16"]["1x1"]
    assert a["width"] == b["width"] == "bf16" and a["dtype"] == "bfloat16"
    gap = np.abs(np.array(a["probabilities"]) - b["probabilities"]).max()
    assert gap < reload_tolerance("bf16")  # bf16 sums in another order: the kit's bf16 allowance (0.05)


def test_tpu_check_plans_the_v5e8_figures_without_jax():
    """benchmarks/tpu_throughput.py's planned figures (scripts/tpu_check.sh): the full Qwen3-14B at 1x8, 8 x 256."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tpu_throughput

    a = tpu_throughput.parse(["--mesh", "1x8", "--length", "256"])
    p = tpu_throughput.planned(a, tpu_throughput.base_of(a))
    assert p["fits"] and p["gb_per_chip"] < 16 and 0.05 < p["step_floor_s"] < 0.1  # tests/test_keras_sharded.py
    assert abs(p["tokens_per_s_at_peak"] * p["step_floor_s"] / 2048 - 1) < 0.01  # 8 x 256 tokens per floor (rounded)
    assert p["predict_floor_s"] == 0.0346 and p["predict_tokens_per_s_at_peak"] == 59173  # forward only: half the FLOPs
    if not a.tpu:  # here: the tiny CPU shape, whose floor is far below the real shape's
        assert p["measured_shape_step_floor_s"] < p["step_floor_s"] / 100
