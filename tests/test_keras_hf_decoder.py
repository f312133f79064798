"""A real offline decoder on the sharded JAX path (issue 40 item 5): SmolLM2-135M read by keras-hub.

kitlib.keras.hf_decoder turns the packaged SmolLM2 folder (kitlib.models.smollm2) into a ``Base``; keras-hub's
transformers converter loads its weights. Here its last hidden states are held to transformers' own on the
same rows (torch in this process; keras-hub on JAX in a child, tests/support/keras_hf_decoder_worker.py).
The config reading and its refusals need neither.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kitlib.keras.hf_decoder import hf_config

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "keras_hf_decoder_worker.py"
# fp32 on CPU: the two frameworks sum in other orders; measured 1.0e-4 of hidden states up to 38.5 (2.7e-6
# relative) on an AMD EPYC (AVX2). The converter alone (rms_norm_eps dropped: 1e-6 for 1e-5) is 0.022 off.
HIDDEN_TOL = 1e-3
SMOLLM2_CONFIG = {"model_type": "llama", "vocab_size": 49152, "num_hidden_layers": 30, "num_attention_heads": 9,
                  "num_key_value_heads": 3, "hidden_size": 576, "intermediate_size": 1536, "head_dim": 64,
                  "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "rope_parameters": {"rope_theta": 100000.0}}


def _folder(tmp_path, **config) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({**SMOLLM2_CONFIG, **config}))
    return tmp_path


def test_config_is_keras_hubs_and_the_plan_replicates_what_4_chips_cannot_split(tmp_path):
    from kitlib.keras.chip_plan import Decoder, plan_chips

    family, c = hf_config(_folder(tmp_path))
    assert family == "llama" and c["num_query_heads"] == 9 and c["num_key_value_heads"] == 3
    assert c["layer_norm_epsilon"] == 1e-5 and c["rope_max_wavelength"] == 100000.0 and c["tie_word_embeddings"] is True
    p = plan_chips(Decoder("SmolLM2", family, c), (2, 4), batch=8, length=64, width="fp32")
    placed = {x.tensor.path: x for x in p.placed}
    assert "token_embedding/reverse_embeddings" not in placed  # tied: no second (hidden, vocab) matrix
    assert placed["token_embedding/embeddings"].shard == (12288, 576)
    q = placed["transformer_layer_0/self_attention/query/kernel"]  # 9 heads on 4 model chips: whole, and said so
    assert q.shard == (576, 9, 64) and "axis 1 (9) does not divide by 4 model chips: replicated" in q.note
    assert placed["transformer_layer_0/feedforward_gate_dense/kernel"].shard == (576, 384)
    assert sum(x.tensor.size for x in p.placed) == 134_515_008  # SmolLM2-135M's parameters (tied embedding once)
    assert "replicated though splittable: 120 tensors" in p.report()  # 30 layers x query, key, value, output


def test_config_refusals_name_the_input_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json: not found; give a transformers decoder folder"):
        hf_config(tmp_path)
    with pytest.raises(ValueError, match=r"model_type 'bert' has no sharded family here .*FAMILY_OF: llama"):
        hf_config(_folder(tmp_path, model_type="bert"))
    with pytest.raises(ValueError, match="rope_scaling .* is untested"):
        hf_config(_folder(tmp_path, rope_scaling={"rope_type": "llama3", "factor": 8.0}))


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    from kitlib.models.packaged import PRETRAINED

    return PRETRAINED["smollm2-135m"](tmp_path_factory.mktemp("smollm2"))


@pytest.mark.slow
def test_keras_hub_backbone_gives_transformers_hidden_states(smollm2, tmp_path):
    """Four rows (two languages, one truncated, one padded) of 24 tokens: the keras-hub backbone's last hidden
    states (after the final norm) equal transformers' ``LlamaModel``'s on every real token within fp32 sums."""
    import torch
    from transformers import AutoModel

    from kitlib.keras.hf_decoder import tokenize

    texts = ["You are a stupid idiot and I hate you.", "Grazie per aver sistemato le fonti, ottimo lavoro.",
             "Bu makale 2015 yılından iki kaynak gösteriyor ve " * 4, "ok"]
    ids, mask = tokenize(smollm2, texts, 24)
    assert ids.dtype == np.int32 and ids.shape == (4, 24) and mask[2].all() and mask[3].sum() < 4
    with torch.no_grad():
        ref = AutoModel.from_pretrained(smollm2, dtype=torch.float32).eval()(
            input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long()).last_hidden_state.numpy()
    np.savez(tmp_path / "in.npz", token_ids=ids, padding_mask=mask)
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    p = subprocess.run([sys.executable, str(WORKER), str(smollm2), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                       env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    out = np.load(tmp_path / "out.npz")
    real = mask.astype(bool)
    assert json.loads(str(out["overrides"])) == {"layer_norm_epsilon": pytest.approx(1e-5)}
    assert str(out["cls"]) == "Llama3Backbone" and float(out["epsilon"]) == pytest.approx(1e-5)
    assert np.abs(ref[real]).max() > 10  # real activations, not zeros
    gap = np.abs(out["kit"] - ref)[real].max()
    assert gap < HIDDEN_TOL, f"keras-hub's SmolLM2 differs from transformers' by {gap}"
    wrong = np.abs(out["converter_only"] - ref)[real].max()  # the mapping without rms_norm_eps: the check sees it
    assert wrong > 10 * HIDDEN_TOL, wrong
