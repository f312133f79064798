"""The torch-side runtime detector and launcher guards."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kitlib import runtime
from kitlib.runtime import configure_env, detect_runtime, launch


def fn_defined_here(index):  # noqa: D103 - used only for the __main__ check below
    pass


def test_cpu_default_and_count(monkeypatch):
    monkeypatch.setattr(runtime, "_tpu_present", lambda: None)
    rt = detect_runtime(3, prefer="auto")
    assert (rt.kind, rt.num_devices, rt.xla) == ("cpu", 3, True)
    assert "3 PJRT CPU device(s)" in rt.describe()


def test_tpu_found_from_environment(monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    monkeypatch.setattr(runtime, "_tpu_chips", lambda: 8)
    rt = detect_runtime()
    assert (rt.kind, rt.num_devices, rt.xla) == ("tpu", 8, True)
    assert "v5litepod-8" in rt.reason


def test_forced_accelerators_that_are_absent(monkeypatch):
    monkeypatch.setattr(runtime, "_tpu_present", lambda: None)
    with pytest.raises(RuntimeError, match="no TPU"):
        detect_runtime(prefer="tpu")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        detect_runtime(prefer="cuda")
    with pytest.raises(ValueError, match="prefer must be"):
        detect_runtime(prefer="gpu")
    with pytest.raises(ValueError, match="num_devices"):
        detect_runtime(0)


def test_configure_env_for_cpu_collectives(monkeypatch):
    for v in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "PJRT_CPU_ASYNC_CLIENT", "XLA_THREAD_POOL_SIZE"):
        monkeypatch.delenv(v, raising=False)
    configure_env(runtime.Runtime("cpu", 4, True, "test"))
    import os

    assert os.environ["PJRT_DEVICE"] == "CPU" and os.environ["CPU_NUM_DEVICES"] == "4"
    assert os.environ["PJRT_CPU_ASYNC_CLIENT"] == "false" and int(os.environ["XLA_THREAD_POOL_SIZE"]) >= 4


def test_spawn_refuses_a_function_from_main(monkeypatch):
    monkeypatch.setattr(fn_defined_here, "__module__", "__main__")
    with pytest.raises(ValueError, match="importable function"):
        launch(fn_defined_here, (), runtime.Runtime("cpu", 1, True, "test"), "spawn")
    with pytest.raises(ValueError, match="start_method"):
        launch(fn_defined_here, (), runtime.Runtime("cpu", 1, True, "test"), "forkserver")


def test_touching_the_device_before_launch_is_a_clear_error(tmp_path):
    """A notebook that ran torch_xla.device() in the parent gets told what to do."""
    code = textwrap.dedent("""
        import os
        os.environ["PJRT_DEVICE"] = "CPU"
        import torch, torch_xla
        from kitlib.runtime import Runtime, launch
        from kitlib.infer_template import _mp_fn
        torch.zeros(1).to(torch_xla.device())
        try:
            launch(_mp_fn, (None,), Runtime("cpu", 2, True, "test"), "fork")
        except RuntimeError as e:
            print("REFUSED:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "REFUSED: cannot launch replicas: the XLA runtime is already initialised" in r.stdout, r.stderr[-2000:]
    assert "Restart the kernel" in r.stdout


def test_tensorflow_before_torch_xla_is_refused_not_aborted():
    """TF first, then torch_xla, kills the process in LLVM; launch says what to do instead."""
    code = textwrap.dedent("""
        import tensorflow
        from kitlib.runtime import Runtime, launch
        from kitlib.infer_template import _mp_fn
        try:
            launch(_mp_fn, (None,), Runtime("cpu", 2, True, "test"), "fork")
        except RuntimeError as e:
            print("REFUSED:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "REFUSED: TensorFlow is imported in this process and torch_xla is not" in r.stdout
