"""The accelerators a kernel can ask for: one table row each, read by name.

Kaggle's TPU sessions are TPU v5e-8 (v3-8 retired) and its GPU sessions 2x T4 (P100 requests
run on T4). ``machine_shape`` is the name ``kaggle kernels push --accelerator`` accepts (kaggle
2.2 CLI help; kagglesdk ``ApiSaveKernelRequest.machine_shape``). A notebook may declare its
accelerator in its own metadata (``kaggle: {accelerator: ...}``): as this kit writes it
(``tpu``), or as Kaggle's editor saves it (``tpuV5e8``, ``nvidiaTeslaT4``, ...), or as a machine
shape (``TpuV5E8``); names are matched without regard to case.
"""
from __future__ import annotations

from typing import NamedTuple


class Accelerator(NamedTuple):
    """What one accelerator sets in ``kernel-metadata.json``, and the other names it goes by."""

    enable_tpu: bool
    enable_gpu: bool
    machine_shape: str | None
    aliases: tuple[str, ...]  # Kaggle editor names and machine shapes (any case)


ACCELERATORS: dict[str, Accelerator] = {
    #         enable_tpu enable_gpu machine_shape    also written as
    "tpu": Accelerator(True, False, "TpuV5E8", ("tpuV5e8", "tpu1vmV38", "tpuV38", "TpuV5E8", "Tpu1VmV38", "TpuV38")),
    "gpu": Accelerator(False, True, "NvidiaTeslaT4", ("nvidiaTeslaT4", "nvidiaTeslaP100", "NvidiaTeslaT4", "NvidiaTeslaP100")),
    "none": Accelerator(False, False, None, ()),
}

_BY_NAME = {name.lower(): key for key, row in ACCELERATORS.items() for name in (key, *row.aliases)}


def accelerator_name(name) -> str | None:
    """This kit's accelerator (``tpu``, ``gpu``, ``none``) for ``name`` in any of its spellings
    (``tpuV5e8`` -> ``tpu``, ``nvidiaTeslaT4`` -> ``gpu``); None when ``name`` is none of them."""
    return _BY_NAME.get(str(name).strip().lower()) if name is not None else None


def notebook_accelerator(nb) -> str | None:
    """The accelerator a notebook declares in its own metadata (``kaggle: {accelerator: ...}``),
    as written there (e.g. ``tpuV5e8``), or None."""
    acc = (nb.metadata.get("kaggle") or {}).get("accelerator")
    return str(acc) if acc is not None else None
