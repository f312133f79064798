"""kitlib.outputs.collapse: a model whose predictions say nothing is refused at the hand-off and never gives a silent submission.

The collapsed model here is the tiny checkpoint with its classifier's output layer zeroed: every
row then gets sigmoid(0) = 0.5, as the collapsed runs of issue 18 gave one value for every row.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE, write_slice
from kitlib.outputs.collapse import CollapsedModelError, check_checkpoint_ready, check_ready, refuses_collapse


def test_check_ready_names_the_figure_and_the_likely_cause():
    rng = np.random.default_rng(0)
    spread_out = rng.uniform(0, 1, 200)
    assert check_ready(0.9, spread_out, lr=3e-5)["problem"] is None
    with pytest.raises(CollapsedModelError, match=r"held-out ROC AUC is 0\.2700, no better than chance.*lr=0\.001"):
        check_ready(0.27, spread_out, lr=1e-3, recipe="standard")
    flat = 0.0429 + rng.normal(0, 7e-7, 200)
    with pytest.raises(CollapsedModelError, match=r"predictions barely vary \(std 7.*e-07.*learning rate too high"):
        check_ready(0.62, flat, lr=1e-3)
    warned = check_ready(0.27, flat, lr=1e-3, recipe="tiny", refuse=False)
    assert warned["problem"].startswith("WARNING: checkpoint not ready") and "not refused" in warned["problem"]


@pytest.fixture(scope="module")
def constant_checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny model with its output layer zeroed: every prediction is exactly 0.5."""
    import torch

    from kitlib.models.model import load_classifier

    tok, model = load_classifier(tiny_checkpoint)
    with torch.no_grad():
        model.classifier.out_proj.weight.zero_()
        model.classifier.out_proj.bias.zero_()
    out = tmp_path_factory.mktemp("constant")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_the_hand_off_rule_refuses_every_recipe_but_the_random_tiny_one():
    assert [refuses_collapse(r) for r in ("tiny", "default", "e5-fast", None)] == [False, True, True, True]
    assert [refuses_collapse(r, random_on_purpose=True) for r in ("tiny", "lora")] == [False, False]  # tiny-random with LoRA
    flat = np.full(50, 0.5)
    assert check_ready(0.5, flat, recipe="tiny", refuse=refuses_collapse("tiny"))["problem"].startswith("WARNING: checkpoint not ready")
    with pytest.raises(CollapsedModelError, match="no better than chance"):
        check_ready(0.5, flat, recipe="default", refuse=refuses_collapse("default"))


def test_hand_off_refuses_a_checkpoint_whose_held_out_predictions_are_constant(constant_checkpoint, tmp_path):
    from kitlib.models.model import load_classifier
    from kitlib.checkpoint import save_checkpoint

    tok, model = load_classifier(constant_checkpoint)
    history = {"epochs": [{"epoch": 1, "valid_auc": 0.5}], "config": {"lr": 1e-3, "recipe": "standard"}}
    out = save_checkpoint(model, tok, tmp_path / "trained", history, [str(i) for i in range(50)], np.full(50, 0.5, np.float32), "toxic")
    with pytest.raises(CollapsedModelError) as e:
        check_checkpoint_ready(out)
    msg = str(e.value)
    assert "ROC AUC is 0.5000" in msg and "barely vary (std 0" in msg and "lr=0.001, recipe 'standard'" in msg


def _predict(checkpoint, tmp_path, collapsed):
    from kitlib.infer import InferJob, predict
    from kitlib.run.runtime import detect_runtime

    test_csv, ss = write_slice(tmp_path / "data", 40)
    job = InferJob(checkpoint=str(checkpoint), test_csv=str(test_csv), shard_dir=str(tmp_path / "shards"),
                   output_csv=str(tmp_path / "submission.csv"), sample_submission=str(ss), batch_size=8, max_len=32,
                   collapsed=collapsed)
    return predict(job, detect_runtime(1, "cpu"))


def test_submission_that_barely_varies_is_written_with_a_loud_warning(constant_checkpoint, tmp_path):
    with pytest.warns(UserWarning, match="the predictions barely vary"):
        result = _predict(constant_checkpoint, tmp_path, "warn")
    (warning,) = [n for n in result.notes if n.startswith("WARNING")]
    assert "std 0" in warning and "chance-level submission" in warning
    assert pd.read_csv(result.output)["toxic"].nunique() == 1


def test_submission_that_barely_varies_is_refused_on_the_competition_data(constant_checkpoint, tmp_path):
    from kitlib.outputs.merge import MergeError

    (tmp_path / "submission.csv").write_text("id,toxic\nold,0.1\n")
    with pytest.raises(MergeError, match=r"predictions barely vary.*nothing was written"):
        _predict(constant_checkpoint, tmp_path, "refuse")
    assert (tmp_path / "submission.csv").read_text() == "id,toxic\nold,0.1\n"  # the old one is left as it was


def test_a_spread_submission_gets_no_warning(sharp_checkpoint, tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _predict(sharp_checkpoint, tmp_path, "refuse")
    assert not [n for n in result.notes if n.startswith("WARNING")]


def test_collapse_policy_warns_only_on_the_bundled_sample_by_content(tmp_path):
    """The sample's test.csv, wherever it lies (a run-local rehearsal copies it under a Kaggle-like
    competition folder), gets a warning; the same file with one row changed, or any other test file,
    gets a refusal."""
    import shutil

    from kitlib.outputs.collapse import policy_for

    comp = tmp_path / "input" / "competitions" / "jigsaw-multilingual-toxic-comment-classification"
    comp.mkdir(parents=True)
    shutil.copy(SAMPLE / "test.csv", comp / "test.csv")
    assert policy_for(comp / "test.csv") == "warn"
    df = pd.read_csv(SAMPLE / "test.csv")
    df.loc[0, "content"] = df.loc[0, "content"] + " x"
    df.to_csv(tmp_path / "test.csv", index=False)
    assert policy_for(tmp_path / "test.csv") == "refuse"
    assert policy_for(tmp_path / "test.csv", random_on_purpose=True) == "warn"  # model="tiny-random", named
    assert policy_for(SAMPLE / "validation.csv") == "refuse"  # a sample file, but not its test set


# issue 27 item 8: one collapse rule for every writer (kitlib.outputs.collapse.check_predictions).
def _flat_submission(path, ids, value=0.5):
    import pandas as pd

    pd.DataFrame({"id": ids, "toxic": np.full(len(ids), value) + np.arange(len(ids)) * 4e-9}).to_csv(path, index=False)
    return path


def _sample_ids():
    import pandas as pd

    return pd.read_csv(SAMPLE / "sample_submission.csv", dtype=str, keep_default_na=False)["id"].tolist()


def test_merge_cli_refuses_a_collapsed_submission_off_the_sample(tmp_path, capsys):
    """`python -m kitlib merge` wrote it (std 4e-6 and less) with exit 0; now refused, exit 2, nothing written."""
    from conftest import write_slice
    from kitlib.__main__ import main

    test, sample = write_slice(tmp_path / "d", 50)  # not the bundled sample by content
    import pandas as pd

    ids = pd.read_csv(sample, dtype=str)["id"].tolist()
    _flat_submission(tmp_path / "shard_0.csv", ids)
    assert main(["merge", str(tmp_path / "shard_0.csv"), "-o", str(tmp_path / "sub.csv"),
                 "--sample-submission", str(sample), "--test", str(test)]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "the predictions barely vary" in err and "nothing was written" in err
    assert not (tmp_path / "sub.csv").exists()
    assert main(["merge", str(tmp_path / "shard_0.csv"), "-o", str(tmp_path / "sub.csv"),
                 "--sample-submission", str(sample), "--collapsed", "warn"]) == 0  # asked for by name


def test_merge_cli_warns_once_on_the_bundled_sample(tmp_path):
    import subprocess
    import sys

    _flat_submission(tmp_path / "shard_0.csv", _sample_ids())
    r = subprocess.run([sys.executable, "-m", "kitlib", "merge", str(tmp_path / "shard_0.csv"), "-o", str(tmp_path / "sub.csv"),
                        "--sample-submission", str(SAMPLE / "sample_submission.csv")], capture_output=True, text=True,
                       timeout=120, cwd=SAMPLE.parents[1])
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert err.count("the predictions barely vary") == 1, err  # was printed twice (a note and a Python warning)
    assert "note: WARNING: " in err and (tmp_path / "sub.csv").is_file()


def test_blend_refuses_a_collapsed_blend_off_the_sample(tmp_path, capsys):
    """`blend` wrote one without a word."""
    from kitlib.__main__ import main
    from kitlib.outputs.blend import BlendError, blend

    ids = [f"r{i}" for i in range(40)]
    a, b = _flat_submission(tmp_path / "a.csv", ids, 0.4), _flat_submission(tmp_path / "b.csv", ids[::-1], 0.6)
    with pytest.raises(BlendError, match=r"the predictions barely vary.*nothing was written"):
        blend([a, b], tmp_path / "s.csv")
    assert not (tmp_path / "s.csv").exists()
    sa, sb = _flat_submission(tmp_path / "sa.csv", _sample_ids(), 0.4), _flat_submission(tmp_path / "sb.csv", _sample_ids(), 0.6)
    assert main(["blend", str(sa), str(sb), "-o", str(tmp_path / "s.csv"),
                 "--sample-submission", str(SAMPLE / "sample_submission.csv")]) == 0
    err = capsys.readouterr().err
    assert err.count("the predictions barely vary") == 1 and "note: WARNING: " in err


def test_policy_for_reads_the_sample_submission_too(tmp_path):
    from kitlib.outputs.collapse import check_predictions, policy_for

    assert policy_for(None, SAMPLE / "sample_submission.csv") == "warn"
    assert policy_for() == "refuse"
    with pytest.raises(CollapsedModelError):
        check_predictions({"toxic": np.full(10, 0.5)}, "out.csv", data_files=(tmp_path / "nothing.csv",))
    assert check_predictions({"toxic": np.linspace(0, 1, 10)}, "out.csv") is None
