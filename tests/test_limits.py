"""Issue 27 items 1-3: what a model can take is checked before any replica starts (:mod:`kitlib.models.limits`).

* token ids past the model's embedding rows (a tokenizer with 32 added tokens over 8,002 rows): refused,
  naming both numbers, by ``predict`` and ``train`` before anything is launched;
* the predicted column comes from the head's own label map (``{0: "toxic", 1: "non-toxic"}`` gives
  P(column 0)); a head that does not name the target is refused; unnamed two-class heads take
  column 1 with a note;
* usable positions from a probe of the model itself (X-MOD, MPNet, data2vec-text, ...: the RoBERTa
  offset, found, not listed), and a model without SDPA refused on the XLA path before tokenization.

Tiny models are built offline from their transformers configs; the tokenizer is the fixture's.
"""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import SAMPLE, write_slice
from kitlib import infer
from kitlib.models import limits
from kitlib.training import train as training
from kitlib.infer import InferJob, predict
from kitlib.models.model import prediction_column, probabilities
from kitlib.run.runtime import detect_runtime
from kitlib.training.job import TrainJob
from conftest import head_loss

SMALL = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=120)


def _no_launch(*args, **kwargs):
    raise AssertionError("a replica was launched")


def _no_tokenizing(*args, **kwargs):
    raise AssertionError("the test set was tokenized")


@pytest.fixture
def stub_launch(monkeypatch):
    """Any launch (inference or training) fails the test: every refusal here must come before it."""
    monkeypatch.setattr(infer, "launch", _no_launch)
    monkeypatch.setattr(training, "launch", _no_launch)


def _job(checkpoint, tmp_path, test_csv=SAMPLE / "test.csv", **kw):
    return InferJob(checkpoint=str(checkpoint), test_csv=str(test_csv), shard_dir=str(tmp_path / "shards"),
                    output_csv=str(tmp_path / "sub.csv"), **{"batch_size": 8, "max_len": 64, "num_buckets": 1,
                                                            "precision": "fp32", **kw})


def _config_folder(tmp_path, config, name):
    out = tmp_path / name
    config.save_pretrained(out)
    return out


# --- 1. token ids beyond the embedding rows ---


@pytest.fixture(scope="module")
def added_tokens_checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny model (8,002 embedding rows) with a tokenizer of 32 more tokens, saved beside it."""
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("added") / "ckpt"
    shutil.copytree(tiny_checkpoint, out)
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_tokens([f"<extra_{i}>" for i in range(32)])
    tok.save_pretrained(out)
    return out


def test_tokenizer_ids_past_the_embedding_rows_are_refused_before_inference(added_tokens_checkpoint, tmp_path, stub_launch):
    assert limits.model_limits(added_tokens_checkpoint).rows == 8002
    with pytest.raises(ValueError, match=r"produces 8034 token ids \(len\(tokenizer\)=8034\) but the model's input "
                                         r"embedding has 8002 rows: ids 8002\.\.8033"):
        predict(_job(added_tokens_checkpoint, tmp_path), detect_runtime(1, "xla-cpu"))
    assert not (tmp_path / "shards").exists() and not (tmp_path / "sub.csv").exists()


def test_tokenizer_ids_past_the_embedding_rows_are_refused_before_training(added_tokens_checkpoint, tmp_path, stub_launch):
    job = TrainJob(checkpoint=str(added_tokens_checkpoint), train_csv=str(SAMPLE / "train.csv"),
                   valid_csv=str(SAMPLE / "validation.csv"), out_dir=str(tmp_path / "out"), max_len=32)
    with pytest.raises(ValueError, match=r"8034 token ids .* 8002 rows"):
        training.train(job, detect_runtime(1, "cpu"))
    assert not (tmp_path / "out").exists()


def test_a_tokenized_set_with_an_id_past_the_rows_is_refused(tiny_checkpoint):
    lim = limits.model_limits(tiny_checkpoint)
    limits.check_token_ids(tiny_checkpoint, lim, ids=np.array([0, 5, lim.rows - 1], np.int32), source="test.csv")
    with pytest.raises(ValueError, match=r"test.csv: tokenized, it holds token id 8002, .* has 8002 embedding rows"):
        limits.check_token_ids(tiny_checkpoint, lim, ids=np.array([0, 8002, 7], np.int32), source="test.csv")


# --- 2. the label map decides the predicted column ---


@pytest.mark.parametrize("id2label, column, note", [
    ({0: "toxic", 1: "non-toxic"}, 0, False),
    ({0: "Non-Toxic", 1: "TOXIC"}, 1, False),
    ({0: "LABEL_0", 1: "toxic"}, 1, False),
    ({0: "LABEL_0", 1: "LABEL_1"}, 1, True),
    ({0: "toxic"}, 0, False),
    ({0: "LABEL_0"}, 0, False),
])
def test_the_prediction_column_is_the_one_the_head_names(id2label, column, note):
    from transformers import PretrainedConfig

    got, why = prediction_column(PretrainedConfig(id2label=id2label), "toxic", "ckpt")
    assert got == column and (why is not None) == note
    if note:
        assert "column 1 is taken as P(toxic)" in why


@pytest.mark.parametrize("id2label, said", [
    ({0: "negative", 1: "positive"}, "do not name 'toxic' at all"),
    ({0: "toxic", 1: "Toxic"}, "do not name 'toxic' once"),
    ({0: "non-toxic"}, "do not name 'toxic' at all"),
])
def test_a_head_that_does_not_name_the_target_is_refused(id2label, said):
    from transformers import PretrainedConfig

    with pytest.raises(ValueError, match=said):
        prediction_column(PretrainedConfig(id2label=id2label), "toxic", "ckpt")


@pytest.fixture(scope="module")
def inverted_checkpoint(tiny_checkpoint, tmp_path_factory):
    """A two-class tiny XLM-R whose head says column 0 is toxic; weights at std 0.2, so rows differ."""
    from transformers import AutoConfig, AutoTokenizer, XLMRobertaForSequenceClassification

    config = AutoConfig.from_pretrained(tiny_checkpoint)
    config.update(dict(num_labels=2, problem_type="single_label_classification"))
    config.id2label, config.label2id = {0: "toxic", 1: "non-toxic"}, {"toxic": 0, "non-toxic": 1}
    torch.manual_seed(0)
    model = XLMRobertaForSequenceClassification(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
    out = tmp_path_factory.mktemp("inverted") / "ckpt"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_checkpoint).save_pretrained(out)
    return out


def test_an_inverted_label_map_gives_p_toxic_not_column_1(inverted_checkpoint, tmp_path):
    from transformers import AutoTokenizer

    from kitlib.models.model import load_model

    test_csv, _ = write_slice(tmp_path / "data", 24)
    predict(_job(inverted_checkpoint, tmp_path, test_csv), detect_runtime(1, "cpu"))
    sub = pd.read_csv(tmp_path / "sub.csv", dtype={"id": str}, keep_default_na=False)
    test = pd.read_csv(test_csv, dtype=str, keep_default_na=False)
    tok, model = AutoTokenizer.from_pretrained(inverted_checkpoint), load_model(inverted_checkpoint)
    with torch.no_grad():
        p = np.array([torch.softmax(model(**tok(t, truncation=True, max_length=64, return_tensors="pt")).logits, -1)[0, 0].item()
                      for t in test["content"]])
    got = sub.set_index("id").loc[test["id"], "toxic"].to_numpy()
    assert np.abs(p - 0.5).max() > 0.05  # the rows differ, so P(column 0) and P(column 1) are far apart
    np.testing.assert_allclose(got, p, atol=1e-5)


def test_a_head_not_naming_the_target_is_refused_before_any_work(inverted_checkpoint, tmp_path, stub_launch, monkeypatch):
    from transformers import AutoConfig

    folder = tmp_path / "ckpt"
    shutil.copytree(inverted_checkpoint, folder)
    config = AutoConfig.from_pretrained(folder)
    config.id2label, config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    config.save_pretrained(folder)
    monkeypatch.setattr(infer, "tokenize_test_set", _no_tokenizing)
    with pytest.raises(ValueError, match=r"labels \{0: 'negative', 1: 'positive'\} \(config.json id2label\) do not name 'toxic'"):
        predict(_job(folder, tmp_path), detect_runtime(1, "cpu"))


def test_the_kits_heads_name_their_label_and_a_two_class_loss_follows_the_column(tiny_checkpoint):
    from transformers import AutoConfig

    assert prediction_column(AutoConfig.from_pretrained(tiny_checkpoint), "toxic") == (0, None)  # the kit's own
    z, y = torch.tensor([[1.5], [-0.5], [0.2]]), torch.tensor([1.0, 0.0, 0.3])
    one = head_loss(z, y)
    col0 = head_loss(torch.cat([z, torch.zeros_like(z)], dim=1), y, column=0)  # softmax([z, 0])[0] = sigmoid(z)
    torch.testing.assert_close(one, col0)
    torch.testing.assert_close(probabilities(torch.cat([z, torch.zeros_like(z)], dim=1), 0), torch.sigmoid(z[:, 0]))
    with pytest.raises(ValueError, match="pass column="):
        probabilities(torch.zeros(3, 2))


def test_a_pretrained_body_gets_a_head_named_for_the_label_trained(tmp_path):
    from transformers import AutoConfig, XLMRobertaConfig

    from kitlib.models.model import _classifier

    body = _config_folder(tmp_path, XLMRobertaConfig(**SMALL), "body")
    _, kwargs = _classifier(body, True, label="severe_toxic")
    config = AutoConfig.from_pretrained(body, **kwargs)
    assert prediction_column(config, "severe_toxic") == (0, None)
    assert limits.model_limits(body, head_for_training=True, label="severe_toxic").rows == 120


# --- 3. limits from the model itself ---


def _family_configs():
    from transformers import (Data2VecTextConfig, EsmConfig, IBertConfig, LukeConfig, MarkupLMConfig, MPNetConfig,
                              RobertaPreLayerNormConfig, XmodConfig)

    return {
        "xmod": XmodConfig(default_language="en_XX", max_position_embeddings=514, **SMALL),
        "mpnet": MPNetConfig(max_position_embeddings=514, **SMALL),
        "data2vec-text": Data2VecTextConfig(max_position_embeddings=514, **SMALL),
        "roberta-prelayernorm": RobertaPreLayerNormConfig(max_position_embeddings=514, **SMALL),
        "ibert": IBertConfig(max_position_embeddings=514, **SMALL),
        "luke": LukeConfig(max_position_embeddings=514, entity_vocab_size=10, **SMALL),
        "esm": EsmConfig(pad_token_id=1, position_embedding_type="absolute", max_position_embeddings=514, **SMALL),
        "markuplm": MarkupLMConfig(max_position_embeddings=514, **SMALL),
    }


@pytest.mark.parametrize("family", ["xmod", "mpnet", "data2vec-text", "roberta-prelayernorm", "ibert", "luke", "esm",
                                    "markuplm"])
def test_usable_positions_come_from_the_model_not_a_list_of_names(family, tmp_path):
    """Each numbers positions from padding_idx + 1: 514 slots hold 514 - (pad + 1) tokens (the old list said 514)."""
    config = _family_configs()[family]
    folder = _config_folder(tmp_path, config, family)
    lim = limits.model_limits(folder)
    assert lim.how == "probe"
    assert lim.positions == 514 - (config.pad_token_id + 1)
    assert lim.rows == 120
    limits.check_max_len(folder, lim.positions, lim)
    with pytest.raises(ValueError, match=rf"max_len={lim.positions + 1} .* holds {lim.positions} tokens per row\. "
                                         rf"Set max_len <= {lim.positions} \(the limit is what a probe forward"):
        limits.check_max_len(folder, lim.positions + 1, lim)


def test_bert_uses_every_slot_and_a_probe_leaves_the_thread_count(tmp_path):
    from transformers import BertConfig

    threads = torch.get_num_threads()
    assert limits.model_limits(_config_folder(tmp_path, BertConfig(**SMALL), "bert")).positions == 512
    assert torch.get_num_threads() == threads


def test_xmod_at_its_full_length_is_refused_on_xla_before_any_work(tmp_path, stub_launch, monkeypatch):
    """X-MOD at 514 tokens on xla-cpu used to write a submission from clamped positions."""
    folder = _config_folder(tmp_path, _family_configs()["xmod"], "xmod")
    monkeypatch.setattr(infer, "tokenize_test_set", _no_tokenizing)
    with pytest.raises(ValueError, match=r"max_len=514 .* holds 512 tokens per row\. Set max_len <= 512"):
        predict(_job(folder, tmp_path, max_len=514), detect_runtime(1, "xla-cpu"))


def test_a_model_without_sdpa_is_refused_on_xla_before_tokenization(tmp_path, stub_launch, monkeypatch):
    """MPNet has no SDPA attention: the XLA path used to say so only inside the replica, after tokenizing."""
    folder = _config_folder(tmp_path, _family_configs()["mpnet"], "mpnet")
    monkeypatch.setattr(infer, "tokenize_test_set", _no_tokenizing)
    with pytest.raises(limits.UnsupportedAttention, match=r"cannot run with the attention the XLA path needs \(transformers: "
                                                          r"MPNetForSequenceClassification does not support .*"
                                                          r"it needs 'kitlib_xla_sdpa'.*accelerator='cpu'"):
        predict(_job(folder, tmp_path), detect_runtime(1, "xla-cpu"))
    assert limits.model_limits(folder, "cpu").positions == 512  # the eager CPU runs it (eager attention)


def test_a_model_the_probe_cannot_run_gets_the_conservative_limit(tmp_path):
    from transformers import XmodConfig

    folder = _config_folder(tmp_path, XmodConfig(max_position_embeddings=514, **SMALL), "xmod-no-language")
    lim = limits.model_limits(folder)
    assert lim.how.startswith("conservative: the probe did not run at 2 tokens (ValueError: Input language unknown")
    assert lim.positions == 512


def test_a_model_that_indexes_past_its_own_tables_is_refused(tmp_path):
    """No token-type row (type_vocab_size=0) for the types the model uses by default: refused, the table named."""
    from transformers import XLMRobertaConfig

    folder = _config_folder(tmp_path, XLMRobertaConfig(type_vocab_size=0, **SMALL), "no-types")
    with pytest.raises(ValueError, match=r"indexes past one of its own tables even at 2 tokens per row .*"
                                         r"token_type_embeddings 0 rows"):
        limits.model_limits(folder)
