"""The notebook-pair rules this package uses: the module :mod:`notebook_pairs` (at the repository's
root and installed with the kit; ``scripts/check_pairs.py`` is its command line). Re-exported here
under the names the package uses: :class:`Pair` (a ``.py`` and its ``.ipynb``), :func:`pairs_for`
(the pairs of named notebooks, or of a folder), :func:`check_pair` (the problems of one pair, []
when in sync) and :func:`sync_pair`.
"""
from notebook_pairs import Pair, check_pair, pairs_for, sync_pair

__all__ = ["Pair", "check_pair", "pairs_for", "sync_pair"]
