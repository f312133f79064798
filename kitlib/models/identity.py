"""What a base model is: its content, not the bytes its files were written with.

One rule, used wherever the kit asks "is this the same model?": LoRA adapters name the base they were
trained on (:mod:`kitlib.models.adapters`), and a training run's saved state names the folder it started
from (:func:`kitlib.training.resume.model_identity`).

:func:`identity` reads a checkpoint folder into two parts:

* ``tensors``: for every tensor of its ``.safetensors`` files, a hash of its name, dtype, shape and
  :data:`SAMPLE_BYTES` bytes of its data at the start, the middle and the end (all of it when smaller). Two
  fine-tunes of one base (another seed, another revision) differ there; the same weights re-saved into
  other shards, in another order or with other file metadata do not. A weight file of another format
  (``.bin``, ``.pt``, ``.gguf``) counts as one entry, its bytes sampled at four places.
* ``config``: ``config.json``'s values, less what only says how and where it was written
  (:data:`SERIALISATION_KEYS`: ``transformers_version``, ``dtype``/``torch_dtype``, ``_name_or_path``, ...).

Two identities are the same model when their tensors are the same and no config value both of them
name differs (:func:`differences`). Reading costs at most 3 x 4 KiB a tensor.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

from .config import read_config

SAMPLE_BYTES = 4096  # read at the start, middle and end of each tensor's data
FILE_BLOCK = 1 << 16  # a weight file of another format: bytes read at each of 4 places
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
# config.json keys that say how, where or with what it was written, not what the model computes
SERIALISATION_KEYS = frozenset({"transformers_version", "_name_or_path", "_commit_hash", "dtype", "torch_dtype",
                                "_attn_implementation_autoset", "attn_implementation", "use_cache"})


def identity(folder: str | os.PathLike) -> dict:
    """``{"config": {...}, "tensors": {name: 16 hex digits}}`` of the checkpoint in ``folder`` (module doc).

    Raises:
        FileNotFoundError: ``folder`` has no ``config.json``, or no weight file.
        ValueError: a ``.safetensors`` file whose header cannot be read (the file named).
    """
    folder = Path(folder)
    config = read_config(folder)
    tensors: dict[str, str] = {}
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"{folder}: no weight file ({', '.join(WEIGHT_SUFFIXES)}), so no model to identify")
    for f in files:
        tensors.update(_safetensors(f) if f.suffix == ".safetensors" else {f"file {f.name}": file_digest(f)})
    return {"config": {k: v for k, v in config.items() if k not in SERIALISATION_KEYS}, "tensors": tensors}


def digest(ident: dict) -> str:
    """16 hex digits of an :func:`identity`'s tensors: one model's content in one string (a run's state records it)."""
    return hashlib.sha256(json.dumps(ident["tensors"], sort_keys=True).encode()).hexdigest()[:16]


def differences(recorded: dict, current: dict, most: int = 3) -> list[str]:
    """What makes ``current`` another model than ``recorded`` (two :func:`identity` values), each named;
    empty when they are the same model. At most ``most`` tensors are named, then a count."""
    out = [f"config {k}: {recorded['config'][k]!r} then, {current['config'][k]!r} now"
           for k in sorted(recorded["config"].keys() & current["config"].keys())
           if recorded["config"][k] != current["config"][k]]
    was, now = recorded["tensors"], current["tensors"]
    for what, names in (("weights differ", [n for n in sorted(was.keys() & now.keys()) if was[n] != now[n]]),
                        ("tensors gone", sorted(was.keys() - now.keys())),
                        ("tensors new", sorted(now.keys() - was.keys()))):
        if names:
            more = f" and {len(names) - most} more" if len(names) > most else ""
            out.append(f"{what} in {len(names)} tensor(s): {', '.join(names[:most])}{more}")
    return out


def _safetensors(path: Path) -> dict[str, str]:
    """name -> hash of each tensor in a ``.safetensors`` file (its 8-byte header length, then the JSON header)."""
    with open(path, "rb") as f:
        try:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        except (struct.error, ValueError) as e:
            raise ValueError(f"{path}: not a readable safetensors file ({e}); the checkpoint's weights are damaged "
                             "or only partly copied") from e
        out = {}
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            begin, end = meta["data_offsets"]
            h = hashlib.sha256(f"{meta['dtype']}{meta['shape']}".encode())
            for at in sorted({begin, max(begin, (begin + end - SAMPLE_BYTES) // 2), max(begin, end - SAMPLE_BYTES)}):
                f.seek(8 + size + at)
                h.update(f.read(min(SAMPLE_BYTES, end - at)))
            out[name] = h.hexdigest()[:16]
    return out


def file_digest(path: Path) -> str:
    """16 hex digits of a weight file of another format (a ``.gguf`` too): its size and :data:`FILE_BLOCK` bytes at 4
    places (reads 256 KiB, whatever the file's size)."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        for at in (0, size // 3, 2 * size // 3, max(0, size - FILE_BLOCK)):
            f.seek(at)
            h.update(f.read(FILE_BLOCK))
    return h.hexdigest()[:16]
