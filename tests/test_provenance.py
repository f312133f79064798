"""Issue 21.10: a submission replaced by another writer is said, with what was replaced (kitlib.outputs.provenance).

The torch inference notebook (``kitlib.infer.predict``), the Keras notebook (``write_submission``)
and ``python -m kitlib merge`` all write ``submission.csv`` through :func:`kitlib.outputs.merge.merge_shards`,
which records the writer beside it and warns when it replaces another writer's file.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from kitlib.outputs import provenance
from kitlib.__main__ import main
from kitlib.keras.data import write_submission
from kitlib.outputs.merge import merge_shards
from kitlib.outputs.shards import write_shard

IDS = ["007", "NA", "12", "3"]


def _files(tmp_path):
    test, ss = tmp_path / "test.csv", tmp_path / "sample_submission.csv"
    pd.DataFrame({"id": IDS, "content": ["a", "b", "c", "d"]}).to_csv(test, index=False)
    pd.DataFrame({"id": IDS, "toxic": [0.5] * 4}).to_csv(ss, index=False)
    return test, ss


def _torch_side(tmp_path, out, model="artifacts/xlmr-toxic"):
    """What kitlib.infer.predict hands the merge: its shards, and its writer name and model."""
    shards = tmp_path / "shards"
    write_shard(shards, rank=0, world_size=1, num_rows=4, rows=np.arange(4), ids=IDS,
                predictions={"toxic": np.array([0.1, 0.9, 0.2, 0.8], np.float32)}, run_id="torch")
    return merge_shards([shards], out, writer=provenance.INFER, source=f"model {model}")


def test_keras_notebook_replacing_the_torch_submission_says_so(tmp_path):
    test, ss = _files(tmp_path)
    out = tmp_path / "submission.csv"
    with warnings.catch_warnings():
        warnings.simplefilter("error", provenance.SubmissionReplaced)  # the first write replaces nothing
        _torch_side(tmp_path, out)
    record = json.loads(provenance.record_path(out).read_text())
    assert record["writer"] == provenance.INFER and record["rows"] == 4
    with pytest.warns(provenance.SubmissionReplaced, match=r"replaced .*submission.csv \(written by kitlib.infer.predict "
                                                           r"\(the torch inference notebook.*model artifacts/xlmr-toxic at "
                                                           r".*, 4 rows\) with the output of kitlib.keras write_submission"):
        result = write_submission(IDS, np.array([0.3, 0.6, 0.4, 0.7]), out, sample_submission=ss, test=test,
                                  source="model artifacts/keras-xlmr/model.keras")
    assert any("written by kitlib.infer.predict" in n for n in result.notes)
    assert pd.read_csv(out, dtype={"id": str}, keep_default_na=False)["toxic"].tolist() == [0.3, 0.6, 0.4, 0.7]
    assert json.loads(provenance.record_path(out).read_text())["writer"] == provenance.KERAS
    with warnings.catch_warnings():  # the same writer again: a rerun, nothing to say
        warnings.simplefilter("error", provenance.SubmissionReplaced)
        again = write_submission(IDS, np.array([0.3, 0.6, 0.4, 0.5]), out, sample_submission=ss, test=test)
    assert not any("replaced" in n for n in again.notes)


def test_a_file_no_writer_recorded_or_changed_since_is_named(tmp_path):
    out = tmp_path / "submission.csv"
    out.write_text("id,toxic\n007,0.5\n")  # a copy of some other submission
    with pytest.warns(provenance.SubmissionReplaced, match=r"replaced .*submission.csv, which no kit writer recorded \(17 bytes"):
        _torch_side(tmp_path, out)
    out.write_text(out.read_text().replace("0.1", "0.15"))  # edited by hand after the torch notebook wrote it
    with pytest.warns(provenance.SubmissionReplaced, match=r"which changed after it was written by kitlib.infer.predict"):
        _torch_side(tmp_path, out)


def test_a_record_names_its_runs_only_while_its_sha256_is_the_files(tmp_path):
    """Issue 33 item 6: the record's sha256 was compared with the file by the replace note only; the runs
    were read from a stale record, so a file overwritten by hand was tagged with the old file's run."""
    out = tmp_path / "submission.csv"
    out.write_text("id,toxic\n007,0.5\n")
    provenance.record_writer(out, provenance.INFER, source="model x", rows=1, runs=["3f2a9c01be77"])
    assert provenance.read_record(out) == (json.loads(provenance.record_path(out).read_text()), True)
    assert provenance.recorded_runs(out) == ["3f2a9c01be77"]
    out.write_text("id,toxic\n007,0.25\n")  # overwritten by hand; the record beside it is the old file's
    said = []
    record, current = provenance.read_record(out)
    assert record["runs"] == ["3f2a9c01be77"] and current is False
    assert provenance.recorded_runs(out, say=said.append) == []
    assert said == [f"{provenance.record_path(out)} names run(s) 3f2a9c01be77, but {out} changed after that record was "
                    "written (its sha256 differs: replaced by hand or another tool), so no run is named for it"]
    out.unlink()
    assert provenance.read_record(out) == (record, False) and provenance.recorded_runs(out) == []


def test_merge_cli_prints_what_it_replaced(tmp_path, capsys):
    out = tmp_path / "submission.csv"
    _torch_side(tmp_path, out, model="/kaggle/input/xlmr/artifacts/xlmr-toxic")
    with warnings.catch_warnings():
        warnings.simplefilter("error", provenance.SubmissionReplaced)  # printed as a note, not warned twice
        assert main(["merge", str(tmp_path / "shards"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: replaced" in err and "written by kitlib.infer.predict" in err and "/kaggle/input/xlmr/artifacts/xlmr-toxic" in err
    assert json.loads(provenance.record_path(out).read_text())["writer"] == provenance.CLI


def test_blend_replacing_a_notebooks_submission_says_so(tmp_path, capsys):
    from kitlib.outputs.blend import blend

    out = tmp_path / "submission.csv"
    _torch_side(tmp_path, out)
    other = tmp_path / "other.csv"
    pd.DataFrame({"id": IDS, "toxic": [0.2, 0.7, 0.1, 0.9]}).to_csv(other, index=False)
    with pytest.warns(provenance.SubmissionReplaced, match=r"written by kitlib.infer.predict .* with the output of kitlib.outputs.blend"):
        r = blend([out, other], out)  # the notebook's file is an input and the output
    assert "written by kitlib.infer.predict" in r.replaced
    assert json.loads(provenance.record_path(out).read_text())["writer"] == provenance.BLEND
    with pytest.warns(provenance.SubmissionReplaced, match=r"written by kitlib.outputs.blend .* with the output of kitlib.infer"):
        _torch_side(tmp_path, out)
    with warnings.catch_warnings():
        warnings.simplefilter("error", provenance.SubmissionReplaced)  # the CLI prints it as a note
        assert main(["blend", str(out), str(other), "-o", str(out)]) == 0
    assert "note: replaced" in capsys.readouterr().err
