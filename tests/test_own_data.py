"""Issue 34 item 1: any binary text-classification competition runs by parameters alone.

A made-up competition of a user's own (tests/support/own_data.py: ``id,text,lang,label``, two
languages, no validation file, an ``id,label`` sample submission), walked through as
docs/own-data.md walks it: train (the torch training notebook, split ``"auto"`` = ``"holdout"``),
predict (the inference notebook, with the sample submission and with ``sample_submission="none"``),
blend the two (``python -m kitlib blend``), submit against the fake Kaggle API.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import papermill as pm
import pytest

from conftest import ROOT
from support.fake_kaggle import FakeKaggle
from support.own_data import write_own_competition
from kitlib.outputs.submission_csv import SubmissionFileError, choose_prediction_column

PY = sys.executable


def _run(notebook: str, out, **parameters) -> str:
    """Execute a repository notebook with papermill; the text of its outputs."""
    pm.execute_notebook(str(ROOT / "notebooks" / f"{notebook}.ipynb"), str(out), cwd=str(ROOT / "notebooks"),
                        kernel_name="python3", parameters=parameters, progress_bar=False)
    cells = json.loads(out.read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))


def test_the_prediction_column_is_the_samples_else_the_trained_label_else_refused(tmp_path):
    """Before: an ``id,label`` sample submission was refused ("set prediction_column", no such parameter),
    and with ``sample_submission="none"`` a ``toxic`` column was written for a ``label`` task, silently."""
    sample = tmp_path / "sample_submission.csv"
    sample.write_text("id,label\na,0.5\n")
    assert choose_prediction_column("", sample, "toxic") == "label"
    assert choose_prediction_column("", None, "label") == "label"
    assert choose_prediction_column("target", sample, "label") == "target"
    with pytest.raises(ValueError, match=r"sample_submission='none': nothing names the prediction column \(label_col names no label\): pass -p prediction_column"):
        choose_prediction_column("", None, None, label_parameter="label_col")
    sample.write_text("id,a,b\nx,0.5,0.5\n")
    with pytest.raises(SubmissionFileError, match=r"has 2 prediction columns \(a, b\); the kit predicts one: pass -p prediction_column"):
        choose_prediction_column("", sample, "label")


def test_a_head_names_the_label_it_was_trained_on(tmp_path, tiny_checkpoint):
    from kitlib.models.model import trained_label

    assert trained_label(tiny_checkpoint) == "toxic"
    (tmp_path / "config.json").write_text(json.dumps({"id2label": {"0": "LABEL_0", "1": "LABEL_1"}}))
    assert trained_label(tmp_path) is None


@pytest.mark.slow
def test_own_competition_trains_predicts_blends_and_submits_by_parameters_alone(tmp_path, tiny_checkpoint, sharp_checkpoint):
    """Before: ``label_col`` was refused as an unknown parameter ("missing column 'toxic'" without it),
    training needed a validation.csv, and the ``id,label`` sample submission was refused.

    From the widely spread tiny model (conftest's ``sharp_checkpoint``, still random: marked as the tiny
    model, so its head takes the new label), whose predictions vary after one short epoch."""
    import shutil

    from kitlib.models.model import TINY_MARKER

    start = tmp_path / "tiny-sharp"
    shutil.copytree(sharp_checkpoint, start)
    shutil.copy(tiny_checkpoint / TINY_MARKER, start / TINY_MARKER)
    data = write_own_competition(tmp_path / "own")
    ckpt = tmp_path / "artifacts" / "own-model"
    common = dict(data_dir=str(data), cache_dir=str(tmp_path / "cache"), accelerator="cpu", num_devices=1,
                  text_col="text", start_method="fork")
    text = _run("xla_ddp_train", tmp_path / "train.ipynb", model=str(start), recipe="tiny", label_col="label",
                output_dir=str(ckpt), epochs=1, batch_size=16, max_len=32, log_every=5, **common)
    assert "split 'holdout'" in text and "checkpoint ready for the inference notebook" in text
    assert json.loads((ckpt / "config.json").read_text())["id2label"] == {"0": "label"}
    assert list(pd.read_csv(ckpt / "valid_predictions.csv").columns) == ["id", "label"]

    subs = {}
    for name, sample in (("with-sample", ""), ("no-sample", "none")):  # the second: the test set's order, the trained label
        subs[name] = tmp_path / f"{name}.csv"
        text = _run("xla_multicore_inference", tmp_path / f"{name}.ipynb", model=str(ckpt), sample_submission=sample,
                    output_csv=str(subs[name]), shard_dir=str(tmp_path / "shards" / name), batch_size=16, **common)
        assert "into column 'label'" in text
        sub = pd.read_csv(subs[name], dtype={"id": str})
        assert list(sub.columns) == ["id", "label"] and len(sub) == 60 and sub["label"].between(0, 1).all()

    blended = tmp_path / "submission.csv"
    r = subprocess.run([PY, "-m", "kitlib", "blend", str(subs["with-sample"]), str(subs["no-sample"]), "-o", str(blended),
                        "--rank", "--sample-submission", str(data / "sample_submission.csv")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(pd.read_csv(blended).columns) == ["id", "label"]

    truth = pd.read_csv(data / "test-labels.csv", dtype={"id": str})
    with FakeKaggle(labels=dict(zip(truth["id"], truth["label"])),
                    data_files={"sample_submission.csv": (data / "sample_submission.csv").read_bytes()}) as fake:
        r = subprocess.run([PY, str(ROOT / "scripts" / "kernels.py"), "submit", str(blended), "--competition", "own-comp",
                            "-m", "own data, tiny model", "--score-poll", "0.05"],
                           env=fake.client_env(tmp_path / "cfg"), cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submission 1000 (submission.csv) scored: public" in r.stdout
