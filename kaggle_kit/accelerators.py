"""The accelerators a kernel can ask for: one table row each, read by name.

The rows follow Kaggle's list of machine shapes as the kaggle client names them
(``kaggle kernels push --accelerator``, ``kernel-metadata.json`` ``machine_shape``; kaggle-cli
``docs/kernels.md``: NvidiaTeslaT4, NvidiaL4, NvidiaH100, NvidiaRtxPro6000, NvidiaTeslaA100,
TpuV5E8, TpuV6E8, and the retired NvidiaTeslaP100, TpuV38, Tpu1VmV38). Free sessions are
TPU v5e-8 and 2x T4; TPU v6e-8, L4, H100, A100 and RTX Pro 6000 are offered for some
competitions only. Each row says which of ``kitlib.run.runtime``'s launch modes the machine runs
(``runtimes``: ``tpu`` is torch_xla, or JAX in the Keras notebook; the GPUs are CUDA), so a
notebook's ``accelerator`` parameter can be checked against the kernel's machine.

A notebook may declare its accelerator in its own metadata (``kaggle: {accelerator: ...}``): as
this kit writes it (``tpu``), or as Kaggle's editor saves it (``tpuV5e8``, ``nvidiaTeslaT4``, ...),
or as a machine shape (``TpuV5E8``); names are matched without regard to case.

P100 is refused (``refused``): Kaggle's image ships a CUDA 12.8 torch without Pascal (sm_60)
kernels, so a P100 session finds CUDA and then fails on its first CUDA operation with
``cudaErrorNoKernelImageForDevice`` (kaggle-cli #1156). The retired TPU v3-8 names mean the
TPU row (the client says sessions run on TPU v5e-8 instead).
"""
from __future__ import annotations

from typing import NamedTuple


class Accelerator(NamedTuple):
    """What one accelerator sets in ``kernel-metadata.json``, and the other names it goes by.

    Attributes:
        enable_tpu, enable_gpu: the kernel-metadata flags.
        machine_shape: Kaggle's name (None: no accelerator).
        aliases: Kaggle editor names and machine shapes (any case).
        runtimes: ``kitlib.run.runtime`` launch modes that run on it (a notebook's ``accelerator`` parameter).
        kind: ``tpu``, ``gpu`` or ``none`` (session limits, image rules).
        what: the machine in words.
        refused: why a push asking for it is refused ("" when it is not).
    """

    enable_tpu: bool
    enable_gpu: bool
    machine_shape: str | None
    aliases: tuple[str, ...]
    runtimes: tuple[str, ...]
    kind: str
    what: str
    refused: str = ""


_CPU = ("cpu", "xla-cpu", "xla-cpu-processes")
P100_REFUSED = ("Kaggle's image ships a CUDA 12.8 torch without Pascal (sm_60) kernels: a P100 session finds CUDA, "
                "then fails on its first CUDA operation with cudaErrorNoKernelImageForDevice (kaggle-cli #1156). "
                "Use gpu (2x T4) or l4")

ACCELERATORS: dict[str, Accelerator] = {
    #              enable_tpu enable_gpu machine_shape   also written as
    "tpu": Accelerator(True, False, "TpuV5E8", ("tpuV5e8", "tpu1vmV38", "tpuV38", "Tpu1VmV38", "TpuV38"),
                       ("tpu",), "tpu", "TPU v5e-8 (8 chips; torch_xla, or JAX in the Keras notebook)"),
    "tpu-v6e": Accelerator(True, False, "TpuV6E8", ("tpuV6e8",), ("tpu",), "tpu",
                           "TPU v6e-8 (some competitions; torch_xla, or JAX in the Keras notebook)"),
    "gpu": Accelerator(False, True, "NvidiaTeslaT4", ("nvidiaTeslaT4", "t4"), ("cuda",), "gpu", "2x NVIDIA T4 (CUDA)"),
    "l4": Accelerator(False, True, "NvidiaL4", ("nvidiaL4",), ("cuda",), "gpu", "NVIDIA L4 (some competitions; CUDA)"),
    "h100": Accelerator(False, True, "NvidiaH100", ("nvidiaH100",), ("cuda",), "gpu", "NVIDIA H100 (some competitions; CUDA)"),
    "a100": Accelerator(False, True, "NvidiaTeslaA100", ("nvidiaTeslaA100",), ("cuda",), "gpu",
                        "NVIDIA A100 (some competitions; CUDA)"),
    "rtx-pro-6000": Accelerator(False, True, "NvidiaRtxPro6000", ("nvidiaRtxPro6000",), ("cuda",), "gpu",
                                "NVIDIA RTX Pro 6000 (some competitions; CUDA)"),
    "p100": Accelerator(False, True, "NvidiaTeslaP100", ("nvidiaTeslaP100",), ("cuda",), "gpu", "NVIDIA P100",
                        P100_REFUSED),
    "none": Accelerator(False, False, None, (), _CPU, "none", "no accelerator (CPU)"),
}

_BY_NAME = {name.lower(): key for key, row in ACCELERATORS.items() for name in (key, *row.aliases, row.machine_shape or key)}


def accelerator_name(name) -> str | None:
    """This kit's accelerator (a key of :data:`ACCELERATORS`) for ``name`` in any of its spellings
    (``tpuV5e8`` -> ``tpu``, ``nvidiaTeslaT4`` -> ``gpu``, ``NvidiaH100`` -> ``h100``); None when
    ``name`` is none of them."""
    return _BY_NAME.get(str(name).strip().lower()) if name is not None else None


def notebook_accelerator(nb) -> str | None:
    """The accelerator a notebook declares in its own metadata (``kaggle: {accelerator: ...}``),
    as written there (e.g. ``tpuV5e8``), or None."""
    acc = (nb.metadata.get("kaggle") or {}).get("accelerator")
    return str(acc) if acc is not None else None
