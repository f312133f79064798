"""Which rows train and which are held out, fixed and written down (:data:`SPLITS`).

The Jigsaw training file (2018 ``train.csv``, reused in 2020 as ``jigsaw-toxic-comment-train.csv``)
is English and has no language column; the 2020 validation file is Turkish, Spanish and Italian
(``lang``). Two splits, by the training notebook's ``split`` parameter:

* ``"english"`` (:func:`english_holdout_split`): a stratified share of the English training rows
  is held out (seeded); validation.csv is never trained on and is scored at the end.
* ``"validation"`` (:func:`validation_split`): train on every English row plus the first half of
  validation.csv in file order (the sample: rows 0-499, ids 0-499: tr 185, es 161, it 154); hold
  out the second half (the sample: rows 500-999: tr 179, es 168, it 153; 88 toxic), which is never
  trained on. Multilingual rows in training are what top competition solutions did; the held-out
  multilingual AUC is what ``make submission`` reports.

* ``"holdout"`` (:func:`holdout_split`): any competition's training file, with no validation file: a
  stratified share of its rows (by label, and by language where it has a ``lang`` column) is held
  out (seeded) and scored after every epoch and at the end.

The test-time training notebook (``notebooks/ttt_train_predict.py``) has a split of its own,
:func:`ttt_split`: the training file's rows less a held-out share, plus the test set's labelled rows.

``"auto"`` (:func:`resolve_split`) is ``"english"`` when the validation file exists, else ``"holdout"``.

**One text, one side** (:data:`HOLDOUT_RULE`; issue 39 item 6): every held-out share this module draws
(``"english"``, ``"holdout"``, :func:`ttt_split`) draws whole texts, not rows: the rows of one exact text
(a repost, a merged file; grouped as the folds group them, :func:`kitlib.cv.folds.text_groups`) are all held
out or all trained on, and a text the training part holds anyway (the test set's labelled rows, copied from
the training file) is never held out. ``round(frac * T)`` of the ``T`` texts are held out, stratified on the
label (and language) of each text's first row, so a part's row count moves by a repeat's rows; without
repeated texts the draw is row for row what a plain stratified split draws. The held-out AUC, the
hand-off's reload and the collapse check therefore score rows whose text was never trained on. What was kept
together is named in ``split.json`` (``notes``) and printed. ``"validation"`` draws nothing (file order): it
names the held-out rows whose text is among the training rows instead (:func:`validation_split`).

Each writes its two CSVs and ``split.json`` (sources, rule, row and positive counts) into a folder of
its own, atomically.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import MANIFEST, atomic_dir
from ..data import TEXT_COLUMNS, csv_columns, read_csv_checked, read_csv_strings
from ..metrics import hard_labels

TRAIN_FILE = "train-en.csv"
HOLDOUT_FILE = "holdout-en.csv"
SPLIT_FILE = "split.json"
MIXED_TRAIN_FILE = "train-en-valid.csv"
VALID_HOLDOUT_FILE = "holdout-valid.csv"
TRAIN_PART_FILE = "train-part.csv"
HOLDOUT_PART_FILE = "holdout-part.csv"
TEST_TIME_TRAIN_FILE = "train-and-labelled-test.csv"
HOLDOUT_RULE = "whole texts held out (the rows of one exact text on one side), stratified on each text's first row"
SPLITS = {
    "english": "hold out a stratified share of the English training texts; validation.csv scored at the end",
    "validation": "train on the English rows + the first half of validation.csv; hold out its second half",
    "holdout": "hold out a stratified share (by label, and language where there is one) of the training file's texts; "
               "no validation file",
}
AUTO = "auto"  # the notebooks' default split: resolve_split


def resolve_split(split: str, valid_csv: str | os.PathLike, *, present: str = "english",
                  choices: tuple[str, ...] = tuple(SPLITS)) -> str:
    """The split a notebook runs: ``split`` itself, or for ``"auto"`` ``present`` (the notebook's
    Jigsaw split) when ``valid_csv`` exists, else ``"holdout"`` (:func:`holdout_split`).

    Raises:
        ValueError: ``split`` is neither ``"auto"`` nor one of ``choices`` (named, with the parameter).
    """
    if split == AUTO:
        return present if Path(valid_csv).is_file() else "holdout"
    if split not in choices:
        raise ValueError(f"split={split!r}: pass one of {', '.join(map(repr, (AUTO, *choices)))} "
                         f"(kitlib/cv/splits.py)")
    if split != "holdout" and not Path(valid_csv).is_file():
        raise FileNotFoundError(f"split={split!r} needs the validation file {valid_csv}, which does not exist: pass "
                                "split='holdout' (holdout_frac of the training file's rows held out) or valid_csv")
    return split


def _check_own_folder(out_dir: Path, names: tuple[str, ...]) -> None:
    """Refuse an ``out_dir`` that holds files other than the split's ``names`` (and the atomic manifest)."""
    if out_dir.exists():
        extra = sorted(p.name for p in out_dir.iterdir() if p.name not in (*names, SPLIT_FILE, MANIFEST))
        if extra:
            raise ValueError(f"{out_dir}: holds other files ({', '.join(extra[:5])}); give the split a folder of its own")


def english_holdout_split(train_csv: str | os.PathLike, out_dir: str | os.PathLike, frac: float = 0.2, seed: int = 0, *,
                          lang_col: str | None = None, lang: str = "en", label_col: str = "toxic",
                          text_col: str | None = None) -> tuple[Path, Path]:
    """Split the English rows of ``train_csv`` into a training part and a held-out part.

    Which rows are English:

    * ``lang_col=None`` (default): the whole file, as Jigsaw's English training file has no
      language column. A file that does have a ``lang`` column is refused (pass ``lang_col``).
    * ``lang_col="lang"`` (say): the rows whose ``lang_col`` equals ``lang``; the column must exist.

    The held-out part is ``round(frac * T)`` of the ``T`` texts (every row of each: the module's one text,
    one side rule) drawn by ``sklearn.model_selection.train_test_split(stratify=hard_labels(label),
    random_state=seed)`` (:func:`kitlib.metrics.hard_labels`: class 1 at >= 0.5), so both
    parts keep the file's share of positive rows. Rows keep their file order within each part and
    every column of the file, with the original strings (ids stay exact).

    ``out_dir`` is built under a temporary name and renamed into place (:func:`kitlib.atomic.atomic_dir`):
    it then holds ``train-en.csv``, ``holdout-en.csv`` and ``split.json`` (source, fraction, seed,
    language rule, row and positive counts), never one file without the other. An existing
    ``out_dir`` is replaced only if it holds nothing but those files.

    Args:
        train_csv: the labelled training CSV (``id``, a text column, ``label_col``).
        out_dir: folder for the two CSVs (owned by the split).
        frac: share of the English rows held out, in (0, 1).
        seed: ``random_state`` of the split.
        lang_col, lang: the language rule above.
        label_col: the 0/1 (or [0, 1]) label the split is stratified on.
        text_col: the text column (None: ``content`` or ``comment_text``, :func:`kitlib.data.read_csv_checked`).

    Returns:
        ``(train_path, holdout_path)``.

    Raises:
        FileNotFoundError: ``train_csv`` does not exist.
        ValueError: ``frac`` is not in (0, 1); ``lang_col`` is missing from the file, or is None while
            the file has a ``lang`` column; no row is in language ``lang``; a column, id or label is
            bad (:func:`kitlib.data.read_csv_checked`); a class has too few rows for both parts;
            ``out_dir`` holds other files.
    """
    train_csv, out_dir = Path(train_csv), Path(out_dir)
    if not 0 < frac < 1:
        raise ValueError(f"frac must be between 0 and 1 (exclusive), not {frac}")
    checked = read_csv_checked(train_csv, text_col=text_col, label_cols=(label_col,))  # ids, text and label column checked
    raw = pd.read_csv(train_csv, dtype=str, keep_default_na=False)
    idx, rule = _language_rows(raw, train_csv, lang_col, lang)
    labels = hard_labels(checked[label_col].to_numpy())
    tr, ho, notes = _stratified_holdout(idx, labels[idx], checked["text"].to_numpy()[idx], frac, seed,
                                        f"among {len(idx)} rows ({rule})", train_csv, label_col)
    _check_own_folder(out_dir, (TRAIN_FILE, HOLDOUT_FILE))
    meta = {"source": str(train_csv), "frac": frac, "seed": seed, "language_rule": rule, "label_col": label_col,
            "rule": HOLDOUT_RULE, "notes": _say(notes, train_csv),
            "train_rows": len(tr), "train_positives": int(labels[tr].sum()),
            "holdout_rows": len(ho), "holdout_positives": int(labels[ho].sum())}
    return _write_split(out_dir, {TRAIN_FILE: raw.iloc[tr], HOLDOUT_FILE: raw.iloc[ho]}, meta)


def _language_rows(raw: pd.DataFrame, train_csv: Path, lang_col: str | None, lang: str) -> tuple[np.ndarray, str]:
    """The positions of the rows in language ``lang`` (:func:`english_holdout_split`'s rule) and
    the rule in words, for ``split.json``."""
    if lang_col is None:
        if "lang" in raw.columns:
            langs = ", ".join(sorted(raw["lang"].unique())[:10])
            raise ValueError(
                f"{train_csv}: has a 'lang' column (values {langs}); pass lang_col='lang' to keep its {lang!r} rows"
            )
        return np.arange(len(raw)), "whole file (no language column)"
    if lang_col not in raw.columns:
        raise ValueError(
            f"{train_csv}: no language column {lang_col!r} (found {', '.join(raw.columns)}); "
            "pass lang_col=None if the whole file is English"
        )
    keep = (raw[lang_col] == lang).to_numpy()
    if not keep.any():
        langs = ", ".join(sorted(raw[lang_col].unique())[:10])
        raise ValueError(f"{train_csv}: no row has {lang_col} == {lang!r} (values: {langs})")
    return np.flatnonzero(keep), f"{lang_col} == {lang!r}"


def _stratified_holdout(idx: np.ndarray, y: np.ndarray, texts, frac: float, seed: int, among: str, train_csv: Path,
                        label_col: str, *, hint: str = "", stratify: np.ndarray | None = None,
                        trained_texts=()) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``idx`` split into (training, held-out) positions, each in file order, with every row of one text on one
    side (:data:`HOLDOUT_RULE`), and the notes naming the repeats kept together.

    ``texts``, ``y`` (hard labels) and ``stratify`` (None: ``y``) are per position of ``idx``; ``trained_texts``
    are texts the training part holds anyway (the test set's labelled rows: :func:`ttt_split`), whose rows here
    are never held out. Refuses a class with too few texts for both parts to have one of them (AUC on a part
    would be undefined)."""
    from sklearn.model_selection import train_test_split

    from .folds import text_groups

    texts = pd.Series(np.asarray(texts, dtype=object)).astype(str)
    trained_texts = pd.Series(list(trained_texts), dtype=object).astype(str)
    groups = text_groups(pd.concat([texts, trained_texts], ignore_index=True))
    forced = set(groups[len(texts):])  # a text the training part holds anyway stays on its side
    groups = groups[:len(texts)]
    first = pd.Series(np.arange(len(groups))).groupby(groups).first().to_numpy()  # each text's first row, text order
    drawn = np.array([g for g in range(len(first)) if g not in forced], dtype=np.int64)
    gy = y[first[drawn]]
    for cls in (0, 1):
        count = int((gy == cls).sum())
        if count < 2 or round(frac * count) < 1 or count - round(frac * count) < 1:
            raise ValueError(
                f"{train_csv}: {count} distinct text(s) with {label_col} = {cls} {among}"
                + (f" (not counting {len(forced)} text(s) the training part holds anyway)" if forced else "")
                + f"; too few to hold out {frac:.0%} of them with some left for training{hint}"
            )
    strata = (y if stratify is None else np.asarray(stratify))[first[drawn]]
    _, held = train_test_split(drawn, test_size=int(round(frac * len(drawn))), stratify=strata, random_state=seed)
    out = np.isin(groups, held)
    return np.sort(idx[~out]), np.sort(idx[out]), _repeat_notes(groups, forced)


def _repeat_notes(groups: np.ndarray, forced: set) -> list[str]:
    """What :func:`_stratified_holdout` kept together, in words (``split.json`` ``notes``, printed)."""
    counts = pd.Series(groups).value_counts()
    repeated = counts[counts > 1]
    notes = [f"{int(repeated.sum())} row(s) share their text with another row ({len(repeated)} text(s)): "
             "each text's rows are on one side"] if len(repeated) else []
    kept = int(np.isin(groups, list(forced)).sum())
    if kept:
        notes.append(f"{kept} training row(s) share their text with a labelled test row: trained, never held out")
    return notes


def _say(notes: list[str], source: Path) -> list[str]:
    """Print each note of a split of ``source`` (``note: ...``) and return them, for ``split.json``."""
    for note in notes:
        print(f"note: split of {source}: {note}")
    return notes


def _write_split(out_dir: Path, parts: dict[str, pd.DataFrame], meta: dict) -> tuple[Path, Path]:
    """Write the two parts and ``split.json`` into ``out_dir`` atomically; returns the parts' paths."""
    with atomic_dir(out_dir) as tmp:
        for name, part in parts.items():
            part.to_csv(tmp / name, index=False)
        (tmp / SPLIT_FILE).write_text(json.dumps(meta, indent=1))
    return tuple(out_dir / name for name in parts)


def holdout_split(train_csv: str | os.PathLike, out_dir: str | os.PathLike, frac: float = 0.2, seed: int = 0, *,
                  label_col: str = "toxic", text_col: str | None = None, id_col: str = "id",
                  lang_col: str = "lang") -> tuple[Path, Path]:
    """Hold out a stratified share of the texts of ``train_csv`` (split ``"holdout"``: no validation file).

    The held-out part is ``round(frac * T)`` of the ``T`` texts (every row of each: the module's one text,
    one side rule) drawn by ``sklearn.model_selection.train_test_split(stratify=..., random_state=seed)``,
    stratified by the hard label and, where the file has a ``lang_col`` column, by label x language (a
    label x language stratum of one row joins its label's: :func:`kitlib.cv.folds.strata`), so both parts keep the file's share of positive rows
    in every language. Rows keep their file order and every column, with the original strings.
    ``out_dir`` (built atomically) then holds ``train-part.csv``, ``holdout-part.csv`` and
    ``split.json`` (source, fraction, seed, columns, row and positive counts per part).

    Args:
        train_csv: the labelled training CSV (``id_col``, a text column, ``label_col``).
        out_dir: folder for the two CSVs (owned by the split).
        frac: share of the rows held out, in (0, 1).
        seed: ``random_state`` of the split.
        label_col, text_col, id_col: the columns (:func:`kitlib.data.read_csv_checked`).
        lang_col: the language column stratified on when the file has it.

    Returns:
        ``(train_path, holdout_path)``.

    Raises:
        FileNotFoundError: no ``train_csv``.
        ValueError: ``frac`` not in (0, 1) (``holdout_frac`` named); a bad column, id or label; a class
            too small for both parts; ``out_dir`` holds other files.
    """
    from .folds import strata

    train_csv, out_dir = Path(train_csv), Path(out_dir)
    if not 0 < frac < 1:
        raise ValueError(f"holdout_frac={frac}: split 'holdout' holds out a share of {train_csv.name}'s rows, "
                         "between 0 and 1 (exclusive), e.g. 0.2")
    checked = read_csv_checked(train_csv, id_col=id_col, text_col=text_col, label_cols=(label_col,))
    raw = pd.read_csv(train_csv, dtype=str, keep_default_na=False)
    y = hard_labels(checked[label_col].to_numpy())
    langs = raw[lang_col].to_numpy() if lang_col in raw.columns else None
    tr, ho, notes = _stratified_holdout(np.arange(len(raw)), y, checked["text"].to_numpy(), frac, seed, f"among {len(y)} rows",
                                        train_csv, label_col, hint=" (holdout_frac, or more rows)", stratify=strata(y, langs, 2))
    _check_own_folder(out_dir, (TRAIN_PART_FILE, HOLDOUT_PART_FILE))
    meta = {"split": "holdout", "rule": f"{frac:.0%} of {train_csv.name}'s texts held out, stratified by {label_col}"
            + (f" x {lang_col}" if langs is not None else "") + f", seed {seed}: {HOLDOUT_RULE}",
            "notes": _say(notes, train_csv), "source": str(train_csv), "frac": frac,
            "seed": seed, "id_col": id_col, "label_col": label_col, "lang_col": lang_col if langs is not None else None,
            "train": _part_counts(tr, y, langs), "holdout": _part_counts(ho, y, langs)}
    return _write_split(out_dir, {TRAIN_PART_FILE: raw.iloc[tr], HOLDOUT_PART_FILE: raw.iloc[ho]}, meta)


def _part_counts(rows: np.ndarray, y: np.ndarray, langs: np.ndarray | None) -> dict:
    """A part's rows, positive rows and rows per language (``split.json`` of :func:`holdout_split`)."""
    per = {} if langs is None else {str(k): int(v) for k, v in pd.Series(langs[rows]).value_counts().sort_index().items()}
    return {"rows": len(rows), "positives": int(y[rows].sum()), "per_language": per}


def validation_split(train_csv: str | os.PathLike, valid_csv: str | os.PathLike, out_dir: str | os.PathLike,
                     train_frac: float = 0.5, *, label_col: str = "toxic", text_col: str | None = None) -> tuple[Path, Path]:
    """Train on every row of ``train_csv`` plus the first rows of ``valid_csv``; hold out the rest.

    The first ``round(train_frac * n)`` rows of ``valid_csv`` (file order, no shuffle: the split is
    the same on every machine and easy to state) join the training rows; the others are the
    held-out rows, never trained on. A held-out row whose exact text is also a training row's (a repost, an
    English row copied into validation.csv) is not moved, as the rule is file order: the split names them
    (``split.json`` ``notes``, printed), so a held-out AUC is read knowing how many rows it has seen. Both files get the columns ``id``, ``comment_text``, ``lang``
    (``"en"`` for the training file's rows, which have none) and ``label_col``, with the original
    strings. ``out_dir`` then holds ``train-en-valid.csv``, ``holdout-valid.csv`` and
    ``split.json``, built atomically (:func:`kitlib.atomic.atomic_dir`); an existing ``out_dir``
    is replaced only if it holds nothing but those files.

    Args:
        train_csv: the English training CSV (``id``, a text column, ``label_col``).
        valid_csv: the multilingual validation CSV (``id``, ``comment_text``, ``lang``, ``label_col``).
        out_dir: folder for the two CSVs (owned by the split).
        train_frac: share of ``valid_csv``'s rows (its first rows) that train, in (0, 1).
        text_col: the text column of both files (None: ``content`` or ``comment_text``); the
            written files name it ``text_col`` (None: ``comment_text``).

    Returns:
        ``(train_path, holdout_path)``.

    Raises:
        FileNotFoundError: a CSV does not exist.
        ValueError: ``train_frac`` not in (0, 1); a column, id or label is bad
            (:func:`kitlib.data.read_csv_checked`); an id is in both files; the held-out rows lack
            a class (AUC undefined); ``out_dir`` holds other files.
    """
    train_csv, valid_csv, out_dir = Path(train_csv), Path(valid_csv), Path(out_dir)
    if not 0 < train_frac < 1:
        raise ValueError(f"train_frac must be between 0 and 1 (exclusive), not {train_frac}")
    en = read_csv_checked(train_csv, text_col=text_col, label_cols=(label_col,))
    va = read_csv_checked(valid_csv, text_col=text_col, label_cols=(label_col,))
    raw_va = pd.read_csv(valid_csv, dtype=str, keep_default_na=False)
    raw_en = pd.read_csv(train_csv, dtype=str, keep_default_na=False)
    both = sorted(set(en["id"]) & set(va["id"]))
    if both:
        raise ValueError(f"{train_csv} and {valid_csv} share id(s) {both[:5]}; ids must be unique across the two")
    n_train = int(round(train_frac * len(va)))
    held = raw_va.iloc[n_train:]
    if n_train < 1 or len(held) < 1 or (held[label_col].astype(float) >= 0.5).nunique() < 2:
        raise ValueError(f"{valid_csv}: holding out its last {len(held)} of {len(va)} rows leaves "
                         "no training rows or a held-out part with one class; change train_frac")
    lang_va = raw_va["lang"].to_numpy() if "lang" in raw_va.columns else ""
    valid_part = _split_columns(raw_va, va, lang_va, text_col, label_col)
    train_part = pd.concat([_split_columns(raw_en, en, "en", text_col, label_col), valid_part.iloc[:n_train]], ignore_index=True)
    holdout_part = valid_part.iloc[n_train:]
    _check_own_folder(out_dir, (MIXED_TRAIN_FILE, VALID_HOLDOUT_FILE))
    y_tr, y_ho = train_part[label_col].astype(float) >= 0.5, holdout_part[label_col].astype(float) >= 0.5
    meta = {"split": "validation", "rule": f"every row of {train_csv.name} + rows 0-{n_train - 1} of {valid_csv.name} "
            f"train; rows {n_train}-{len(va) - 1} of {valid_csv.name} are held out", "train_csv": str(train_csv),
            "valid_csv": str(valid_csv), "train_frac": train_frac, "label_col": label_col,
            "train_rows": len(train_part), "train_positives": int(y_tr.sum()), "train_english_rows": len(en),
            "holdout_rows": len(holdout_part), "holdout_positives": int(y_ho.sum()),
            "holdout_languages": holdout_part["lang"].value_counts().to_dict(),
            "notes": _say(_seen_texts(train_part, holdout_part, text_col or "comment_text"), valid_csv)}
    return _write_split(out_dir, {MIXED_TRAIN_FILE: train_part, VALID_HOLDOUT_FILE: holdout_part}, meta)


def _seen_texts(train_part: pd.DataFrame, holdout_part: pd.DataFrame, column: str) -> list[str]:
    """The note naming the held-out rows whose text is a training row's (:func:`validation_split`); [] when none."""
    seen = holdout_part[column].isin(set(train_part[column]))
    if not seen.any():
        return []
    return [f"{int(seen.sum())} held-out row(s) share their text with a training row (ids "
            f"{', '.join(holdout_part['id'][seen].astype(str).iloc[:5])}{' ...' if seen.sum() > 5 else ''}): they stay held "
            "out (the split is file order), and their scores are of texts the model was trained on"]


def _split_columns(raw: pd.DataFrame, checked: pd.DataFrame, lang, text_col: str | None, label_col: str) -> pd.DataFrame:
    """A file's rows in :func:`validation_split`'s columns: ``id``, the text, ``lang``, the label (original strings)."""
    return pd.DataFrame({"id": checked["id"].to_numpy(), text_col or "comment_text": checked["text"].to_numpy(),
                         "lang": lang, label_col: raw[label_col].to_numpy()})


def training_columns(split: str, train_csv: str | os.PathLike, text_col: str | None = None,
                     label_col: str = "toxic") -> list[str]:
    """The columns of the training rows ``split`` gives, without splitting: ``"english"``: every column of
    ``train_csv`` (:func:`english_holdout_split` keeps them); ``"validation"``: ``id``, the text column,
    ``lang`` and ``label_col`` (:func:`validation_split`).

    Raises:
        ValueError: ``split`` not in :data:`SPLITS`; FileNotFoundError: no ``train_csv`` (split ``"english"``).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    if split == "validation":
        return ["id", text_col or "comment_text", "lang", label_col]  # "english", "holdout": every column
    return list(pd.read_csv(train_csv, dtype=str, nrows=0).columns)


def ttt_split(train_csv: str | os.PathLike, test_csv: str | os.PathLike, out_dir: str | os.PathLike,
              frac: float = 0.1, seed: int = 0, *, label_col: str = "toxic", test_label_col: str = "",
              text_col: str | None = None) -> tuple[Path, Path, dict]:
    """The rows a test-time training run learns from, and those it holds out (``notebooks/ttt_train_predict.py``).

    A stratified ``frac`` share of ``train_csv``'s texts is held out, as :func:`holdout_split` draws it (the
    hand-off scores it), never a text of the test set's labelled rows (the module's one text, one side rule). The
    training part is the test set's labelled rows first (``test_label_col`` not empty, in file order), then the
    other training rows shuffled (``seed``): a run cut to its first N rows (``TrainJob.train_limit``) keeps the rows
    most like the test set. Both parts have ``id`` (``train:<id>``, ``test:<id>``), the text under ``text_col``
    (None: ``text``; read with the notebook's ``text_col`` by training and the hand-off), ``label_col``, ``source``
    and every other column both files have (a prompt's per-row fields: :meth:`kitlib.models.kinds.Prompt.columns`);
    ``out_dir`` (built atomically) holds ``train-and-labelled-test.csv``, ``holdout-part.csv`` and ``split.json``.

    Args:
        train_csv: the labelled training CSV (``id``, a text column, ``label_col``).
        test_csv: the test CSV (``id``, a text column; ``test_label_col`` when it carries labels).
        out_dir: the folder for the parts (owned by the split).
        frac: share of ``train_csv``'s rows held out, in (0, 1).
        seed: the held-out draw's and the shuffle's seed.
        label_col: the label column of ``train_csv`` (0/1 or in [0, 1]).
        test_label_col: ``""``: the test set carries no labels; else its column whose non-empty values
            (0/1 or in [0, 1]) are labels.
        text_col: the text column of both files (None: ``content``, ``comment_text`` or ``text``), and the parts'.

    Returns:
        ``(train_path, holdout_path, counts)``: counts of ``train_rows``, ``labelled_test_rows``,
        ``holdout_rows``.

    Raises:
        ValueError: ``frac`` not in (0, 1); ``test_label_col`` missing from ``test_csv`` (its columns named);
            a label that is not a number in [0, 1] (file, row and value named); a bad id or column
            (:func:`kitlib.data.read_csv_checked`); a class too small to hold out; ``out_dir`` holds other files.
    """
    train_csv, test_csv, out_dir = Path(train_csv), Path(test_csv), Path(out_dir)
    if not 0 < frac < 1:
        raise ValueError(f"holdout_frac={frac}: the held-out share of {train_csv.name}'s rows must be between 0 and 1 "
                         "(exclusive), e.g. 0.1")
    skip = {"id", "source", label_col, test_label_col, text_col, *TEXT_COLUMNS}
    shared = tuple(c for c in csv_columns(train_csv) if c in csv_columns(test_csv) and c not in skip)
    train = read_csv_checked(train_csv, text_col=text_col, label_cols=(label_col,), fields=shared)
    y = hard_labels(train[label_col].to_numpy())
    labelled = _labelled_test_rows(test_csv, test_label_col, text_col, label_col, shared)
    tr, ho, notes = _stratified_holdout(np.arange(len(train)), y, train["text"].to_numpy(), frac, seed, f"among {len(y)} rows",
                                        train_csv, label_col, hint=" (holdout_frac, or more rows)",
                                        trained_texts=labelled["text"])
    part = lambda df, rows, source: pd.DataFrame({"id": f"{source}:" + df["id"].iloc[rows].astype(str).to_numpy(),
                                                  text_col or "text": df["text"].iloc[rows].to_numpy(),
                                                  label_col: df[label_col].iloc[rows].to_numpy(), "source": source,
                                                  **{c: df[f"field:{c}"].iloc[rows].to_numpy() for c in shared}})
    shuffled = np.random.default_rng(seed).permutation(tr)
    training = pd.concat([part(labelled, np.arange(len(labelled)), "test"), part(train, shuffled, "train")], ignore_index=True)
    counts = {"train_rows": len(tr), "labelled_test_rows": len(labelled), "holdout_rows": len(ho)}
    _check_own_folder(out_dir, (TEST_TIME_TRAIN_FILE, HOLDOUT_PART_FILE))
    meta = {"split": "test-time", "rule": f"{frac:.0%} of {train_csv.name}'s texts held out, stratified by {label_col}, "
            f"seed {seed} ({HOLDOUT_RULE}; never a labelled test row's text); trained: {test_csv.name}'s labelled rows ({test_label_col or 'none'}) first, then the other "
            "training rows shuffled", "source": str(train_csv), "test": str(test_csv), "frac": frac, "seed": seed,
            "label_col": label_col, "test_label_col": test_label_col or None, "notes": _say(notes, train_csv), **counts}
    paths = _write_split(out_dir, {TEST_TIME_TRAIN_FILE: training, HOLDOUT_PART_FILE: part(train, ho, "train")}, meta)
    return (*paths, counts)


def _labelled_test_rows(test_csv: Path, column: str, text_col: str | None, label_col: str,
                        fields: tuple = ()) -> pd.DataFrame:
    """The rows of ``test_csv`` with a label in ``column`` (``id``, ``text``, ``label_col``: float, and ``fields``
    as :func:`kitlib.data.read_csv_checked` keeps them); none for ``""``."""
    test = read_csv_checked(test_csv, text_col=text_col, fields=fields)
    if not column:
        return test.iloc[:0].assign(**{label_col: np.zeros(0)})
    columns = list(read_csv_strings(test_csv, nrows=0).columns)
    if column not in columns:
        raise ValueError(f"{test_csv}: no column {column!r} (test_label_col), so no test rows can be read as labelled; "
                         f"its columns: {columns}. Name the column that carries labels, or \"\" for none")
    values = read_csv_strings(test_csv, usecols=[column])[column].str.strip()
    has = (values != "").to_numpy()
    labels = pd.to_numeric(values[has], errors="coerce")
    bad = labels.isna() | (labels < 0) | (labels > 1)
    if bad.any():
        row = int(np.flatnonzero(has)[np.argmax(bad.to_numpy())])
        raise ValueError(f"{test_csv}: column {column!r} (test_label_col) at data row {row + 1} is {values.iloc[row]!r}, "
                         "not a label: a number from 0 to 1, or empty for an unlabelled row")
    return test.loc[has, ["id", "text", *(f"field:{c}" for c in fields)]].assign(**{label_col: labels.to_numpy(dtype=float)}).reset_index(drop=True)
