"""Where the notebooks' ``model="auto"`` looks, and its refusal to use a random model on real data.

On Kaggle the inference kernel's working folder is empty: the training kernel's output arrives
under ``/kaggle/input/<its slug>/`` (attached through ``kernel_sources``), and pretrained models
under ``/kaggle/input/<model>/...``. ``KAGGLE_INPUT_DIR`` stands in for ``/kaggle/input`` here.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import papermill as pm
import pytest

from conftest import ROOT, SAMPLE
from kitlib import paths
from kitlib.checkpoint import HISTORY_FILE
from kitlib.models.model import resolve_checkpoint


def _checkpoint(folder: Path, trained: bool) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    if trained:
        (folder / HISTORY_FILE).write_text("{}")
    return folder


@pytest.fixture
def kaggle_input(tmp_path, monkeypatch):
    """A /kaggle/input with the competition's files (named as Kaggle names them)."""
    root = tmp_path / "input"
    comp = root / "competitions" / paths.COMPETITION
    comp.mkdir(parents=True)
    for name in ("test.csv", "sample_submission.csv", "validation.csv"):
        shutil.copy(SAMPLE / name, comp / name)
    shutil.copy(SAMPLE / "train.csv", comp / "jigsaw-toxic-comment-train.csv")
    monkeypatch.setenv(paths.INPUT_ENV, str(root))
    return root, comp


def test_auto_finds_an_attached_training_kernel_output(kaggle_input, tmp_path):
    root, comp = kaggle_input
    _checkpoint(root / "some-pretrained-model" / "transformers" / "default" / "1", trained=False)
    attached = _checkpoint(root / "xlmr-train-kernel" / "artifacts" / "xlmr-toxic", trained=True)
    assert paths.is_competition_data(comp)
    got = resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "work" / "none",
                             search_dir=root, real_data=True)
    assert got == attached  # the kit-trained checkpoint, not the untrained encoder beside it


def test_auto_refuses_a_random_model_on_real_data(kaggle_input, tmp_path):
    root, comp = kaggle_input
    with pytest.raises(FileNotFoundError, match=r"model='auto' found no checkpoint for inference .*"
                                                r"looked in .*none; .*input.*Attach the training kernel.s output .*kernel_sources.*model=.tiny-random."):
        resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "work" / "none",
                           search_dir=root, real_data=True)
    with pytest.raises(FileNotFoundError, match=r"for training .*Attach a pretrained checkpoint"):
        resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "cache", search_dir=root, real_data=True,
                           purpose="training")
    assert not (tmp_path / "cache").exists()  # no random model was built


def test_training_auto_prefers_an_attached_xlm_roberta(kaggle_input, tmp_path):
    root, comp = kaggle_input
    _checkpoint(root / "bert-base" / "model", trained=False)
    xlmr = _checkpoint(root / "xlm-roberta-base" / "transformers" / "base" / "1", trained=False)
    got = resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "c", search_dir=root, real_data=True,
                             purpose="training")
    assert got == xlmr


def test_off_kaggle_auto_still_builds_the_offline_model(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.INPUT_ENV, str(tmp_path / "no-input"))
    assert not paths.is_competition_data(SAMPLE)
    got = resolve_checkpoint("auto", data_dir=SAMPLE, cache_dir=tmp_path / "cache", search_dir=tmp_path / "no-input")
    assert (got / "config.json").is_file() and got.parent == tmp_path / "cache"


def test_the_competitions_training_file_name(kaggle_input):
    _, comp = kaggle_input
    assert paths.train_file(comp).name == "jigsaw-toxic-comment-train.csv"
    assert paths.train_file(SAMPLE).name == "train.csv"
    with pytest.raises(FileNotFoundError, match="no training file .* Set train_csv"):
        paths.train_file(comp.parent)


@pytest.mark.slow
def test_inference_notebook_pushed_as_is_refuses_on_competition_data(kaggle_input, tmp_path, monkeypatch):
    """The notebook, run as Kaggle runs it (competition attached, empty working folder, no
    checkpoint attached), stops before predicting and writes no submission."""
    root, _ = kaggle_input
    work = tmp_path / "working"
    work.mkdir()
    monkeypatch.setenv(paths.WORKING_ENV, str(work))
    with pytest.raises(pm.PapermillExecutionError, match="found no checkpoint for inference"):
        pm.execute_notebook(str(ROOT / "notebooks" / "xla_multicore_inference.ipynb"), str(tmp_path / "out.ipynb"),
                            cwd=str(ROOT / "notebooks"), kernel_name="python3", progress_bar=False)
    assert not (work / "submission.csv").exists()


# --- issue 21.11: "auto" uses the random model only on the bundled sample, recognised by content ---


def test_sample_fingerprints_are_the_bundled_files():
    from kitlib import sample

    source = (SAMPLE / "SOURCE.md").read_text()
    for name, (size, digest) in sample.FINGERPRINTS.items():
        assert sample.fingerprint(SAMPLE / name) == (size, digest), name
        assert f"| {name} |" in source and f"| {size:,} | {digest} |" in source  # SOURCE.md's table says the same
    assert sample.not_sample(sample.data_files(SAMPLE)) == []


def test_auto_refuses_a_random_model_off_kaggle_on_data_that_is_not_the_sample(tmp_path, monkeypatch):
    """Colab, or the competition files in a folder of one's own: no Kaggle mount, "auto" finds no
    checkpoint. The sample with a few rows changed is not the sample: refused, naming the file and
    what to pass, and no random model is built."""
    monkeypatch.setenv(paths.INPUT_ENV, str(tmp_path / "no-input"))
    data = tmp_path / "my-data"
    shutil.copytree(SAMPLE, data)
    test = pd.read_csv(data / "test.csv", dtype=str, keep_default_na=False)
    test.loc[3, "content"] = "a comment of the user's own data"  # one row changed
    test.to_csv(data / "test.csv", index=False)
    assert not paths.is_competition_data(data)
    for purpose in ("inference", "training"):
        with pytest.raises(FileNotFoundError, match=rf"model='auto' found no checkpoint for {purpose} on data that is not "
                                                    rf"the bundled sample \(.*my-data/test.csv is not one of its files\).*"
                                                    r"Pass model=.*model='tiny-random'"):
            resolve_checkpoint("auto", data_dir=data, cache_dir=tmp_path / "cache", trained_dir=tmp_path / "none",
                               search_dir=tmp_path / "no-input", purpose=purpose)
    # the bundled sample's folder, but a test file from elsewhere (the notebook's test_csv): refused too
    with pytest.raises(FileNotFoundError, match=r"my-data/test.csv is not one of its files"):
        resolve_checkpoint("auto", data_dir=SAMPLE, cache_dir=tmp_path / "cache", search_dir=tmp_path / "no-input",
                           data_files=[data / "test.csv"])
    assert not (tmp_path / "cache").exists()  # no random model was built


def test_a_copy_of_the_sample_anywhere_is_the_sample(tmp_path, monkeypatch, tiny_checkpoint):
    """Recognised by content, not by path: a copy (also with CRLF line ends) gets the offline model."""
    from kitlib import sample

    monkeypatch.setenv(paths.INPUT_ENV, str(tmp_path / "no-input"))
    copy = tmp_path / "colab" / "jigsaw"
    shutil.copytree(SAMPLE, copy)
    crlf = tmp_path / "crlf-test.csv"
    crlf.write_bytes((SAMPLE / "test.csv").read_bytes().replace(b"\n", b"\r\n"))
    assert sample.sample_file_name(crlf) == "test.csv"
    got = resolve_checkpoint("auto", data_dir=copy, cache_dir=tiny_checkpoint.parent, search_dir=tmp_path / "no-input",
                             data_files=[copy / "test.csv"])
    assert got == tiny_checkpoint  # the same offline model the bundled sample gives
    (copy / "submission.csv").write_text("id,toxic\n")  # a file the run does not read changes nothing
    assert resolve_checkpoint("auto", data_dir=copy, cache_dir=tiny_checkpoint.parent, search_dir=tmp_path / "no-input") == got


def _refused_by_the_handoff(folder: Path) -> Path:
    """``folder`` as the training notebook leaves it when its hand-off refuses a collapsed model."""
    from kitlib.outputs.collapse import CollapsedModelError, check_ready
    from kitlib.training.handoff import refusal_marked

    with pytest.raises(CollapsedModelError) as e:
        with refusal_marked(folder):
            check_ready(0.27, [0.0429] * 100, lr=1e-3)
    assert f"The folder is marked refused ({folder / 'handoff_refused.json'}): model='auto' will not pick it" in str(e.value)
    assert "delete handoff_refused.json to use it anyway" in str(e.value)
    return folder


def test_a_checkpoint_the_handoff_refused_is_never_picked_by_auto(kaggle_input, tmp_path, capsys):
    """Issue 27.11: a collapsed checkpoint the hand-off refused stayed in output_dir, where model="auto"
    found it later (the working folder first, then every folder under /kaggle/input)."""
    from kitlib.checkpoint import refusal

    root, comp = kaggle_input
    work = _refused_by_the_handoff(_checkpoint(tmp_path / "work" / "xlmr-toxic", trained=True))
    assert refusal(work).startswith("CollapsedModelError: checkpoint not ready: its held-out ROC AUC is 0.2700")
    attached = _refused_by_the_handoff(_checkpoint(root / "xlmr-train-kernel" / "artifacts" / "xlmr-toxic", trained=True))
    with pytest.raises(FileNotFoundError, match=r"looked in .*xlmr-toxic \(skipped: the hand-off refused it; CollapsedModelError"):
        resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "cache", trained_dir=work, search_dir=root,
                           real_data=True)
    assert f"note: model='auto' skips {work}: the training notebook's hand-off refused it" in capsys.readouterr().out
    good = _checkpoint(root / "older-kernel" / "artifacts" / "xlmr-toxic", trained=True)
    os.utime(good / "config.json", (1e9, 1e9))  # older than the refused one, which auto would take first
    assert resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "cache", trained_dir=work, search_dir=root,
                              real_data=True) == good  # the one that was not refused, though the refused one is newer
    assert attached.exists()  # marked, not deleted: what was trained is still there to look at


def test_a_refused_checkpoint_named_for_inference_is_refused_saying_why(tmp_path):
    folder = _refused_by_the_handoff(_checkpoint(tmp_path / "xlmr-toxic", trained=True))
    with pytest.raises(ValueError, match=r"the training notebook's hand-off refused this checkpoint \(CollapsedModelError: "
                                         r"checkpoint not ready.*delete .*handoff_refused.json to predict with it anyway"):
        resolve_checkpoint(str(folder), data_dir=SAMPLE, cache_dir=tmp_path / "cache")
    assert resolve_checkpoint(str(folder), data_dir=SAMPLE, cache_dir=tmp_path / "cache", purpose="training") == folder


def _cut_off(folder: Path) -> Path:
    """A kit-trained folder as a run killed after its first kept epoch leaves it (before the held-out scoring and
    the hand-off): its history says the run did not finish."""
    _checkpoint(folder, trained=True)
    (folder / HISTORY_FILE).write_text(json.dumps({"run_id": "r1", "epochs": [{"epoch": 1, "valid_auc": 0.41}],
                                                   "config": {"epochs": 2}, "finished": False, "stopped": None}))
    return folder


def test_a_checkpoint_whose_run_did_not_finish_is_not_used_as_ready(kaggle_input, tmp_path, capsys):
    """Issue 33 item 3: a run killed after its first kept epoch, before its hand-off ran, was picked by
    model="auto", predicted with and published with no word. Auto skips it (saying so), a run that names it
    is refused, and so is publishing it; once finished, it is used only with a warning until its hand-off
    passes (handoff_passed.json), then silently."""
    from kitlib.checkpoint import not_ready
    from kitlib.models.model import find_checkpoints
    from kitlib.training.handoff import mark_passed

    try:  # the push tool (kaggle_kit) needs its own packages (python-slugify): make test has them, the Kaggle twin not
        from kaggle_kit.publish import PublishError, check_ready
    except ImportError:
        PublishError, check_ready = None, None
    root, comp = kaggle_input
    work = _cut_off(tmp_path / "work" / "xlmr-toxic")
    attached = _cut_off(root / "xlmr-train-kernel" / "artifacts" / "xlmr-toxic")
    why = f"its run did not finish (cut off, 1 of 2 epoch(s) done); its state is in {work}.state: train again"
    assert not_ready(work)[0] == "unfinished" and not_ready(work)[1].startswith(why)
    with pytest.raises(FileNotFoundError, match=r"looked in .*xlmr-toxic \(skipped: its run did not finish \(cut off"):
        resolve_checkpoint("auto", data_dir=comp, cache_dir=tmp_path / "cache", trained_dir=work, search_dir=root,
                           real_data=True)
    out = capsys.readouterr().out
    assert f"note: model='auto' skips {work}: {why}" in out and f"note: skipping {attached}: its run did not finish" in out
    assert find_checkpoints(root, trained=True) == []
    with pytest.raises(ValueError, match=rf"model='{work}': {work} is not ready: its run did not finish \(cut off, 1 of 2"):
        resolve_checkpoint(str(work), data_dir=SAMPLE, cache_dir=tmp_path / "cache")
    if check_ready:
        with pytest.raises(PublishError, match=r"the folder: .*xlmr-toxic is not ready to publish: its run did not finish"):
            check_ready(work, "the folder")
    history = json.loads((work / HISTORY_FILE).read_text())
    (work / HISTORY_FILE).write_text(json.dumps({**history, "finished": True}))  # the run finished; no hand-off yet
    assert resolve_checkpoint(str(work), data_dir=SAMPLE, cache_dir=tmp_path / "cache") == work
    assert (f"WARNING: predicting with {work}, but its hand-off has not passed (no handoff_passed.json"
            in capsys.readouterr().out)
    if check_ready:
        with pytest.raises(PublishError, match=r"not ready to publish: its hand-off has not passed"):
            check_ready(work, "the folder")
    mark_passed(work, {"reload": {"gap": 0.0}})
    assert not_ready(work) is None and resolve_checkpoint(str(work), data_dir=SAMPLE, cache_dir=tmp_path / "cache") == work
    assert "WARNING" not in capsys.readouterr().out
    if check_ready:
        check_ready(work, "the folder")  # publishable
    (work / HISTORY_FILE).write_text(json.dumps({**history, "finished": True, "epochs": history["epochs"] * 2}))
    assert not_ready(work) == ("unchecked", "its hand-off passed run r1 at 1 epoch(s); the folder now holds run r1 at 2: "
                                            "run the training notebook's hand-off again")


def test_a_cut_off_runs_folder_is_still_found_to_train_from(kaggle_input, tmp_path):
    """A cut-off run's folder attached under /kaggle/input (the previous version's output) is what a training run
    continues from: model="auto" for training still finds it; for inference it does not."""
    from kitlib.models.model import find_checkpoints

    root, _ = kaggle_input
    attached = _cut_off(root / "xlmr-train-kernel" / "artifacts" / "xlmr-toxic")
    assert find_checkpoints(root, trained=False) == [attached] and find_checkpoints(root, trained=True) == []
