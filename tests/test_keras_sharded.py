"""Sharded LoRA decoders on the JAX side (issue 40): the per-chip plan, the layout, and the CPU rehearsal.

The plan and the layout need neither Keras nor JAX: they run here, on real decoders' published sizes (no
weights). The rehearsal runs in a subprocess (tests/support/keras_sharded_worker.py: 8 virtual JAX CPU
devices, KERAS_BACKEND=jax, keras-hub imports TensorFlow, which never enters this process): each
family's tiny random decoder is LoRA-trained on one device and on meshes (1, 8), (2, 4) and (8, 1),
and the tests read what it recorded.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from kitlib.keras.chip_plan import PUBLISHED, Decoder, V5E, check_fits, plan_chips, step_floor_seconds, v5e8_table
from kitlib.keras.mesh import check_mesh_shape, describe_layout, place, tensors
from kitlib.models.memory import GB

ROOT = Path(__file__).resolve().parents[1]


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
        cfg.architectures = [f"{type(cfg).__name__[:-6]}ForCausalLM"]
        s = model_shape(cfg)
        ours = [t for t in tensors(PUBLISHED[name].family, PUBLISHED[name].config) if "reverse" not in t.path]
        assert sum(t.size for t in ours) == s.params - s.head_params, name  # all but the LM head
    assert s.params - s.head_params == 9_241_705_984 - 0  # Gemma 2 9B without its (tied) head


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
