"""A held-out English split of the training CSV, for measuring a fine-tuned model on unseen rows.

The Jigsaw training file (2018 ``train.csv``, reused in 2020 as ``jigsaw-toxic-comment-train.csv``)
is English and has no language column; the 2020 validation file is Turkish, Spanish and Italian
(``lang``). So "held-out English AUC" needs rows taken out of the training file itself:
:func:`english_holdout_split` does that, stratified on the label, with a fixed seed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .atomic import atomic_dir
from .data import read_csv_checked
from .metrics import hard_labels

TRAIN_FILE = "train-en.csv"
HOLDOUT_FILE = "holdout-en.csv"
SPLIT_FILE = "split.json"


def english_holdout_split(
    train_csv: str | os.PathLike,
    out_dir: str | os.PathLike,
    frac: float = 0.2,
    seed: int = 0,
    *,
    lang_col: str | None = None,
    lang: str = "en",
    label_col: str = "toxic",
) -> tuple[Path, Path]:
    """Split the English rows of ``train_csv`` into a training part and a held-out part.

    Which rows are English:

    * ``lang_col=None`` (default): the whole file, as Jigsaw's English training file has no
      language column. A file that does have a ``lang`` column is refused (pass ``lang_col``).
    * ``lang_col="lang"`` (say): the rows whose ``lang_col`` equals ``lang``; the column must exist.

    The held-out part is ``round(frac * n)`` rows drawn by
    ``sklearn.model_selection.train_test_split(stratify=hard_labels(label), random_state=seed)``
    (:func:`kitlib.metrics.hard_labels`: class 1 at >= 0.5), so both
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
    checked = read_csv_checked(train_csv, label_cols=(label_col,))  # ids, text and label column checked
    raw = pd.read_csv(train_csv, dtype=str, keep_default_na=False)
    if lang_col is None:
        if "lang" in raw.columns:
            langs = ", ".join(sorted(raw["lang"].unique())[:10])
            raise ValueError(
                f"{train_csv}: has a 'lang' column (values {langs}); pass lang_col='lang' to keep its {lang!r} rows"
            )
        keep = np.ones(len(raw), dtype=bool)
        rule = "whole file (no language column)"
    else:
        if lang_col not in raw.columns:
            raise ValueError(
                f"{train_csv}: no language column {lang_col!r} (found {', '.join(raw.columns)}); "
                "pass lang_col=None if the whole file is English"
            )
        keep = (raw[lang_col] == lang).to_numpy()
        if not keep.any():
            langs = ", ".join(sorted(raw[lang_col].unique())[:10])
            raise ValueError(f"{train_csv}: no row has {lang_col} == {lang!r} (values: {langs})")
        rule = f"{lang_col} == {lang!r}"
    idx = np.flatnonzero(keep)
    y = hard_labels(checked[label_col].to_numpy()[idx])
    n_hold = int(round(frac * len(idx)))
    for cls in (0, 1):
        count = int((y == cls).sum())
        # each part needs at least one row of each class, or AUC on it is undefined
        if count < 2 or round(frac * count) < 1 or count - round(frac * count) < 1:
            raise ValueError(
                f"{train_csv}: {count} row(s) with {label_col} = {cls} among {len(idx)} ({rule}); "
                f"too few to hold out {frac:.0%} of them with some left for training"
            )
    from sklearn.model_selection import train_test_split

    tr, ho = train_test_split(idx, test_size=n_hold, stratify=y, random_state=seed)
    tr, ho = np.sort(tr), np.sort(ho)

    if out_dir.exists():
        extra = sorted(p.name for p in out_dir.iterdir() if p.name not in (TRAIN_FILE, HOLDOUT_FILE, SPLIT_FILE))
        if extra:
            raise ValueError(f"{out_dir}: holds other files ({', '.join(extra[:5])}); give the split a folder of its own")
    labels = hard_labels(checked[label_col].to_numpy())
    meta = {"source": str(train_csv), "frac": frac, "seed": seed, "language_rule": rule, "label_col": label_col,
            "train_rows": len(tr), "train_positives": int(labels[tr].sum()),
            "holdout_rows": len(ho), "holdout_positives": int(labels[ho].sum())}
    with atomic_dir(out_dir) as tmp:
        raw.iloc[tr].to_csv(tmp / TRAIN_FILE, index=False)
        raw.iloc[ho].to_csv(tmp / HOLDOUT_FILE, index=False)
        (tmp / SPLIT_FILE).write_text(json.dumps(meta, indent=1))
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700
    return out_dir / TRAIN_FILE, out_dir / HOLDOUT_FILE
