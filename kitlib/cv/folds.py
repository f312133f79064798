"""K folds of the training rows, fixed and written down (``folds.csv``), so a fold is the same rows everywhere.

The training notebook's ``folds=K`` splits the TRAINING rows of its split (:mod:`kitlib.cv.splits`:
for ``split="validation"`` the English rows plus the first half of validation.csv; never the
held-out rows, which stay the score every fold model and every blend is measured on) into K
folds; ``fold=i`` trains on the other K - 1 folds and validates (and keeps its best epoch) on fold
i, whose predictions are that row's out-of-fold prediction (:mod:`kitlib.cv.groups`).

The rule (:data:`RULE`, version :data:`RULE_VERSION`, recorded in ``folds.json``):
``sklearn.model_selection.StratifiedGroupKFold(n_splits=K, shuffle=True, random_state=seed)`` over the
strata label x language (``<hard label>|<lang>``, :func:`kitlib.metrics.hard_labels`), where the file
has a ``lang`` column, else the label alone, with the rows of one text as one group (:func:`text_groups`:
the exact text as :func:`kitlib.data.read_csv_checked` reads it), so a repeated text (a repost, a
merged file) is never in one fold's validation rows and in its training rows (issue 33, item 4;
scikit-learn#13621). A stratum with fewer than K rows cannot be spread over K folds, so its rows are
stratified by label alone, and the note (``folds.json`` ``notes``, printed) names it (:func:`strata_notes`).
Every training row is in exactly one fold; each fold holds close to 1/K of every stratum (within
one group's rows of it). Version 1 (``StratifiedKFold``, no groups) leaked repeated texts: a folds file
it wrote is rewritten with a note by :func:`write_folds` and refused by :func:`read_folds`.

:func:`write_folds` writes ``folds.csv`` (``id``, ``fold``: the ids as the exact strings of the
file) and ``folds.json`` (the rule, the seed, K, the source, a fingerprint of the ids, rows and
positives per fold and per language), atomically. Written again for the same rows, it gives the
same file; a folds file that does not match the data (another row set, another K or seed) is
refused, naming what differs, rather than silently training on other folds (:func:`read_folds`).
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import MANIFEST, atomic_dir
from ..data import read_csv_checked, read_csv_strings
from ..metrics import hard_labels

FOLDS_FILE = "folds.csv"
FOLDS_META = "folds.json"
FOLD_TRAIN_FILE = "train.csv"
FOLD_VALID_FILE = "valid.csv"
RULE = ("StratifiedGroupKFold(shuffle=True) over label x lang (label alone for a stratum with fewer than K rows), "
        "the rows of one exact text one group")
RULE_VERSION = 2  # 1: StratifiedKFold without groups (repeated texts leaked across folds)


class FoldsError(ValueError):
    """A folds file that does not match the data, or fold parameters that cannot be used (the message says which and the fix)."""


def ids_fingerprint(ids) -> str:
    """16 hex digits of sha256 over the ids (exact strings, in the order given, newline-separated)."""
    return hashlib.sha256("\n".join(map(str, ids)).encode()).hexdigest()[:16]


def strata(labels, langs, k: int) -> np.ndarray:
    """The stratum of each row, str ``[n]``: ``"<hard label>|<lang>"``, or ``"<hard label>"`` for the
    rows of a label x language stratum with fewer than ``k`` rows (or when ``langs`` is None)."""
    y = hard_labels(labels).astype(str)
    if langs is None:
        return y
    s = pd.Series(y) + "|" + pd.Series(np.asarray(langs, dtype=str))
    small = s.map(s.value_counts()) < k
    return np.where(small.to_numpy(), y, s.to_numpy())


def check_fold_parameters(folds: int, fold: int, pseudo_csv: str = "") -> str:
    """Refuse ``folds``/``fold``/``pseudo_csv`` notebook parameters that name no fold (before any work).

    Returns:
        ``pseudo_csv`` in the kit's one form of a path (:func:`kitlib.storage.normalise`: ``~`` expanded), or ``""``.

    Raises:
        FoldsError: ``folds`` is 1 or negative, or ``fold`` is not in ``0..folds-1`` while ``folds`` is set
            (also ``fold=-1``: each fold is one run, ``make cv`` runs them all), or ``fold`` or ``pseudo_csv``
            set without ``folds``, or ``pseudo_csv`` is not a file.
    """
    from ..storage import normalise

    pseudo_csv = normalise(pseudo_csv) if pseudo_csv else ""
    if folds == 0:
        if fold != -1:
            raise FoldsError(f"fold={fold} without folds: pass folds=K (e.g. folds=5) to train fold {fold} of K")
        if pseudo_csv:
            raise FoldsError(f"pseudo_csv={pseudo_csv!r} without folds: pseudo-labelled rows join the folds' "
                             "training rows; pass folds=K and fold=i (make cv PSEUDO=1)")
        return ""
    if pseudo_csv and not Path(pseudo_csv).is_file():
        raise FoldsError(f"pseudo_csv={pseudo_csv!r}: no such file (python -m kitlib.cv pseudo writes it)")
    if folds < 2:
        raise FoldsError(f"folds={folds}: K folds need K >= 2 (0: no folds)")
    if not 0 <= fold < folds:
        raise FoldsError(f"fold={fold} with folds={folds}: pass fold=i for i in 0..{folds - 1} (one run per fold; "
                         f"`make cv FOLDS={folds}` runs every fold, `python -m kaggle_kit run --folds {folds}` one kernel each)")
    return pseudo_csv


def text_groups(texts) -> np.ndarray:
    """The group of each row, int ``[n]``: rows with the same text share a group (exact strings, as
    :func:`kitlib.data.read_csv_checked` reads them: blank text is ``""``, so blank rows are one group)."""
    return pd.factorize(pd.Series(texts, dtype=str))[0]


def strata_notes(labels, langs, k: int, groups) -> list[str]:
    """The notes on strata that cannot fill every fold: each label x language stratum with fewer than
    ``k`` rows (stratified by its label alone: :func:`strata`), then each stratum of the split (after that
    fallback) with fewer than ``k`` groups (texts: :func:`text_groups`), which some folds get none of.
    ``[]`` when every stratum fills every fold."""
    notes = []
    if langs is not None:
        s = pd.Series(hard_labels(labels).astype(str)) + "|" + pd.Series(np.asarray(langs, dtype=str))
        notes = [f"stratum {name} (label|lang): {n} row(s), fewer than {k} folds: its rows are stratified by label alone"
                 for name, n in s.value_counts().sort_index().items() if n < k]
    final = pd.DataFrame({"stratum": strata(labels, langs, k), "group": groups})
    for name, g in final.groupby("stratum"):
        if g["group"].nunique() < k:
            notes.append(f"stratum {name}: {len(g)} row(s) in {g['group'].nunique()} text(s), fewer than {k} folds: "
                         f"{k - g['group'].nunique()} fold(s) get none of it")
    return notes


def _check_classes(fold: np.ndarray, y: np.ndarray, k: int, train_csv) -> None:
    for i in range(k):
        missing = [cls for cls in (0, 1) if not (y[fold == i] == cls).any()]
        if missing:
            raise FoldsError(f"{train_csv}: fold {i} of {k} has no row with label {missing[0]}: the rows of that "
                             "label are too few distinct texts to fill every fold (rows of one text stay in one "
                             "fold); fewer folds")


def assign_folds(train_csv: str | os.PathLike, k: int, seed: int = 0, *, label_col: str = "toxic",
                 lang_col: str = "lang") -> pd.DataFrame:
    """The fold of every row of ``train_csv`` by the module's rule (nothing written).

    Returns:
        A DataFrame in file order: ``id`` (str, exact), ``fold`` (int64 in ``0..k-1``), ``lang`` (str,
        ``""`` without a ``lang_col`` column) and ``label`` (int64, the hard label); ``attrs["notes"]``:
        the strata split by label alone (:func:`strata_notes`) and the repeated texts kept together.

    Raises:
        FileNotFoundError: no ``train_csv``.
        ValueError: a bad id or label (:func:`kitlib.data.read_csv_checked`).
        FoldsError: ``k < 2``, a label has fewer than ``k`` rows, or a fold would get no row of a
            label (too few distinct texts of it): a fold would lack that class.
    """
    from sklearn.model_selection import StratifiedGroupKFold

    if k < 2:
        raise FoldsError(f"folds={k}: K folds need K >= 2")
    checked = read_csv_checked(train_csv, label_cols=(label_col,))
    cols = read_csv_strings(train_csv, nrows=0).columns
    langs = read_csv_strings(train_csv, usecols=[lang_col])[lang_col].to_numpy() if lang_col in cols else None
    y = hard_labels(checked[label_col].to_numpy())
    for cls in (0, 1):
        if (y == cls).sum() < k:
            raise FoldsError(f"{train_csv}: {(y == cls).sum()} row(s) with {label_col} = {cls}; {k} folds need at "
                             f"least {k} (each fold validates on both classes): fewer folds")
    s = strata(checked[label_col].to_numpy(), langs, k)
    groups = text_groups(checked["text"])
    fold = np.empty(len(y), dtype=np.int64)
    splitter = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # sklearn's "least populated class" warning: named by strata_notes instead
        warnings.simplefilter("ignore", UserWarning)
        for i, (_, va) in enumerate(splitter.split(np.zeros(len(y)), s, groups)):
            fold[va] = i
    _check_classes(fold, y, k, train_csv)
    table = pd.DataFrame({"id": checked["id"].to_numpy(), "fold": fold,
                          "lang": langs if langs is not None else "", "label": y})
    repeated = pd.Series(groups).duplicated(keep=False)
    table.attrs["notes"] = strata_notes(checked[label_col].to_numpy(), langs, k, groups) + (
        [f"{int(repeated.sum())} row(s) share their text with another row ({pd.Series(groups)[repeated].nunique()} "
         "text(s)): each text's rows are in one fold"] if repeated.any() else [])
    return table


def _meta(train_csv: Path, table: pd.DataFrame, k: int, seed: int, label_col: str) -> dict:
    per = {}
    for i, g in table.groupby("fold"):
        per[str(i)] = {"rows": len(g), "positives": int(g["label"].sum()),
                       "languages": {str(k_): int(v) for k_, v in g["lang"].value_counts().sort_index().items()}}
    return {"rule": RULE, "rule_version": RULE_VERSION, "notes": table.attrs.get("notes", []), "folds": k, "seed": seed, "label_col": label_col, "source": str(train_csv),
            "rows": len(table), "ids": ids_fingerprint(table["id"]), "per_fold": per}


def write_folds(train_csv: str | os.PathLike, out_dir: str | os.PathLike, k: int, seed: int = 0, *,
                label_col: str = "toxic", lang_col: str = "lang") -> Path:
    """Write (or reuse) the folds of ``train_csv`` in ``out_dir``: ``folds.csv`` and ``folds.json``.

    An ``out_dir`` that already holds a folds file for exactly these rows, ``k`` and ``seed`` is kept
    as it is (every fold of a run, on any machine, reads the same file); one made for other rows,
    another ``k`` or ``seed`` is refused (:func:`read_folds`). Written atomically (:func:`kitlib.atomic.atomic_dir`):
    an existing ``out_dir`` is replaced only if it holds nothing else.

    Returns:
        The path of ``folds.csv``.

    A folds file made by an older rule (:func:`rule_version` below :data:`RULE_VERSION`) is rewritten by
    the current one, with a note. The notes of :func:`assign_folds` (strata split by label alone,
    repeated texts) are printed and kept in ``folds.json``.

    Raises:
        FoldsError: an existing folds file that does not match (named, with what differs and the fix);
            ``out_dir`` holds other files; what :func:`assign_folds` raises.
    """
    train_csv, out_dir = Path(train_csv), Path(out_dir)
    table = assign_folds(train_csv, k, seed, label_col=label_col, lang_col=lang_col)
    path = out_dir / FOLDS_FILE
    if path.is_file() and rule_version(path) == RULE_VERSION:
        read_folds(path, train_csv, k=k, seed=seed)  # refuses a mismatch
        return path
    if path.is_file():
        print(f"note: {path} was made by folds rule version {rule_version(path)} (repeated texts could be in "
              f"two folds), not {RULE_VERSION}; rewritten by the current rule ({RULE}): fold checkpoints trained "
              "on the old file belong to another cross-validation run (its cv tag) and are trained again")
    for note in table.attrs.get("notes", []):
        print(f"note: folds of {train_csv}: {note}")
    if out_dir.is_dir():
        extra = sorted(p.name for p in out_dir.iterdir() if p.name not in (FOLDS_FILE, FOLDS_META, MANIFEST))
        if extra:
            raise FoldsError(f"{out_dir}: holds other files ({', '.join(extra[:5])}) beside {FOLDS_FILE}; "
                             "give the folds a folder of their own")
    with atomic_dir(out_dir) as tmp:
        table[["id", "fold"]].to_csv(tmp / FOLDS_FILE, index=False)
        (tmp / FOLDS_META).write_text(json.dumps(_meta(train_csv, table, k, seed, label_col), indent=1))
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700
    return path


def rule_version(folds_csv: str | os.PathLike) -> int | None:
    """The folds rule version ``folds.json`` beside ``folds_csv`` records: 1 when it records none (written
    before versions were kept: ``StratifiedKFold`` without groups), None without a ``folds.json``."""
    meta = Path(folds_csv).parent / FOLDS_META
    return int(json.loads(meta.read_text()).get("rule_version", 1)) if meta.is_file() else None


def read_folds(folds_csv: str | os.PathLike, train_csv: str | os.PathLike, *, k: int | None = None,
               seed: int | None = None) -> pd.DataFrame:
    """The folds of ``folds_csv``, checked against the rows of ``train_csv``.

    Returns:
        ``id`` (str) and ``fold`` (int64), in ``train_csv``'s row order.

    Raises:
        FoldsError: ``folds_csv`` does not cover exactly the ids of ``train_csv``, each once (ids missing,
            extra or repeated are named), a fold is not in ``0..K-1``, ``folds.json`` records another
            ``k``/``seed`` than asked, or an older rule (:func:`rule_version`); the message names the file and the fix (delete the folds folder to
            make new folds for these rows, or give the data they were made from).
    """
    folds_csv = Path(folds_csv)
    fix = f"delete {folds_csv.parent} to split these rows afresh, or train on the rows it was made from"
    if not folds_csv.is_file():
        raise FoldsError(f"{folds_csv}: no such folds file")
    version = rule_version(folds_csv)
    if version is not None and version != RULE_VERSION:
        raise FoldsError(f"{folds_csv} was made by folds rule version {version}, not {RULE_VERSION} ({RULE}): its "
                         f"folds can hold one text in two folds; {fix}")
    table = read_csv_strings(folds_csv)
    if list(table.columns) != ["id", "fold"]:
        raise FoldsError(f"{folds_csv}: columns {', '.join(table.columns)}; a folds file has id, fold")
    dup = table["id"][table["id"].duplicated()]
    if len(dup):
        raise FoldsError(f"{folds_csv}: id(s) in more than one row: {', '.join(dup.unique()[:5])}")
    ids = read_csv_checked(train_csv)["id"]
    missing, extra = ids[~ids.isin(table["id"])], table["id"][~table["id"].isin(ids)]
    if len(missing) or len(extra):
        parts = [f"{len(v)} {what} ({', '.join(map(repr, v[:5]))}{' ...' if len(v) > 5 else ''})"
                 for v, what in ((list(missing), "training id(s) in no fold"), (list(extra), "id(s) not among its rows")) if v]
        raise FoldsError(f"{folds_csv} does not match {train_csv}: {'; '.join(parts)}; {fix}")
    fold = pd.to_numeric(table["fold"], errors="coerce")
    meta_path = folds_csv.parent / FOLDS_META
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    k_file = int(meta.get("folds", fold.max() + 1))
    if fold.isna().any() or (fold < 0).any() or (fold >= k_file).any() or (fold % 1 != 0).any():
        raise FoldsError(f"{folds_csv}: fold values must be integers 0..{k_file - 1}")
    for name, want in (("folds", k), ("seed", seed)):
        if want is not None and name in meta and meta[name] != want:
            raise FoldsError(f"{folds_csv} was made with {name}={meta[name]}, not {want}; {fix}")
    return pd.DataFrame({"id": ids.to_numpy(), "fold": fold.astype(np.int64).to_numpy()[
        pd.Index(table["id"]).get_indexer(ids)]})


def check_extra_columns(extra_columns, train_columns, extra_name: str, train_name: str) -> None:
    """Refuse rows added to every fold's training part (pseudo-labels) that lack a column of the training
    rows; called by :func:`fold_split` and, before the first fold, by ``make cv PSEUDO=1`` (``scripts/cv.py``).

    Raises:
        FoldsError: naming the columns missing, both sides and the fix.
    """
    missing = [c for c in train_columns if c not in list(extra_columns)]
    if missing:
        raise FoldsError(f"{extra_name}: no column(s) {', '.join(missing)}; {train_name} have {', '.join(train_columns)}: "
                         "pseudo-labelled rows (id, comment_text, lang, toxic) join only training rows with those "
                         "columns: train with -p split validation (make cv's TRAIN_PARAMS), or a training file of those columns")


def fold_split(train_csv: str | os.PathLike, folds_csv: str | os.PathLike, fold: int, out_dir: str | os.PathLike,
               extra_train_csv: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Write fold ``fold``'s two CSVs into ``out_dir`` (atomically): ``train.csv`` (the rows of the other
    folds, then the rows of ``extra_train_csv``: pseudo-labelled rows, :mod:`kitlib.cv.pseudo`, which are
    trained on and never validated on) and ``valid.csv`` (fold ``fold``'s rows), every column of
    ``train_csv`` with its exact strings, in file order.

    Returns:
        ``(train_path, valid_path)``.

    Raises:
        FoldsError: ``folds_csv`` does not match ``train_csv`` (:func:`read_folds`), ``fold`` is not one of
            its folds, or ``extra_train_csv`` shares an id with ``train_csv``.
    """
    table = read_folds(folds_csv, train_csv)
    k = int(table["fold"].max()) + 1
    if not 0 <= fold < k:
        raise FoldsError(f"fold={fold}: {folds_csv} has folds 0..{k - 1}")
    raw = read_csv_strings(train_csv)
    is_valid = (table["fold"] == fold).to_numpy()
    train_part = raw[~is_valid]
    if extra_train_csv:
        extra = read_csv_strings(extra_train_csv)
        both = sorted(set(extra["id"]) & set(raw["id"]))
        if both:
            raise FoldsError(f"{extra_train_csv} shares id(s) {both[:5]} with {train_csv}; ids must be unique")
        check_extra_columns(extra.columns, raw.columns, str(extra_train_csv), str(train_csv))
        train_part = pd.concat([train_part, extra[list(raw.columns)]], ignore_index=True)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        train_part.to_csv(tmp / FOLD_TRAIN_FILE, index=False)
        raw[is_valid].to_csv(tmp / FOLD_VALID_FILE, index=False)
        os.chmod(tmp, 0o755)
    return out_dir / FOLD_TRAIN_FILE, out_dir / FOLD_VALID_FILE
