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

from kitlib.params import ParameterTypeError, check_parameters as check_types, parameter_defaults, unknown_parameters

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
            names: :func:`kitlib.params.unknown_parameters`), or each value of the wrong type.
    """
    if not parameters:
        return {}
    nb, where = _read(notebook, where)
    known = notebook_defaults(nb)
    if known is None:
        raise ParameterError(f"{where}: has no cell tagged 'parameters'; cannot set {', '.join(parameters)}")
    unknown = unknown_parameters(parameters, known)
    if unknown:
        raise ParameterError(f"{where}: " + "; ".join(unknown))
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


# Parameters whose meaning depends on the notebook's role in a chain: the same name means another
# thing in a training and in an inference notebook, so an unqualified ``-p`` of one of them is
# refused when several members of a chain define it (write ``-p MEMBER:NAME=VALUE``).
ROLE_PARAMETERS = {
    "model": "the checkpoint a training notebook starts from, or the one an inference notebook predicts with",
    "preset": "the checkpoint a training notebook starts from",
    "output_dir": "the folder this notebook writes its output to",
    "output_csv": "the file this notebook writes",
    "submission": "the file this notebook writes",
    "work_dir": "the folder this notebook writes its output to",
    "shard_dir": "the folder this notebook writes its shards to",
    "train_csv": "an input file of this notebook's role",
    "valid_csv": "an input file of this notebook's role",
    "test_csv": "an input file of this notebook's role",
}


def parse_qualified(items: list[str]) -> list[tuple[str | None, str, object]]:
    """``-p`` items -> ``[(member or None, name, value), ...]`` in order.

    ``MEMBER:NAME=VALUE`` aims a value at one notebook of a chain (its stem, e.g.
    ``xla_ddp_train:model=multilingual-e5-small``); ``NAME=VALUE`` is unqualified. The item is
    split at its first ``=`` first, so a value may hold ``:`` (``model=gs://bucket/x``).

    Raises:
        ParameterError: an item without ``=``, or with an empty member or name.
    """
    out = []
    for item in items:
        left, eq, value = item.partition("=")
        member, colon, name = left.strip().rpartition(":")
        if not eq or not name.strip() or (colon and not member.strip()):
            raise ParameterError(f"-p {item!r}: write NAME=VALUE or MEMBER:NAME=VALUE (e.g. -p lr=1e-5, "
                                 "-p xla_ddp_train:model=multilingual-e5-small)")
        out.append((member.strip() or None, name.strip(), parse_value(value)))
    return out


def split_parameters(items: list[str], defaults: dict[str, dict | None], chain: bool = True) -> dict[str, dict]:
    """Route ``-p`` items to the notebooks of a run (one notebook, or the members of a chain).

    Args:
        items: the raw ``-p`` strings (:func:`parse_qualified`).
        defaults: member (notebook stem) -> its parameters cell's defaults (None: no parameters cell),
            in run order.
        chain: the members run as a chain (one reads another's output): names of
            :data:`ROLE_PARAMETERS` are then refused unqualified; False (notebooks staged or pushed
            side by side) sends them to every member that defines them.

    Returns:
        member -> ``{name: value}`` for that member (every member present, maybe empty).

    Rules:
        * ``MEMBER:NAME=VALUE`` goes to MEMBER only (an unknown member is refused, naming the members);
        * ``NAME=VALUE`` goes to every member whose parameters cell defines NAME, except a name of
          :data:`ROLE_PARAMETERS` that several members define: that is refused, naming them;
        * a name no member defines is refused (with one notebook, it is left for
          :func:`check_parameters`, which names the closest one);
        * a qualified value overrides an unqualified one for its member.

    Raises:
        ParameterError: naming the item, the members and the fix.
    """
    members = list(defaults)
    plain: dict[str, dict] = {m: {} for m in members}
    aimed: dict[str, dict] = {m: {} for m in members}
    for member, name, value in parse_qualified(items):
        if member is not None:
            if member not in defaults:
                raise ParameterError(f"-p {member}:{name}=...: {member!r} is not a notebook of this run "
                                     f"({', '.join(members)}){_closest(member, members)}")
            aimed[member][name] = value
            continue
        having = [m for m in members if name in (defaults[m] or {})]
        if not having:
            if len(members) == 1:
                plain[members[0]][name] = value
                continue
            raise ParameterError(f"-p {name}=...: unknown parameter: no notebook of {', '.join(members)} defines it"
                                 + _closest(name, {k for d in defaults.values() for k in (d or {})}))
        if chain and len(having) > 1 and name in ROLE_PARAMETERS:
            raise ParameterError(
                f"-p {name}=...: {name!r} means a different thing in each notebook of this run that has it "
                f"({ROLE_PARAMETERS[name]}): {', '.join(having)}. Aim it at one: "
                + " or ".join(f"-p {m}:{name}=..." for m in having))
        for m in having:
            plain[m][name] = value
    return {m: {**plain[m], **aimed[m]} for m in members}


def _closest(name: str, names) -> str:
    near = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def effective_table(members: dict[str, tuple[dict, dict]]) -> str:
    """The effective parameters of each member, as a text table: the parameters cell's defaults
    overlaid by the ``-p`` values (marked ``*``); ``-`` where a member has no such parameter.

    Args:
        members: member -> (defaults of its parameters cell, the values given with ``-p``), in run order.
    """
    names = list(dict.fromkeys(n for d, given in members.values() for n in (*d, *given)))
    cols = list(members)

    def cell(m: str, n: str) -> str:
        d, given = members[m]
        if n in given:
            return f"{given[n]!r} *"
        return repr(d[n]) if n in d else "-"

    rows = [["parameter", *cols]] + [[n, *(cell(m, n) for m in cols)] for n in names]
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, width)).rstrip() for r in rows]
    return "\n".join(["effective parameters (the parameters cell; * = set with -p):"] + ["  " + ln for ln in lines])
