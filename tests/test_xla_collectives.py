"""XLA collectives between 2 replicas: PJRT CPU devices as threads of one process (``xla-cpu``).

The multi-replica TPU path (``xm.optimizer_step``'s all-reduce, DDP over ``xla://``,
``all_gather``, ``together``) runs here for real: thread replicas launch their graphs in rank
order through :class:`kitlib.run.backends.xla_threads._Turnstile`, without which the first all-reduce aborts the
process (two compiled modules, two XLA rendezvous: "op_id=0" vs "op_id=1").

* the turnstile itself, on plain threads: rank order, waiting for every rank, stopping when a
  rank leaves, a clear error when the ranks disagree;
* every Replica collective on 2 thread replicas, and a failure on one of them inside ``together``;
* both training patterns on 2 thread replicas: identical parameters on both, equal (float
  tolerance) to one eager replica over the same global batch and to 2 gloo processes, and a
  compile count that stops growing after the first steps.

XLA runs in subprocesses (``tests/support/xla_worker.py``) killed as a group after a timeout, so a
deadlock fails the test instead of hanging it. The file takes about 3 minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict

import pytest
import torch

from conftest import ROOT, SAMPLE
from support.rank_states import max_diff, rank_states
from kitlib.run.backends import xla_threads
from kitlib.run.backends.xla_threads import _Turnstile
from kitlib.run.replica import PeerFailed
from kitlib.run.runtime import detect_runtime
from kitlib.checkpoint import read_history
from kitlib.training.job import PATTERNS, TrainJob
from kitlib.training.train import train

WORKER = ROOT / "tests" / "support" / "xla_worker.py"
# 64 rows, 2 epochs of 8 steps with a global batch of 8, no dropout: deterministic and quick.
SMALL = dict(train_csv=str(SAMPLE / "train.csv"), valid_csv=str(SAMPLE / "validation.csv"), epochs=2, max_len=32,
             lr=1e-3, train_limit=64, valid_limit=32, dropout=0.0, log_every=4,
             precision="fp32")  # exactness is the point: "auto" is bf16 on xla-cpu and on AMX / avx512_bf16 CPUs
GLOBAL_BATCH = 8
TOL = 2e-4  # as the gloo test: float rounding of a sum taken in another order, over 16 Adam steps


def _run_worker(args: list[str], timeout: float) -> str:
    """Run ``tests/support/xla_worker.py ARGS``; kill its whole process group after ``timeout`` s."""
    proc = subprocess.Popen([sys.executable, str(WORKER), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"xla_worker {args[0]} did not finish within {timeout} s (deadlock?):\n{out[-4000:]}")
    assert proc.returncode == 0, f"xla_worker {args[0]} exited with {proc.returncode}:\n{out[-4000:]}"
    return out


# --- the turnstile on plain threads (no XLA) ---


def _run_ranks(turnstile: _Turnstile, program, world: int) -> dict[int, BaseException | None]:
    errors: dict[int, BaseException | None] = {}

    def body(rank):
        try:
            program(rank)
            errors[rank] = None
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors[rank] = e
        finally:
            turnstile.leave(rank)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting in the turnstile"
    return errors


def test_turnstile_launches_in_rank_order_once_every_rank_has_arrived():
    world, graphs = 3, 4
    turnstile, events, lock = _Turnstile(world), [], threading.Lock()

    def program(rank):
        for k in range(1, graphs + 1):
            time.sleep(0.01 * ((rank * 7 + k * 3) % 5))  # ranks arrive in varying orders
            with lock:
                events.append(("arrive", rank, k))
            turnstile.launch(rank, f"graph {k}", lambda: events.append(("launch", rank, k)))

    assert _run_ranks(turnstile, program, world) == {0: None, 1: None, 2: None}
    launches = [(r, k) for what, r, k in events if what == "launch"]
    assert launches == [(r, k) for k in range(1, graphs + 1) for r in range(world)]
    for k in range(1, graphs + 1):  # rank 0 launched graph k only after every rank reached it
        first = events.index(("launch", 0, k))
        assert all(events.index(("arrive", r, k)) < first for r in range(world))


def test_turnstile_stops_the_others_when_a_rank_leaves_or_fails():
    turnstile = _Turnstile(2)

    def program(rank):
        turnstile.launch(rank, "graph 1", lambda: None)
        if rank == 1:
            raise OSError("rank 1 stops between graphs")
        turnstile.launch(rank, "graph 2", lambda: None)

    errors = _run_ranks(turnstile, program, 2)
    assert isinstance(errors[1], OSError)
    assert isinstance(errors[0], PeerFailed) and "rank(s) [1] stopped before graph 2" in str(errors[0])

    turnstile = _Turnstile(2)

    def failing_launch(rank):
        def launch_graph():
            if rank == 0:
                raise RuntimeError("compile failed")

        turnstile.launch(rank, "graph 1", launch_graph)

    errors = _run_ranks(turnstile, failing_launch, 2)
    assert isinstance(errors[0], RuntimeError) and "compile failed" in str(errors[0])
    assert isinstance(errors[1], PeerFailed) and "rank(s) [0]" in str(errors[1])


def test_a_thread_replica_that_fails_while_opening_stops_the_others(monkeypatch):
    """The CI hang: rank 1 failed inside ``open()`` (two threads importing transformers at once: "cannot
    import name ... from partially initialized module") and rank 0 waited 1800 s at its first
    collective for a rank that never started. Now the failed rank leaves the turnstile: the others stop."""
    from kitlib.run.backends import precision

    rt = detect_runtime(2, "xla-cpu")
    assert rt.backend.threaded

    def no_device(self, index):
        raise OSError(f"replica {index} has no device")

    monkeypatch.setattr(type(rt.backend.launcher), "rank_and_world", lambda self, index, rt: (index, 2))  # as inside a launch
    monkeypatch.setattr(type(rt.backend.accelerator), "device", no_device)
    monkeypatch.setattr(xla_threads, "_TURNSTILE", None)
    with pytest.raises(OSError, match="replica 1 has no device"):
        rt.backend.open(1, rt, "fork", precision.named("fp32", "xla"))
    with pytest.raises(PeerFailed, match=r"rank\(s\) \[1\] stopped before all_gather"):
        xla_threads._TURNSTILE.launch(0, "all_gather", lambda: None)


def test_turnstile_names_the_missing_rank_when_the_ranks_disagree(monkeypatch):
    monkeypatch.setattr(xla_threads, "TURN_TIMEOUT_S", 0.3)
    turnstile = _Turnstile(2)
    expected = r"replica rank 0 waited \d+ s to launch graph 1 \(all_gather\) for rank\(s\) \[1\]: thread replicas must"
    with pytest.raises(RuntimeError, match=expected):
        turnstile.launch(0, "all_gather", lambda: None)  # rank 1 never calls it


# --- every Replica collective on 2 thread replicas ---


@pytest.mark.slow
def test_thread_replicas_run_every_collective_and_stop_together(tmp_path):
    _run_worker(["collectives", str(tmp_path)], timeout=300)
    seen = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    for r, s in enumerate(seen):
        assert (s["rank"], s["world"], s["threaded"]) == (r, 2, True)
        assert s["all_gather"] == [[1.0] * 3] * 2 + [[2.0] * 3] * 2  # rank order
        assert s["all_reduce_sum"] == [[30.0] * 3] * 2  # 10 + 20
        assert s["failed_ranks_none"] == []
        assert s["in_step"] == [[5.0] * 3] * 2  # (1 + 1) + (2 + 1)
    # rank 1 raised inside together(): the launcher reports it once; rank 0 stopped quietly
    rank, message = (tmp_path / "error.txt").read_text().split("\n", 1)
    assert rank == "1" and "replica rank 1 failed: OSError: rank 1 cannot write" in message
    assert not list(tmp_path.glob("after-*.txt"))


# --- training on 2 thread replicas vs one eager replica and 2 gloo processes ---


@pytest.fixture(scope="module")
def references(tiny_checkpoint, tmp_path_factory):
    """The final parameters and histories of one eager replica (whole global batch) and of 2 gloo processes."""
    tmp = tmp_path_factory.mktemp("references")
    one = TrainJob(checkpoint=str(tiny_checkpoint), out_dir=str(tmp / "one"), batch_size=GLOBAL_BATCH,
                   rank_states_dir=str(tmp / "one-states"), **SMALL)
    gloo = TrainJob(checkpoint=str(tiny_checkpoint), out_dir=str(tmp / "gloo"), batch_size=GLOBAL_BATCH // 2,
                    rank_states_dir=str(tmp / "gloo-states"), **SMALL)
    one_history = train(one, detect_runtime(1, "cpu"))
    gloo_history = train(gloo, detect_runtime(2, "cpu"), "spawn")
    return {"one": (one_history, rank_states(tmp / "one-states", 1)[0]),
            "gloo": (gloo_history, rank_states(tmp / "gloo-states", 2)[0])}


@pytest.mark.slow
@pytest.mark.parametrize("pattern", PATTERNS)
def test_two_xla_thread_replicas_train_like_one_replica_and_like_gloo(pattern, references, tiny_checkpoint, tmp_path):
    from safetensors.torch import load_file

    job = TrainJob(checkpoint=str(tiny_checkpoint), out_dir=str(tmp_path / "ckpt"), pattern=pattern,
                   batch_size=GLOBAL_BATCH // 2, rank_states_dir=str(tmp_path / "states"), **SMALL)
    t0 = time.perf_counter()
    _run_worker(["train", json.dumps(asdict(job)), "2"], timeout=540)
    seconds = time.perf_counter() - t0
    history = read_history(job.out_dir)
    assert (history["mode"], history["collectives"], history["world_size"]) == ("xla-cpu", "xla", 2)
    assert history["ddp_wrapped"] == (pattern == "ddp") and history["global_batch"] == GLOBAL_BATCH

    rank0, rank1 = rank_states(tmp_path / "states", 2)
    for k in rank0:  # the gradient all-reduce keeps the replicas bit-identical after 16 steps on different rows
        assert torch.equal(rank0[k], rank1[k]), k
    one_history, one = references["one"]
    gloo_history, gloo = references["gloo"]
    init = load_file(str(tiny_checkpoint / "model.safetensors"))
    moved = max((one[k] - init[k]).abs().max().item() for k in init)
    to_one, to_gloo = max_diff(rank0, one), max_diff(rank0, gloo)
    print(f"\n{pattern}: {seconds:.0f} s; max |xla - one replica| {to_one:.2e}, |xla - gloo| {to_gloo:.2e}, "
          f"weights moved {moved:.2e}; compile counts {history['compile_counts']}")
    assert moved > 50 * TOL  # training moved the weights far more than the tolerance
    assert to_one < TOL and to_gloo < TOL
    for mine, ref in zip(history["epochs"], one_history["epochs"]):
        assert mine["train_loss"] == pytest.approx(ref["train_loss"], abs=1e-4)  # all-reduced over the replicas
        assert mine["valid_loss"] == pytest.approx(ref["valid_loss"], abs=1e-4)  # from all-gathered predictions

    counts, steps = history["compile_counts"], history["steps_per_epoch"]
    assert steps == 8 and len(counts) == 2 * steps
    assert counts[2] == counts[steps - 1]  # after the first 3 steps (Adam state, DDP's bucket rebuild) none compiles
    first_epoch_end = history["epochs"][0]["compile_count"]
    assert counts[steps:] == [first_epoch_end] * steps  # epoch 2 compiles nothing: every graph is reused
    assert history["epochs"][1]["compile_count"] == first_epoch_end
    saved = load_file(str(tmp_path / "ckpt" / "model.safetensors"))  # the master saved the synced model
    assert max_diff({k: saved[k] for k in init}, {k: rank0[k] for k in init}) == 0.0
