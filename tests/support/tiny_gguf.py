"""A tiny random Gemma 3 written as a GGUF file, as llama.cpp lays one out, for the GGUF converter's tests.

:func:`write_gemma3_gguf` draws a Gemma 3 causal LM (hidden 32, 2 layers, head_dim 16) from a seed, and writes
it with the ``gguf`` package: F32 tensors under llama.cpp's names (``gguf.get_tensor_name_map``), Gemma's norm
weights stored as ``1 + w`` (what transformers' GGUF reader subtracts again), and a SentencePiece-style
vocabulary (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3, ``<mask>`` 4, then ``▁``-prefixed words of the prompt and
the sample, with every prefix, so the merges transformers rebuilds from it give whole words).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")  # Gemma's first five (transformers' GemmaTokenizer adds a
# <mask> it does not find, past the embedding's rows)
ANSWERS = ("Yes", "No", "yes", "no")


def vocabulary(words: int = 300) -> list[str]:
    """The token list: :data:`SPECIAL`, the single characters, then each word (``▁``-prefixed and bare for the
    answers) with all its prefixes; the words are the prompt's and the sample's ``words`` commonest."""
    import pandas as pd

    from conftest import SAMPLE
    from kitlib.models.kinds import DEFAULT_RULE, DEFAULT_TEMPLATE

    text = (DEFAULT_TEMPLATE + " " + DEFAULT_RULE).replace("{text}", "").replace("{rule}", "")
    common = Counter(w for t in pd.read_csv(SAMPLE / "train.csv")["comment_text"][:1000] for w in str(t).split())
    found = list(dict.fromkeys([*text.split(), *ANSWERS, *(w for w, _ in common.most_common(words))]))
    pieces = ["\u2581" + w for w in found] + list(ANSWERS)
    tokens = dict.fromkeys(SPECIAL)
    tokens.update(dict.fromkeys(sorted({c for p in pieces for c in p})))
    for p in pieces:
        tokens.update(dict.fromkeys(p[:i] for i in range(2, len(p) + 1)))
    return list(tokens)


def tiny_gemma3(vocab: int, seed: int = 0):
    """A random ``Gemma3ForCausalLM`` (hidden 32, 2 layers, 2 heads, 1 key/value head, head_dim 16), weights
    drawn at std 0.3 (norms around 1) so that predictions spread over rows."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                              sliding_window=64, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                              rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.normal_(0, 0.1)
    return model.eval()


def write_gemma3_gguf(path: Path, seed: int = 0, licence: str | None = None):
    """Write :func:`tiny_gemma3`'s model and :func:`vocabulary` as a GGUF file at ``path`` (F32 tensors, file type
    ALL_F32; ``general.license`` when ``licence`` is given); returns the model."""
    import gguf
    import numpy as np

    tokens = vocabulary()
    model = tiny_gemma3(len(tokens), seed)
    c = model.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, c.num_hidden_layers)
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if licence:
        w.add_license(licence)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_sliding_window(c.sliding_window)
    w.add_rope_freq_base(1e6)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([3, 3, 3, 2, 4] + [1] * (len(tokens) - len(SPECIAL)))
    w.add_pad_token_id(0)
    w.add_eos_token_id(1)
    w.add_bos_token_id(2)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)
    for name, t in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied to the embedding, as in the real file
        array = t.detach().float().numpy() + (1.0 if name.endswith("norm.weight") else 0.0)
        w.add_tensor(names.get_name(name, try_suffixes=(".weight",)), np.ascontiguousarray(array, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model
