"""The runtime detector, the launch-mode table and the launcher's guards (no accelerator needed)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kitlib.run import hardware, runtime
from kitlib.run.runtime import MODES, Runtime, detect_runtime, launch


def fn_defined_here(replica, job):  # noqa: D103 - used only for the __main__ check below
    pass


@pytest.fixture
def no_accelerator(monkeypatch):
    monkeypatch.setattr(hardware, "tpu_evidence", lambda: None)
    monkeypatch.setattr(hardware, "cuda_device_count", lambda: 0)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "GROUP_RANK"):
        monkeypatch.delenv(v, raising=False)


def test_cpu_default_is_eager_with_the_cores_shared(no_accelerator, monkeypatch):
    monkeypatch.setattr(hardware, "cpu_cores", lambda: 2)
    rt = detect_runtime()
    assert (rt.mode, rt.num_replicas, rt.threads, rt.world_size) == ("cpu", 1, 2, 1)
    assert rt.backend.device == "cpu" and rt.backend.collectives == "gloo"
    monkeypatch.setattr(hardware, "cpu_cores", lambda: 16)
    rt = detect_runtime()
    assert (rt.num_replicas, rt.threads) == (4, 4)
    assert "4 replica(s) x 4 thread(s) (eager torch on the CPU, gloo)" in rt.describe()
    rt = detect_runtime(3, "xla-cpu")
    assert (rt.mode, rt.num_replicas, rt.backend.device) == ("xla-cpu", 3, "xla")
    assert "rehearsal of the TPU path" in rt.describe()


def test_modes_are_one_table():
    # the torchrun and TPU-pod starts are rows of the table (a backend each), not a second axis
    assert set(MODES) == {"tpu", "tpu-pod", "cuda", "cuda-torchrun", "cpu", "cpu-torchrun", "xla-cpu",
                          "xla-cpu-processes"}
    assert {m.collectives for m in MODES.values()} == {"xla", "nccl", "gloo", None}
    assert {m.started_by for m in MODES.values()} == {"kit", "torchrun", "tpu-pod"}
    assert runtime.ACCELERATORS == ("auto", "tpu", "cuda", "cpu", "xla-cpu", "xla-cpu-processes")
    with pytest.raises(ValueError, match="unknown launch mode"):
        Runtime("gpu", 1, "test")


def test_tpu_runs_every_chip_and_refuses_a_subset(monkeypatch):
    """torch_xla.launch always runs every chip: num_devices=4 on a v5e-8 is refused, never misreported."""
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    monkeypatch.setattr(hardware, "tpu_chip_count", lambda: 8)
    rt = detect_runtime()
    assert (rt.mode, rt.num_replicas, rt.world_size) == ("tpu", 8, 8)
    assert "v5litepod-8" in rt.reason
    with pytest.raises(ValueError, match=r"num_devices=4, but torch_xla.launch runs one replica on every TPU chip of this host \(8\)"):
        detect_runtime(4)
    assert detect_runtime(8).num_replicas == 8


def test_cuda_detection_and_launch_plan_never_initialise_cuda(monkeypatch):
    """On 2x T4 with fork: nothing in the parent may initialise CUDA (else every child fails)."""
    import torch
    import torch.multiprocessing as tmp

    from conftest import poison_cuda

    poison_cuda(monkeypatch, 2)
    rt = detect_runtime()
    assert (rt.mode, rt.num_replicas) == ("cuda", 2) and "NVML" in rt.describe()
    started = {}
    monkeypatch.setattr(tmp, "start_processes", lambda fn, args, nprocs, start_method, join: started.update(
        nprocs=nprocs, start_method=start_method))
    launch(fn_defined_here, None, rt, "fork")
    assert started == {"nprocs": 2, "start_method": "fork"}
    assert not torch.cuda.is_initialized()
    with pytest.raises(RuntimeError, match="3 CUDA devices asked for, 2 present"):
        detect_runtime(3)


def test_forced_accelerators_that_are_absent(no_accelerator):
    with pytest.raises(RuntimeError, match="no TPU"):
        detect_runtime(prefer="tpu")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        detect_runtime(prefer="cuda")
    with pytest.raises(ValueError, match="must be one of"):
        detect_runtime(prefer="gpu")
    with pytest.raises(ValueError, match="num_devices"):
        detect_runtime(0)


def test_torchrun_process_is_one_replica_of_a_multi_host_world(no_accelerator, monkeypatch):
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "TORCHELASTIC_RUN_ID": "test"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rt = detect_runtime()
    assert (rt.mode, rt.num_replicas, rt.num_hosts, rt.host, rt.world_size, rt.started_by) == (
        "cpu-torchrun", 2, 2, 1, 4, "torchrun")
    assert "host 2 of 2, 2 replica(s)" in rt.describe() and "world 4" in rt.describe()
    with pytest.raises(ValueError, match="torchrun started 2 process"):
        detect_runtime(1)


def test_tpu_pod_hosts_from_the_cloud_tpu_environment(monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-32")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4")
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    monkeypatch.setattr(hardware, "tpu_chip_count", lambda: 8)
    rt = detect_runtime()
    assert (rt.mode, rt.num_hosts, rt.host, rt.world_size, rt.started_by) == ("tpu-pod", 4, 1, 32, "tpu-pod")
    assert "host 2 of 4, 8 replica(s) on this host, world 32" in rt.describe()


def test_the_xla_cpu_environment_is_set_for_the_launch_only(monkeypatch):
    """PJRT CPU's variables come from the backend and are restored after the launch (Accelerate's patch_environment)."""
    import os

    from kitlib.run.backends.base import patch_environment

    for v in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "PJRT_CPU_ASYNC_CLIENT", "XLA_THREAD_POOL_SIZE"):
        monkeypatch.delenv(v, raising=False)
    env = MODES["xla-cpu"].env(Runtime("xla-cpu", 4, "test"))
    assert env["PJRT_DEVICE"] == "CPU" and env["CPU_NUM_DEVICES"] == "4"
    assert env["PJRT_CPU_ASYNC_CLIENT"] == "false" and int(env["XLA_THREAD_POOL_SIZE"]) >= 4
    assert MODES["xla-cpu-processes"].env(Runtime("xla-cpu-processes", 3, "test"))["CPU_NUM_DEVICES"] == "1"
    monkeypatch.setenv("XLA_THREAD_POOL_SIZE", "64")
    with patch_environment(env):
        assert os.environ["PJRT_DEVICE"] == "CPU" and os.environ["XLA_THREAD_POOL_SIZE"] == env["XLA_THREAD_POOL_SIZE"]
    assert "PJRT_DEVICE" not in os.environ and "CPU_NUM_DEVICES" not in os.environ
    assert os.environ["XLA_THREAD_POOL_SIZE"] == "64"


def test_a_launch_leaves_no_rendezvous_variables_behind(monkeypatch, tmp_path):
    """Two gloo processes need MASTER_ADDR/MASTER_PORT; the notebook's process does not keep them."""
    import os

    for v in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    launch(write_rank, str(tmp_path), Runtime("cpu", 2, "test"), "fork")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0", "rank-1"]
    assert "MASTER_ADDR" not in os.environ and "MASTER_PORT" not in os.environ


def write_rank(replica, out):  # noqa: D103 - a replica program for the tests here
    from pathlib import Path

    Path(out, f"rank-{replica.rank}").write_text(f"{replica.world_size} {os.environ['MASTER_PORT']}")


def test_spawn_refuses_a_function_from_main(monkeypatch):
    monkeypatch.setattr(fn_defined_here, "__module__", "__main__")
    with pytest.raises(ValueError, match="importable function"):
        launch(fn_defined_here, None, Runtime("cpu", 1, "test"), "spawn")
    with pytest.raises(ValueError, match="start_method"):
        launch(fn_defined_here, None, Runtime("cpu", 1, "test"), "forkserver")


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a child imports torch_xla and launches (~90-110 s under contention)
def test_touching_the_device_before_launch_is_a_clear_error():
    """A notebook that ran torch_xla.device() in the parent gets told what to do."""
    r = _child("""
        import os
        os.environ["PJRT_DEVICE"] = "CPU"
        import torch, torch_xla
        from kitlib.run.runtime import Runtime, launch
        from kitlib.infer import _mp_fn
        torch.zeros(1).to(torch_xla.device())
        try:
            launch(_mp_fn, None, Runtime("xla-cpu", 2, "test"), "fork")
        except RuntimeError as e:
            print("REFUSED:", e)
    """)
    assert "REFUSED: cannot launch replicas: the XLA runtime is already initialised" in r.stdout, r.stderr[-2000:]
    assert "Restart the kernel" in r.stdout


@pytest.mark.slow  # imports TensorFlow in a child (~25 s of CPU)
def test_tensorflow_before_torch_xla_is_refused_not_aborted():
    """TF first, then torch_xla, kills the process in LLVM; launch says what to do instead."""
    r = _child("""
        import tensorflow
        from kitlib.run.runtime import Runtime, launch
        from kitlib.infer import _mp_fn
        try:
            launch(_mp_fn, None, Runtime("xla-cpu", 2, "test"), "fork")
        except RuntimeError as e:
            print("REFUSED:", e)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "REFUSED: TensorFlow is imported in this process and torch_xla is not" in r.stdout


@pytest.mark.slow  # a child imports torch_xla and launches 2 replicas (~90-110 s under contention)
def test_xla_replicas_start_without_warnings_that_say_nothing():
    """No "Defaulting to PJRT_DEVICE=CPU" and no TF/torch_xla conflict warning (TF is never imported)."""
    r = _child("""
        import os
        before = {v: os.environ.get(v) for v in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "XLA_THREAD_POOL_SIZE")}
        from kitlib.run.replica import Replica
        from kitlib.run.runtime import Runtime, launch

        def report(replica, job):
            print(f"REPLICA {replica.rank} {replica.world_size} {replica.device}\\n", end="")  # one write: threads

        launch(report, None, Runtime("xla-cpu", 2, "test"), "fork")
        print("ENVIRONMENT RESTORED", before == {v: os.environ.get(v) for v in before})
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(line for line in r.stdout.splitlines() if line.startswith("REPLICA")) == [
        "REPLICA 0 2 xla:0", "REPLICA 1 2 xla:1"]
    assert "ENVIRONMENT RESTORED True" in r.stdout  # the launch's variables are not left in the calling process
    assert "Defaulting to PJRT_DEVICE" not in r.stderr and "can conflict with" not in r.stderr, r.stderr
