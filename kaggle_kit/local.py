"""Run a staged kernel as Kaggle would, on this machine: papermill in a ``/kaggle``-like folder.

One root holds several rehearsals, one folder per kernel, as Kaggle keeps one ``/kaggle/working``
per kernel: ``ROOT/<slug>/working/`` (the output), ``ROOT/<slug>/input/`` (what the kernel
reads: the competition data at ``input/competitions/<competition>/``, and each kernel or data set
source at ``input/<slug>/``, as Kaggle mounts them) and ``ROOT/<slug>/__notebook__.ipynb``. A
kernel source ``owner/train-slug`` is the output of an earlier rehearsal in the same root
(``ROOT/train-slug/working``), or a folder named on the command line (``--input SLUG=DIR``); a
data set source must be named on the command line. So a training rehearsal and then an inference
rehearsal on its output share one root, and neither wipes the other.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .parameters import ParameterError, check_parameters
from .stage import Staged

__all__ = ["ParameterError", "check_parameters", "kaggle_layout", "run_local", "MountError"]


class MountError(FileNotFoundError):
    """A kernel or data set source that no earlier rehearsal wrote and no ``--input`` names."""


def _source_slug(source: str) -> str:
    """``owner/slug[/version]`` -> ``slug``."""
    parts = source.split("/")
    return parts[1] if len(parts) > 1 else parts[0]


def _copy(src: Path, dst: Path) -> None:
    """Mount ``src`` at ``dst``: a copy (Kaggle's input is separate from the source kernel's working folder;
    kitlib.models.model's search does not follow links). Files are hard-linked where the filesystem allows."""
    if dst.exists():
        shutil.rmtree(dst)

    def link_or_copy(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy, symlinks=False)


def kaggle_layout(root: Path, meta: dict, data_dir: Path, inputs: dict[str, Path] | None = None) -> tuple[Path, Path]:
    """Make ``root/<slug>/input`` and ``root/<slug>/working`` like ``/kaggle/input`` and ``/kaggle/working``.

    Each competition source is mounted (copied) at ``input/competitions/<competition>/`` from
    ``data_dir``; each kernel source at ``input/<slug>/`` from ``inputs[slug]`` or else from an
    earlier rehearsal's ``root/<slug>/working``; each data set source from ``inputs[slug]``.
    Returns ``(input, working)``; ``working`` starts empty. Other kernels' folders are not touched.

    Raises:
        MountError: a kernel or data set source with nothing to mount (nothing is changed).
    """
    inputs = {k: Path(v) for k, v in (inputs or {}).items()}
    slug = str(meta.get("id", "kernel")).split("/")[-1]
    base = Path(root) / slug
    mounts = {}
    for kind in ("kernel_sources", "dataset_sources"):
        for source in meta.get(kind, []) or []:
            name = _source_slug(source)
            earlier = Path(root) / name / "working"
            src = inputs.get(name) or (earlier if kind == "kernel_sources" and earlier.is_dir() else None)
            if src is None or not src.is_dir():
                where = f"no earlier rehearsal wrote {earlier} and " if kind == "kernel_sources" else ""
                raise MountError(f"{kind}: {source!r}: {where}no folder was given for it: run-local that notebook first "
                                 f"with --root {root}, or pass --input {name}=DIR")
            mounts[name] = src
    inp, work = base / "input", base / "working"
    for d in (inp, work):
        if d.exists():
            shutil.rmtree(d)
    work.mkdir(parents=True)
    inp.mkdir(parents=True)
    for comp in meta.get("competition_sources", []):
        dst = inp / "competitions" / comp
        dst.mkdir(parents=True)
        for f in sorted(Path(data_dir).glob("*.csv")):
            shutil.copy2(f, dst / f.name)
    for name, src in mounts.items():
        _copy(src, inp / name)
    return inp, work


def run_local(staged: Staged, root: Path, data_dir: Path, parameters: dict | None = None, timeout: int = 1800,
              inputs: dict[str, Path] | None = None, log_output: bool = True) -> Path:
    """Execute a staged kernel with papermill as Kaggle would, in ``root/<slug>/{input,working}``.

    The kernel runs with cwd ``working``, ``KAGGLE_INPUT_DIR``/``KAGGLE_WORKING_DIR`` pointing at
    the layout (``kitlib.paths`` honours them), ``KAGGLE_TMP_DIR`` at ``root/<slug>/tmp`` (what
    Kaggle keeps outside the output) and ``KAGGLE_KERNEL_RUN_TYPE=Batch`` (set by Kaggle for
    committed runs). Parameters are best injected at staging (``stage(..., parameters=...)``, as a
    push does); ``parameters`` here are checked the same way and handed to papermill. The cells'
    output is shown as they run (``log_output``). The executed notebook is ``root/<slug>/__notebook__.ipynb``.

    Returns:
        The working folder (the kernel's output files).

    Raises:
        ParameterError: a parameter the notebook does not define, or of the wrong type (nothing is run).
        MountError: a source with nothing to mount (nothing is run).
        papermill.PapermillExecutionError: a cell failed.
    """
    import papermill

    from kitlib.run.backends.base import patch_environment

    values = check_parameters(staged.notebook, parameters or {})
    inp, work = kaggle_layout(Path(root), staged.metadata, data_dir, inputs)
    tmp = work.parent / "tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    env = {"KAGGLE_INPUT_DIR": str(inp.resolve()), "KAGGLE_WORKING_DIR": str(work.resolve()),
           "KAGGLE_TMP_DIR": str(tmp.resolve()), "KAGGLE_KERNEL_RUN_TYPE": "Batch"}
    with patch_environment(env):  # the Kaggle variables for this rehearsal only
        papermill.execute_notebook(str(staged.notebook), str(work.parent / "__notebook__.ipynb"),
                                   parameters=values, cwd=str(work), kernel_name="python3",
                                   execution_timeout=timeout, progress_bar=False, log_output=log_output)
    return work
