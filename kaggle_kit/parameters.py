"""``-p NAME=VALUE`` for ``run-local``, ``push`` and ``run``: checked, then injected as papermill would.

The names and types come from the notebook's cell tagged ``parameters``: an unknown name is
refused with the closest known one (papermill itself would only warn and run the default), and a
value of the wrong type is refused by :func:`kitlib.params.check_parameters` (the one home of the
type rule, which the notebooks apply to themselves too). Accepted values are injected into the
staged notebook by papermill's own :func:`papermill.parameterize.parameterize_notebook` (a cell
tagged ``injected-parameters`` after the parameters cell, starting ``# Parameters``), so what
``run-local`` rehearses and what ``push`` sends are the same notebook.
"""
from __future__ import annotations

import copy
import difflib
import json
from pathlib import Path

from kitlib.params import ParameterTypeError, check_parameters as check_types, parameter_defaults

INJECTED_TAG = "injected-parameters"  # papermill's tag for the cell it adds


class ParameterError(ValueError):
    """A ``-p`` parameter the notebook does not define, or of the wrong type (names each one)."""


def parse_value(text: str):
    """A ``-p`` value: JSON when it parses (``32``, ``1e-5``, ``false``, ``"x"``, ``[1, 2]``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_assignments(items: list[str]) -> dict:
    """``["lr=1e-5", "model=auto"]`` -> ``{"lr": 1e-05, "model": "auto"}`` (:func:`parse_value`).

    Raises:
        ParameterError: an item without ``=`` or with an empty name.
    """
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ParameterError(f"-p {item!r}: write NAME=VALUE (e.g. -p lr=1e-5)")
        out[name.strip()] = parse_value(value)
    return out


def _read(notebook, where=None):
    if isinstance(notebook, (str, Path)):
        import jupytext

        return jupytext.read(notebook), str(where or notebook)
    return notebook, str(where or "the notebook")


def notebook_defaults(nb) -> dict | None:
    """``name -> default`` of the cell tagged ``parameters`` (literals only), or None without one."""
    for c in nb.cells:
        if c.cell_type == "code" and "parameters" in (c.get("metadata", {}).get("tags") or []):
            return parameter_defaults(c.source)
    return None


def check_parameters(notebook, parameters: dict, where=None) -> dict:
    """Refuse parameters the notebook's ``parameters`` cell does not define, or of the wrong type.

    Args:
        notebook: a path (``.ipynb`` or ``.py``) or an ``nbformat`` notebook.
        parameters: ``name -> value``.
        where: how messages name the notebook (default: its path).

    Returns:
        The values, converted as :func:`kitlib.params.check_parameters` says (``"false"`` -> False).

    Raises:
        ParameterError: naming each unknown parameter (with the closest known name and the known
            names), or each value of the wrong type.
    """
    if not parameters:
        return {}
    nb, where = _read(notebook, where)
    known = notebook_defaults(nb)
    if known is None:
        raise ParameterError(f"{where}: has no cell tagged 'parameters'; cannot set {', '.join(parameters)}")
    unknown = [k for k in parameters if k not in known]
    if unknown:
        hints = []
        for k in unknown:
            near = difflib.get_close_matches(k, list(known), n=1)
            hints.append(f"{k!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        raise ParameterError(f"{where}: unknown parameter(s) {', '.join(hints)}; its parameters cell defines: "
                             f"{', '.join(known)}")
    try:
        return check_types(parameters, known)
    except ParameterTypeError as e:
        raise ParameterError(f"{where}: " + "; ".join(e.problems)) from None


def inject_parameters(nb, parameters: dict):
    """A copy of ``nb`` with ``parameters`` injected as papermill injects them (after the
    ``parameters`` cell, tagged ``injected-parameters``; an earlier injected cell is replaced).
    The cell's id is its tag, so staging stays deterministic. ``nb`` is returned as is when
    ``parameters`` is empty."""
    if not parameters:
        return nb
    from papermill.parameterize import parameterize_notebook

    nb = copy.deepcopy(nb)
    nb.metadata.setdefault("papermill", {})
    untagged = set()
    for i, c in enumerate(nb.cells):  # papermill reads every cell's tags
        if "tags" not in c.metadata:
            c.metadata["tags"] = []
            untagged.add(id(c))
    nb = parameterize_notebook(nb, parameters, kernel_name="python3", language="python")
    for c in nb.cells:
        if id(c) in untagged:
            del c.metadata["tags"]
        if INJECTED_TAG in (c.get("metadata", {}).get("tags") or []):
            c.id = INJECTED_TAG
    nb.metadata.pop("papermill", None)
    return nb
