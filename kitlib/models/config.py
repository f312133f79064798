"""The one reader of a checkpoint's ``config.json`` (a dict, or transformers' object) and of its adapters' record
(:data:`RECORD_FILE`).

Each file is read from disk once per version (its path, modification time and size); every call gets its own
dict, so a caller may change what it got.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

CONFIG_FILE = "config.json"
RECORD_FILE = "kitlib-adapter.json"  # the adapters' record (kitlib.models.adapters.write_adapter)


@lru_cache(maxsize=128)
def _text(path: str, mtime_ns: int, size: int) -> str:
    return Path(path).read_text(encoding="utf-8")


def _read(p: Path) -> dict | None:
    try:
        st = p.stat()
    except FileNotFoundError:
        return None
    return json.loads(_text(str(p.resolve()), st.st_mtime_ns, st.st_size))


def read_config(folder: str | os.PathLike, missing: dict | None = None) -> dict:
    """``folder``'s ``config.json`` as a dict; no such file: ``missing`` (a copy) when given.

    Raises:
        FileNotFoundError: no ``config.json`` and no ``missing``.
    """
    config = _read(Path(folder) / CONFIG_FILE)
    if config is not None:
        return config
    if missing is None:
        raise FileNotFoundError(f"{folder}: no config.json, so not a checkpoint folder")
    return dict(missing)


def hf_config(folder: str | os.PathLike, **overrides):
    """transformers' config object of ``folder`` (``AutoConfig.from_pretrained``) with ``overrides`` set: the one
    place a checkpoint's config becomes that object (its plain dict: :func:`read_config`)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(folder, **overrides)


def read_record(adapter_dir: str | os.PathLike) -> dict:
    """The adapter checkpoint's :data:`RECORD_FILE` as a dict.

    Raises:
        FileNotFoundError: not an adapter checkpoint written by :func:`kitlib.models.adapters.save_adapter`.
    """
    record = _read(Path(adapter_dir) / RECORD_FILE)
    if record is None:
        raise FileNotFoundError(f"{adapter_dir}: no {RECORD_FILE}, so not an adapter checkpoint kitlib wrote "
                                "(kitlib.models.adapters.save_adapter)")
    return record
