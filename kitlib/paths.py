"""Where things are: this repository, a Kaggle kernel, or Colab.

Kaggle mounts competition data at ``/kaggle/input/competitions/<slug>/`` in newer images and
``/kaggle/input/<slug>/`` in older ones, and keeps output in ``/kaggle/working`` (Kaggle docs,
"Kaggle Notebooks: data sources"). Offline, the data is the sample bundled in ``data/jigsaw-sample``.
"""
from __future__ import annotations

from pathlib import Path

COMPETITION = "jigsaw-multilingual-toxic-comment-classification"
SAMPLE_DIR = Path("data") / "jigsaw-sample"
KAGGLE_INPUT = Path("/kaggle/input")
KAGGLE_WORKING = Path("/kaggle/working")


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) holding ``kitlib/`` and ``data/``; else ``start``."""
    start = Path(start or Path.cwd()).resolve()
    for p in (start, *start.parents):
        if (p / "kitlib").is_dir() and (p / "data").is_dir():
            return p
    return start


def competition_dir(slug: str = COMPETITION, kaggle_input: Path = KAGGLE_INPUT) -> Path | None:
    """The mounted competition folder on Kaggle (either layout), or None."""
    for p in (kaggle_input / "competitions" / slug, kaggle_input / slug):
        if p.is_dir():
            return p
    return None


def default_data_dir(root: Path | None = None) -> Path:
    """The competition data on Kaggle, else the bundled sample under ``root``."""
    return competition_dir() or (root or project_root()) / SAMPLE_DIR


def working_dir(root: Path | None = None) -> Path:
    """``/kaggle/working`` on Kaggle, else ``root`` (the repository)."""
    return KAGGLE_WORKING if KAGGLE_WORKING.is_dir() else (root or project_root())


# Hand-off between notebooks, relative to working_dir(): the torch training notebook saves a
# transformers checkpoint (model + tokenizer) here; the inference notebook's model="auto" loads it.
TRAINED_CHECKPOINT = Path("artifacts") / "xlmr-toxic"
# The Keras training notebook saves its .keras model here.
KERAS_MODEL = Path("artifacts") / "keras-xlmr" / "model.keras"
