"""Sharded LoRA decoders on the JAX side (issue 40): the per-chip plan, the layout, and the CPU rehearsal.

The plan and the layout need neither Keras nor JAX: they run here, on real decoders' published sizes (no
weights). The rehearsal runs in a subprocess (tests/support/keras_sharded_worker.py: 8 virtual JAX CPU
devices, KERAS_BACKEND=jax, keras-hub imports TensorFlow, which never enters this process): each
family's tiny random decoder is LoRA-trained on one device and on meshes (1, 8), (2, 4) and (8, 1),
and the tests read what it recorded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kitlib.keras.chip_plan import PUBLISHED, Decoder, V5E, check_fits, plan_chips, step_floor_seconds, v5e8_table
from kitlib.keras.mesh import check_mesh_shape, describe_layout, place, tensors
from kitlib.models.memory import GB

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "keras_sharded_worker.py"
FAMILIES = ("gemma", "gemma3", "llama", "qwen3")
MESHES = ("1x8", "2x4", "8x1")
TOL = 1e-5  # float32 on CPU: sharded matmuls sum in another order (measured gaps: below 1e-6)


# ----------------------------------------------------------------------------- the plan (no Keras, no JAX)

def test_qwen3_14b_is_refused_data_parallel_and_fits_sharded_on_a_v5e_8():
    q = PUBLISHED["qwen3-14b"]
    dp = plan_chips(q, (8, 1), batch=8, length=256)
    assert round(dp.frozen / GB, 2) == 29.54  # 14.77 B parameters at bf16, whole on every chip
    with pytest.raises(ValueError) as e:
        check_fits(dp)
    msg = str(e.value)
    assert "mesh (8, 1)" in msg and "of 16 GB" in msg and "does not fit" in msg
    assert "more model-axis chips: mesh (2, 4) needs about 13.78 GB" in msg
    assert "the frozen share alone is 29.54 GB per chip" in msg  # no shorter length or batch can help
    for mesh, frozen in (((2, 4), 7.38), ((1, 8), 3.69)):
        p = plan_chips(q, mesh, batch=8, length=256)
        check_fits(p)  # does not raise
        assert round(p.frozen / GB, 2) == frozen and p.total < 16 * GB


def test_the_fix_for_activations_is_a_shorter_length_or_a_smaller_batch():
    p = plan_chips(PUBLISHED["qwen3-14b"], (2, 4), batch=16, length=1024)
    assert p.activations > 40 * GB and not p.fits
    with pytest.raises(ValueError, match=r"a shorter length: 128 needs about 13\.52 GB.*a smaller batch: 2 needs about 15\.36 GB"):
        check_fits(p)
    assert plan_chips(PUBLISHED["qwen3-14b"], (2, 4), batch=16, length=128).fits
    assert plan_chips(PUBLISHED["qwen3-14b"], (2, 4), batch=2, length=1024).fits


def test_v5e_8_table():
    rows = {(r["name"], r["mesh"], r["batch"], r["length"]): r for r in v5e8_table()}
    assert len(rows) == len(PUBLISHED) * 3 * 2 * 3
    assert not any(r["fits"] for k, r in rows.items() if k[0] == "qwen3-14b" and k[1] == (8, 1))
    assert rows[("qwen3-14b", (1, 8), 8, 256)]["fits"] and rows[("qwen3-14b", (2, 4), 8, 256)]["fits"]
    assert all(r["fits"] for k, r in rows.items() if k[0] == "gemma2-2b" and k[2:] == (8, 256))
    # the 8-9 B models hold 16-18.5 GB whole: refused data parallel, taken at (2, 4) and (1, 8)
    for name in ("gemma2-9b", "llama3-8b", "qwen3-8b"):
        assert not rows[(name, (8, 1), 8, 256)]["fits"] and rows[(name, (2, 4), 8, 256)]["fits"]
    assert rows[("gemma2-9b", (8, 1), 8, 256)]["frozen_gb"] == 18.48
    r = rows[("qwen3-14b", (1, 8), 8, 256)]
    assert 0.05 < r["step_floor_s"] < 0.1  # 2048 tokens x 4 x 13.2 B matmul weights / (8 x 197 TFLOPS) = 0.069 s


def test_keras_tables_count_what_the_torch_side_counts():
    """The per-family weight tables against transformers' own models on the meta device (kitlib.models.memory)."""
    from transformers import Gemma2Config, LlamaConfig, Qwen3Config

    from kitlib.models.memory import model_shape

    torch_configs = {
        "qwen3-14b": Qwen3Config(vocab_size=151936, num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=8,
                                 head_dim=128, hidden_size=5120, intermediate_size=17408, tie_word_embeddings=False),
        "llama3-8b": LlamaConfig(vocab_size=128256, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                 hidden_size=4096, intermediate_size=14336, tie_word_embeddings=False),
        "gemma2-9b": Gemma2Config(vocab_size=256000, num_hidden_layers=42, num_attention_heads=16, num_key_value_heads=8,
                                  head_dim=256, hidden_size=3584, intermediate_size=14336),
    }
    for name, cfg in torch_configs.items():
        cfg.architectures, cfg.num_labels = [f"{type(cfg).__name__[:-6]}ForSequenceClassification"], 1
        backbone = model_shape(cfg).params - cfg.hidden_size  # the classifier less its 1-logit score: no LM head
        ours = [t for t in tensors(PUBLISHED[name].family, PUBLISHED[name].config) if "reverse" not in t.path]
        assert sum(t.size for t in ours) == backbone, name
    assert backbone == 9_241_705_984  # Gemma 2 9B without its (tied) head


def test_layout_splits_heads_and_widths_on_the_model_axis_only():
    llama = {p.tensor.path: p for p in place(tensors("llama", PUBLISHED["llama3-8b"].config), 8)}
    q = llama["transformer_layer_0/self_attention/query/kernel"]
    assert q.tensor.shape == (4096, 32, 128) and q.spec == (None, "model", None) and q.shard == (4096, 4, 128)
    assert llama["token_embedding/embeddings"].shard == (16032, 4096)
    assert llama["transformer_layer_0/feedforward_output_dense/kernel"].spec == ("model", None)
    assert llama["transformer_layer_0/self_attention_layernorm/scale"].spec == (None,)
    gemma = {p.tensor.path: p for p in place(tensors("gemma", PUBLISHED["gemma2-9b"].config), 16)}
    k = gemma["decoder_block_0/attention/key/kernel"]  # 8 key/value heads on 16 chips: replicated, and said so
    assert k.spec == (None, None, None) and k.shard == (8, 3584, 256) and "does not divide by 16" in k.note
    assert gemma["decoder_block_0/attention/query/kernel"].shard == (1, 3584, 256)
    assert gemma["decoder_block_0/ffw_gating/kernel"].tensor.shape == (3584, 14336)  # keras-hub's halved width
    text = describe_layout(list(gemma.values()), top=3)
    assert text.count("\n") == 2 and "decoder_block_*" not in text and "token_embedding/embeddings (256000, 3584)" in text


def test_plan_refuses_bad_inputs_naming_the_fix():
    q = PUBLISHED["qwen3-8b"]
    with pytest.raises(ValueError, match=r"divide by the 2 batch-axis chips \(use 2\)"):
        plan_chips(q, (2, 4), batch=3, length=64)
    with pytest.raises(ValueError, match="'fp32', 'bf16' or 'fp16'"):
        plan_chips(q, (1, 8), batch=8, length=64, width="4bit")
    with pytest.raises(ValueError, match=r"covers 6 chips, and there are 8: use one of \[\(8, 1\), \(4, 2\), \(2, 4\), \(1, 8\)\]"):
        check_mesh_shape((2, 3), 8)
    with pytest.raises(ValueError, match="has no layout"):
        tensors("mistral", {})


def test_report_prints_the_mesh_the_largest_tensors_and_each_chip():
    p = plan_chips(PUBLISHED["gemma2-9b"], (2, 4), batch=8, length=256, chip=V5E)
    text = p.report()
    assert text.startswith("Gemma 2 9B at bf16, mesh (2, 4)") and "mesh (2, 4): 2 x 4 = 8 chips (a TPU v5e chip)" in text
    assert "token_embedding/embeddings (256000, 3584) -> ('model', None): (64000, 3584) per chip, 458.8 MB" in text
    assert "chip 7 (batch 1, model 3): frozen 4.62 GB" in text and text.count("  chip ") == 8
    assert step_floor_seconds(plan_chips(Decoder("x", "qwen3", PUBLISHED["qwen3-8b"].config), (1, 8), batch=8,
                                         length=64, chip=p.chip)) > 0


# ----------------------------------------------------------------------------- the CPU rehearsal (8 JAX devices)

@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded")
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    p = subprocess.run([sys.executable, str(WORKER), str(out), *FAMILIES], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, f"sharded worker failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads((out / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_sharded_loss_and_predictions_match_one_device(rehearsal, family):
    runs = rehearsal[family]
    ref = runs["1x1"]
    assert len(ref["losses"]) == 3 and len(set(ref["losses"])) == 3  # three different batches, three losses
    z0, z1 = np.array(ref["logits_before"]), np.array(ref["logits_after"])
    assert z0.std() > 0.1 and np.abs(z1 - z0).max() > 1e-3  # outputs that differ per row, and training moved them
    for mesh in MESHES:
        r = runs[mesh]
        assert np.abs(np.array(r["losses"]) - ref["losses"]).max() < TOL, mesh
        assert np.abs(np.array(r["logits_before"]) - z0).max() < TOL, mesh
        assert np.abs(np.array(r["logits_after"]) - z1).max() < TOL, mesh


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_each_chip_holds_its_planned_share_of_the_frozen_weights(rehearsal, family):
    runs = rehearsal[family]
    whole = runs["1x1"]["planned_frozen"]
    for mesh in MESHES:
        r = runs[mesh]
        assert len(r["device_bytes"]) == 8 and set(r["device_bytes"].values()) == {r["planned_frozen"]}, mesh
        assert r["shard_mismatches"] == [], mesh  # every tensor's sharding.shard_shape is the plan's
    assert runs["8x1"]["planned_frozen"] == whole  # data parallel: every chip holds everything
    assert whole / 8 < runs["1x8"]["planned_frozen"] < whole / 4  # 8 model chips (norms and 4 kv heads replicated)
    assert whole / 4 <= runs["2x4"]["planned_frozen"] < whole / 2
    assert "does not divide by 8 model chips: replicated" in runs["1x8"]["report"]
    assert "chip 7 (batch 1, model 3)" in runs["2x4"]["report"]


@pytest.mark.slow
def test_tiny_qwen3_shares_by_hand(rehearsal):
    """Qwen3 tiny (vocabulary 128, hidden 32, 8 heads of 4, 4 kv heads, MLP 64, 2 layers), float32, on (1, 8):
    embedding 128x32/8 = 512; a layer: query 1024/8 = 128, key and value whole (4 heads on 8 chips) 2 x 512,
    output 128, MLP 3 x 2048/8 = 768, norms 4 + 4 + 32 + 32: 2120; 512 + 2 x 2120 + 32 = 4784 values, 19136 bytes."""
    assert rehearsal["qwen3"]["1x8"]["device_bytes"]["cpu:0"] == 19136
    assert rehearsal["qwen3"]["8x1"]["device_bytes"]["cpu:5"] == 22704 * 4  # all 22,704 parameters


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_only_lora_and_the_head_train(rehearsal, family):
    for mesh in ("1x1", *MESHES):
        r = rehearsal[family][mesh]
        assert r["changed"] == r["trainable"], mesh
        assert len(r["trainable"]) == 2 * 2 * 2 + 2  # 2 layers x (query, value) x (A, B) + the head's kernel and bias
        assert all("lora_kernel_" in p or p.startswith("score/") for p in r["trainable"])
        assert r["frozen_count"] > 20


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_save_and_reload_give_the_same_predictions(rehearsal, family):
    r = rehearsal[family]["save_reload"]
    assert {"kitlib-keras-adapter.json", "lora-and-head.npz"} <= set(r["files"]) and r["bytes"] < 20_000
    assert r["reload_1x8_max_diff"] < TOL and r["reload_1x1_max_diff"] < TOL  # saved on (2, 4)
    assert "trained on another base" in r["other_base_error"] and "Load them on the base" in r["other_base_error"]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_plan_that_cannot_fit_is_refused_before_any_weight(rehearsal, family):
    r = rehearsal[family]["refusal"]  # a chip 1% under what (8, 1) needs
    assert r["built"] == 0 and r["error"] is not None
    assert f"tiny {family} at fp32, mesh (8, 1)" in r["error"] and "MB per chip" in r["error"]
    assert "does not fit. Fix: " in r["error"] and ("a shorter length: 8 needs" in r["error"] or "mesh (" in r["error"])
