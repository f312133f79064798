"""The Keras training notebook end to end, offline, via papermill: TF with 2 virtual CPU replicas, JAX with 2 devices.

Small slices through the parameters cell keep each run to a minute or two on 2 cores. Each run
writes into its own temporary work_dir: the .keras model, the curves, metrics.json and the submission.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks" / "keras_xlmr_train.ipynb"
SAMPLE = ROOT / "data" / "jigsaw-sample"
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_notebook_end_to_end(backend, tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    params = dict(
        backend=backend, virtual_replicas=2, train_limit=128, valid_limit=96, epochs=2, batch_per_replica=8,
        max_len=32, work_dir=str(tmp_path), cache_dir=str(ROOT / ".cache"),
    )
    papermill.execute_notebook(
        str(NB), str(tmp_path / "out.ipynb"), parameters=params, cwd=str(ROOT / "notebooks"), kernel_name="python3",
        progress_bar=False,
    )
    art = tmp_path / "artifacts" / "keras-xlmr"
    m = json.loads((art / "metrics.json").read_text())
    assert (m["backend"], m["accelerator"], m["virtual_replicas"], m["replicas"], m["global_batch"]) == (backend, "cpu", 2, 2, 16)
    assert len(m["epoch_seconds"]) == 2 and len(m["history"]["loss"]) == 2 and "val_auc" in m["history"]
    assert m["train_rows"] == 128 and m["validation_rows"] == 96 and m["test_rows"] == 1000
    assert 0.0 <= m["validation_auc"] <= 1.0
    assert m["predict_compilations"] == {"validation": 1, "test": 0}  # one padded shape for every prediction
    for f in ("model.keras", "curves.png", "config.json", "preprocessor/sentencepiece.bpe.model", "preprocessor/preprocessor.json"):
        assert (art / f).is_file(), f
    assert f"curves saved: {art / 'curves.png'}" in (tmp_path / "out.ipynb").read_text()  # with the ROC curve (kitlib/training/plots.py)
    sub = pd.read_csv(tmp_path / "submission.csv", dtype={"id": str}, keep_default_na=False)
    ss = pd.read_csv(SAMPLE / "sample_submission.csv", dtype={"id": str}, keep_default_na=False)
    assert sub.columns.tolist() == ["id", "toxic"] and sub.id.tolist() == ss.id.tolist()
    assert sub.toxic.between(0, 1).all() and sub.toxic.nunique() > 1
