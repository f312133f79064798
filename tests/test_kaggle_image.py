"""The three notebooks end to end, as on Kaggle's TPU image: `make test-kaggle-image` runs these in the
image's twin (Python 3.12, torch/torch_xla 2.8, tensorflow-cpu 2.20 + keras-nlp; requirements/kaggle-tpu.txt),
on CPU, on slices of the sample:

* inference on 2 PJRT CPU devices: one row per test row, 2 shards;
* DDP training, one epoch on 2 replicas; its checkpoint is saved;
* Keras on JAX with 2 emulated devices (what the TPU image's jax[tpu] + tensorflow-cpu can run);
* the sharded LoRA notebook on JAX with 8 emulated devices, mesh (2, 4), the tiny random decoder (the image's
  jax and keras-hub; its run's folder ready, its submission one row per sample row).

Marked ``kaggle_image`` and left out of a plain ``pytest`` run (the main suite runs the same notebooks
with other settings); ``pytest -m kaggle_image`` runs them in any environment. The parameters are
the notebooks' documented ones; each is checked against papermill's inspection first, so a renamed
parameter fails here by name instead of being injected unused.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, SAMPLE, write_slice

pytestmark = [pytest.mark.kaggle_image, pytest.mark.slow]
NOTEBOOKS = ROOT / "notebooks"


def run_notebook(name: str, tmp_path: Path, **params) -> str:
    """Execute notebooks/<name>.ipynb with papermill; returns the text of every code cell's output."""
    import papermill as pm

    known = pm.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    unknown = sorted(set(params) - set(known))
    assert not unknown, f"{name}: parameters {unknown} are not in its parameters cell (it has {sorted(known)})"
    out = tmp_path / f"{name}.executed.ipynb"
    pm.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(out), parameters=params, cwd=str(NOTEBOOKS),
                        kernel_name="python3", progress_bar=False)
    cells = json.loads(out.read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))


def read_ids(path: Path) -> list[str]:
    return pd.read_csv(path, dtype={"id": str}, keep_default_na=False)["id"].tolist()


def test_inference_notebook_on_two_devices(tmp_path, tiny_checkpoint, monkeypatch):
    work = tmp_path / "working"
    work.mkdir()
    monkeypatch.setenv("KAGGLE_WORKING_DIR", str(work))  # the kernel's output folder: no shards there
    from kitlib.paths import TMP_ENV

    scratch = tmp_path / "tmp"
    monkeypatch.setenv(TMP_ENV, str(scratch))  # the shards go to the scratch folder (kitlib.paths.scratch_dir)
    test_csv, sample_csv = write_slice(tmp_path / "data", 40, start=300)
    out_csv = tmp_path / "submission.csv"
    run_notebook("xla_multicore_inference", tmp_path, model="tiny-random", test_csv=str(test_csv),
                 sample_submission=str(sample_csv), output_csv=str(out_csv), cache_dir=str(tiny_checkpoint.parent),
                 accelerator="xla-cpu", num_devices=2, batch_size=8, max_len=64)
    sub = pd.read_csv(out_csv, dtype={"id": str}, keep_default_na=False)
    assert list(sub.columns) == ["id", "toxic"] and sub["id"].tolist() == read_ids(sample_csv)
    assert sub["toxic"].between(0, 1).all()
    assert not list(work.rglob("*.parquet"))
    shards = sorted(scratch.rglob("*.parquet"))
    from kitlib.outputs.shards import read_shard_info

    infos = [read_shard_info(pq.read_schema(s)) for s in shards]
    assert sorted((i.rank, i.world_size) for i in infos) == [(0, 2), (1, 2)]


def test_ddp_notebook_one_epoch_on_two_replicas(tmp_path, tiny_checkpoint):
    out_dir = tmp_path / "xlmr-toxic"
    run_notebook("xla_ddp_train", tmp_path, model="tiny-random", output_dir=str(out_dir),
                 cache_dir=str(tiny_checkpoint.parent), accelerator="xla-cpu", num_devices=2, pattern="ddp", epochs=1, batch_size=8,
                 max_len=32, train_limit=64, valid_limit=40)
    from kitlib.checkpoint import read_history

    history = read_history(out_dir)
    assert (history["world_size"], history["mode"], history["pattern"], len(history["epochs"])) == (2, "xla-cpu", "ddp", 1)
    assert history["steps_per_epoch"] == 64 // (8 * 2)
    assert 0.0 <= history["epochs"][0]["valid_auc"] <= 1.0
    assert (out_dir / "config.json").is_file() and (out_dir / "tokenizer.json").is_file()


def test_keras_notebook_on_jax_with_two_emulated_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    text = run_notebook("keras_xlmr_train", tmp_path, backend="jax", virtual_replicas=2, epochs=1,
                        batch_per_replica=8, max_len=32, train_limit=64, valid_limit=48, work_dir=str(tmp_path),
                        cache_dir=str(ROOT / ".cache"))
    m = json.loads((tmp_path / "artifacts" / "keras-xlmr" / "metrics.json").read_text())
    assert (m["backend"], m["replicas"], m["global_batch"]) == ("jax", 2, 16)
    assert (m["train_rows"], m["validation_rows"], len(m["epoch_seconds"])) == (64, 48, 1)
    assert 0.0 <= m["validation_auc"] <= 1.0
    sub = pd.read_csv(tmp_path / "submission.csv", dtype={"id": str}, keep_default_na=False)
    assert sub["id"].tolist() == read_ids(SAMPLE / "sample_submission.csv") and sub["toxic"].between(0, 1).all()
    from kitlib import compat

    assert compat.version_report(compat.KERAS_PACKAGES) in text  # the setup cell says what it found


def test_sharded_lora_notebook_on_jax_with_eight_emulated_devices(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    text = run_notebook("keras_sharded_lora", tmp_path, model="tiny-random", mesh="2x4", virtual_devices=8, steps=4, max_len=32,
                        batch_size=8, train_limit=200, valid_limit=64, work_dir=str(tmp_path),
                        cache_dir=str(tmp_path / "cache"))
    assert "keras" in text and "on jax: 8 cpu device(s); width fp32" in text and "mesh (2, 4): 2 x 4 = 8 chips" in text
    from kitlib.checkpoint import not_ready, read_history

    folder = tmp_path / "artifacts" / "keras-sharded-lora"
    history = read_history(folder)
    assert not_ready(folder) is None and history["finished"] and history["model_settings"]["mesh"] == [2, 4]
    sub = pd.read_csv(tmp_path / "submission.csv", dtype={"id": str}, keep_default_na=False)
    assert sub["id"].tolist() == read_ids(SAMPLE / "sample_submission.csv") and sub["toxic"].between(0, 1).all()
    from kitlib import compat

    assert compat.version_report(compat.KERAS_PACKAGES) in text
