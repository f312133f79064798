"""Staging: one notebook pair -> one Kaggle kernel folder ``build/kernels/<slug>/``.

The folder holds ``<slug>.ipynb`` (the notebook with kitlib vendored in, :mod:`.vendor`) and
``kernel-metadata.json`` (:func:`~.project.derive_metadata`), both written as JSON with every
non-ASCII character escaped (``\\u00d6``): ``kaggle kernels push`` reads them with the locale's
encoding (``open(path)``), and ASCII reads the same under cp1252, UTF-8 or any other locale. A
folder is staged in a scratch folder next to it and moved into place only once it validates
(:func:`kitlib.atomic.atomic_dir`): nothing partial is left behind.

``-p`` parameters are checked and injected as papermill would (:mod:`.parameters`). What Kaggle's
editor left in the notebook's own ``kaggle`` metadata that would change where it runs is removed,
with a note (:func:`strip_editor_metadata`): an image pin (``dockerImageVersionId``: a TPU kernel
with a pinned image runs on the CPU image without torch_xla, kaggle-cli #1197), and flags that
disagree with ``kernel-metadata.json``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

from kitlib.atomic import atomic_dir

from . import pairs as check_pairs
from .accelerators import notebook_accelerator
from .parameters import check_parameters, inject_parameters
from .project import derive_metadata, entry_problems
from .rules import VENDOR_TAG, MetadataError, notebook_parameter, validate_metadata
from .vendor import KITLIB, kitlib_files, vendor_notebook, vendored_files


@dataclass(frozen=True)
class Staged:
    """One staged kernel folder.

    Attributes:
        source: the repository notebook (``notebooks/X.py``).
        folder: ``build/kernels/<slug>/``.
        notebook: the staged ``.ipynb`` in ``folder``.
        metadata: the kernel's ``kernel-metadata.json`` content.
        accelerator: ``tpu``, ``gpu`` or ``none``.
        warnings: what validation could not be sure of (each naming its field and cell).
        notes: what staging changed (editor metadata removed).
        parameters: the ``-p`` values injected (checked and converted).
    """

    source: Path
    folder: Path
    notebook: Path
    metadata: dict
    accelerator: str
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    parameters: tuple = ()

    @property
    def kernel_id(self) -> str:
        return self.metadata["id"]


# notebook parameters naming a model (a packaged name among them attaches its published data set): the model,
# and an adapter checkpoint's base (the inference notebook's base_model)
MODEL_PARAMETERS = ("model", "base_model")


def notebook_paths(args: list[str] | None, notebooks_dir: Path) -> list[Path]:
    """The ``.py`` side of each named notebook (``X``, ``X.py``, ``X.ipynb``); default every pair in ``notebooks_dir``.

    Raises:
        FileNotFoundError: a named notebook does not exist, or there are none.
    """
    pairs = check_pairs.pairs_for(args or None, Path(notebooks_dir))
    if not pairs:
        raise FileNotFoundError(f"no notebooks in {notebooks_dir}")
    return [p.py for p in pairs]


def read_notebook(py: Path):
    """The notebook of pair ``py``: its ``.ipynb`` (stable cell ids) when there is one, else the ``.py`` via jupytext.

    Raises:
        MetadataError: the pair disagrees or its ``.ipynb`` is not deterministic (run
            ``python scripts/check_pairs.py --sync``); or the ``.py`` is missing.
    """
    pair = check_pairs.Pair(py, py.with_suffix(".ipynb"))
    if not py.exists():
        raise MetadataError([f"{py}: missing (its pair {pair.ipynb} exists): run python scripts/check_pairs.py --sync {pair.ipynb}"])
    if not pair.ipynb.exists():
        return jupytext.read(py)
    problems = check_pairs.check_pair(pair)
    if problems:
        raise MetadataError(problems + [f"run: python scripts/check_pairs.py --sync {py}"], str(py))
    return jupytext.read(pair.ipynb)


def ascii_json(obj, indent: int = 1) -> str:
    """``obj`` as JSON text with every non-ASCII character escaped, ending in a newline (any
    ASCII-compatible decoder reads the same characters)."""
    return json.dumps(obj, indent=indent, ensure_ascii=True) + "\n"


# Kaggle editor keys in a notebook's ``metadata.kaggle`` -> the kernel-metadata.json flag they must agree with
# (None: always removed; the kernel's metadata says where it runs and what it reads).
EDITOR_KEYS = {"dockerImageVersionId": None, "dataSources": None, "isInternetEnabled": "enable_internet",
               "isGpuEnabled": "enable_gpu", "isTpuEnabled": "enable_tpu"}


def strip_editor_metadata(nb, meta: dict, accelerator: str) -> list[str]:
    """Remove from ``nb.metadata.kaggle`` (in place) what Kaggle's editor saved that would change
    where the kernel runs: :data:`EDITOR_KEYS` that are always removed, and flags that disagree with
    ``meta``. The block keeps ``accelerator`` (this kit's name for ``accelerator``). Returns one note per removal."""
    block = nb.metadata.get("kaggle")
    notes = []
    if isinstance(block, dict):
        for key, flag in EDITOR_KEYS.items():
            if key not in block:
                continue
            want = meta.get(flag, True if flag == "enable_internet" else False) if flag else None
            if flag is None or bool(block[key]) != bool(want):
                why = ("an image pin: Kaggle would run that image (a TPU kernel then has no torch_xla, kaggle-cli #1197)"
                       if key == "dockerImageVersionId" else
                       "sources come from kernel-metadata.json" if key == "dataSources" else
                       f"disagrees with kernel-metadata.json {flag}: {want}")
                notes.append(f"removed metadata.kaggle.{key} = {block[key]!r} from the staged notebook ({why})")
                del block[key]
    nb.metadata["kaggle"] = {**(block if isinstance(block, dict) else {}), "accelerator": accelerator}
    return notes


def attach_wheels(kernel, meta: dict, accelerator: str, project: dict, stem: str) -> tuple[list[str], list[str]]:
    """The notebook's wheels data set (``wheels_sources``, :mod:`.wheels`): its install cell added to
    ``kernel`` and its data set to ``meta``'s ``dataset_sources`` (both in place); with the internet
    off, a warning per distribution the notebook needs that neither its image nor its wheels provide.

    Returns:
        (notes: what was added, warnings).
    """
    from . import wheels

    manifest = (project.get("wheels_sources") or {}).get(stem)
    notes = []
    if manifest:
        wheels.add_cell(kernel, manifest, stem)
        if manifest["dataset"] not in (meta.get("dataset_sources") or []):
            meta["dataset_sources"] = list(meta.get("dataset_sources") or []) + [manifest["dataset"]]
        notes.append(f"attached dataset {manifest['dataset']} and a first cell installing its wheels offline "
                     f"({', '.join(w['file'] for w in manifest['wheels'])}; kernel-metadata.json wheels_sources)")
    if str(meta.get("enable_internet", True)).lower() != "false":
        return notes, []
    cell = next(c for c in kernel.cells if VENDOR_TAG in (c.get("metadata", {}).get("tags") or []))
    return notes, wheels.unmet(kernel, vendored_files(cell.source), accelerator, manifest, stem)


def stage(py: Path, out: Path, owner: str | None, project: dict, kitlib_dir: Path = KITLIB, api=None,
          parameters: dict | None = None) -> Staged:
    """Stage notebook ``py`` as a Kaggle kernel folder ``out/<slug>/`` and validate it.

    Args:
        py: the notebook's ``.py`` side (its entry in ``project`` is ``py.stem``).
        out: the folder kernel folders go in.
        owner: the kernel owner for the id (None: the entry must set ``id``).
        project: the top-level metadata (:func:`~.project.load_project_metadata`).
        kitlib_dir: kitlib's package folder, vendored into the notebook.
        api: a ``KaggleApi`` for the validators (None: one without credentials).
        parameters: ``-p`` values, checked against the parameters cell and injected (:mod:`.parameters`).

    Returns:
        The :class:`Staged` kernel (``<slug>.ipynb`` + ``kernel-metadata.json``).

    Raises:
        MetadataError: invalid metadata (:func:`~.rules.validate_metadata`), an entry whose
            ``code_file`` is not its own notebook, or an out-of-sync pair. Nothing is written.
        ParameterError: an unknown parameter, or one of the wrong type. Nothing is written.
    """
    py = Path(py)
    problems = entry_problems(project, py.parent, only=py.stem) if py.stem in project.get("notebooks", {}) else []
    if problems:
        raise MetadataError(problems, str(py))
    nb = read_notebook(py)
    values = check_parameters(nb, parameters or {}, where=py)
    meta, acc = derive_metadata(project, py.stem, owner, notebook_accelerator(nb))
    nb = inject_parameters(nb, values)
    notes = []
    published = project.get("packaged_sources") or {}
    for name in MODEL_PARAMETERS:  # a packaged checkpoint published as a dataset: attach it by name
        model = notebook_parameter(nb, name)
        if isinstance(model, str) and model in published and published[model] not in (meta.get("dataset_sources") or []):
            meta["dataset_sources"] = list(meta.get("dataset_sources") or []) + [published[model]]
            notes.append(f"attached dataset {published[model]} ({name}={model!r} as published by kaggle_kit publish; "
                         "kernel-metadata.json packaged_sources)")
    attached = tuple(m for m, ds in published.items() if ds in (meta.get("dataset_sources") or []))
    kernel = vendor_notebook(nb, kitlib_files(kitlib_dir))
    notes += strip_editor_metadata(kernel, meta, acc)
    wheel_notes, wheel_warnings = attach_wheels(kernel, meta, acc, project, py.stem)
    notes += wheel_notes
    slug = str(meta.get("id", py.stem)).split("/")[-1] or py.stem
    code = str(meta.get("code_file"))
    folder = Path(out) / slug
    with atomic_dir(folder) as scratch:
        if Path(code).name == code and code.endswith(".ipynb"):
            nbformat.validate(kernel)
            (scratch / code).write_text(ascii_json(json.loads(nbformat.writes(kernel, version=4))), encoding="ascii")
        (scratch / "kernel-metadata.json").write_text(ascii_json(meta, indent=2), encoding="ascii")
        warnings = validate_metadata(meta, acc, scratch, api, notebook=nb, attached_packaged=attached) + wheel_warnings
    return Staged(py, folder, folder / code, meta, acc, tuple(warnings), tuple(notes), tuple(values.items()))
