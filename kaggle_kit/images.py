"""Kaggle's notebook images, one row each: :data:`IMAGES`, the one home of what each image ships.

A kernel pushed with ``enable_internet: false`` can use only what its image has, plus the wheels of
an attached data set (:mod:`.wheels`). Each row says the image's Python, the platform its wheels
must be built for, and the distributions it ships (name -> version; ``None``: shipped, its version
not recorded here, so any version is taken as the image's). :data:`ACCELERATOR_IMAGE` says which
image a kernel of each accelerator runs on.

Sources (check them again when Kaggle moves its images): the GPU image as measured in a Kaggle
session (Python 3.12, torch 2.10, peft 0.19, accelerate 1.13, keras 3.13; no bitsandbytes, no
vLLM); the TPU image as published in Kaggle/docker-python ``tpu/config.txt`` and
``tpu/requirements.in`` (Python 3.12, torch and torch_xla 2.8.0, jax 0.7.2, tensorflow-cpu 2.20,
Keras 3, keras-hub, flax; transformers unpinned). The unversioned rows are packages both images
install from Kaggle/docker-python's requirements without a pin.
"""
from __future__ import annotations

from typing import NamedTuple

from packaging.utils import canonicalize_name


class Image(NamedTuple):
    """One Kaggle notebook image.

    Attributes:
        name: the row's name (``gpu``, ``tpu``).
        python: its Python, ``major.minor``.
        platforms: the wheel platform tags it runs (pip's ``--platform``), most specific first.
        packages: canonical distribution name -> version it ships (None: shipped, version not recorded).
    """

    name: str
    python: str
    platforms: tuple[str, ...]
    packages: dict[str, str | None]

    @property
    def python_tag(self) -> str:
        """The CPython tag of its Python (``cp312``)."""
        return "cp" + self.python.replace(".", "")

    def version(self, dist: str) -> str | None:
        """The version of ``dist`` it ships (``""`` when shipped at a version not recorded); None when it does not ship it."""
        key = canonicalize_name(dist)
        if key not in self.packages:
            return None
        return self.packages[key] or ""


# Unversioned packages both images ship (Kaggle/docker-python installs them without a pin).
_COMMON = {name: None for name in (
    "numpy", "pandas", "pyarrow", "scikit-learn", "matplotlib", "tqdm", "pyyaml", "psutil", "packaging", "requests",
    "safetensors", "huggingface-hub", "tokenizers", "transformers", "sentencepiece", "protobuf", "papermill",
    "ipykernel", "ipython", "nbformat", "filelock", "fsspec", "jinja2", "scipy", "pillow")}
# Both images run glibc 2.35 or newer on x86-64 (GPU: Ubuntu 22.04; TPU: python:3.12, Debian 12): every manylinux
# tag up to 2.35, spelled out (pip's --platform takes each as given, it does not expand older ones)
_MANYLINUX_X86 = tuple(f"manylinux_2_{k}_x86_64" for k in range(35, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")

IMAGES: dict[str, Image] = {
    "gpu": Image("gpu", "3.12", _MANYLINUX_X86, {**_COMMON, "torch": "2.10", "peft": "0.19", "accelerate": "1.13",
                                                 "keras": "3.13", "torchvision": None, "torchaudio": None}),
    "tpu": Image("tpu", "3.12", _MANYLINUX_X86, {**_COMMON, "torch": "2.8.0", "torch-xla": "2.8.0", "torchvision": "0.23.0",
                                                 "torchaudio": "2.8.0", "jax": "0.7.2", "jaxlib": "0.7.2", "keras": None,
                                                 "keras-hub": None, "keras-nlp": None, "keras-cv": None, "flax": None,
                                                 "optax": None, "grain": None, "tensorflow-cpu": "2.20.0",
                                                 "accelerate": None, "kagglehub": None, "fastparquet": None}),
}
# the image a kernel of each accelerator (kaggle_kit.accelerators) runs on; "none": Kaggle's CPU image, not recorded
ACCELERATOR_IMAGE = {"gpu": "gpu", "tpu": "tpu"}


def image_for(accelerator: str) -> Image:
    """The image a kernel of ``accelerator`` runs on (:data:`ACCELERATOR_IMAGE`).

    Raises:
        ValueError: no image is recorded for it, naming the accelerator and the fix.
    """
    if accelerator not in ACCELERATOR_IMAGE:
        raise ValueError(f"accelerator {accelerator!r}: no Kaggle image recorded for it in kaggle_kit/images.py "
                         f"(recorded: {', '.join(ACCELERATOR_IMAGE)}): give the notebook an accelerator "
                         "(gpu or tpu), or add the image's row to IMAGES")
    return IMAGES[ACCELERATOR_IMAGE[accelerator]]
