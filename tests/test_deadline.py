"""Test-time training before a deadline: the probe's figures, the run that fits (kitlib/training/deadline.py),
the rows it learns from (kitlib/cv/splits.py ttt_split), and the notebook rehearsed as Kaggle runs it."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from conftest import ROOT, SAMPLE
from kitlib.cv.splits import ttt_split
from kitlib.training.deadline import SAFETY, DeadlineError, Probe, estimate, fit_deadline

# a launch 10 s, a step of 16 rows 2 s, a predicted row 10 ms
PROBE = Probe(launch_s=10.0, step_s=2.0, row_s=0.01, global_batch=16)
RUN = dict(train_rows=1600, epochs=2, valid_rows=200, test_rows=1000, min_rows=256)


def test_estimate_counts_whole_batches_a_launch_each_and_the_held_out_rows_every_epoch():
    # 1600 rows = 100 steps of 2 s, + 200 held-out rows x 10 ms, per epoch; predicting 1000 rows x 10 ms; a launch
    # each; training keeps a step and LEAVE_S (30 s) in hand at its last stop decision (kitlib.training.session)
    assert estimate(PROBE, train_rows=1600, epochs=2, valid_rows=200, test_rows=1000) == (10 + 2 * (200 + 2) + 32, 10 + 10)
    assert estimate(PROBE, train_rows=1615, epochs=1, valid_rows=0, test_rows=0)[0] == 10 + 100 * 2 + 32  # drop_last
    # the hand-off's 64 held-out rows predicted again first: a launch of their own and 64 x 10 ms
    assert estimate(PROBE, train_rows=0, epochs=1, valid_rows=0, test_rows=1000, check_rows=64)[1] == (10 + 0.64) + (10 + 10)


def test_the_run_is_as_asked_when_it_fits_or_there_is_no_deadline():
    assert (SAFETY * (446 + 20)) == 582.5
    for left in (None, 582.5, 3600):
        fit = fit_deadline(PROBE, left, **RUN)
        assert (fit.epochs, fit.train_rows, fit.why, fit.shrunk) == (2, 1600, "as asked", False)
    assert fit_deadline(PROBE, 600, **RUN).train_budget(300) == 300 - SAFETY * 20 - 10  # the prediction's share, the launch
    assert fit_deadline(PROBE, None, **RUN).train_budget(None) is None


def test_first_one_epoch_then_the_first_rows_then_refused():
    one = fit_deadline(PROBE, 400, **RUN)  # 2 epochs: 582.5 s with the margin; 1 epoch: 1.25 x (244 + 20) = 330
    assert (one.epochs, one.train_rows, one.shrunk) == (1, 1600, True)
    assert one.why.startswith("1 epoch instead of 2: 2 epoch(s) over all 1,600 rows would take about 9.7 min"), one.why
    # 200 s left: 200 / 1.25 = 160 = 20 predicting + 10 launch + 2 held out + 32 kept in hand + 48 steps of 2 s
    rows = fit_deadline(PROBE, 200, **RUN)
    assert (rows.epochs, rows.train_rows) == (1, 48 * 16)
    assert rows.why.startswith("the first 768 of 1,600 rows, 1 epoch"), rows.why
    assert SAFETY * (rows.train_s + rows.predict_s) <= 200
    with pytest.raises(DeadlineError, match=r"only 64 training rows fit before the deadline \(min_train_rows 256\)"):
        fit_deadline(PROBE, 90, **RUN)  # 90 / 1.25 - 20 - 44 = 8 s: 4 steps
    with pytest.raises(DeadlineError, match=r"predicting the 1,000 test rows alone takes about 0.4 min .* nothing would train"):
        fit_deadline(PROBE, 20, **RUN)  # 1.25 x 20 s = 25 s > 20 s
    with pytest.raises(DeadlineError, match="predicting"):
        fit_deadline(PROBE, -5, **RUN)  # the probe itself ran past the deadline


def test_probe_figures_from_a_run_the_first_steps_warm_up_counted_as_launch():
    history = {"world_size": 2, "epochs": [{"steps": 5, "train_seconds": 9.0, "first_step_seconds": 5.0, "valid_seconds": 2.0}]}
    probe = Probe.from_run(history, wall_s=20.0, valid_rows=100, batch_size=8)
    # steps 2-5 took 4 s: 1 s each; the first one's 4 s beyond a step + (20 - 9 - 2) s outside the epoch
    assert probe == Probe(launch_s=13.0, step_s=1.0, row_s=0.02, global_batch=16)
    with pytest.raises(ValueError, match="no finished epoch"):
        Probe.from_run({"world_size": 1, "epochs": [], "stopped": "SIGTERM"}, 3.0, 10, 8)


@pytest.fixture
def files(tmp_path):
    train = pd.DataFrame({"id": [str(i) for i in range(20)], "comment_text": [f"train row {i}" for i in range(20)],
                          "toxic": [i % 2 for i in range(20)]})
    test = pd.DataFrame({"id": [str(i) for i in range(6)], "content": [f"test row {i}" for i in range(6)],
                         "rule_label": ["", "1", "", "0.0", "", ""]})  # ids overlap the training file's
    train.to_csv(tmp_path / "train.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    return tmp_path


def test_ttt_split_trains_the_labelled_test_rows_first_and_holds_out_training_rows(files):
    fit, holdout, counts = ttt_split(files / "train.csv", files / "test.csv", files / "split", 0.2, seed=3,
                                           test_label_col="rule_label")
    assert counts == {"train_rows": 16, "labelled_test_rows": 2, "holdout_rows": 4}
    rows = pd.read_csv(fit, dtype=str, keep_default_na=False)
    held = pd.read_csv(holdout, dtype=str, keep_default_na=False)
    assert rows.columns.tolist() == ["id", "text", "toxic", "source"]
    assert rows["id"].tolist()[:2] == ["test:1", "test:3"] and rows["toxic"].tolist()[:2] == ["1.0", "0.0"]
    assert rows["text"].tolist()[:2] == ["test row 1", "test row 3"]
    trained = [int(i.split(":")[1]) for i in rows["id"][2:]]
    out = sorted(int(i.split(":")[1]) for i in held["id"])
    assert sorted(trained + out) == list(range(20)) and trained != sorted(trained)  # every row once; shuffled
    assert held["toxic"].astype(float).sum() == 2  # stratified: 2 of the 4 held out are positive
    none = ttt_split(files / "train.csv", files / "test.csv", files / "split2", 0.2, seed=3)
    assert none[2]["labelled_test_rows"] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ttt_split_holds_out_no_text_it_trains_on(tmp_path, seed):
    """Reposted training texts and labelled test rows copied from the training file (issue 39 item 6): before, the
    held-out draw took rows, so a held-out row's text was trained on (its repost, or the labelled test copy), and the
    held-out AUC, the hand-off and the collapse check scored it."""
    train = pd.DataFrame({"id": [str(i) for i in range(36)], "comment_text": [f"train text {i % 12}" for i in range(36)],
                          "toxic": [int(i % 12 < 4) for i in range(36)]})
    test = pd.DataFrame({"id": ["a", "b", "c", "d"], "comment_text": ["train text 0", "train text 5", "new", "train text 6"],
                         "label": ["1", "0", "0", ""]})  # 2 labelled copies of training texts; "d" unlabelled
    train.to_csv(tmp_path / "train.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    fit, holdout, counts = ttt_split(tmp_path / "train.csv", tmp_path / "test.csv", tmp_path / "split", 0.25, seed=seed,
                                     test_label_col="label")
    rows, held = (pd.read_csv(p, dtype=str, keep_default_na=False) for p in (fit, holdout))
    assert set(rows["text"]).isdisjoint(held["text"]), set(rows["text"]) & set(held["text"])
    assert {"train text 0", "train text 5"} <= set(rows["text"][rows["source"] == "train"])  # the copies' originals train
    assert held["text"].nunique() == round(0.25 * 10) and len(held) == counts["holdout_rows"] == 3 * held["text"].nunique()
    assert counts["train_rows"] + counts["holdout_rows"] == 36 and set(held["toxic"].astype(float)) == {0.0, 1.0}
    notes = json.loads((tmp_path / "split" / "split.json").read_text())["notes"]
    assert notes == ["36 row(s) share their text with another row (12 text(s)): each text's rows are on one side",
                     "6 training row(s) share their text with a labelled test row: trained, never held out"]


def test_ttt_split_names_a_bad_label_or_a_missing_column(files):
    test = pd.read_csv(files / "test.csv", dtype=str, keep_default_na=False)
    test.loc[4, "rule_label"] = "yes"
    test.to_csv(files / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"bad.csv: column 'rule_label' \(test_label_col\) at data row 5 is 'yes', not a label"):
        ttt_split(files / "train.csv", files / "bad.csv", files / "split", 0.2, test_label_col="rule_label")
    with pytest.raises(ValueError, match=r"test.csv: no column 'label' \(test_label_col\).*'rule_label'"):
        ttt_split(files / "train.csv", files / "test.csv", files / "split", 0.2, test_label_col="label")
    assert not (files / "split").exists()  # refused before anything was written


def _outputs(notebook) -> str:
    """Every text a notebook's cells printed or displayed."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    return "\n".join(str(o.get("text") or o.get("data", {}).get("text/plain", "")) for c in nb.cells
                     if c.cell_type == "code" for o in c.get("outputs", []))


def _run_local(tmp_path, *params: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/kernels.py", "run-local", "ttt_train_predict", "--root", str(tmp_path / "run"),
           "-p", "model", "tiny-random", "-p", "max_len", "32", "-p", "batch_size", "8", "-p", "num_devices", "1",
           "-p", "lora_r", "4", "-p", "probe_steps", "3", *params]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_kernel_trains_then_predicts_within_its_deadline_or_refuses_before_training(tmp_path):
    """The notebook rehearsed with run-local (staged and vendored as pushed): the sample's test set with 40
    labelled rows, 20 minutes: it probes, trains as asked on the labelled rows + the training rows, and
    predicts every test row; with 3 seconds it refuses after the probe, and writes no submission."""
    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    test["label"] = ""
    test.loc[:39, "label"] = ["1" if i % 4 == 0 else "0" for i in range(40)]
    test.to_csv(tmp_path / "test.csv", index=False)
    common = ["-p", "test_csv", str(tmp_path / "test.csv"), "-p", "test_label_col", "label", "-p", "sample_submission", "none"]
    r = _run_local(tmp_path, *common, "-p", "time_budget_minutes", "20")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    out = _outputs(next((tmp_path / "run").glob("*/__notebook__.ipynb")))  # the executed notebook, as Kaggle keeps it
    assert re.search(r"test, labelled \(label\): trained first +40\n", out), out[-4000:]
    assert "probe (" in out and ": as asked" in out and "finished with" in out, out[-4000:]
    assert re.search(r"predicted again: the first 64 held-out rows within \S+ of the trained model's", out), out[-4000:]
    sub = next((tmp_path / "run").rglob("submission.csv"))
    assert pd.read_csv(sub, dtype=str)["id"].tolist() == test["id"].tolist()
    from kitlib.checkpoint import READY_FILE, not_ready
    from kitlib.paths import TTT_CHECKPOINT

    (folder,) = [p for p in (tmp_path / "run").rglob(str(TTT_CHECKPOINT)) if p.is_dir()]
    assert (folder / READY_FILE).is_file() and not_ready(folder) is None  # issue 39 item 8: before, never marked passed
    late = _run_local(tmp_path / "late", *common, "-p", "time_budget_minutes", "0.05")
    assert late.returncode != 0
    assert "DeadlineError" in late.stdout + late.stderr and "nothing would train" in late.stdout + late.stderr
    assert not list((tmp_path / "late" / "run").rglob("submission.csv"))
