"""Run a staged kernel as Kaggle would, on this machine: papermill in a ``/kaggle``-like folder."""
from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

from .stage import Staged


class ParameterError(ValueError):
    """``run-local -p NAME VALUE`` names a parameter the notebook's ``parameters`` cell does not define."""


def check_parameters(notebook: Path, parameters: dict) -> None:
    """Refuse parameter names that the notebook's ``parameters`` cell does not define.

    papermill injects unknown names after the parameters cell with only a warning, so a typo
    (``num_device`` for ``num_devices``) would run with the default. The names come from
    papermill's own reading of the cell (``papermill.inspect_notebook``).

    Raises:
        ParameterError: naming each unknown parameter, the closest known name, and the known names.
    """
    if not parameters:
        return
    import papermill

    known = papermill.inspect_notebook(str(notebook))
    unknown = [k for k in parameters if k not in known]
    if not unknown:
        return
    if not known:
        raise ParameterError(f"{notebook}: has no cell tagged 'parameters'; cannot set {', '.join(unknown)}")
    hints = []
    for k in unknown:
        near = difflib.get_close_matches(k, list(known), n=1)
        hints.append(f"{k!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    raise ParameterError(f"{notebook}: unknown parameter(s) {', '.join(hints)}; its parameters cell defines: "
                         f"{', '.join(known)}")


def kaggle_layout(root: Path, meta: dict, data_dir: Path) -> tuple[Path, Path]:
    """Make ``root/input`` and ``root/working`` like ``/kaggle/input`` and ``/kaggle/working``.

    Each competition source is mounted (copied) at ``input/competitions/<slug>/`` (the newer
    Kaggle layout) from ``data_dir``. Returns ``(input, working)``; ``working`` starts empty.
    """
    inp, work = root / "input", root / "working"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for comp in meta.get("competition_sources", []):
        dst = inp / "competitions" / comp
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        for f in sorted(Path(data_dir).glob("*.csv")):
            shutil.copy2(f, dst / f.name)
    inp.mkdir(parents=True, exist_ok=True)
    return inp, work


def run_local(staged: Staged, root: Path, data_dir: Path, parameters: dict | None = None, timeout: int = 1800) -> Path:
    """Execute a staged kernel with papermill as Kaggle would, in ``root/{input,working}``.

    The kernel runs with cwd ``root/working``, ``KAGGLE_INPUT_DIR``/``KAGGLE_WORKING_DIR``
    pointing at the layout (``kitlib.paths`` honours them) and ``KAGGLE_KERNEL_RUN_TYPE=Batch``
    (set by Kaggle for committed runs). The executed notebook is ``root/__notebook__.ipynb``.

    Returns:
        The working folder (the kernel's output files).

    Raises:
        ParameterError: a parameter the notebook does not define (nothing is run).
        papermill.PapermillExecutionError: a cell failed.
    """
    import papermill

    check_parameters(staged.notebook, parameters or {})
    inp, work = kaggle_layout(Path(root), staged.metadata, data_dir)
    env = {"KAGGLE_INPUT_DIR": str(inp.resolve()), "KAGGLE_WORKING_DIR": str(work.resolve()),
           "KAGGLE_KERNEL_RUN_TYPE": "Batch"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        papermill.execute_notebook(str(staged.notebook), str(Path(root) / "__notebook__.ipynb"),
                                   parameters=parameters or {}, cwd=str(work), kernel_name="python3",
                                   execution_timeout=timeout, progress_bar=False, log_output=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return work
