"""Where things are: this repository, a Kaggle kernel, or Colab.

Kaggle mounts competition data at ``/kaggle/input/competitions/<slug>/`` in newer images and
``/kaggle/input/<slug>/`` in older ones, and keeps output in ``/kaggle/working`` (Kaggle docs,
"Kaggle Notebooks: data sources"). Offline, the data is the sample bundled in ``data/jigsaw-sample``.

``KAGGLE_INPUT_DIR`` and ``KAGGLE_WORKING_DIR`` (environment) stand in for ``/kaggle/input`` and
``/kaggle/working`` when set: ``scripts/kernels.py run-local`` runs a staged kernel in a folder laid
out like Kaggle's without writing to ``/kaggle``. They are read at call time, not at import.

Kaggle saves everything in ``/kaggle/working`` as the kernel's output. What the user does not
need there (vendored code, caches such as the tiny model and the XLA compile cache, copies of
the inputs such as split CSVs, prediction shards) goes to :func:`scratch_dir` instead.
"""
from __future__ import annotations

import os
from pathlib import Path

COMPETITION = "jigsaw-multilingual-toxic-comment-classification"
SAMPLE_DIR = Path("data") / "jigsaw-sample"
KAGGLE_INPUT = Path("/kaggle/input")
KAGGLE_WORKING = Path("/kaggle/working")
INPUT_ENV = "KAGGLE_INPUT_DIR"
WORKING_ENV = "KAGGLE_WORKING_DIR"
TMP_ENV = "KAGGLE_TMP_DIR"  # run-local sets it; the vendored cell (kaggle_kit/vendor_cell.py) reads the same rule


def kaggle_input_dir() -> Path:
    """Kaggle's input mount: ``$KAGGLE_INPUT_DIR`` when set (local runs), else ``/kaggle/input``."""
    return Path(os.environ[INPUT_ENV]) if os.environ.get(INPUT_ENV) else KAGGLE_INPUT


def kaggle_working_dir() -> Path:
    """Kaggle's output folder: ``$KAGGLE_WORKING_DIR`` when set (local runs), else ``/kaggle/working``."""
    return Path(os.environ[WORKING_ENV]) if os.environ.get(WORKING_ENV) else KAGGLE_WORKING


def project_root(start: str | Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: cwd) holding ``kitlib/`` and ``data/``; else ``start``."""
    start = Path(start or Path.cwd()).resolve()
    for p in (start, *start.parents):
        if (p / "kitlib").is_dir() and (p / "data").is_dir():
            return p
    return start


def competition_dir(slug: str = COMPETITION, kaggle_input: Path | None = None) -> Path | None:
    """The mounted competition folder on Kaggle (either layout), or None.

    ``kaggle_input`` defaults to :func:`kaggle_input_dir` (``$KAGGLE_INPUT_DIR`` or ``/kaggle/input``).
    """
    kaggle_input = Path(kaggle_input) if kaggle_input is not None else kaggle_input_dir()
    for p in (kaggle_input / "competitions" / slug, kaggle_input / slug):
        if p.is_dir():
            return p
    return None


def is_competition_data(data_dir: str | os.PathLike) -> bool:
    """True when ``data_dir`` is the mounted competition folder (real data, on Kaggle or a Kaggle-like layout)."""
    comp = competition_dir()
    return comp is not None and Path(data_dir).resolve() == comp.resolve()


# The competition's training file first (Jigsaw Multilingual ships jigsaw-toxic-comment-train.csv,
# its English training set), then the bundled sample's name.
TRAIN_FILES = ("jigsaw-toxic-comment-train.csv", "train.csv")


def train_file(data_dir: str | os.PathLike) -> Path:
    """The training CSV in ``data_dir``: the first of :data:`TRAIN_FILES` that exists.

    Raises:
        FileNotFoundError: none of them is there (the message lists what the folder holds).
    """
    data_dir = Path(data_dir)
    for name in TRAIN_FILES:
        if (data_dir / name).is_file():
            return data_dir / name
    have = ", ".join(sorted(p.name for p in data_dir.glob("*.csv"))) if data_dir.is_dir() else "nothing (no such folder)"
    raise FileNotFoundError(f"{data_dir}: no training file ({' or '.join(TRAIN_FILES)}); it holds {have}. Set train_csv.")


def default_data_dir(root: Path | None = None) -> Path:
    """The competition data on Kaggle, else the bundled sample under ``root``."""
    return competition_dir() or (root or project_root()) / SAMPLE_DIR


def working_dir(root: Path | None = None) -> Path:
    """``/kaggle/working`` (or ``$KAGGLE_WORKING_DIR``) when that folder exists, else ``root`` (the repository)."""
    w = kaggle_working_dir()
    return w if w.is_dir() else (root or project_root())


def scratch_dir(root: Path | None = None) -> Path:
    """Where a kernel keeps what is not its output (caches, split copies, shards, vendored code).

    ``$KAGGLE_TMP_DIR`` when set (run-local: ``ROOT/<slug>/tmp``); else, in a kernel (the working
    folder exists: ``/kaggle/working``), ``<tmp>/kaggle-kit`` (``tempfile.gettempdir()``, ``/tmp``
    on Kaggle: not saved as output); else ``<root>/.cache`` (the repository's ignored folder).
    The folder is created.
    """
    import tempfile

    if os.environ.get(TMP_ENV):
        out = Path(os.environ[TMP_ENV])
    elif kaggle_working_dir().is_dir():
        out = Path(tempfile.gettempdir()) / "kaggle-kit"
    else:
        out = (root or project_root()) / ".cache"
    out.mkdir(parents=True, exist_ok=True)
    return out


# Hand-off between notebooks, relative to working_dir(): the torch training notebook saves a
# transformers checkpoint (model + tokenizer) here; the inference notebook's model="auto" loads it.
TRAINED_CHECKPOINT = Path("artifacts") / "xlmr-toxic"
CV_GROUP = Path("artifacts") / "cv"  # the training notebook's group folder with folds=K (kitlib.cv.groups)
TTT_CHECKPOINT = Path("artifacts") / "ttt-model"  # the test-time training notebook's model (its adapters with LoRA)
# The Keras training notebook saves its .keras model here.
KERAS_MODEL = Path("artifacts") / "keras-xlmr" / "model.keras"
# The sharded LoRA notebook (notebooks/keras_sharded_lora.py) saves its adapters, head and base record here.
SHARDED_ADAPTER = Path("artifacts") / "keras-sharded-lora"
