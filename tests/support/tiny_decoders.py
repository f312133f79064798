"""Tiny random decoders of each family, built offline from a config with a word-level tokenizer of the sample.

Shared by the decoder tests (``tests/test_decoder.py``, ``tests/test_decoder_runs.py``): Llama, Qwen3 and
Gemma2, as sequence classifiers (``decoder``) or causal LMs (``answer-tokens``), hidden 32, 2 layers.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

FAMILIES = ("llama", "qwen3", "gemma2")
TINY = dict(vocab_size=0, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1)


def sample_dir() -> Path:
    """The bundled sample's folder (``tests/conftest.py``'s ``SAMPLE``)."""
    from conftest import SAMPLE

    return SAMPLE


def tiny_tokenizer(out: Path):
    """A word-level tokenizer of the prompt's words and the sample's 1,500 commonest, with <unk>, <eos>, Yes/No; no pad token."""
    import pandas as pd
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from kitlib.models.kinds import DEFAULT_RULE, DEFAULT_TEMPLATE

    words = Counter(w for t in pd.read_csv(sample_dir() / "train.csv")["comment_text"][:2000] for w in str(t).split())
    vocab = ["<unk>", "<eos>", "Yes", "No", "yes", "no"]
    vocab += [w for w in dict.fromkeys((DEFAULT_TEMPLATE + " " + DEFAULT_RULE).split()) if w not in vocab and "{" not in w]
    vocab += [w for w, _ in words.most_common(1500) if w not in vocab]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.save_pretrained(out)
    return fast


def tiny_config(family: str, vocab: int, causal: bool, **sizes):
    """The family's config at :data:`TINY`'s sizes (``sizes`` override them); a classifier has one logit named ``toxic``."""
    from transformers import Gemma2Config, LlamaConfig, Qwen3Config

    cls = {"llama": LlamaConfig, "qwen3": Qwen3Config, "gemma2": Gemma2Config}[family]
    extra = {"head_dim": 16} if family != "llama" else {}
    arch = f"{cls.__name__[:-6]}{'ForCausalLM' if causal else 'ForSequenceClassification'}"
    return cls(**{**TINY, **sizes, "vocab_size": vocab}, **extra, eos_token_id=1, architectures=[arch], num_labels=1,
               id2label={0: "toxic"}, label2id={"toxic": 0})


def labelled_slices(root: Path, train_rows: int = 64, valid_rows: int = 48) -> Path:
    """``root`` with ``train.csv`` and ``valid.csv`` (and ``test.csv``: the validation rows without labels): the
    sample's first 40 toxic and 72 other training rows, shuffled (seed 0), texts cut to 300 characters."""
    import pandas as pd

    root.mkdir(parents=True, exist_ok=True)
    df = pd.read_csv(sample_dir() / "train.csv", dtype={"id": str}, keep_default_na=False)
    pos, neg = df[df["toxic"] >= 0.5], df[df["toxic"] < 0.5]
    rows = pd.concat([pos.iloc[:40], neg.iloc[:72]]).sample(frac=1.0, random_state=0)
    rows["comment_text"] = rows["comment_text"].str.slice(0, 300)
    rows.iloc[:train_rows].to_csv(root / "train.csv", index=False)
    valid = rows.iloc[train_rows:train_rows + valid_rows]
    valid.to_csv(root / "valid.csv", index=False)
    valid[["id", "comment_text"]].to_csv(root / "test.csv", index=False)
    return root


def build(out: Path, family: str, causal: bool, seed: int = 0, tokenizer=None, **sizes) -> Path:
    """A tiny random decoder folder (``sizes``: :data:`TINY`'s overridden); weights redrawn at std 0.3 so that
    predictions spread over rows. ``tokenizer``: one already saved in ``out`` (None: :func:`tiny_tokenizer`'s)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    tok = tokenizer or tiny_tokenizer(out)
    config = tiny_config(family, len(tok), causal, **sizes)
    torch.manual_seed(seed)
    model = (AutoModelForCausalLM if causal else AutoModelForSequenceClassification).from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    model.save_pretrained(out)
    return out
