"""A sharded LoRA run through the kit's other surfaces (issue 40 item 6, kitlib.keras.sharded_run): its identity (the
mesh and the LoRA settings among it), a cut-off run continued exactly, the trained folder's ready mark and runs-table
row, ``adapter="auto"`` and publish finding it, and its submission blended and cascaded with an encoder's by run id.

The checks that need no JAX run here; the training runs once in a subprocess (tests/support/keras_sharded_run_worker.py:
8 virtual JAX CPU devices, KERAS_BACKEND=jax) and the tests read what it wrote.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.child_process import run_jax_worker

from kitlib.checkpoint import HISTORY_FILE, MODEL_SETTINGS, READY_FILE, not_ready
from kitlib.keras import sharded_run
from kitlib.keras.sharded_run import ShardedJob, byte_encode, find_adapter, find_state, parse_mesh, run_settings, step_rows

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "keras_sharded_run_worker.py"
SAMPLE = ROOT / "data" / "jigsaw-sample"


def job(out: Path, **kw) -> ShardedJob:
    """The worker's job (its folder under ``out``), with ``kw`` changed."""
    fields = dict(model="tiny-random", mesh=(2, 4), lora_rank=2, max_len=16, batch_size=8, steps=6, lr=1e-2, width="fp32",
                  out_dir=str(out / "cut"), train_csv=str(SAMPLE / "train.csv"), valid_csv=str(SAMPLE / "validation.csv"),
                  train_limit=96, valid_limit=32, save_every=2)
    return ShardedJob(**{**fields, **kw})


def test_mesh_bytes_and_rows():
    assert parse_mesh("2x4") == (2, 4) and parse_mesh((1, 8)) == (1, 8)
    with pytest.raises(ValueError, match="mesh='2-4': write BATCHxMODEL chips"):
        parse_mesh("2-4")
    ids, mask = byte_encode(["ab", "", "é"], 3)
    assert ids.tolist() == [[101, 102, 0], [36, 0, 0], [199, 173, 0]] and mask.sum(axis=1).tolist() == [2, 1, 2]
    # the rows of steps 0..11 with 8 rows a step over 24 rows: each pass is a permutation, passes differ, fixed by the seed
    rows = np.concatenate([step_rows(24, 8, s, 0) for s in range(12)]).reshape(4, 24)
    assert all(sorted(r) == list(range(24)) for r in rows) and (rows[0] != rows[1]).any()
    assert (step_rows(24, 8, 7, 0) == rows[2, 8:16]).all() and (step_rows(24, 8, 7, 1) != rows[2, 8:16]).any()


def test_a_job_is_refused_naming_each_bad_parameter(tmp_path):
    with pytest.raises(ValueError) as e:
        job(tmp_path, lora_rank=0, width="int8", lr=0.0)
    assert str(e.value) == "lora_rank=0 must be >= 1; width='int8': one of fp32, bf16, fp16; lr=0.0 must be > 0"
    with pytest.raises(ValueError, match="batch_size=7 must be a positive multiple of the mesh's 2 batch chips"):
        job(tmp_path, batch_size=7)
    assert job(tmp_path, steps=0).total_steps(96) == 12 and job(tmp_path).total_steps(96) == 6


def test_the_mesh_and_lora_settings_are_the_run_s_identity(tmp_path):
    settings = run_settings(job(tmp_path), sharded_run.tiny_base(3), 96)
    made = settings.model_settings
    assert tuple(made) == MODEL_SETTINGS
    assert (made["kind"], made["lora_r"], made["lora_targets"], made["weights"], made["mesh"]) == (
        "keras-sharded-decoder", 2, ["query", "value"], "fp32", [2, 4])
    assert (settings.world_size, settings.batch_size, settings.steps_per_epoch) == (2, 4, 6)
    other = run_settings(job(tmp_path), sharded_run.tiny_base(4), 96)
    assert other.model_print != settings.model_print and other.model == "random qwen3 seed 4"


def test_auto_on_other_data_refuses_naming_what_to_attach(tmp_path):
    changed = tmp_path / "test.csv"
    changed.write_text((SAMPLE / "test.csv").read_text() + "999999,one more row,en\n")
    with pytest.raises(FileNotFoundError, match=r"model='auto' found no decoder to shard: .*not the bundled sample.* "
                                                r"Attach one \(kernel-metadata model_sources"):
        sharded_run.resolve_base("auto", data_files=[SAMPLE / "train.csv", changed], cache_dir=tmp_path,
                                 search_dir=tmp_path / "input")
    base, encode = sharded_run.resolve_base("auto", data_files=[SAMPLE / "test.csv"], cache_dir=tmp_path)
    assert base.name == "tiny random qwen3" and encode is byte_encode
    with pytest.raises(ValueError, match="model='qwen3_14b_en': give 'auto', 'tiny-random', 'smollm2-135m' or a transformers"):
        sharded_run.resolve_base("qwen3_14b_en", data_files=[], cache_dir=tmp_path)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded-run")
    return out, run_jax_worker(WORKER, out, "sharded run")


@pytest.mark.slow
def test_a_cut_off_run_continues_exactly(run):
    _, r = run
    assert r["cut"] == {"finished": False, "steps": 4, "stopped": "stop_after=4",
                        "state": {"epoch": 0, "batch": 4, "global_step": 4}}
    assert r["continued"]["run_id"] == r["continued"]["cut_run_id"]  # one run, continued: one record
    assert [x["from_step"] for x in r["continued"]["resumed"]] == [4]
    assert np.allclose(r["continued"]["losses"], r["uncut"]["losses"], atol=1e-6)  # the same rows, Adam's state kept
    assert r["uncut"]["losses"][-1] != r["uncut"]["losses"][0] and r["max_weight_gap"] < 1e-6


@pytest.mark.slow
def test_another_mesh_rank_or_base_does_not_continue_the_state(run, tmp_path):
    out, _ = run
    state = tmp_path / "cut.state"
    shutil.copytree(out / "cut.state", state)
    run_json = json.loads((state / "run.json").read_text())
    run_json["finished"] = False  # as it was when cut off
    (state / "run.json").write_text(json.dumps(run_json))
    base = sharded_run.tiny_base(3)
    same = job(tmp_path, steps=8)
    assert find_state(same, run_settings(same, base, 96), log=None)["position"]["global_step"] == 6
    for change, named in (({"mesh": (1, 8)}, "mesh [2, 4]; this one makes it with [1, 8]"),
                          ({"lora_rank": 4}, "lora_r 2; this one makes it with 4"),
                          ({"width": "bf16"}, "weights 'fp32'; this one makes it with 'bf16'")):
        other = job(tmp_path, steps=8, **change)
        with pytest.raises(ValueError, match=rf"cut.state: that run made its model with {re.escape(named)}.*or delete "):
            find_state(other, run_settings(other, base, 96), log=None)
    with pytest.raises(ValueError, match="that run started from random qwen3 seed 3"):
        find_state(same, run_settings(same, sharded_run.tiny_base(5), 96), log=None)
    with pytest.raises(ValueError, match="already trained 6 steps and steps=6 counts the whole run"):
        find_state(job(tmp_path), run_settings(job(tmp_path), base, 96), log=None)


@pytest.mark.slow
def test_the_trained_folder_is_ready_recorded_and_found(run, tmp_path):
    from kitlib.training.runs import read_runs

    out, r = run
    folder = out / "cut"
    history = json.loads((folder / HISTORY_FILE).read_text())
    assert r["not_ready"] is None and json.loads((folder / READY_FILE).read_text())["run_id"] == history["run_id"]
    assert r["handoff"]["reload"]["gap"] <= r["handoff"]["reload"]["tolerance"] and r["handoff"]["reload"]["rows"] == 32
    assert history["model_settings"]["mesh"] == [2, 4] and history["finished"] and len(history["epochs"]) == 1
    row = next(x for x in read_runs(r["table"]) if x["run_id"] == history["run_id"])
    assert (row["status"], row["recipe"], row["world_size"], json.loads(row["tags"])["mesh"]) == (
        "finished", "sharded-lora", "2", "2x4")
    assert float(row["valid_auc"]) == pytest.approx(history["epochs"][0]["valid_auc"])
    # adapter="auto": the attached output under /kaggle/input, an unfinished copy skipped
    inputs = tmp_path / "input"
    shutil.copytree(folder, inputs / "a" / "keras-sharded-lora")
    unfinished = inputs / "b" / "keras-sharded-lora"
    shutil.copytree(folder, unfinished)
    (unfinished / HISTORY_FILE).write_text(json.dumps({**history, "finished": False}))
    os.utime(unfinished / "kitlib-keras-adapter.json")
    assert find_adapter("auto", trained_dir=tmp_path / "none", search_dir=inputs) == inputs / "a" / "keras-sharded-lora"
    with pytest.raises(ValueError, match="is not ready: its run did not finish"):
        find_adapter(str(unfinished))
    assert not_ready(unfinished)[0] == "unfinished"


@pytest.mark.slow
def test_publish_takes_the_ready_sharded_folder_only(run, tmp_path):
    """kaggle_kit publish (the push environment's, not the Kaggle image's) takes the folder and refuses an unfinished copy."""
    from kaggle_kit.publish import PublishError, _checkpoint_folder

    folder = run[0] / "cut"
    assert _checkpoint_folder(str(folder), None, tmp_path)[0] == folder
    unfinished = tmp_path / "unfinished"
    shutil.copytree(folder, unfinished)
    history = json.loads((folder / HISTORY_FILE).read_text())
    (unfinished / HISTORY_FILE).write_text(json.dumps({**history, "finished": False}))
    with pytest.raises(PublishError, match="is not ready to publish: its run did not finish"):
        _checkpoint_folder(str(unfinished), None, tmp_path)
    shutil.rmtree(unfinished)
    unfinished.mkdir()
    (unfinished / "notes.txt").write_text("no record")
    with pytest.raises(PublishError, match="not a checkpoint folder \\(no config.json, nor a sharded Keras run's"):
        _checkpoint_folder(str(unfinished), None, tmp_path)


def _encoder_submission(tmp_path: Path, ids: list[str], run_id: str) -> Path:
    """An encoder run's submission as the kit writes one (a shard merged, naming its run) and its runs-table row."""
    from kitlib.outputs.merge import merge_shards
    from kitlib.outputs.shards import write_shard
    from kitlib.training.runs import append_run

    probs = np.random.default_rng(0).random(len(ids))
    write_shard(tmp_path / "enc" / "shards", rank=0, world_size=1, num_rows=len(ids), rows=np.arange(len(ids)),
                ids=ids[::-1], predictions={"toxic": probs}, run_id="enc-predict")
    append_run(tmp_path / "enc" / "runs.csv", {"run_id": run_id, "status": "finished", "recipe": "e5"})
    return merge_shards([tmp_path / "enc" / "shards"], tmp_path / "enc" / "submission.csv", runs=[run_id]).output


@pytest.mark.slow
def test_its_submission_blends_and_cascades_with_an_encoder_s_by_run_id(run, tmp_path):
    from kitlib.outputs import provenance
    from kitlib.outputs.blend import blend
    from kitlib.outputs.cascade import cascade
    from kitlib.training.runs import find_runs

    out, r = run
    sharded_csv = Path(r["submission"])
    sharded_run_id = json.loads((out / "cut" / HISTORY_FILE).read_text())["run_id"]
    assert provenance.recorded_runs(sharded_csv) == [sharded_run_id]
    sub = pd.read_csv(sharded_csv, dtype={"id": str})
    encoder_csv = _encoder_submission(tmp_path, sub["id"].tolist(), "e5e5e5e5e5e5")
    blended = blend([sharded_csv, encoder_csv], tmp_path / "blend.csv", rank=True)
    cascaded = cascade(encoder_csv, sharded_csv, tmp_path / "cascade.csv", fraction=0.25)
    for result in (blended, cascaded):
        assert result.num_rows == 40
        assert sorted(provenance.recorded_runs(result.output)) == sorted([sharded_run_id, "e5e5e5e5e5e5"])
    found = find_runs([sharded_run_id, "e5e5e5e5e5e5"], [out, tmp_path / "enc"])
    assert found[sharded_run_id][1]["recipe"] == "sharded-lora" and found["e5e5e5e5e5e5"][1]["recipe"] == "e5"
    enc = pd.read_csv(encoder_csv, dtype={"id": str}).set_index("id")["toxic"]
    got = pd.read_csv(tmp_path / "cascade.csv", dtype={"id": str}).set_index("id")["toxic"]
    replaced = got.index[(got - enc.loc[got.index]).abs() > 1e-12]
    assert len(replaced) == 10  # a quarter of 40 rows came from the sharded run, matched by id
    assert np.allclose(got.loc[replaced], sub.set_index("id")["toxic"].loc[replaced])


def _notebook(tmp_path: Path, **params):
    """Execute notebooks/keras_sharded_lora.ipynb with papermill (a fresh kernel: JAX starts with 8 virtual devices)."""
    import papermill as pm

    env = {k: os.environ.pop(k) for k in ("KERAS_BACKEND", "XLA_FLAGS") if k in os.environ}
    try:
        pm.execute_notebook(str(ROOT / "notebooks" / "keras_sharded_lora.ipynb"), str(tmp_path / "out.ipynb"),
                            parameters={"work_dir": str(tmp_path), "cache_dir": str(tmp_path / "cache"), **params},
                            cwd=str(ROOT / "notebooks"), kernel_name="python3", progress_bar=False)
    finally:
        os.environ.update(env)
    cells = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))


@pytest.mark.slow
def test_the_notebook_trains_hands_off_and_submits_on_the_sample(tmp_path):
    text = _notebook(tmp_path, steps=4, max_len=32, train_limit=200, valid_limit=64, save_every=2)
    assert "mesh (2, 4): 2 x 4 = 8 chips" in text and "model='auto': no decoder attached" in text
    folder = tmp_path / "artifacts" / "keras-sharded-lora"
    history = json.loads((folder / HISTORY_FILE).read_text())
    assert not_ready(folder) is None and history["model_settings"]["mesh"] == [2, 4] and len(history["step_loss"]) == 4
    sub = pd.read_csv(tmp_path / "submission.csv", dtype={"id": str}, keep_default_na=False)
    sample = pd.read_csv(SAMPLE / "sample_submission.csv", dtype={"id": str}, keep_default_na=False)
    assert sub.columns.tolist() == ["id", "toxic"] and sub["id"].tolist() == sample["id"].tolist()
    assert sub["toxic"].between(0, 1).all() and sub["toxic"].nunique() > 1
    from kitlib.outputs import provenance

    assert provenance.recorded_runs(tmp_path / "submission.csv") == [history["run_id"]]


@pytest.mark.slow
def test_the_notebook_on_other_data_without_a_decoder_refuses_naming_what_to_attach(tmp_path):
    import papermill as pm

    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data)
    (data / "test.csv").write_text((SAMPLE / "test.csv").read_text() + "999999,one more row,en\n")
    with pytest.raises(pm.PapermillExecutionError, match=r"model='auto' found no decoder to shard"):
        _notebook(tmp_path, data_dir=str(data))
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / "submission.csv").exists()
