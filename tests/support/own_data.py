"""A made-up binary text-classification competition of a user's own (issue 34 item 1).

``id,text,label`` in two languages (``lang``: en, es), no validation file, a test file and an
``id,label`` sample submission: nothing named as Jigsaw names it. Words carry the label, so a tiny
model can learn a little; everything is seeded.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

WORDS = {  # (language, label) -> words
    ("en", 0): "kind lovely helpful thanks great friendly calm".split(),
    ("en", 1): "awful stupid hate idiot terrible nasty rude".split(),
    ("es", 0): "amable gracias bonito util tranquilo genial".split(),
    ("es", 1): "odio tonto horrible feo idiota grosero".split(),
}


def _rows(rng: np.random.Generator, n: int, start: int) -> pd.DataFrame:
    langs = rng.choice(["en", "es"], size=n)
    labels = (rng.random(n) < 0.3).astype(int)
    texts = [" ".join(rng.choice(WORDS[(lang, y)], size=int(rng.integers(3, 9)))) for lang, y in zip(langs, labels)]
    return pd.DataFrame({"id": [f"r{start + i:04d}" for i in range(n)], "text": texts, "lang": langs, "label": labels})


def write_own_competition(folder: Path, n_train: int = 240, n_test: int = 60, seed: int = 0) -> Path:
    """Write ``train.csv`` (id,text,lang,label), ``test.csv`` (id,text,lang), ``sample_submission.csv``
    (id,label) and the hidden ``test-labels.csv`` (id,label: what a fake Kaggle scores) into ``folder``; returns ``folder``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    _rows(rng, n_train, 0).to_csv(folder / "train.csv", index=False)
    test = _rows(rng, n_test, n_train)
    test.drop(columns="label").to_csv(folder / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "label": 0.5}).to_csv(folder / "sample_submission.csv", index=False)
    test[["id", "label"]].to_csv(folder / "test-labels.csv", index=False)
    return folder
