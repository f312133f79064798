"""Real training and prediction on 2 emulated replicas, one backend per subprocess (tests/support/keras_worker.py).

JAX: ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set before JAX is imported (by
``kitlib.keras.runtime.select_backend`` in the worker), ``keras.distribution.DataParallel`` over
the 2 CPU devices. TF: 2 logical CPUs under ``MirroredStrategy``. The TF run also reloads the
``.keras`` file the JAX run saved and must give the same predictions.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "keras_worker.py"
pytestmark = pytest.mark.slow


def _run(backend: str, out: Path, *extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    p = subprocess.run(
        [sys.executable, str(WORKER), backend, str(out), *extra], env=env, cwd=ROOT, capture_output=True, text=True, timeout=480
    )
    assert p.returncode == 0, f"{backend} worker failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("jax")
    return out, _run("jax", out)


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory, jax_run):
    out = tmp_path_factory.mktemp("tf")
    return out, _run("tensorflow", out, str(jax_run[0] / "model"))


def _check_training(res, backend):
    assert (res["backend"], res["replicas"], res["global_batch"], res["accelerator"], res["virtual_replicas"]) == (backend, 2, 16, "cpu", 2)
    assert res["steps_per_epoch"] == 6  # 96 rows // 16, the remainder dropped
    assert len(res["epoch_seconds"]) == 2 and len(res["loss"]) == 2
    assert all(np.isfinite(res["loss"])) and res["loss"][1] < res["loss"][0]  # training lowers the loss
    assert res["head_change"] > 0  # the weights moved: training really ran on both replicas


def _check_prediction(out, n_big):
    big, small, rev = (np.load(out / f) for f in ("big.npy", "small.npy", "rev.npy"))
    assert big.shape == (n_big,) and small.shape == (7,) and rev.shape == (n_big,)
    assert np.all((big >= 0) & (big <= 1))
    assert big.std() > 0.05  # outputs that differ per row, so the comparisons below mean something
    np.testing.assert_allclose(small, big[:7], atol=1e-5)  # same rows, other padding: same outputs
    np.testing.assert_allclose(rev[::-1], big, atol=1e-5)  # order kept: reversed input, reversed output
    assert np.ptp(big) > 0  # not a constant output that would make the order checks vacuous


def test_jax_data_parallel_training_on_two_devices(jax_run):
    _check_training(jax_run[1], "jax")


def test_jax_prediction_exact_rows_in_order(jax_run):
    _check_prediction(jax_run[0], 1001)  # 1001 = 62 x 16 + 9: padded to 1008, sliced back


def test_jax_prediction_compiles_once_per_shape(jax_run):
    res = jax_run[1]
    assert res["predict_compiles"] == 1  # 1001, 7 and 1001 reversed rows: one padded shape [16, 32]
    assert res["predict_compiles_again"] == 0


def test_jax_failed_predict_restores_state(jax_run):
    res = jax_run[1]
    assert res["uneven_error"] is not None  # 7 rows cannot split over 2 devices
    assert "jax_state_sync" in res["uneven_note"]
    assert res["after_error_max_diff"] < 1e-6  # the weights are still attached and unchanged


def test_tf_mirrored_training_on_two_virtual_replicas(tf_run):
    _check_training(tf_run[1], "tensorflow")


def test_tf_prediction_ragged_tail(tf_run):
    _check_prediction(tf_run[0], 37)  # 37 = 2 x 16 + 5
    assert tf_run[1]["predict_compiles"] == 1 and tf_run[1]["predict_compiles_again"] == 0


def test_keras_file_saved_under_jax_reloads_under_tf(jax_run, tf_run):
    jax_probe = np.load(jax_run[0] / "probe.npy")
    tf_probe = np.load(tf_run[0] / "reloaded_probe.npy")
    assert jax_probe.shape == tf_probe.shape == (50,)
    assert jax_probe.std() > 0.05
    np.testing.assert_allclose(tf_probe, jax_probe, atol=1e-5)
