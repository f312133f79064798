"""Backend choice (mocked machines), padding and the submission writer: no Keras import in this process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kitlib.keras.data import pad_to_multiple, write_submission
from kitlib.keras.runtime import Probes, choose_backend
from kitlib.outputs.merge import MergeError

ROOT = Path(__file__).resolve().parents[1]


def probes(*, tpu=None, tf_tpu=False, jax_tpu=False, gpus=0, has_tf=True, has_jax=True):
    calls = []

    def rec(name, value):
        def f():
            calls.append(name)
            return value
        return f

    p = Probes(
        tpu_evidence=rec("evidence", tpu),
        tf_sees_tpu=rec("tf_tpu", tf_tpu),
        jax_sees_tpu=rec("jax_tpu", jax_tpu),
        gpu_count=rec("gpus", gpus),
        has_tf=lambda: has_tf,
        has_jax=lambda: has_jax,
    )
    p.calls = calls
    return p


@pytest.fixture(autouse=True)
def no_env_backend(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)


def test_tpu_seen_by_jax_only_means_jax():  # Kaggle TPU v5e-8: jax[tpu] + tensorflow-cpu
    p = probes(tpu="TPU_ACCELERATOR_TYPE=v5litepod-8", tf_tpu=False, jax_tpu=True)
    c = choose_backend("auto", probes=p)
    assert c.backend == "jax"
    assert "seen by JAX, not by TensorFlow" in c.reason and "v5litepod-8" in c.reason
    assert p.calls == ["evidence", "tf_tpu", "jax_tpu"]


def test_tpu_seen_by_tf_means_tensorflow():
    p = probes(tpu="COLAB_TPU_ADDR=10.0.0.2:8470", tf_tpu=True, jax_tpu=True)
    c = choose_backend("auto", probes=p)
    assert c.backend == "tensorflow" and "usable by TensorFlow" in c.reason
    assert "jax_tpu" not in p.calls  # JAX is not asked (it would grab the TPU)


def test_two_gpus_mean_tensorflow():
    p = probes(gpus=2)
    c = choose_backend("auto", probes=p)
    assert c.backend == "tensorflow" and c.reason == "2 GPU(s), no TPU"
    assert "tf_tpu" not in p.calls


def test_cpu_means_tensorflow_or_jax_without_tf():
    assert choose_backend("auto", probes=probes()).backend == "tensorflow"
    c = choose_backend("auto", probes=probes(has_tf=False))
    assert c.backend == "jax" and c.reason == "no TPU or GPU"


def test_tpu_nobody_can_use_is_an_error():
    with pytest.raises(RuntimeError, match="neither TensorFlow .* nor JAX can use it"):
        choose_backend("auto", probes=probes(tpu="/dev/accel0"))


def test_overrides(monkeypatch):
    p = probes(tpu="TPU_NAME=x", jax_tpu=True)
    assert choose_backend("tensorflow", probes=p).backend == "tensorflow"
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    c = choose_backend("auto", probes=probes(gpus=2))
    assert (c.backend, c.reason) == ("jax", "KERAS_BACKEND=jax")
    assert choose_backend("tensorflow", probes=p).reason == "backend='tensorflow' requested"
    assert p.calls == []  # an explicit choice probes nothing
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    with pytest.raises(ValueError, match="KERAS_BACKEND='torch'"):
        choose_backend("auto", probes=p)
    with pytest.raises(ValueError):
        choose_backend("pytorch")


def test_virtual_replicas_skip_probing():
    p = probes(tpu="TPU_NAME=x", gpus=2)
    c = choose_backend("auto", virtual_replicas=2, probes=p)
    assert c.backend == "tensorflow" and "virtual" in c.reason and p.calls == []


def test_select_backend_sets_env_and_xla_flags():
    # a fresh process: jax and keras must not be imported yet
    code = (
        "import os, sys; from kitlib.keras.runtime import select_backend; "
        "select_backend('jax', virtual_replicas=2); "
        "print(os.environ['KERAS_BACKEND'], os.environ['XLA_FLAGS'], 'jax' in sys.modules, 'keras' in sys.modules)"
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8"}
    env.pop("KERAS_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["jax", "--xla_cpu_foo=1", "--xla_force_host_platform_device_count=2", "False", "False"]


def test_pad_to_multiple():
    padded, n = pad_to_multiple(["a", "b", "c"], 4)
    assert (padded, n) == (["a", "b", "c", ""], 3)
    padded, n = pad_to_multiple([str(i) for i in range(1001)], 16)
    assert len(padded) == 1008 and n == 1001 and padded[:1001] == [str(i) for i in range(1001)]
    assert pad_to_multiple(["x"] * 8, 8)[0] == ["x"] * 8
    with pytest.raises(ValueError):
        pad_to_multiple([], 8)


def _files(tmp_path, ids):
    test = tmp_path / "test.csv"
    pd.DataFrame({"id": ids, "content": ["t"] * len(ids)}).to_csv(test, index=False)
    ss = tmp_path / "sample_submission.csv"
    pd.DataFrame({"id": ids[::-1], "toxic": 0.5}).to_csv(ss, index=False)
    return test, ss


def test_write_submission_keeps_ids_and_sample_order(tmp_path):
    ids = ["007", "NA", "12", "3"]
    test, ss = _files(tmp_path, ids)
    out = tmp_path / "sub.csv"
    r = write_submission(ids, np.array([0.1, 0.2, 0.3, 0.4]), out, sample_submission=ss, test=test)
    assert r.num_rows == 4
    got = pd.read_csv(out, dtype={"id": str}, keep_default_na=False)
    assert got.id.tolist() == ["3", "12", "NA", "007"]
    np.testing.assert_allclose(got.toxic, [0.4, 0.3, 0.2, 0.1], rtol=1e-6)


def test_write_submission_refuses_wrong_rows(tmp_path):
    ids = ["007", "NA", "12", "3"]
    test, ss = _files(tmp_path, ids)
    out = tmp_path / "sub.csv"
    with pytest.raises(MergeError, match="sample_submission.csv"):
        write_submission(ids[:3], np.zeros(3), out, sample_submission=ss, test=None)
    with pytest.raises(MergeError, match="do not match .*test.csv"):
        write_submission(["7", "NA", "12", "3"], np.zeros(4), out, sample_submission=ss, test=test)
    with pytest.raises(ValueError, match="4 ids but 3 predictions"):
        write_submission(ids, np.zeros(3), out, sample_submission=ss, test=test)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_write_submission_refuses_non_finite(tmp_path, bad):
    """Issue 12 item 1: a NaN probability (bfloat16/float16 overflow) never reaches the file."""
    ids = ["007", "NA", "12", "3"]
    test, ss = _files(tmp_path, ids)
    out = tmp_path / "sub.csv"
    out.write_text("earlier good submission\n")
    with pytest.raises(MergeError, match=r"2 non-finite 'toxic' probabilit\(ies\) \(nan or inf\) for id\(s\) 'NA', '3'; nothing written"):
        write_submission(ids, np.array([0.1, bad, 0.3, bad]), out, sample_submission=ss, test=test)
    assert out.read_text() == "earlier good submission\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_tensorflow_cpu_alone_never_tries_the_tpu(monkeypatch):
    # Kaggle's TPU image: tensorflow-cpu only; initialising TPU resolvers there is pointless
    from kitlib.keras import runtime as kr
    from kitlib.keras import strategy as st

    monkeypatch.setattr(st, "installed_tensorflow", lambda: "tensorflow-cpu 2.20.0")
    monkeypatch.setattr(st, "_try_tpu", lambda *a: pytest.fail("TPU resolvers tried with tensorflow-cpu"))
    assert kr._tf_sees_tpu() is False


def test_one_accelerator_vocabulary_for_torch_and_keras():
    """Issue 20: the Keras side names accelerators as the torch side does (kitlib.run.hardware.ACCELERATOR_KINDS)."""
    from kitlib.run import hardware, runtime
    from kitlib.keras import precision

    assert set(hardware.ACCELERATOR_KINDS) <= set(runtime.ACCELERATORS)
    assert set(precision.POLICIES) == set(hardware.ACCELERATOR_KINDS)
    # what TensorFlow, JAX and Keras call the devices, in the kit's words
    assert [hardware.accelerator_kind(n) for n in ("GPU", "gpu", "cuda:0", "TPU", "tpu:3", "CPU", "cpu:0")] == [
        "cuda", "cuda", "cuda", "tpu", "tpu", "cpu", "cpu"]
    with pytest.raises(ValueError, match="'mps'.*tpu, cuda, cpu"):
        hardware.accelerator_kind("mps")
    with pytest.raises(ValueError, match="'gpu' is not one of"):
        precision.mixed_precision_policy("gpu")
    assert precision.mixed_precision_policy("cuda") == "mixed_float16"
