"""A row is data, wherever the model sees it (issue 39 items 3 and 4): the answer-token prompt's ``{names}`` come
from each row's columns (or are refused before any work, naming the file and the column); a special token's string
inside a row is text; an empty or blank row through a decoder whose tokenizer adds no bos is predicted.

Tiny random Llama folders (tests/support/tiny_decoders.py's config) with a word-level tokenizer whose special
tokens ``<s>``/``</s>`` are added tokens, as in real tokenizers (no pad: ``</s>`` pads, as for most decoders)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from support.tiny_decoders import build
from kitlib.data import read_csv_checked, row_fields
from kitlib.infer import InferJob, predict, tokenize_test_set, what_the_model_sees
from kitlib.models.kinds import DEFAULT_RULE, DEFAULT_TEMPLATE, kind_for
from kitlib.run.runtime import detect_runtime
from kitlib.training.job import TrainJob
from kitlib.training.plan import bound_kind

WORDS = "you are bad good the a no spam links rule Yes No yes no Subreddit: Answer: Comment:".split()


def special_folder(out: Path, causal: bool) -> Path:
    """A tiny Llama whose tokenizer knows :data:`WORDS` and the default prompt's words, with ``<s>``/``</s>`` added
    as special tokens outside the word vocabulary (bos and eos; it adds neither to a text)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = list(dict.fromkeys(["<unk>", *WORDS, *(DEFAULT_TEMPLATE + " " + DEFAULT_RULE).split()]))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    return build(out, "llama", causal, tokenizer=fast)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("special")
    return {"decoder": special_folder(root / "cls", False), "answer-tokens": special_folder(root / "lm", True)}


def bound(folder):
    kind = kind_for(folder)
    tok = kind.load_tokenizer(folder)
    return kind.bind(tok), tok


def write(path: Path, **columns) -> Path:
    pd.DataFrame({"id": [str(i) for i in range(len(next(iter(columns.values()))))], **columns}).to_csv(path, index=False)
    return path


def infer_job(folder, csv: Path, out: Path, **kw) -> InferJob:
    return InferJob(checkpoint=str(folder), test_csv=str(csv), shard_dir=str(out / "shards"),
                    output_csv=str(out / "sub.csv"), batch_size=4, max_len=48, collapsed="warn", **kw)


def test_prompt_fields_come_from_each_row(folders, tmp_path):
    """Two rows of the same text under two rules are two prompts, in the test set's tokens and in what the model
    sees (before: both read DEFAULT_RULE, the rows' tokens were equal)."""
    folder = folders["answer-tokens"]
    kind, tok = bound(folder)
    csv = write(tmp_path / "test.csv", comment_text=["you are bad", "you are bad"], rule=["no spam", "no links"])
    job = infer_job(folder, csv, tmp_path)
    tokens = tokenize_test_set(job, tmp_path / "tokens", tok, kind)
    rows = [tokens.ids[tokens.offsets[i]:tokens.offsets[i + 1]].tolist() for i in range(2)]
    assert rows[0] != rows[1]
    for row, rule in zip(rows, ["no spam", "no links"]):
        want = kind.encode(tok, ["you are bad"], 48, [{"rule": rule}])["input_ids"][0].tolist()
        assert row == want and f"Rule: {rule} Comment:" in tok.decode(row)
    assert "Rule: no links" in what_the_model_sees(job, row=1)
    df = read_csv_checked(csv, fields=kind.row_columns(csv))
    assert row_fields(df) == [{"rule": "no spam"}, {"rule": "no links"}]


def test_a_prompt_field_is_read_from_the_row_or_refused_before_any_work(folders, tmp_path):
    """``{subreddit}`` (no default) is the row's column in training and inference; a file without it is refused
    naming the file and the column, before any replica or shard (before: a row's own column was refused as missing)."""
    folder = folders["answer-tokens"]
    template = "Subreddit: {subreddit} Rule: {rule} Comment: {text} Answer:"
    good = write(tmp_path / "good.csv", comment_text=["you are bad", "the links", "a spam", "good"],
                 subreddit=["spam", "links", "spam", "no"], toxic=["1", "0", "1", "0"])
    bad = write(tmp_path / "bad.csv", comment_text=["you are bad"], toxic=["1"])
    sub = predict(infer_job(folder, good, tmp_path / "p", prompt=template), detect_runtime(1, "cpu"))
    assert sub is not None and len(pd.read_csv(tmp_path / "p" / "sub.csv")) == 4
    with pytest.raises(ValueError, match=r"bad\.csv: the prompt template names \{subreddit\}, but the file has no column 'subreddit'"):
        predict(infer_job(folder, bad, tmp_path / "q", prompt=template), detect_runtime(1, "cpu"))
    assert not (tmp_path / "q").exists()  # nothing started, nothing written
    job = TrainJob(checkpoint=str(folder), train_csv=str(good), valid_csv=str(bad), out_dir=str(tmp_path / "t"),
                   prompt=template, max_len=48, batch_size=2, epochs=1)
    with pytest.raises(ValueError, match=r"bad\.csv: .*no column 'subreddit'"):
        bound_kind(job)
    kind, tok = bound_kind(TrainJob(checkpoint=str(folder), train_csv=str(good), valid_csv=str(good),
                                    out_dir=str(tmp_path / "t"), prompt=template, max_len=48, batch_size=2, epochs=1))
    seen = tok.decode(kind.encode(tok, ["good"], 48, row_fields(read_csv_checked(good, fields=kind.row_columns(good)))[1:2])["input_ids"][0])
    assert seen.startswith("Subreddit: links Rule: No toxic")


@pytest.mark.parametrize("name", ["decoder", "answer-tokens"])
def test_special_token_strings_in_a_row_are_text(folders, name):
    """``</s>`` (eos = pad) and ``<s>`` (bos) inside a comment or a rule tokenize as text: no row holds the special
    ids (before: they did, and a decoder's test set was refused whole: "a real token equals the pad id")."""
    kind, tok = bound(folders[name])
    specials = {tok.eos_token_id, tok.bos_token_id}
    batch = kind.encode(tok, ["you are </s> bad <s>", "</s>"], 48, [{"rule": "no </s> spam"}] * 2)
    real = batch["input_ids"][batch["attention_mask"].bool()].tolist()
    assert not specials & set(real), real
    lengths, ids = kind.packed(tok, ["you are </s> bad <s>"], 48)  # checked: not refused
    assert not specials & set(ids.tolist())


def test_a_templates_own_special_tokens_stay_special(folders):
    """The template is configuration, the row is data: ``<s>`` written in the template is the bos id, in the rule text."""
    kind, tok = bound(folders["answer-tokens"])
    kind = kind.__class__(prompt=kind.prompt.__class__(template="<s>Rule: {rule} Comment: {text} Answer:"),
                          yes_ids=kind.yes_ids, no_ids=kind.no_ids)
    ids = kind.encode(tok, ["bad"], 48, [{"rule": "<s> no spam"}])["input_ids"][0].tolist()
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1


@pytest.mark.parametrize("texts", [["you are bad", "", "   ", "good", "the spam links"],  # before: "cannot reshape ..."
                                   ["you are bad", "you are </s>", "good"]])  # before: "a real token equals the pad id"
def test_empty_blank_and_special_rows_are_predicted(folders, tmp_path, texts):
    """A decoder whose tokenizer adds no bos: empty and blank rows, and a row of ``</s>``, each get a prediction
    (one per input row, finite), beside ordinary rows (before: the replica failed with "cannot reshape tensor of
    0 elements", or the whole set was refused)."""
    csv = write(tmp_path / "test.csv", comment_text=texts)
    predict(infer_job(folders["decoder"], csv, tmp_path), detect_runtime(1, "cpu"))
    sub = pd.read_csv(tmp_path / "sub.csv", dtype={"id": str}, keep_default_na=False)
    assert sub["id"].tolist() == [str(i) for i in range(len(texts))]
    assert np.isfinite(sub["toxic"].to_numpy()).all()
    kind, tok = bound(folders["decoder"])
    batch = kind.encode(tok, ["", "   "], 48)
    assert batch["attention_mask"].sum(1).tolist() == [1, 1]  # a stand-in token, never the pad
    assert tok.pad_token_id not in batch["input_ids"][batch["attention_mask"].bool()].tolist()


def test_the_test_time_split_carries_the_rows_fields(tmp_path):
    """ttt_split's parts keep the columns both files have (the per-row ``rule``), so test-time training reads each
    row's rule as inference does (before: only id, text, label and source were written)."""
    from kitlib.cv.splits import ttt_split

    n = 20
    train = write(tmp_path / "train.csv", comment_text=[f"row {i}" for i in range(n)], rule=[f"rule {i}" for i in range(n)],
                  toxic=[str(i % 2) for i in range(n)])
    test = write(tmp_path / "test.csv", comment_text=["a", "b"], rule=["test rule a", "test rule b"], label=["1", ""])
    fit, holdout, _ = ttt_split(train, test, tmp_path / "split", 0.2, 0, test_label_col="label")
    fit_df = pd.read_csv(fit, dtype=str, keep_default_na=False)
    assert fit_df.loc[fit_df["id"] == "test:0", "rule"].tolist() == ["test rule a"]
    rules = dict(zip(fit_df["id"], fit_df["rule"]))
    assert all(rules[f"train:{i}"] == f"rule {i}" for i in range(n) if f"train:{i}" in rules)
    held = pd.read_csv(holdout, dtype=str, keep_default_na=False)
    assert (held["rule"] == "rule " + held["id"].str.slice(6)).all()
