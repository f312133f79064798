"""kitlib vendored into a staged notebook: a first code cell that writes kitlib's modules.

The cell is :file:`vendor_cell.py` (real Python, read here as text) followed by one call,
``_vendor_kitlib({path: text, ...}, sha256)``, carrying kitlib's sources as string literals. On
Kaggle it writes them to ``/kaggle/working/kitlib/``, checks their sha256, and puts
``/kaggle/working`` first on ``sys.path`` and ``PYTHONPATH``, so ``import kitlib`` works in the
notebook and in ``fork`` and ``spawn`` children, which must import ``_mp_fn`` from a module.
"""
from __future__ import annotations

import ast
import copy
import hashlib
from pathlib import Path

import nbformat

from .rules import VENDOR_TAG

CELL_FILE = Path(__file__).with_name("vendor_cell.py")
KITLIB = Path(__file__).resolve().parents[1] / "kitlib"  # the repository's kitlib package


def kitlib_files(kitlib_dir: Path = KITLIB) -> dict[str, str]:
    """kitlib's Python sources, ``relative path -> text``, sorted (``__pycache__`` left out)."""
    out = {}
    for p in sorted(Path(kitlib_dir).rglob("*.py")):
        if "__pycache__" not in p.parts:
            out[p.relative_to(kitlib_dir).as_posix()] = p.read_text(encoding="utf-8")
    return out


def kitlib_digest(files: dict[str, str]) -> str:
    """sha256 over ``name \\0 text`` of every file, in name order (what the vendored cell checks)."""
    return hashlib.sha256("".join(k + "\0" + files[k] for k in sorted(files)).encode()).hexdigest()


def vendor_cell_source(files: dict[str, str]) -> str:
    """The code of the cell that writes ``files`` (kitlib's modules) into the kernel's working folder."""
    digest = kitlib_digest(files)
    body = "{\n" + "".join(f"        {k!r}: {v!r},\n" for k, v in sorted(files.items())) + "    }"
    return (f"# kitlib, vendored by scripts/kernels.py ({len(files)} modules, sha256 {digest}). Do not edit: re-stage.\n"
            + CELL_FILE.read_text(encoding="utf-8").rstrip("\n")
            + f"\n\n\n_vendor_kitlib(\n    {body},\n    {digest!r},\n)\ndel _vendor_kitlib\n")


def vendored_files(cell_source: str) -> dict[str, str]:
    """The ``{path: text}`` embedded in a vendored cell (parsed, not executed).

    Raises:
        ValueError: ``cell_source`` is not a vendored kitlib cell.
    """
    for node in ast.walk(ast.parse(cell_source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_vendor_kitlib" and node.args:
            return ast.literal_eval(node.args[0])
    raise ValueError("not a vendored kitlib cell")


def vendor_notebook(nb, files: dict[str, str]):
    """A copy of ``nb`` with the vendored-kitlib cell inserted before its first code cell.

    Outputs are cleared (Kaggle runs the notebook from scratch; ``kernels_push`` clears them too).
    An earlier vendored cell (tagged ``kitlib-vendored``) is replaced, not duplicated.
    """
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if VENDOR_TAG not in c.get("metadata", {}).get("tags", [])]
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    cell = nbformat.v4.new_code_cell(vendor_cell_source(files), metadata={"tags": [VENDOR_TAG]})
    cell.id = VENDOR_TAG
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)
    return nb
