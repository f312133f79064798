"""Past one host: shards at URLs (an S3 bucket served by moto on 127.0.0.1), and two torchrun "hosts".

The two hosts are two ``torchrun --nnodes 2 --nproc-per-node 1`` agents on 127.0.0.1 meeting
through the c10d rendezvous (host 0's agent holds the store), with gloo between the replicas.
Each runs tests/support/multihost_worker.py, which calls ``detect_runtime()`` and ``predict()`` or
``train()`` as a user's script would. Every subprocess has a time limit and is killed with its
process group at the end.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, SAMPLE
from kitlib.run import hardware
from kitlib import storage
from kitlib.__main__ import main as kitlib_cli
from kitlib.infer import InferJob, predict
from kitlib.run.runtime import Runtime, detect_runtime, holds_global_rank0
from kitlib.outputs.shards import clear_shards, shard_name, write_shard

WORKER = ROOT / "tests" / "support" / "multihost_worker.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
BUCKET = "kit-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """An S3 endpoint on 127.0.0.1 (moto's server) with one bucket; this process and children reach it by env."""
    from moto.server import ThreadedMotoServer
    import s3fs

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir(BUCKET)
    try:
        yield env, fs
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


# --- storage and the merge at URLs (fast) ---


def test_url_files_appear_whole_or_not_at_all(s3):
    _, fs = s3
    folder = storage.as_path(f"s3://{BUCKET}/whole")
    assert isinstance(folder, storage.URL) and not folder.exists()
    target = folder / "submission.csv"
    storage.atomic_write(target, lambda tmp: Path(tmp).write_text("id,toxic\n1,0.5\n"))
    assert fs.cat_file(f"{BUCKET}/whole/submission.csv") == b"id,toxic\n1,0.5\n"

    def half_then_fail(tmp):
        Path(tmp).write_text("id,toxic\n1,")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        storage.atomic_write(target, half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        storage.atomic_write(folder / "other.csv", half_then_fail)
    # the old object is untouched, the failed new one never appeared, nothing else was left behind
    assert fs.cat_file(f"{BUCKET}/whole/submission.csv") == b"id,toxic\n1,0.5\n"
    assert [p.name for p in folder.iterdir()] == ["submission.csv"]
    assert (target.name, target.suffix, str(target.parent)) == ("submission.csv", ".csv", f"s3://{BUCKET}/whole")
    assert storage.as_path("file:///tmp/x/y.csv") == Path("/tmp/x/y.csv")
    with pytest.raises(FileNotFoundError, match="bucket s3://no-such-bucket does not exist"):
        write_shard("s3://no-such-bucket/shards", rank=0, world_size=1, num_rows=1, rows=[0], ids=["a"],
                    predictions={"toxic": [0.5]}, run_id="r")
    assert not storage.is_url("/tmp/x") and not storage.is_url("file:///tmp/x") and storage.is_url("gs://b/x")


@pytest.mark.parametrize("path", ["/tmp/run 1/a b.csv", "/tmp/100%/x#1?.csv", "/tmp/é ü/ß.csv"])
def test_a_file_url_names_the_path_as_uri_encoded(path):
    """RFC 8089: the URL pathlib.Path.as_uri() writes decodes back to that path, not to its %-escapes."""
    assert storage.as_path(Path(path).as_uri()) == Path(path)
    assert storage.as_path("file://localhost" + Path(path).as_uri()[len("file://"):]) == Path(path)
    assert storage.as_path("file:" + Path(path).as_uri()[len("file://"):]) == Path(path)  # file:/p


@pytest.mark.parametrize("url, message", [
    ("file://server/share/x.csv", r"on host 'server'"),
    ("file:///tmp/run#1/shards", r"unescaped '\?' or '#'"),
    ("file:///tmp/what?/x", r"unescaped '\?' or '#'"),
    ("file:relative/x", r"needs an absolute path"),
])
def test_a_file_url_that_names_no_local_path_is_refused(url, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        storage.as_path(url)
    assert kitlib_cli(["merge", str(tmp_path), "-o", url]) == 2


def test_shards_written_to_a_file_url_land_at_the_decoded_path(tmp_path):
    folder = tmp_path / "run 1" / "shards #2"
    _write_toy_shards(folder.as_uri(), world=2)
    assert sorted(p.name for p in folder.iterdir()) == [shard_name(r, 2) for r in range(2)]
    assert [p.name for p in tmp_path.iterdir()] == ["run 1"]


def test_a_process_local_shard_dir_is_refused_before_launch(tmp_path, monkeypatch):
    """memory:// lives in one process: replica processes would each write into their own copy."""
    from kitlib import infer

    def no_launch(*args, **kwargs):
        raise AssertionError("launched")

    monkeypatch.setattr(infer, "launch", no_launch)
    job = InferJob(checkpoint=str(tmp_path / "never-read"), test_csv=str(SAMPLE / "test.csv"),
                   shard_dir="memory://kit/shards", output_csv=str(tmp_path / "sub.csv"))
    with pytest.raises(ValueError, match=r"shard_dir=memory://kit/shards: memory:// files live in the memory of one "
                                         r"process, so the replica processes cannot share them"):
        predict(job, detect_runtime(2, "cpu"))
    assert not (tmp_path / "sub.csv").exists()
    storage.check_shared(f"s3://{BUCKET}/shards")  # shared stores pass
    storage.check_shared(tmp_path / "shards")


def _write_toy_shards(folder, world: int, num_rows: int = 10, run_id: str = "r1"):
    ids = np.array([f"id{i:03d}" for i in range(num_rows)])
    for rank in range(world):
        rows = np.arange(rank, num_rows, world)
        write_shard(folder, rank=rank, world_size=world, num_rows=num_rows, rows=rows, ids=ids[rows],
                    predictions={"toxic": rows / num_rows}, run_id=run_id)
    return ids


def test_merge_cli_reads_and_writes_urls_and_names_missing_global_ranks(s3, tmp_path, capsys):
    _, fs = s3
    shards = f"s3://{BUCKET}/cli/shards"
    ids = _write_toy_shards(shards, world=3)
    fs.pipe_file(f"{BUCKET}/cli/shards/notes.txt", b"not a shard")  # ignored: not a shard name
    assert sorted(p.name for p in storage.as_path(shards).iterdir()) == [
        "notes.txt", *(shard_name(r, 3) for r in range(3))]

    assert kitlib_cli(["merge", shards, "-o", f"s3://{BUCKET}/cli/submission.csv"]) == 0
    sub = pd.read_csv(storage.readable(storage.as_path(f"s3://{BUCKET}/cli/submission.csv")), dtype={"id": str})
    assert sub["id"].tolist() == ids.tolist()
    np.testing.assert_allclose(sub["toxic"].to_numpy(), np.arange(10) / 10, rtol=1e-6)
    assert kitlib_cli(["merge", shards, "-o", str(tmp_path / "local.csv")]) == 0
    assert (tmp_path / "local.csv").read_bytes() == fs.cat_file(f"{BUCKET}/cli/submission.csv")

    fs.rm_file(f"{BUCKET}/cli/shards/{shard_name(1, 3)}")  # one host's shard never arrived
    capsys.readouterr()
    assert kitlib_cli(["merge", shards, "-o", f"s3://{BUCKET}/cli/again.csv"]) == 2
    err = capsys.readouterr().err
    assert "missing shard(s) for rank(s) 1 of world size 3" in err and shard_name(1, 3) in err
    assert not fs.exists(f"{BUCKET}/cli/again.csv")

    assert clear_shards(shards) == 2  # only kit shards are removed
    assert fs.ls(f"{BUCKET}/cli/shards", detail=False) == [f"{BUCKET}/cli/shards/notes.txt"]


def test_the_process_of_global_rank_0_merges(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    assert holds_global_rank0(Runtime("cpu-torchrun", 1, "t", num_hosts=2, host=0))
    monkeypatch.setenv("RANK", "1")
    assert not holds_global_rank0(Runtime("cpu-torchrun", 1, "t", num_hosts=2, host=1))
    assert holds_global_rank0(Runtime("tpu-pod", 4, "t", num_hosts=4, host=0))
    assert not holds_global_rank0(Runtime("tpu-pod", 4, "t", num_hosts=4, host=3))
    assert holds_global_rank0(Runtime("cpu", 2, "t"))


@pytest.fixture
def tpu_pod_vm(monkeypatch):
    """A Cloud TPU VM host of a v5litepod-32 slice (4 hosts x 8 chips) as torch_xla sees it: no
    ``TPU_WORKER_*`` variables, the slice in the GCE metadata (torch_xla._internal.tpu's formats)."""
    from torch_xla._internal import tpu

    for var in ("TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "CLOUD_TPU_TASK_ID", "TPU_SKIP_MDS_QUERY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-32")
    metadata = {
        "worker-network-endpoints": ",".join(f"t1v-n-w-{i}:uid{i}:10.164.0.{10 + i}" for i in range(4)),
        "tpu-env": "ACCELERATOR_TYPE: 'v5litepod-32'\nWORKER_ID: '2'\nTPU_PROCESS_BOUNDS: '2,2,1'\n",
    }
    asked = []

    def get_metadata(key):
        asked.append(key)
        return metadata[key]

    monkeypatch.setattr(tpu, "_get_metadata", get_metadata)
    monkeypatch.setattr(hardware, "tpu_chip_count", lambda: 8)
    return asked


def test_tpu_pod_hosts_from_the_tpu_vm_metadata_as_torch_xla_reads_it(tpu_pod_vm, monkeypatch):
    monkeypatch.setattr(hardware, "_on_google_compute_engine", lambda: True)
    rt = detect_runtime()
    assert (rt.mode, rt.num_hosts, rt.host, rt.world_size, rt.started_by) == ("tpu-pod", 4, 2, 32, "tpu-pod")
    assert "host 3 of 4, 8 replica(s) on this host, world 32" in rt.describe()
    assert set(tpu_pod_vm) == {"worker-network-endpoints", "tpu-env"}
    assert not holds_global_rank0(rt)
    # GKE's variables (TPU_SKIP_MDS_QUERY with TPU_WORKER_HOSTNAMES / TPU_WORKER_ID) win, without a query
    tpu_pod_vm.clear()
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "h0,h1")
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    assert hardware.tpu_hosts() == (2, 0) and tpu_pod_vm == []


def test_off_google_cloud_no_metadata_is_asked(tpu_pod_vm, monkeypatch):
    monkeypatch.setattr(hardware, "_on_google_compute_engine", lambda: False)
    rt = detect_runtime()
    assert (rt.num_hosts, rt.host, rt.started_by) == (1, 0, "kit") and tpu_pod_vm == []


def test_a_tpu_pod_replica_takes_its_global_ordinal_from_torch_xla(tpu_pod_vm, monkeypatch):
    """Replica rank and world size come from torch_xla's runtime (global ordinal), the host from the slice."""
    import torch

    from kitlib import compat

    monkeypatch.setattr(hardware, "_on_google_compute_engine", lambda: True)
    rt = detect_runtime()
    monkeypatch.setattr(compat, "xla_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(compat, "xla_rank", lambda: 21)  # torch_xla.runtime.global_ordinal()
    monkeypatch.setattr(compat, "xla_world_size", lambda: 32)  # torch_xla.runtime.world_size()
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    try:
        # what launch does in replica 5 (a replica other than host 0's first quiets transformers' logs)
        replica = rt.backend.open(5, rt, "fork", rt.backend.resolve_precision("auto"))
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()
    assert (replica.rank, replica.world_size, replica.local_rank, replica.host, replica.num_hosts) == (21, 32, 5, 2, 4)
    assert shard_name(replica.rank, replica.world_size) == "shard-00021-of-00032.parquet"
    assert replica.precision.name == "bf16" and replica.static_shapes  # the TPU's precision, resolved once


# --- two torchrun hosts on 127.0.0.1 (slow) ---


def _host_env(s3_env: dict | None) -> dict:
    env = dict(os.environ)
    env.update(s3_env or {})
    env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "GLOO_SOCKET_IFNAME": "lo",  # gloo's pairs on the loopback interface only
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def _run_two_hosts(kind: str, job: dict, tmp: Path, env: dict, timeout: float = 300, kill_rank1_host: bool = False):
    """Start two torchrun agents (hosts) and wait; returns (exit codes, logs, reports by rank, timing).

    timing: ``{"total": s, "after_kill": s}``, seconds from the start, and from the kill, to the end.

    ``kill_rank1_host``: once the replica of global rank 1 is running, SIGKILL its whole host
    (the torchrun agent and its worker); its exit code is then reported as None.
    """
    reports = tmp / "reports"
    reports.mkdir(parents=True)
    args = tmp / "job.json"
    args.write_text(json.dumps(job))
    port = _free_port()
    procs, logs = [], [tmp / f"host{h}.log" for h in range(2)]
    start = time.perf_counter()
    try:
        for h in range(2):
            cmd = [str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                   "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"kit-{kind}",
                   "--rdzv-conf", f"is_host={int(h == 0)}", "--local-addr", "127.0.0.1", "--max-restarts", "0",
                   str(WORKER), kind, str(reports), str(args)]
            with open(logs[h], "w") as log:
                procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        killed, killed_at = None, None
        if kill_rank1_host:
            ready = reports / "rank-1.ready"
            while not ready.exists():
                assert time.perf_counter() - start < timeout, "rank 1 never started"
                assert all(p.poll() is None for p in procs), (
                    "a host ended before rank 1 started:\n" + "\n".join(f.read_text()[-3000:] for f in logs))
                time.sleep(0.2)
            host = json.loads(ready.read_text())
            killed = next(p for p in procs if p.pid == host["agent"])
            os.killpg(killed.pid, signal.SIGKILL)  # the torchrun agent (its own session, see Popen)
            os.killpg(host["worker_group"], signal.SIGKILL)  # and its worker
            killed.wait(timeout=30)
            killed_at = time.perf_counter()
        codes = []
        for p in procs:
            left = timeout - (time.perf_counter() - start)
            try:
                codes.append(None if p is killed else p.wait(timeout=max(1, left)))
            except subprocess.TimeoutExpired:
                codes.append("timeout")
    finally:
        for p in procs:
            _kill(p)
    end = time.perf_counter()
    timing = {"total": end - start, "after_kill": None if killed_at is None else end - killed_at}
    out = {int(f.stem.split("-")[1]): json.loads(f.read_text()) for f in reports.glob("rank-*.json")}
    return codes, [f.read_text() for f in logs], out, timing


def _infer_job(checkpoint: Path, shard_dir: str, output: str) -> dict:
    return dict(checkpoint=str(checkpoint), test_csv=str(SAMPLE / "test.csv"), shard_dir=shard_dir,
                output_csv=output, sample_submission=str(SAMPLE / "sample_submission.csv"),
                batch_size=32, max_len=64)


@pytest.fixture(scope="module")
def one_host_submission(sharp_checkpoint, tmp_path_factory) -> bytes:
    """The reference: the same job on one host, two replicas started by the kit (world size 2)."""
    tmp = tmp_path_factory.mktemp("one-host")
    rt = dataclasses.replace(detect_runtime(2, "cpu"), threads=1)
    result = predict(InferJob(**_infer_job(sharp_checkpoint, str(tmp / "shards"), str(tmp / "submission.csv"))), rt)
    assert result.num_rows == 1000 and result.num_shards == 2
    return (tmp / "submission.csv").read_bytes()


@pytest.mark.slow
def test_two_hosts_write_shards_to_s3_and_merge_the_one_host_submission(s3, sharp_checkpoint, one_host_submission, tmp_path):
    env, fs = s3
    fs.pipe_file(f"{BUCKET}/run/shards/{shard_name(5, 8)}", b"stale shard of an older run")  # rank 0 clears it
    job = _infer_job(sharp_checkpoint, f"s3://{BUCKET}/run/shards", f"s3://{BUCKET}/run/submission.csv")
    codes, logs, reports, timing = _run_two_hosts("infer", job, tmp_path, _host_env(env))
    assert codes == [0, 0], logs
    print(f"two-host inference (1,000 rows, 2 torchrun hosts, gloo, S3 shards): {timing['total']:.1f} s")
    assert "host 1 of 2, 1 replica(s) x 1 thread(s) on this host, world 2" in reports[0]["describe"]
    assert "host 2 of 2, 1 replica(s) x 1 thread(s) on this host, world 2" in reports[1]["describe"]
    assert "started by torchrun" in reports[1]["describe"]
    assert reports[0]["merged_rows"] == 1000 and reports[1]["merged_rows"] is None  # global rank 0 alone merges
    assert sorted(fs.ls(f"{BUCKET}/run/shards", detail=False)) == [
        f"{BUCKET}/run/shards/{shard_name(r, 2)}" for r in range(2)]
    assert fs.cat_file(f"{BUCKET}/run/submission.csv") == one_host_submission

    # the merge as a separate step, from the bucket to a local file
    cli = subprocess.run([sys.executable, "-m", "kitlib", "merge", f"s3://{BUCKET}/run/shards", "-o",
                          str(tmp_path / "cli.csv"), "--sample-submission", str(SAMPLE / "sample_submission.csv")],
                         env=_host_env(env), capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "cli.csv").read_bytes() == one_host_submission


@pytest.mark.slow
def test_two_hosts_train_one_epoch_with_identical_parameters(tiny_checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file

    job = dict(checkpoint=str(tiny_checkpoint), train_csv=str(SAMPLE / "train.csv"),
               valid_csv=str(SAMPLE / "validation.csv"), out_dir=str(tmp_path / "ckpt"), epochs=1,
               batch_size=4, max_len=32, lr=1e-3, train_limit=64, valid_limit=40, dropout=0.0,
               rank_states_dir=str(tmp_path / "states"))
    codes, logs, reports, timing = _run_two_hosts("train", job, tmp_path, _host_env(None))
    assert codes == [0, 0], logs
    print(f"two-host training (1 epoch, 64 rows, 2 torchrun hosts, gloo): {timing['total']:.1f} s")
    assert reports[0]["history_world_size"] == 2 and reports[1]["history_world_size"] is None
    rank0, rank1 = (torch.load(tmp_path / "states" / f"rank-{r}.pt") for r in range(2))
    assert rank0.keys() == rank1.keys()
    for k in rank0:
        assert torch.equal(rank0[k], rank1[k]), k
    init = load_file(str(tiny_checkpoint / "model.safetensors"))
    assert max((rank0[k] - init[k]).abs().max().item() for k in init) > 1e-3  # 8 steps really moved them


@pytest.mark.slow
def test_a_killed_host_ends_the_run_with_a_clear_error_and_no_submission(s3, sharp_checkpoint, tmp_path):
    env, fs = s3
    job = _infer_job(sharp_checkpoint, f"s3://{BUCKET}/dies/shards", f"s3://{BUCKET}/dies/submission.csv")
    codes, logs, reports, timing = _run_two_hosts("infer-host-dies", job, tmp_path, _host_env(env),
                                                  timeout=240, kill_rank1_host=True)
    print(f"killed host: the other host ended {timing['after_kill']:.1f} s after the kill ({timing['total']:.1f} s in all)")
    assert timing["after_kill"] < 120
    survivor = codes.index(None) ^ 1
    assert codes[survivor] not in (0, "timeout"), logs[survivor]
    assert "replica rank 0 failed: RuntimeError: lost another host while writing the shards" in logs[survivor]
    assert "no submission is written" in logs[survivor]
    assert reports == {}
    assert not fs.exists(f"{BUCKET}/dies/submission.csv")
    assert not fs.exists(f"{BUCKET}/dies/shards/{shard_name(1, 2)}")
