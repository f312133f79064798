"""Notebook parameters: each value is checked against the type of its default in the parameters cell.

papermill (``-p NAME VALUE``) and Kaggle pushes inject parameters as a cell after the one tagged
``parameters``; papermill leaves ``false`` a (truthy) string. The rule, one home (:data:`TYPE_RULES`):
a value must have its default's type.

* a bool default takes a bool, or the strings ``"true"``/``"false"`` (any case), parsed;
* an int default takes an int (not a bool);
* a float default takes an int or a float (not a bool), made a float;
* a str default takes a str;
* a list, tuple or dict default takes the same kind; a None default takes anything.

Anything else (``"false"`` for an int, ``"32"`` for an int, ``1`` for a bool, ``5`` for a str) is
refused, naming the parameter, its default and what to pass. A name the parameters cell does not
define is refused too, naming its close matches (:func:`unknown_parameters`).

Used in two places, by the same function: the push tooling checks ``-p`` values against the
parsed parameters cell before anything runs (``kaggle_kit``), and every notebook calls
:func:`check_notebook_parameters` in the cell after its parameters, which reads the parameters
cell and papermill's injected cell from IPython's input history (``In``).
"""
from __future__ import annotations

import ast
import difflib

INJECTED_HEADER = "# Parameters"  # the first line of papermill's injected cell (PythonTranslator.comment)
BOOL_WORDS = {"true": True, "false": False}


class ParameterTypeError(TypeError):
    """A notebook parameter whose value does not have its default's type; ``problems`` name each parameter."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class UnknownParameterError(ParameterTypeError):
    """A parameter the notebook's parameters cell does not define (papermill would only warn and run
    the defaults); ``problems`` name each one with its close matches."""


def unknown_parameters(names, known) -> list[str]:
    """One problem per name of ``names`` not in ``known``, naming its close matches (:mod:`difflib`)
    and, when there are none, every known name. The one home of the unknown-name message: the
    notebooks (:func:`check_notebook_parameters`) and ``kaggle_kit``'s ``-p`` both use it."""
    known = list(known)
    problems = []
    for name in names:
        if name in known:
            continue
        near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = (f"did you mean {' or '.join(map(repr, near))}?" if near else
                f"the parameters cell defines: {', '.join(known)}")
        problems.append(f"unknown parameter {name!r}: the notebook's parameters cell does not define it ({hint})")
    return problems


def assigned_names(source: str) -> list[str]:
    """Every top-level name ``source`` assigns (``a = ...``, ``b: int = ...``, ``c = d = ...``), in order;
    unlike :func:`parameter_defaults`, non-literal values count too."""
    out = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        out += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in out]
    return out


def parameter_defaults(source: str) -> dict[str, object]:
    """``name -> default`` for each top-level ``name = <literal>`` of a parameters cell's source.

    Values are read with :func:`ast.literal_eval`; an assignment that is not a literal (a call,
    an expression of other names) is left out: its type cannot be known without running it.

    Raises:
        SyntaxError: ``source`` is not Python.
    """
    out: dict[str, object] = {}
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if getattr(node, "value", None) is None:
            continue
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                out[t.id] = value
    return out


def _as_bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in BOOL_WORDS:
        return BOOL_WORDS[value.strip().lower()]
    raise ValueError('true or false (a bool, or the string "true"/"false")')


def _as_int(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("an integer")


def _as_float(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError("a number")


def _same(kind: type, what: str):
    def check(value):
        if isinstance(value, kind):
            return value
        raise ValueError(what)
    return check


# default's type -> the function that accepts (and may convert) a value, or says what is wanted
TYPE_RULES = {
    bool: _as_bool,
    int: _as_int,
    float: _as_float,
    str: _same(str, "a string"),
    list: _same(list, "a list"),
    tuple: _same((list, tuple), "a list"),
    dict: _same(dict, "a dict"),
}


def check_value(name: str, value, default):
    """``value`` for parameter ``name`` after the rule of its ``default``'s type (:data:`TYPE_RULES`).

    Returns:
        The value, converted where the rule says (``"false"`` -> False for a bool, 3 -> 3.0 for a float).

    Raises:
        ParameterTypeError: naming ``name``, the value, its default and what to pass.
    """
    rule = TYPE_RULES.get(type(default))
    if rule is None:  # None, or a type without a rule: anything goes
        return value
    try:
        return rule(value)
    except ValueError as e:
        hint = (" (papermill's -p reads True/False, not true/false, as booleans; or pass -p NAME true and "
                "let this check parse it)" if isinstance(default, bool) else
                " (papermill: -p NAME 32 gives an int, -r NAME VALUE a string)")
        raise ParameterTypeError([f"parameter {name!r}: got {value!r} ({type(value).__name__}), but its default "
                                  f"{default!r} wants {e}{hint}"]) from None


def check_parameters(values: dict, defaults: dict) -> dict:
    """Every value in ``values`` checked against ``defaults`` (:func:`check_value`); names without a
    default are passed through (unknown names are the caller's to refuse).

    Returns:
        ``values`` with conversions applied (a new dict).

    Raises:
        ParameterTypeError: listing every parameter of the wrong type.
    """
    out, problems = {}, []
    for name, value in values.items():
        if name not in defaults:
            out[name] = value
            continue
        try:
            out[name] = check_value(name, value, defaults[name])
        except ParameterTypeError as e:
            problems += e.problems
    if problems:
        raise ParameterTypeError(problems)
    return out


def check_notebook_parameters(namespace: dict) -> dict:
    """In a notebook, right after its parameters: check the values papermill injected.

    Reads IPython's input history (``namespace["In"]``): the last cell that starts with
    papermill's :data:`INJECTED_HEADER` holds the injected names, and the cell executed just
    before it is the parameters cell, whose literals give the defaults. Each injected value is
    checked (:func:`check_parameters`) and converted in ``namespace`` (``"false"`` -> False),
    with a line saying so. Without an injected cell (run by hand, or no ``-p``) nothing is checked.

    Returns:
        The converted values (empty when nothing changed).

    Raises:
        UnknownParameterError: an injected name the parameters cell does not define (papermill only
            warns, and the run would go on with the default), naming its close matches; nothing is set.
        ParameterTypeError: a value of the wrong type, naming the parameter.
    """
    history = [s for s in namespace.get("In", []) if isinstance(s, str)]
    injected = [i for i, s in enumerate(history) if s.lstrip().startswith(INJECTED_HEADER)]
    if not injected or injected[-1] == 0:
        return {}
    i = injected[-1]
    defaults = parameter_defaults(history[i - 1])
    names = assigned_names(history[i])
    unknown = unknown_parameters(names, assigned_names(history[i - 1]))
    if unknown:
        raise UnknownParameterError(unknown)
    checked = check_parameters({k: namespace[k] for k in names if k in namespace}, defaults)
    changed = {k: v for k, v in checked.items() if v is not namespace[k] and (type(v) is not type(namespace[k]) or v != namespace[k])}
    for k, v in changed.items():
        print(f"parameter {k}: {namespace[k]!r} read as {v!r}")
        namespace[k] = v
    return changed
