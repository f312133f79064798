"""Decoder classifiers through the kit's own runs: ``train`` with LoRA and ``predict`` from the adapter checkpoint.

Tiny random Llama, Qwen3 and Gemma2 classifiers (tests/support/tiny_decoders.py) at ``precision="auto"``
on eager CPU (1 replica, and 2 gloo processes) and on xla-cpu (the TPU rehearsal: bf16).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import write_slice
from support.tiny_decoders import FAMILIES, build, labelled_slices
from kitlib.infer import InferJob, predict
from kitlib.models import adapters
from kitlib.run.runtime import detect_runtime
from kitlib.training.handoff import check_reload
from kitlib.training.job import TrainJob
from kitlib.training.train import train

TRAIN_ROWS, VALID_ROWS = 64, 48


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Training and validation slices of the sample's English training rows (both classes in each)."""
    return labelled_slices(tmp_path_factory.mktemp("decoder-data"), TRAIN_ROWS, VALID_ROWS)


# Llama's runs are quick enough for every suite run; Qwen3's and Gemma2's the same runs again (slow)
QUICK = [pytest.param(f, marks=[] if f == "llama" else pytest.mark.slow) for f in FAMILIES]


class Lazy(dict):
    """family -> what ``make(family)`` gives, made at the first ask (a test of one family builds only it)."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, family):
        self[family] = self.make(family)
        return self[family]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> a tiny random classifier folder."""
    root = tmp_path_factory.mktemp("decoders")
    return Lazy(lambda f: build(root / f"{f}-cls", f, False))


def train_lora(folder, data, out, accelerator="cpu", replicas=1, **kw):
    """A LoRA run of ``folder`` (r 4) on the slices, 2 epochs of 8-row batches, at precision auto."""
    job = TrainJob(checkpoint=str(folder), out_dir=str(out), **{
        "train_csv": str(data / "train.csv"), "valid_csv": str(data / "valid.csv"), "epochs": 2, "batch_size": 8,
        "max_len": 48, "lr": 3e-3, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "dropout": 0.0, **kw})
    # xla-cpu: "spawn", as tests/test_train.py: autograd's device queues, sized when this process first ran a
    # backward on the CPU (the other runs here), have no slot for the XLA device a thread replica adds
    return train(job, detect_runtime(replicas, accelerator), "spawn" if accelerator.startswith("xla") else "fork")


def predict_csv(checkpoint, data, out, accelerator="cpu", replicas=1, **kw) -> np.ndarray:
    """``predict`` of the validation rows (as test.csv) at precision auto: the probabilities in the file's order."""
    job = InferJob(checkpoint=str(checkpoint), test_csv=str(data / "test.csv"), shard_dir=str(out / "shards"),
                   output_csv=str(out / "sub.csv"), **{"batch_size": 8, "max_len": 48, "collapsed": "warn", **kw})
    predict(job, detect_runtime(replicas, accelerator))
    sub = pd.read_csv(out / "sub.csv", dtype={"id": str}, keep_default_na=False)
    assert sub["id"].tolist() == pd.read_csv(data / "test.csv", dtype={"id": str})["id"].tolist()
    return sub["toxic"].to_numpy()


def tolerance(width: str | None = None) -> float:
    """How far two runs' probabilities may differ: the kit's own rule for a reload at the precision ``auto`` gives
    here and the weights' ``width`` (:func:`kitlib.run.backends.precision.reload_tolerance`: 1e-4 at fp32, 0.08 at
    bf16, 0.1 at 8 bits). A bf16 CPU (AVX-512 bf16 or AMX) differed by up to 0.035 between the kept epoch's
    predictions and predict()'s; 0.02 failed there. At 8 bits on an fp32 CPU (AMD EPYC) up to 0.069."""
    from kitlib.run.backends.precision import reload_tolerance

    return reload_tolerance(detect_runtime(1, "cpu").backend.resolve_precision("auto").name, width)


@pytest.fixture(scope="module")
def trained(folders, data, tmp_path_factory):
    """family -> (adapter checkpoint, history): one LoRA run each on one eager CPU replica."""
    root = tmp_path_factory.mktemp("trained")
    return Lazy(lambda f: (root / f, train_lora(folders[f], data, root / f)))


@pytest.mark.parametrize("family", QUICK)
def test_lora_trains_small_adapters_that_predict_the_same_through_predict(trained, folders, data, family, tmp_path):
    """Only adapters + head are trained and saved (a small folder naming its base); the loss falls; predict()
    of the adapter checkpoint (base once, adapters on top, merged or not) gives the kept epoch's predictions."""
    out, history = trained[family]
    losses = [e["train_loss"] for e in history["epochs"]]
    assert history["finished"] and losses[-1] < 0.9 * losses[0], losses  # measured: 0.75-1.0 -> 0.58-0.66
    assert adapters.is_adapter(out) and not (out / "model.safetensors").exists()
    weights = (out / "adapter_model.safetensors").stat().st_size
    base = (folders[family] / "model.safetensors").stat().st_size
    print(f"{family}: adapter weights {weights} bytes, base weights {base} bytes; losses {losses}")
    assert weights < base / 4  # measured about 1/10 (r 4 on every Linear of a 2-layer, 32-wide model, and the head)
    record = adapters.read_record(out)
    assert record["kind"] == "decoder" and record["base"] == str(folders[family].resolve())
    assert json.loads((out / "config.json").read_text())["kitlib_kind"] == "decoder"
    kept = pd.read_csv(out / "valid_predictions.csv", dtype={"id": str})["toxic"].to_numpy()
    merged = predict_csv(out, data, tmp_path / "merged")
    kept_apart = predict_csv(out, data, tmp_path / "apart", merge_adapters=False)
    assert kept.std() > 0.02  # a model whose outputs differ per row, so agreement means something
    np.testing.assert_allclose(merged, kept, atol=tolerance())
    np.testing.assert_allclose(kept_apart, kept, atol=tolerance())
    texts = pd.read_csv(data / "valid.csv", keep_default_na=False)["comment_text"].tolist()
    gap = check_reload(out, texts, kept, 48, history["precision"])["gap"]  # the training notebook's hand-off
    assert gap <= tolerance(), gap


def test_adapter_checkpoints_are_found_recorded_and_publishable(trained):
    """model="auto" finds an adapter checkpoint (config.json + history), the runs table records its LoRA
    settings, and kaggle_kit publish's weights check accepts adapter_model.safetensors."""
    from kaggle_kit.publish import check_weights
    from kitlib.models.model import find_checkpoints
    from kitlib.training.runs import read_runs, runs_table

    out, history = trained["llama"]
    assert out in find_checkpoints(out.parent, trained=True)
    row = next(r for r in read_runs(runs_table(out)) if r["run_id"] == history["run_id"])
    params = json.loads(row["params"])
    assert (params["lora_r"], params["lora_targets"], row["recipe"]) == (4, "all-linear", "lora")
    made = history["model_settings"]  # how the run made its model (kitlib.checkpoint.MODEL_SETTINGS): a group compares it
    assert {k: made[k] for k in ("kind", "prompt", "answer_tokens", "lora_r", "lora_alpha", "lora_dropout", "lora_targets")} \
        == {"kind": "decoder", "prompt": "", "answer_tokens": [[], []], "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
            "lora_targets": "all-linear"}
    check_weights(out, "an adapter checkpoint")  # raises PublishError when the folder holds no weights


def test_adapter_checkpoint_refuses_another_base(trained, folders, data, tmp_path):
    out, _ = trained["llama"]
    with pytest.raises(ValueError, match=r"trained on the base .*llama-cls.*not on .*qwen3-cls"):
        predict_csv(out, data, tmp_path, base=str(folders["qwen3"]))


def test_answer_tokens_train_with_lora_and_predict(data, tmp_path):
    """A causal LM asked the default prompt: the answer tokens' logits train (adapters only) and predict."""
    folder = build(tmp_path / "llama-lm", "llama", True)
    history = train_lora(folder, data, tmp_path / "out")
    losses = [e["train_loss"] for e in history["epochs"]]
    assert losses[-1] < losses[0], losses
    assert adapters.read_record(tmp_path / "out")["kind"] == "answer-tokens"
    kept = pd.read_csv(tmp_path / "out" / "valid_predictions.csv", dtype={"id": str})["toxic"].to_numpy()
    np.testing.assert_allclose(predict_csv(tmp_path / "out", data, tmp_path / "p"), kept, atol=tolerance())


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_one_and_two_gloo_replicas_predict_the_same(trained, data, family, tmp_path):
    out, _ = trained[family]
    one = predict_csv(out, data, tmp_path / "one")
    two = predict_csv(out, data, tmp_path / "two", replicas=2)
    np.testing.assert_allclose(two, one, atol=tolerance())


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("accelerator,replicas", [("cpu", 2), ("xla-cpu", 1)])
def test_lora_trains_and_predicts_on_gloo_and_xla_cpu(folders, trained, data, family, accelerator, replicas, tmp_path):
    """2 gloo processes (global batch 16) and xla-cpu (auto: bf16, the TPU's rehearsal): the loss falls and the
    adapter checkpoint predicts there what the run kept."""
    history = train_lora(folders[family], data, tmp_path / "out", accelerator, replicas)
    losses = [e["train_loss"] for e in history["epochs"]]
    assert history["world_size"] == replicas and losses[-1] < losses[0], losses
    kept = pd.read_csv(tmp_path / "out" / "valid_predictions.csv", dtype={"id": str})["toxic"].to_numpy()
    got = predict_csv(tmp_path / "out", data, tmp_path / "p", accelerator, replicas)
    bf16 = detect_runtime(replicas, accelerator).backend.precision("auto") != "fp32"
    # bf16 (xla-cpu): training kept bf16 base weights with the adapters beside them, inference merges them into
    # the float32 weights and computes under bf16 autocast: measured up to 0.050 apart (of a 0.06-0.93 spread)
    np.testing.assert_allclose(got, kept, atol=8e-2 if bf16 else 1e-5)
    assert np.corrcoef(got, kept)[0, 1] > 0.98


@pytest.mark.slow
def test_lora_run_cut_off_continues_with_its_adapters_optimizer_state(folders, data, tmp_path):
    """A LoRA run cut off by its time budget after its first step, run again: it continues exactly (the
    adapters' and head's weights and AdamW moments restored) and ends where an uninterrupted run ends."""
    whole = train_lora(folders["llama"], data, tmp_path / "a", log_every=1)
    cut = train_lora(folders["llama"], data, tmp_path / "b", log_every=1, time_budget_s=1.0)
    assert not cut["finished"] and cut["stopped"] == "time budget"
    both = train_lora(folders["llama"], data, tmp_path / "b", log_every=1)
    assert [r["how"] for r in both["resumed"]] == ["exact"], both["resumed"]
    a, b = ([e["train_loss"] for e in h["epochs"]] for h in (whole, both))
    np.testing.assert_allclose(b, a, atol=1e-4)  # fp32 here; bf16 within its rounding


def test_memory_plan_printed_before_replicas_and_a_run_that_cannot_fit_refused(folders, data, tmp_path, monkeypatch,
                                                                              capsys):
    """The plan's line per replica is printed before any replica starts; a device too small refuses the run
    with the figure and no replica starts (nothing is written)."""
    from kitlib.models import memory
    from kitlib.training import plan as plans

    folder = folders["llama"]
    job = TrainJob(checkpoint=str(folder), train_csv=str(data / "train.csv"), valid_csv=str(data / "valid.csv"),
                   out_dir=str(tmp_path / "out"), batch_size=8, max_len=48, lora_r=4)
    made = plans.make_plan(job, detect_runtime(2, "cpu"))
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("memory plan")]
    assert len(lines) == 2 and lines[0].startswith("memory plan, replica 0 on this CPU (") and "llama-cls at " in lines[0]
    assert made.weights.width == detect_runtime(2, "cpu").backend.precision("auto")
    (seen,) = [n for n in made.notes if n.startswith("what the decoder model sees (")]  # the first training row, printed
    first = pd.read_csv(data / "train.csv")["comment_text"].iloc[0]
    assert first.split()[-1] in seen, seen  # (the tiny tokenizer knows few words: <unk> for the rest)
    monkeypatch.setattr(memory, "replica_devices", lambda hardware, n: [memory.Device("a tiny device", "cpu", 1e-4)] * (n or 1))
    with pytest.raises(ValueError, match=r"llama-cls at \w+ needs about 0\.0 GB; a tiny device has 0\.0001 GB"):
        train(job, detect_runtime(1, "cpu"))
    assert not (tmp_path / "out").exists()


def test_inference_plans_memory_loads_the_decoder_at_its_width_and_refuses_what_cannot_fit(
        folders, trained, data, tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """predict() of a decoder prints each replica's memory plan before any replica starts, and the replicas hold the
    weights at the plan's width (recorded with each shard: bf16 at precision auto on a bf16 CPU, not the fp32 they
    were saved at); a device too small refuses the run with the figure, and 8/4 bits asked of an encoder or of an
    adapter checkpoint's base at another width than it trained on are refused, all before anything is written."""
    from kitlib.infer import replica_stats
    from kitlib.models import memory

    width = detect_runtime(1, "cpu").backend.precision("auto")  # bf16 on AVX-512 bf16 / AMX CPUs, else fp32
    for checkpoint in (folders["llama"], trained["llama"][0]):  # a base decoder, and adapters merged into one
        out = tmp_path / checkpoint.name
        capsys.readouterr()  # not the fixture's training run
        predict_csv(checkpoint, data, out)
        lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("memory plan")]
        assert len(lines) == 1 and lines[0].startswith("memory plan, replica 0 on this CPU (") and f" at {width}: about" in lines[0]
        assert [s["weights"] for s in replica_stats(out / "shards")] == [width]
    monkeypatch.setattr(memory, "replica_devices", lambda hardware, n: [memory.Device("a tiny device", "cpu", 1e-4)] * (n or 1))
    with pytest.raises(ValueError, match=r"llama-cls at \w+ needs about 0\.0 GB; a tiny device has 0\.0001 GB"):
        predict_csv(folders["llama"], data, tmp_path / "small")
    monkeypatch.undo()
    assert not (tmp_path / "small").exists()
    with pytest.raises(ValueError, match="weights='8bit': .* is an encoder, which loads as saved"):
        predict_csv(tiny_checkpoint, data, tmp_path / "enc", weights="8bit")
    with pytest.raises(ValueError, match="InferJob.weights must be one of auto, fp32, bf16, fp16, 8bit, 4bit, not 'int8'"):
        predict_csv(folders["llama"], data, tmp_path / "int8", weights="int8")


def test_a_fold_group_of_adapter_checkpoints_is_resolved_predicted_and_blended(folders, data, tmp_path):
    """make cv's path with LoRA: 2 folds of the training slice (write_folds, fold_split, the fold tags), each an
    adapter checkpoint that passes the hand-off; the group folder resolves to both members, each predicts through
    its base, the blend is the mean of the two members' own predictions, and the out-of-fold rows are every
    training row once, from its own fold's model."""
    from kitlib.cv.folds import fold_split, write_folds
    from kitlib.cv.groups import collect_oof, fold_tags, save_oof
    from kitlib.infer import predict_members, resolve_members
    from kitlib.training.handoff import mark_passed

    group = tmp_path / "cv"
    folds_csv = write_folds(data / "train.csv", group / "folds", 2)
    for fold in (0, 1):
        train_csv, valid_csv = fold_split(data / "train.csv", folds_csv, fold, tmp_path / "split" / f"fold-{fold}")
        out = group / f"fold-{fold}"
        history = train_lora(folders["llama"], data, out, train_csv=str(train_csv), valid_csv=str(valid_csv),
                             tags=fold_tags(folds_csv, fold))
        save_oof(out, valid_csv)
        kept = pd.read_csv(out / "valid_predictions.csv", dtype={"id": str})["toxic"].to_numpy()
        texts = pd.read_csv(valid_csv, keep_default_na=False)["comment_text"].tolist()
        mark_passed(out, {"reload": check_reload(out, texts, kept, 48, history["precision"])})
        assert adapters.is_adapter(out) and not (out / "model.safetensors").exists()
    members = resolve_members(str(group))
    assert [m.name for m in members] == ["fold-0", "fold-1"]
    each = np.stack([predict_csv(m, data, tmp_path / m.name) for m in members])
    assert np.abs(each[0] - each[1]).max() > 0.01  # two different models, so the blend's agreement means something
    job = InferJob(checkpoint=str(members[0]), test_csv=str(data / "test.csv"), shard_dir=str(tmp_path / "shards"),
                   output_csv=str(tmp_path / "blend.csv"), batch_size=8, max_len=48, collapsed="warn")
    predict_members(job, members, detect_runtime(1, "cpu"), blend="mean", pred_dir=tmp_path / "preds")
    blended = pd.read_csv(tmp_path / "blend.csv", dtype={"id": str})["toxic"].to_numpy()
    np.testing.assert_allclose(blended, each.mean(axis=0), atol=1e-6)
    oof = collect_oof(group, members)  # checked (kitlib.cv.groups.check_oof): one per training row, from its own fold
    assert len(oof) == TRAIN_ROWS and oof["id"].is_unique


@pytest.mark.parametrize("width", ["8bit", "4bit"])
def test_lora_on_8_and_4_bit_weights_trains_and_predicts_on_the_base_quantized_the_same_way(folders, data, width,
                                                                                           tmp_path, monkeypatch):
    """weights='8bit'/'4bit' (bitsandbytes LLM.int8 / NF4): the replica loads the base quantized, only the adapters
    and the head train and are saved, with the width recorded (read from the model the replica trained); predict()
    loads the base quantized the same way (never merged) and gives the kept epoch's predictions.

    The kit refuses 8/4-bit weights off CUDA (kitlib.models.memory.check_width); bitsandbytes 0.47+ runs on the
    CPU too, so this test lifts that refusal to run the real replica programs here. Hidden 64 with 2 key/value
    heads: bitsandbytes 0.50.2's CPU 4-bit inference kernel fails on the 16-row key/value matrices of TINY's
    hidden 32 ("shape '[32, 0]' is invalid"), which its training path and CUDA take."""
    from kitlib.infer import replica_stats
    from kitlib.models import memory

    monkeypatch.setattr(memory, "check_width", lambda width, device: None)
    folder = build(tmp_path / "llama-64", "llama", False, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                   num_key_value_heads=2)
    history = train_lora(folder, data, tmp_path / "out", weights=width)
    losses = [e["train_loss"] for e in history["epochs"]]
    assert history["finished"] and losses[-1] < losses[0], losses
    record = adapters.read_record(tmp_path / "out")
    assert record["weights"] == width and not (tmp_path / "out" / "model.safetensors").exists()
    kept = pd.read_csv(tmp_path / "out" / "valid_predictions.csv", dtype={"id": str})["toxic"].to_numpy()
    got = predict_csv(tmp_path / "out", data, tmp_path / "p")  # merge_adapters=True asked: not merged into 8/4 bits
    assert kept.std() > 0.02
    np.testing.assert_allclose(got, kept, atol=tolerance(width))
    assert [s["weights"] for s in replica_stats(tmp_path / "p" / "shards")] == [width]
    with pytest.raises(ValueError, match=f"weights='bf16': .* were trained on its base in {width}"):
        predict_csv(tmp_path / "out", data, tmp_path / "other", weights="bf16")
    monkeypatch.undo()
    with pytest.raises(ValueError, match=f"weights='{width}' on this CPU: 8-bit and 4-bit weights come from bitsandbytes, "
                                         "which the kit loads on CUDA only"):
        predict_csv(tmp_path / "out", data, tmp_path / "refused")  # as a user's CPU run is: refused, naming why


def test_a_4bit_lora_run_cut_off_continues_exactly(data, tmp_path, monkeypatch):
    """The run's state keeps the trained tensors only (adapters and head: a base in 4 bits cannot be loaded back
    from its state dict, "Unexpected key(s) ... weight.absmax"); cut off after its first step and run again, it
    continues exactly and ends where an uninterrupted run ends. CPU's refusal lifted as in the test above."""
    from kitlib.models import memory

    monkeypatch.setattr(memory, "check_width", lambda width, device: None)
    folder = build(tmp_path / "llama-64", "llama", False, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                   num_key_value_heads=2)
    whole = train_lora(folder, data, tmp_path / "a", log_every=1, weights="4bit")
    cut = train_lora(folder, data, tmp_path / "b", log_every=1, time_budget_s=1.0, weights="4bit")
    assert not cut["finished"] and cut["stopped"] == "time budget"
    both = train_lora(folder, data, tmp_path / "b", log_every=1, weights="4bit")
    assert [r["how"] for r in both["resumed"]] == ["exact"], both["resumed"]
    a, b = ([e["train_loss"] for e in h["epochs"]] for h in (whole, both))
    np.testing.assert_allclose(b, a, atol=1e-4)


def _cuda_stand_in(monkeypatch, capability=(7, 5)):
    """2 "T4"s seen through NVML only, CUDA poisoned in this process (:func:`conftest.poison_cuda`); the replicas'
    start is recorded, then :class:`Started` raised instead."""
    import torch.multiprocessing as tmp

    from conftest import poison_cuda

    poison_cuda(monkeypatch, 2, capability)
    started = {}

    def start(fn, args, nprocs, start_method, join):
        started.update(nprocs=nprocs, start_method=start_method)
        raise Started

    monkeypatch.setattr(tmp, "start_processes", start)
    return started


class Started(Exception):
    """The replicas' start was reached (and recorded) by :func:`_cuda_stand_in`."""


def test_decoder_plans_on_2_t4_under_fork_touch_no_cuda(folders, trained, data, tmp_path, monkeypatch, capsys):
    """The parent's part of a decoder run on 2x T4 (fork): training's plan (fp16 with the scaler on compute
    capability 7.5, the memory plan of each T4) and inference's (the adapter checkpoint's kind, the tokens) are
    made, and the 2 replicas started, without initialising CUDA; Qwen3-14B's shape picks 4-bit weights there."""
    import torch

    from dataclasses import replace

    from kitlib.models import memory
    from kitlib.training import plan as plan_module

    adapter, _ = trained["llama"]  # trained on the CPU first, before CUDA is poisoned
    started = _cuda_stand_in(monkeypatch)
    rt = detect_runtime()
    assert (rt.mode, rt.num_replicas) == ("cuda", 2)
    with pytest.raises(Started):  # the plan made, the replicas' start reached with CUDA untouched
        train_lora(folders["llama"], data, tmp_path / "t", accelerator="auto", replicas=2)
    out = capsys.readouterr().out
    assert started["nprocs"] == 2 and started["start_method"] == "fork"
    assert out.count("on a T4 (15 GB usable)") == 2 and "at fp16" in out, out
    assert not torch.cuda.is_initialized()
    started.clear()
    with pytest.raises(Started):
        predict_csv(adapter, data, tmp_path / "p", accelerator="auto", replicas=2)
    assert started["nprocs"] == 2 and not torch.cuda.is_initialized()
    from transformers import Qwen3Config

    qwen14 = memory.model_shape(Qwen3Config(vocab_size=151936, hidden_size=5120, intermediate_size=17408,
                                            num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=8,
                                            head_dim=128), name="Qwen3-14B")
    monkeypatch.setattr(memory, "shape_of", lambda path: qwen14)  # inference's shape; training's counts what trains
    monkeypatch.setattr(plan_module, "run_shape", lambda job, kind: replace(qwen14, trained=64_230_400))  # r=16, score
    with pytest.raises(Started):
        train_lora(folders["llama"], data, tmp_path / "q", accelerator="auto", replicas=2, max_len=256, batch_size=1)
    out = capsys.readouterr().out
    assert out.count("Qwen3-14B at 4bit: about") == 2 and not torch.cuda.is_initialized(), out
    with pytest.raises(Started):  # inference of the base alone: fp16 (28.5 GB) and 8-bit exceed a T4's 15
        predict_csv(folders["llama"], data, tmp_path / "qp", accelerator="auto", replicas=2)
    out = capsys.readouterr().out
    assert out.count("Qwen3-14B at 4bit: about") == 2 and not torch.cuda.is_initialized(), out
    with pytest.raises(ValueError, match=r"Qwen3-14B at fp16 needs about 28\.5 GB; a T4 has 15 GB: weights='4bit' needs about 9\.5 GB"):
        predict_csv(folders["llama"], data, tmp_path / "qf", accelerator="auto", replicas=2, weights="fp16")
