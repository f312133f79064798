"""Where the notebooks' ``model="auto"`` looks, and its refusal to use a random model on real data.

On Kaggle the inference kernel's working folder is empty: the training kernel's output arrives
under ``/kaggle/input/<its slug>/`` (attached through ``kernel_sources``), and pretrained models
under ``/kaggle/input/<model>/...``. ``KAGGLE_INPUT_DIR`` stands in for ``/kaggle/input`` here.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import papermill as pm
import pytest

from conftest import ROOT, SAMPLE
from kitlib import paths
from kitlib.checkpoint import HISTORY_FILE
from kitlib.model import resolve_checkpoint


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
