"""Runs that survive (:mod:`kitlib.training.resume`): killed mid-epoch and resumed, a run ends with the weights of one
that was never interrupted; a resumed run is continued exactly, rebuilt with a note, or refused before any
replica starts (issue 26)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from conftest import ROOT, SAMPLE
from support.rank_states import max_diff, rank_states
from kitlib.atomic import MANIFEST
from kitlib.training import resume
from kitlib.run.runtime import ReplicaError, detect_runtime
from kitlib.checkpoint import read_history
from kitlib.training.job import TrainJob
from kitlib.training.train import train

JOB = dict(train_csv=str(SAMPLE / "train.csv"), valid_csv=str(SAMPLE / "validation.csv"), max_len=32, lr=1e-3,
           train_limit=48, valid_limit=24, log_every=2, batch_size=8, precision="fp32")


def _settings(**changes) -> resume.Settings:
    base = dict(recipe="e5", lr=3e-5, head_lr=1e-3, weight_decay=0.0, param_groups=((199, 21_000_000), (2, 385)),
                world_size=1, batch_size=16, steps_per_epoch=174, epochs=2, precision="fp32", train_rows="abc",
                valid_rows="def", model="/models/e5", model_print="e5e5e5e5e5e5e5e5")
    return resume.Settings(**{**base, **changes})


# how JOB's runs make their model (kitlib.checkpoint.MODEL_SETTINGS): an encoder, fully fine-tuned, loaded as saved
ENCODER_MADE = {"kind": "encoder", "prompt": "", "answer_tokens": [[], []], "lora_r": 0, "lora_alpha": None,
                "lora_dropout": None, "lora_targets": None, "weights": "as saved"}


def _identity(checkpoint: Path) -> dict:
    """The :class:`resume.Settings` fields naming the run of ``JOB``'s rows started from ``checkpoint``."""
    return dict(model=str(checkpoint), model_print=resume.model_identity(checkpoint, "train_history.json")[0],
                model_settings=ENCODER_MADE,
                train_rows=resume.rows_fingerprint(JOB["train_csv"], JOB["train_limit"]),
                valid_rows=resume.rows_fingerprint(JOB["valid_csv"], JOB["valid_limit"]))


def _saved(settings: resume.Settings, epoch: int, batch: int, finished: bool = False) -> tuple[Path, dict]:
    pos = resume.Position(epoch, batch, epoch * settings.steps_per_epoch + batch)
    return Path("/runs/xlmr-toxic.state"), {"format": resume.STATE_FORMAT, "settings": settings.to_json(),
                                              "position": asdict(pos), "history": {"epochs": []}, "finished": finished}


# --- the plan: pure, in the calling process ---


def test_an_unchanged_run_continues_exactly_from_the_saved_batch():
    plan = resume.plan(_settings(), _saved(_settings(), 0, 130))
    assert plan.how == "exact" and plan.position == resume.Position(0, 130, 130) and plan.restores_schedule
    assert plan.note == ("resuming the run in /runs/xlmr-toxic.state from epoch 1, batch 130 of 174 (step 130): continued "
                         "exactly (weights, optimizer, schedule, scaler and RNG states restored); training epoch(s) 1-2")


def test_a_larger_global_batch_rebuilds_the_schedule_where_the_rows_done_end():
    """Issue 26: resumed with a larger batch, the restored schedule had ended: every step at learning rate 0."""
    new = _settings(batch_size=32, steps_per_epoch=87)
    plan = resume.plan(new, _saved(_settings(), 0, 130))
    assert plan.how == "rebuilt" and not plan.restores_schedule
    assert plan.position == resume.Position(0, 65, 65)  # 130 x 16 = 2,080 rows done = 65 batches of 32
    assert ("changed since: batch_size 16 -> 32, steps_per_epoch 174 -> 87: the schedule is rebuilt for global batch 32: "
            "87 steps an epoch, 174 in all, 65 done (epoch 1 from batch 65: the 2,080 rows done in the epoch)") in plan.note
    two = resume.plan(_settings(world_size=2, steps_per_epoch=87), _saved(_settings(), 1, 0))  # more replicas
    assert two.how == "rebuilt" and two.position == resume.Position(1, 0, 87) and "world_size 1 -> 2" in two.note


def test_another_recipe_or_other_parameter_groups_are_refused_naming_the_fix():
    """Issue 26: resumed with another recipe, a replica failed with torch's "loaded state dict has a
    different number of parameter groups"."""
    with pytest.raises(ValueError, match=r"xlmr-toxic.state: that run trained with recipe 'e5', this one asks for "
                                         r"'standard'; pass recipe='e5' to continue it, or pass resume='never'"):
        resume.plan(_settings(recipe="standard"), _saved(_settings(), 0, 10))
    with pytest.raises(ValueError, match=r"has 2 parameter group\(s\), 199 tensors \(21,000,000 values\), 2 tensors "
                                         r"\(385 values\); this run's model and recipe make 1, 201 tensors"):
        resume.plan(_settings(param_groups=((201, 21_000_385),)), _saved(_settings(), 0, 10))
    with pytest.raises(ValueError, match=r"already trained 2 epoch\(s\), and epochs=2 counts the whole run"):
        resume.plan(_settings(), _saved(_settings(), 2, 0, finished=True))
    assert resume.plan(_settings(), None) is None


def test_a_state_continues_only_the_run_it_belongs_to():
    """Issue 33 item 2: a state continued a run started from another model ("continued exactly", A's weights
    trained under B's name) or on other rows (a fold re-split: validation rows its weights trained on)."""
    saved = _saved(_settings(), 0, 10)
    saved[1]["history"]["run_id"] = "run-a"
    with pytest.raises(ValueError, match=r"xlmr-toxic.state: that run started from /models/e5 \(fingerprint "
                                         r"e5e5e5e5e5e5e5e5\); this one starts from /models/b \(fingerprint bbbb\): a "
                                         r"saved state continues only the run it belongs to. Start from /models/e5 to "
                                         r"continue it \(model=...\), or pass resume='never'"):
        resume.plan(_settings(model="/models/b", model_print="bbbb"), saved)
    # the run's own folder (its history's run_id) continues it, whatever that folder's fingerprint now is
    own = resume.plan(_settings(model="/runs/xlmr-toxic", model_print="kept", model_run="run-a"), saved)
    assert own.how == "exact"
    with pytest.raises(ValueError, match=r"that run trains on rows abc and validates on rows def \(fold 0 of 3 \(cv "
                                         r"aaa\)\); this one trains on rows abd and validates on rows deg \(fold 0 of 4 "
                                         r"\(cv bbb\)\): continuing it would validate on rows its weights may have "
                                         r"trained on"):
        resume.plan(_settings(train_rows="abd", valid_rows="deg", fold="fold 0 of 4 (cv bbb)"),
                    _saved(_settings(fold="fold 0 of 3 (cv aaa)"), 0, 10))
    with pytest.raises(ValueError, match=r"validates on rows other"):  # the validation rows alone changed
        resume.plan(_settings(valid_rows="other"), saved)
    assert resume.fold_label({"cv": "aaa", "fold": 0, "folds": 3}) == "fold 0 of 3 (cv aaa)"
    assert resume.fold_label({"seed_group": "x"}) == ""


def test_a_cut_off_run_is_found_beside_its_output_and_a_finished_one_from_its_folder(tmp_path):
    out = tmp_path / "xlmr-toxic"
    state = resume.state_dir(out)
    assert state == tmp_path / "xlmr-toxic.state"
    assert resume.find(out, tmp_path / "e5", "train_history.json") is None
    state.mkdir()
    run = _saved(_settings(), 0, 3)[1]
    (state / resume.RUN_FILE).write_text(json.dumps(run))
    assert resume.find(out, tmp_path / "e5", "train_history.json")[0] == state  # case 1: cut off
    (state / resume.RUN_FILE).write_text(json.dumps({**run, "finished": True}))
    assert resume.find(out, tmp_path / "e5", "train_history.json") is None  # finished: a fresh run replaces it
    out.mkdir()
    (out / "train_history.json").write_text("{}")
    assert resume.find(tmp_path / "next", out, "train_history.json")[0] == state  # case 2: continue from its folder
    (state / resume.RUN_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"run.json: not a readable run state .*delete .*xlmr-toxic.state to start afresh"):
        resume.find(out, tmp_path / "e5", "train_history.json")


# --- resumed runs, for real (a linear schedule: the e5 recipe, on the tiny model) ---


@pytest.fixture(scope="module")
def one_e5_epoch(sharp_checkpoint, tmp_path_factory):
    """One epoch of the e5 recipe (warm-up, then linear decay to 0 at its last step) from the spread tiny model."""
    out = tmp_path_factory.mktemp("e5-epoch") / "ckpt"
    job = TrainJob(checkpoint=str(sharp_checkpoint), out_dir=str(out), recipe="e5", epochs=1, **{**JOB, "lr": 0.0})
    return job, train(job, detect_runtime(1, "cpu"))


@pytest.mark.slow
def test_the_checkpoint_records_the_recipe_it_was_trained_with(one_e5_epoch):
    """Issue 26: a run trained with e5-fast saved kitlib_recipe "e5" (the starting folder's), so resuming it
    without recipe= took the other recipe and crashed in a replica. Here the tiny model (recipe "tiny" by
    its marker) trained with "e5": its folder must say "e5"."""
    job, history = one_e5_epoch
    assert json.loads((Path(job.out_dir) / "config.json").read_text())["kitlib_recipe"] == "e5"
    from kitlib.training.recipe import recipe_for

    assert recipe_for(job.out_dir) == "e5" and history["recipe"]["name"] == "e5"


@pytest.mark.slow
def test_a_finished_schedule_is_rebuilt_for_the_new_batch_and_the_weights_move(one_e5_epoch, tmp_path, capsys):
    """Issue 26: resumed with a larger batch, every step ran at learning rate 0 and the weights stayed
    bit-identical while the history called the epoch trained."""
    job, _ = one_e5_epoch
    before = torch.load(resume.state_dir(job.out_dir) / resume.WEIGHTS_FILE, weights_only=True)
    again = TrainJob(**{**asdict(job), "checkpoint": job.out_dir, "out_dir": str(tmp_path / "more"), "epochs": 3,
                        "batch_size": 16, "recipe": "auto", "rank_states_dir": str(tmp_path / "states")})
    history = train(again, detect_runtime(1, "cpu"))
    out = capsys.readouterr().out
    assert "the schedule is rebuilt for global batch 16: 3 steps an epoch, 9 in all, 3 done" in out
    assert history["recipe"]["name"] == "e5" and [e["epoch"] for e in history["epochs"]] == [1, 2, 3]
    # issue 33 item 8: the steps go on (6 at batch 8, then 6 more at batch 16), never back to the rebuilt schedule's 4
    assert [s for s, _ in history["step_loss"]] == [2, 4, 6, 8, 10, 12]
    assert resume.read_run(resume.state_dir(again.out_dir))["steps"] == 12
    after = rank_states(tmp_path / "states", 1)[0]
    assert max_diff(after, before) > 1e-4  # epochs 2-3 trained at the rebuilt schedule's rates


@pytest.mark.slow
def test_an_epoch_that_changes_nothing_is_an_error_not_a_trained_epoch(sharp_checkpoint, tmp_path, monkeypatch):
    """A schedule at 0 throughout (what an ended schedule restored as it was gave): the epoch is refused,
    not recorded as trained (one eager replica runs in this process, so the patched schedule applies)."""
    from kitlib.training import recipe

    monkeypatch.setattr(recipe, "lr_factor", lambda step, r, total: 0.0)
    job = TrainJob(checkpoint=str(sharp_checkpoint), out_dir=str(tmp_path / "ckpt"), recipe="e5", epochs=1,
                   **{**JOB, "lr": 0.0})
    with pytest.raises(ReplicaError, match=r"epoch 1 changed no trained parameter \(learning rates now 0, 0\): every "
                                           r"step ran at learning rate 0"):
        train(job, detect_runtime(1, "cpu"))
    assert not (tmp_path / "ckpt").exists()


def test_another_recipe_is_refused_before_any_replica_starts(tiny_checkpoint, tmp_path):
    out = tmp_path / "ckpt"
    state = resume.state_dir(out)
    state.mkdir(parents=True)
    groups = ((41, 1_372_161),)
    settings = _settings(recipe="tiny", lr=1e-3, head_lr=1e-3, param_groups=groups, batch_size=8, steps_per_epoch=6,
                         **_identity(tiny_checkpoint))
    (state / resume.RUN_FILE).write_text(json.dumps(_saved(settings, 0, 3)[1]))
    (state / MANIFEST).write_text(f"{resume.RUN_FILE}\n")  # a state folder the kit wrote (kitlib.atomic)
    job = TrainJob(checkpoint=str(tiny_checkpoint), out_dir=str(out), epochs=2, recipe="standard", **JOB)
    with pytest.raises(ValueError, match=r"that run trained with recipe 'tiny', this one asks for 'standard'"):
        train(job, detect_runtime(1, "cpu"))


# --- killed with SIGKILL mid-epoch, then resumed ---


def _worker(job: TrainJob, accelerator: str, replicas: int, start_method: str, kill_at: int) -> int:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "kill_worker.py"), json.dumps(asdict(job)),
                           accelerator, str(replicas), start_method, str(kill_at)], cwd=ROOT, start_new_session=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    if kill_at:
        assert proc.returncode == -signal.SIGKILL, proc.stdout[-2000:] + proc.stderr[-3000:]
    else:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("accelerator, replicas, start_method", [("cpu", 1, "fork"), ("cpu", 2, "fork"),
                                                                  ("xla-cpu", 1, "fork")])
def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_runs_weights(accelerator, replicas, start_method,
                                                                           sharp_checkpoint, tmp_path):
    """SIGKILL at step 5 of 12 (6 an epoch), after the save at step 3: the same command again continues from
    epoch 1, batch 3 (steps 4-5 are trained again), and ends within float noise of a run never interrupted.
    Dropout is on (the checkpoint's 0.1): the RNG state is restored too."""
    batch = JOB["batch_size"] // replicas  # the same global batch of 8
    common = dict(checkpoint=str(sharp_checkpoint), epochs=2, save_every_steps=3, save_every_minutes=0,
                  **{**JOB, "batch_size": batch})
    ref = TrainJob(out_dir=str(tmp_path / "ref"), rank_states_dir=str(tmp_path / "ref-states"), **common)
    _worker(ref, accelerator, replicas, start_method, 0)
    job = TrainJob(out_dir=str(tmp_path / "run"), rank_states_dir=str(tmp_path / "states"), **common)
    _worker(job, accelerator, replicas, start_method, 5)
    run = resume.read_run(resume.state_dir(job.out_dir))
    assert run["position"] == {"epoch": 0, "batch": 3, "global_step": 3} and not run["finished"]  # mid-epoch
    assert not (tmp_path / "run").exists()  # no epoch ended: nothing kept yet
    _worker(job, accelerator, replicas, start_method, 0)
    history = read_history(job.out_dir)
    assert history["resumed"][0]["how"] == "exact" and history["resumed"][0]["at_step"] == 3
    assert [e["epoch"] for e in history["epochs"]] == [1, 2] and history["finished"]
    assert [s for s, _ in history["step_loss"]] == [2, 4, 6, 8, 10, 12]
    resumed, uninterrupted = rank_states(tmp_path / "states", replicas)[0], rank_states(tmp_path / "ref-states", replicas)[0]
    from safetensors.torch import load_file

    moved = max_diff(uninterrupted, load_file(str(sharp_checkpoint / "model.safetensors")))
    assert moved > 1e-3 and max_diff(resumed, uninterrupted) < 1e-5, (max_diff(resumed, uninterrupted), moved)
    ref_history = read_history(ref.out_dir)
    for a, b in zip(history["epochs"], ref_history["epochs"]):
        assert a["valid_loss"] == pytest.approx(b["valid_loss"], abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("replicas, term_at, stopped_at", [(1, 5, 5), (2, 3, 4)])
def test_sigterm_saves_the_state_at_the_step_reached_and_the_run_continues(replicas, term_at, stopped_at, sharp_checkpoint,
                                                                            tmp_path):
    """Issue 34 item 4: kill -TERM of a training (what Kaggle and Colab send) exited without saving: up to 30
    minutes lost. SIGTERM to the training process during a step: the replicas save the state at their next stop
    decision (every step with one replica, every log_every = 2 steps with two) and the call returns, saying
    where the state is; the same call then continues from it."""
    common = dict(checkpoint=str(sharp_checkpoint), epochs=2, save_every_minutes=0,
                  **{**JOB, "batch_size": JOB["batch_size"] // replicas})
    job = TrainJob(out_dir=str(tmp_path / "run"), **common)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "kill_worker.py"), json.dumps(asdict(job)),
                           "cpu", str(replicas), "fork", str(term_at), "TERM"], cwd=ROOT, start_new_session=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    state = resume.state_dir(job.out_dir)
    assert (f"note: the run stopped (SIGTERM) before its last epoch; its state is in {state}: run the same again "
            "to continue it") in proc.stdout
    run = resume.read_run(state)
    assert run["position"] == {"epoch": 0, "batch": stopped_at, "global_step": stopped_at} and not run["finished"]
    assert run["history"]["stopped"] == "SIGTERM"
    _worker(job, "cpu", replicas, "fork", 0)
    history = read_history(job.out_dir)
    assert history["resumed"][0]["how"] == "exact" and history["resumed"][0]["at_step"] == stopped_at
    assert [e["epoch"] for e in history["epochs"]] == [1, 2] and history["finished"] and history["stopped"] is None


def test_a_second_sigterm_inside_the_first_ones_handler_returns(monkeypatch):
    """Two SIGTERMs (each replica's, or a user's second stop) hung a 2-replica run: the second arrived inside the
    first's handler while it held threading.Event's lock (1 of 4 runs under load; faulthandler's stack
    _on_sigterm -> Event.set -> _on_sigterm -> Event.set). That moment cannot be hit on demand; what is tested is
    the handler's answer to a nested SIGTERM: it returns at once (no second pass to the replicas; the old handler
    passed it on twice) and the flag it reads takes no lock. Run in a thread, so a deadlock fails instead of hanging."""
    import multiprocessing as mp
    import threading

    from kitlib.training import session

    nested = []

    def children_with_a_second_signal():
        nested.append(1)
        if len(nested) == 1:  # the second SIGTERM arrives while the first handler passes it on
            session._on_sigterm(signal.SIGTERM, None)
        return []

    monkeypatch.setattr(mp, "active_children", children_with_a_second_signal)
    with session.sigterm_saves():  # a run's block: no stop asked yet
        t = threading.Thread(target=session._on_sigterm, args=(signal.SIGTERM, None), daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive(), "the second SIGTERM's handler waited on the first's lock"
        assert session.stop_requested() and nested == [1]  # the nested call returned before passing it on again
    with session.sigterm_saves():  # the next run's block starts with no stop asked
        assert not session.stop_requested()


# --- the best epoch, early stopping, the time budget, the record of runs ---


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars of TensorBoard event files (TFRecord: length, its CRC, an Event proto, its CRC)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list] = {}
    for f in sorted(folder.rglob("events.out.tfevents.*")):
        data, i = f.read_bytes(), 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            event = Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def test_a_resumed_runs_tensorboard_writer_purges_the_steps_after_its_state(tmp_path):
    """Issue 33 item 8: a run killed after logging steps its state does not hold logs them again when resumed;
    the writer opens with purge_step (TensorBoard then drops the earlier events from that step on)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event, SessionLog

    from kitlib.training.runs import Tracker

    tracker = Tracker("tensorboard", tmp_path / "tb", purge_step=4)
    tracker.log(4, {"loss/step": 0.5})
    tracker.close()
    (f,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    data, i, events = f.read_bytes(), 0, []
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        events.append(Event.FromString(data[i + 12:i + 12 + n]))
        i += 12 + n + 4
    starts = [e.step for e in events if e.HasField("session_log") and e.session_log.status == SessionLog.START]
    assert starts == [4]


@pytest.mark.slow
def test_the_best_epoch_is_kept_and_patience_stops_the_run(sharp_checkpoint, tmp_path):
    """Monitor the validation loss with a rate that overfits: the folder keeps the best epoch's weights and
    predictions, the history says which and why, patience 1 stops after the first epoch that is worse,
    every run is a row of the runs table, and the curves are TensorBoard event files."""
    import pandas as pd

    from kitlib.training.runs import read_runs, runs_table

    out = tmp_path / "ckpt"
    job = TrainJob(checkpoint=str(sharp_checkpoint), out_dir=str(out), epochs=6, monitor="valid_loss", patience=1,
                   rank_states_dir=str(tmp_path / "states"), tracker="tensorboard", tags={"fold": 0, "folds": 3},
                   **{**JOB, "lr": 3e-3})
    history = train(job, detect_runtime(1, "cpu"))
    losses = [e["valid_loss"] for e in history["epochs"]]
    best = history["best"]
    k = losses.index(min(losses))
    assert best["epoch"] == k + 1 and best["monitor"] == "valid_loss" and best["value"] == min(losses)
    assert best["why"].startswith(f"the lowest valid_loss so far ({min(losses):.4f}")
    assert len(losses) == k + 2 < 6 and history["stopped"] == "early stopping" and history["finished"]  # patience 1
    saved = read_history(out)
    assert saved["best"] == best and len(saved["epochs"]) == len(losses)  # the whole history, the best epoch's weights
    kept = torch.load(resume.state_dir(out) / resume.WEIGHTS_FILE, weights_only=True)  # the last epoch's
    from safetensors.torch import load_file

    in_folder = load_file(str(out / "model.safetensors"))
    assert max_diff(in_folder, kept) > 1e-4  # the folder is not the last epoch
    preds = pd.read_csv(out / "valid_predictions.csv")
    p = preds["toxic"].clip(1e-7, 1 - 1e-7).to_numpy()
    y = pd.read_csv(SAMPLE / "validation.csv")["toxic"].to_numpy()[: len(p)]
    import numpy as np

    assert float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))) == pytest.approx(best["value"], abs=1e-5)
    rows = read_runs(runs_table(out))
    assert len(rows) == 1 and rows[0]["run_id"] == history["run_id"] and rows[0]["best_epoch"] == str(k + 1)
    assert rows[0]["status"] == "early stopping" and json.loads(rows[0]["tags"]) == {"fold": 0, "folds": 3}
    assert len(rows[0]["data"]) == 16 and rows[0]["valid_auc"] and float(rows[0]["train_seconds"]) > 0
    scalars = _scalars(Path(str(out) + ".tensorboard") / history["run_id"])
    assert [v for _, v in scalars["loss/valid"]] == pytest.approx(losses, abs=1e-6)
    assert len(scalars["loss/step"]) == len(history["step_loss"])


@pytest.mark.slow
def test_a_time_budget_stops_with_a_state_and_the_same_call_finishes_the_run(sharp_checkpoint, tmp_path, capsys):
    from kitlib.training.runs import read_runs, runs_table

    out = tmp_path / "ckpt"
    job = TrainJob(checkpoint=str(sharp_checkpoint), out_dir=str(out), epochs=2, time_budget_s=1.0, **JOB)
    history = train(job, detect_runtime(1, "cpu"))
    assert not history["finished"] and history["stopped"] == "time budget" and history["epochs"] == []
    run = resume.read_run(resume.state_dir(out))
    assert run["position"]["epoch"] == 0 and 1 <= run["position"]["batch"] < 6 and not run["finished"]
    assert "run the same again to continue it" in capsys.readouterr().out
    done = train(TrainJob(**{**asdict(job), "time_budget_s": None}), detect_runtime(1, "cpu"))
    assert done["finished"] and [e["epoch"] for e in done["epochs"]] == [1, 2]
    assert done["resumed"][0]["how"] == "exact" and done["run_id"] == history["run_id"]
    # one run, one row: the continued run's latest state (issue 33), not a row per call
    assert [(r["run_id"], r["status"], r["epochs"]) for r in read_runs(runs_table(out))] == [(history["run_id"], "finished", "2")]


def test_a_run_cut_off_from_model_a_is_not_continued_from_model_b(sharp_checkpoint, tiny_checkpoint, tmp_path, capsys):
    """Issue 33 item 2: cut off while training from A (the spread tiny model), then started from B (the tiny
    model: same architecture and recipe) into the same folder, the run printed "continued exactly" and
    trained A's weights under B's name. Refused before any replica, naming both; the state is kept."""
    out = tmp_path / "ckpt"
    job = TrainJob(checkpoint=str(sharp_checkpoint), out_dir=str(out), epochs=2, time_budget_s=1.0, **JOB)
    assert not train(job, detect_runtime(1, "cpu"))["finished"]
    state = resume.read_run(resume.state_dir(out))
    capsys.readouterr()
    with pytest.raises(ValueError, match=rf"that run started from {sharp_checkpoint} \(fingerprint [0-9a-f]{{16}}\); "
                                         rf"this one starts from {tiny_checkpoint} \(fingerprint [0-9a-f]{{16}}\)"):
        train(TrainJob(**{**asdict(job), "checkpoint": str(tiny_checkpoint), "time_budget_s": None}), detect_runtime(1, "cpu"))
    assert "continued exactly" not in capsys.readouterr().out
    assert resume.read_run(resume.state_dir(out)) == state  # the cut-off run's state, untouched


def test_a_starting_model_is_identified_by_its_content(sharp_checkpoint, tmp_path):
    """Issue 39.2: the same weights whose config.json was written again (another transformers version: order,
    version, spacing) are the same starting model; another fine-tune of the same shape, same config bytes and
    file sizes, is not (the old fingerprint, by config bytes and sizes, said the opposite in both cases)."""
    import shutil

    from safetensors.torch import load_file, save_file

    resaved, other = tmp_path / "resaved", tmp_path / "other"
    shutil.copytree(sharp_checkpoint, resaved)
    config = json.loads((resaved / "config.json").read_text())
    (resaved / "config.json").write_text(json.dumps({**dict(reversed(config.items())), "transformers_version": "4.57.1"}))
    shutil.copytree(sharp_checkpoint, other)
    tensors = load_file(other / "model.safetensors")
    name = next(n for n in sorted(tensors) if n.endswith("dense.weight"))
    tensors[name] = tensors[name].flip(0).contiguous()
    save_file(tensors, other / "model.safetensors", metadata={"format": "pt"})
    prints = {p.name: resume.model_identity(p, "train_history.json")[0] for p in (sharp_checkpoint, resaved, other)}
    assert (other / "model.safetensors").stat().st_size == (sharp_checkpoint / "model.safetensors").stat().st_size
    assert prints["resaved"] == prints[sharp_checkpoint.name] != prints["other"], prints


def _fold_files(tmp_path: Path, k: int) -> tuple[Path, Path]:
    """Fold 0 of ``k`` of the first 120 sample rows, written where the training notebook writes a fold's
    two CSVs (the same paths for any K: only their rows differ)."""
    import pandas as pd

    from kitlib.cv.folds import fold_split, write_folds

    rows = tmp_path / "rows.csv"
    if not rows.is_file():
        pd.read_csv(SAMPLE / "train.csv", dtype=str, keep_default_na=False).head(120).to_csv(rows, index=False)
    folds_csv = write_folds(rows, tmp_path / f"cv-{k}" / "folds", k)
    return fold_split(rows, folds_csv, 0, tmp_path / "scratch" / "fold-0")


def test_a_fold_run_is_not_continued_after_the_rows_are_split_into_other_folds(sharp_checkpoint, tmp_path, capsys):
    """Issue 33 item 2: a fold run cut off, then the rows split into other folds (3 -> 4), continued the old
    state "with a note": the new fold's validation rows held rows its weights trained on. Refused."""
    train_csv, valid_csv = _fold_files(tmp_path, 3)
    common = dict(JOB, train_csv=str(train_csv), valid_csv=str(valid_csv), train_limit=None, valid_limit=None)
    job = TrainJob(checkpoint=str(sharp_checkpoint), out_dir=str(tmp_path / "fold-0"), epochs=2, time_budget_s=1.0,
                   **common)
    assert not train(job, detect_runtime(1, "cpu"))["finished"]
    _fold_files(tmp_path, 4)  # the same paths, fold 0 of 4 now
    capsys.readouterr()
    with pytest.raises(ValueError, match=r"fold-0.state: that run trains on rows [0-9a-f]{16} and validates on rows "
                                         r"[0-9a-f]{16}; this one trains on rows [0-9a-f]{16} and validates on rows "
                                         r"[0-9a-f]{16}: continuing it would validate on rows its weights may have "
                                         r"trained on"):
        train(TrainJob(**{**asdict(job), "time_budget_s": None}), detect_runtime(1, "cpu"))
    assert "resuming" not in capsys.readouterr().out


def test_the_time_budgets_reserve_holds_the_validation_and_saves_after_the_epochs_last_batch():
    """Issue 33 item 8: the reserve was two saves, log_every steps and 30 s: a stop decision one step before an
    epoch's end let the run go on into a validation of 60 s and two saves it had no time for."""
    from kitlib.training.session import LEAVE_S, reserve_s

    mid = reserve_s(step_s=1.0, save_s=2.0, valid_s=60.0, steps_to_check=1, steps_left_in_epoch=5)
    assert mid == 1.0 + 2 * 2.0 + LEAVE_S == 35.0
    last = reserve_s(step_s=1.0, save_s=2.0, valid_s=60.0, steps_to_check=1, steps_left_in_epoch=1)
    assert last == 35.0 + 60.0 + 2 * 2.0 == 99.0  # the epoch's last batch, then its validation, checkpoint and state
    assert reserve_s(step_s=1.0, save_s=2.0, valid_s=60.0, steps_to_check=10, steps_left_in_epoch=4) == 10 + 4 + 30 + 64


def test_a_validation_not_yet_measured_is_estimated_at_the_mean_step_not_the_longest():
    """A SmolLM2 run (kitlib.training.deadline, the test-time training notebook) stopped for its time budget two
    steps before its only epoch ended, with minutes in hand (the last batch is the one whose reserve holds the validation): one slow step (15 s among 5.5 s ones) was multiplied
    by every validation batch (200 rows / 16: 13 batches), a 195 s estimate for what the probe had measured at 21 s."""
    import time
    from types import SimpleNamespace

    from kitlib.training.loop import _Loop, _reserve
    from kitlib.training.session import LEAVE_S

    loop = _Loop(history={}, settings=None, position=SimpleNamespace(batch=62), loss_total=0.0, step_seconds=15.0,
                 save_seconds=1.0)
    loop.epoch_started, loop.epoch_steps = time.monotonic() - 62 * 5.5, 62  # this call's epoch: 62 steps of 5.5 s
    data = SimpleNamespace(valid_rows=[None] * 200, loader=[None] * 63)
    reserve = _reserve(SimpleNamespace(world_size=1), SimpleNamespace(batch_size=16, log_every=10), loop, data)
    valid = 13 * 5.5 + 1.0  # ceil(200 / 16) batches at the mean step, and a save
    assert reserve == pytest.approx(15.0 + 2 * 1.0 + LEAVE_S + valid + 2 * 1.0, abs=0.5)  # not 13 x 15 s


def test_the_time_budget_on_kaggle_is_the_sessions_limit_less_a_margin(monkeypatch):
    import time

    from kitlib.training import session

    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    assert session.time_budget(-1, "tpu") is None and session.time_budget(0, "tpu") is None  # not on Kaggle
    assert session.time_budget(90, "cpu") == 5400.0
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    monkeypatch.setattr(session, "process_started", lambda: time.time() - 3600)  # an hour in
    assert session.time_budget(-1, "tpu") == pytest.approx(9 * 3600 - 20 * 60 - 3600, abs=5)
    assert session.time_budget(-1, "cuda") == pytest.approx(12 * 3600 - 20 * 60 - 3600, abs=5)
    monkeypatch.setattr(session, "process_started", lambda: time.time() - 9 * 3600 + 60)
    with pytest.raises(ValueError, match=r"this Kaggle session has -19 min left"):
        session.time_budget(-1, "tpu")
    with pytest.raises(ValueError, match="time_budget_minutes must be -1"):
        session.time_budget(-5, "tpu")
    assert abs(session.process_started() - time.time()) < 24 * 3600 * 30  # read from /proc
