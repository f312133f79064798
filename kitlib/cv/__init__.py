"""Cross-validation: which rows train, folds, groups of models, pseudo-labels (``python -m kitlib.cv``).

* :mod:`kitlib.cv.splits`: which rows train and which are held out.
* :mod:`kitlib.cv.heldout`: a training notebook's rows as one call (``make_split``), named, scored at the end.
* :mod:`kitlib.cv.folds`: K stratified folds of the training rows, written down (``folds=K``, ``fold=i``).
* :mod:`kitlib.cv.groups`: a group of fold or seed models: written down, out-of-fold scores, held-out blends, the report.
* :mod:`kitlib.cv.pseudo`: one round of pseudo-labels (the test rows every fold model agrees on).
"""
