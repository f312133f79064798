"""One run per output folder (issue 34.2): kitlib.locks, taken by kitlib.training.train.train.

From the input: ``make submission`` trained into artifacts/xlmr-toxic while a second training run
wrote the same folder; nothing noticed. A second run into a held folder is now refused naming the
holder; a lock left by a dead run is taken over with a note.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from conftest import SAMPLE
from kitlib.locks import FolderLocked, lock_path, output_lock


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "ckpt"
    with output_lock(out) as path:
        assert path == tmp_path / "ckpt.lock"
        held = json.loads(path.read_text())
        assert (held["pid"], held["host"]) == (os.getpid(), socket.gethostname())
        code = ("import sys; from kitlib.locks import output_lock\n"
                f"with output_lock({str(out)!r}): pass\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert r.returncode == 1
        assert (f"FolderLocked: output folder {out} is being written by another run: pid {os.getpid()} on host "
                f"{socket.gethostname()} since {held['started']}") in r.stderr, r.stderr
    with output_lock(out):  # released at the end of the body
        pass


def test_a_lock_left_by_a_dead_run_is_taken_over_with_a_note(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    out = tmp_path / "ckpt"
    lock_path(out).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": "train old",
                                          "started": "2024-01-01T00:00:00+00:00"}))
    with output_lock(out) as path:
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert (f"note: {path} named pid {pid} on host {socket.gethostname()} since 2024-01-01T00:00:00+00:00 "
            "(train old), which no longer runs: taking the lock over") in capsys.readouterr().out


def test_training_into_a_held_folder_is_refused_before_any_work(tmp_path):
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    out = tmp_path / "ckpt"
    job = TrainJob(checkpoint=str(tmp_path / "no-model"), train_csv=str(SAMPLE / "train.csv"),
                   valid_csv=str(SAMPLE / "validation.csv"), out_dir=str(out))
    with output_lock(out):
        with pytest.raises(FolderLocked, match=rf"training output folder {out} is being written by another run: "
                                               rf"pid {os.getpid()} on host"):
            train(job, detect_runtime(1, "cpu"))
    assert not out.exists()


def test_a_released_lock_leaves_no_file_and_a_waiter_takes_the_next_one(tmp_path):
    """Locks are removed when released (nothing left beside a run's outputs); a waiter that opened the
    old file before it was removed takes the path's new file, so two holders never overlap."""
    import threading

    from kitlib.locks import record_lock

    table = tmp_path / "runs.csv"
    inside, order = threading.Event(), []

    def second():
        inside.wait()
        with record_lock(table, 10):
            order.append("second")

    t = threading.Thread(target=second)
    with output_lock(tmp_path / "ckpt"):
        assert lock_path(tmp_path / "ckpt").is_file()
    with record_lock(table, 10) as held:
        assert held == table and (tmp_path / ".runs.csv.lock").is_file()
        t.start()
        inside.set()
        t.join(0.3)
        assert t.is_alive()  # waits while the first holds it
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # both lock files removed


# ---------------------------------------------------------------------------------------------
# issue 39.1: one lock per real folder, whatever name or link reaches it
# ---------------------------------------------------------------------------------------------
def _linked(tmp_path, name="xlmr-toxic", folder=True):
    """``artifacts/<name>``, a link to ``drive/<name>`` (Colab's Drive mount): the folder (or file) written, which
    need not exist yet. Returns ``(link, real)``."""
    (tmp_path / "drive").mkdir(exist_ok=True)
    (tmp_path / "artifacts").mkdir(exist_ok=True)
    link, real = tmp_path / "artifacts" / name, tmp_path / "drive" / name
    link.symlink_to(real, target_is_directory=folder)
    return link, real


def test_a_folder_reached_through_a_link_and_by_its_own_name_takes_one_lock(tmp_path):
    """On the old lock (keyed by os.path.abspath) the second holder took artifacts/xlmr-toxic.lock and both ran."""
    linked, real = _linked(tmp_path)
    assert lock_path(linked) == lock_path(real) == tmp_path / "drive" / "xlmr-toxic.lock"
    with output_lock(real):
        with pytest.raises(FolderLocked, match=rf"output folder {linked} \(the folder {real}, which it links to\) "
                                               rf"is being written by another run: pid {os.getpid()}"):
            with output_lock(linked):
                pass
    with output_lock(linked) as path:  # and the other way round
        assert path == tmp_path / "drive" / "xlmr-toxic.lock"
        with pytest.raises(FolderLocked):
            with output_lock(real):
                pass
    assert sorted(p.name for p in (tmp_path / "drive").iterdir()) == []  # no lock left


def test_a_record_reached_through_a_link_takes_the_real_records_lock(tmp_path):
    from kitlib.locks import record_lock

    _linked(tmp_path, "runs.csv", folder=False)
    with record_lock(tmp_path / "artifacts" / "runs.csv", 10):
        assert (tmp_path / "drive" / ".runs.csv.lock").is_file()
        with pytest.raises(TimeoutError, match="another process has held its lock"):
            with record_lock(tmp_path / "drive" / "runs.csv", 0.1):
                pass


def test_training_through_a_link_into_a_held_folder_is_refused(tmp_path):
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    linked, real = _linked(tmp_path)
    job = TrainJob(checkpoint=str(tmp_path / "no-model"), train_csv=str(SAMPLE / "train.csv"),
                   valid_csv=str(SAMPLE / "validation.csv"), out_dir=str(linked))
    with output_lock(real):
        with pytest.raises(FolderLocked, match="training output folder .* is being written by another run"):
            train(job, detect_runtime(1, "cpu"))
    assert not real.exists()


@pytest.mark.parametrize("held", ["shards", "submission"])
def test_predict_into_a_shard_folder_or_submission_another_run_holds_is_refused(sharp_checkpoint, tmp_path, held):
    """The inference notebook's outputs are locked as training's are, once the checks passed and before the first
    write (the old predict locked nothing: it predicted and wrote both)."""
    from conftest import write_slice
    from kitlib.infer import InferJob, predict
    from kitlib.run.runtime import detect_runtime

    test_csv, sample = write_slice(tmp_path / "data", 8)
    shards, _ = _linked(tmp_path, "shards")
    submission, _ = _linked(tmp_path, "submission.csv", folder=False)
    job = InferJob(checkpoint=str(sharp_checkpoint), test_csv=str(test_csv), shard_dir=str(shards),
                   output_csv=str(submission), sample_submission=str(sample), max_len=32)
    real = tmp_path / "drive" / ("shards" if held == "shards" else "submission.csv")
    what = "shard folder (shard_dir)" if held == "shards" else "submission file (output_csv)"
    with output_lock(real):
        with pytest.raises(FolderLocked, match=rf"{re.escape(what)} .* is being written by another run"):
            predict(job, detect_runtime(1, "cpu"))
    assert [p.name for p in (tmp_path / "drive").rglob("*") if p.is_file()] == []  # no shard, no submission, no lock left


def test_a_link_into_a_file_is_refused_before_any_work_naming_the_lock(tmp_path):
    """The lock lives beside the real folder, so a link whose target's parent is a file is refused at the lock,
    before any replica starts (before, the save failed after training)."""
    (tmp_path / "not-a-folder").write_text("a file")
    (tmp_path / "ckpt").symlink_to(tmp_path / "not-a-folder" / "ckpt")
    with pytest.raises(FileExistsError, match=r"output folder .*ckpt: its lock .*not-a-folder/ckpt\.lock cannot be made "
                                              r"there \(File exists: a file where a folder should be"):
        with output_lock(tmp_path / "ckpt"):
            pass
    assert (tmp_path / "not-a-folder").read_text() == "a file"
