"""The notebook-pair rules (``scripts/check_pairs.py``), imported as a module of this package.

``scripts/check_pairs.py`` is the pair check's command line and the home of its rules (jupytext
does the syncing; the script keeps the kit's refusals). It is a script, not an installed module,
so it is loaded here once from its file, by path: nothing relies on ``scripts/`` being on
``sys.path``. The names used by this package are re-exported: :class:`Pair` (a ``.py`` and its
``.ipynb``), :func:`pairs_for` (the pairs of named notebooks, or of a folder), :func:`check_pair`
(the problems of one pair, [] when in sync) and :func:`sync_pair`.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_pairs.py"


def _load():
    name = "kit_check_pairs"  # not "check_pairs": a script run as __main__ keeps its own copy
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the pair rules from {SCRIPT}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


_rules = _load()
Pair = _rules.Pair
pairs_for = _rules.pairs_for
check_pair = _rules.check_pair
sync_pair = _rules.sync_pair

__all__ = ["Pair", "check_pair", "pairs_for", "sync_pair"]
