"""One round of pseudo-labels: the test rows every model of a group agrees on, as training rows.

The rule: a test row becomes a training row with label 1 when every member's prediction is at least
``high``, with label 0 when every member's is at most ``low``; rows the members disagree on, or are
unsure of, are left out. The next round (the training notebook's ``pseudo_csv``) adds them to every
fold's training part, never to a fold's validation part nor to the held-out rows, so the next
round is scored on the same held-out rows as this one (``make cv PSEUDO=1``; :mod:`kitlib.cv.groups`'s
report gives the change, whichever way it goes). Jigsaw Multilingual's top solutions did this on
the test set (one round took an XLM-R large from 0.9393 to 0.9439 private).

A pseudo row's id is ``pseudo-<test id>``: the competition's test ids (0, 1, ...) repeat
validation.csv's, and a training file's ids must be unique. Columns: ``id``, ``comment_text``,
``lang`` (``""`` without one in the test file) and ``toxic``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

ID_PREFIX = "pseudo-"
# The default thresholds: multilingual-e5-small's fold models (e5 recipe, 1 epoch, pos_weight) predict
# the sample's test rows between 0.11 and 0.87, so 0.9 / 0.1 agreed on no row; at 0.85 / 0.15 three folds
# agreed on 210 of 1,000 (docs/training-torch.md, "Folds, seeds and pseudo-labels").
HIGH, LOW = 0.85, 0.15
COLUMNS = ("id", "comment_text", "lang", "toxic")  # a pseudo-label file's columns (select)


def select(member_csvs: list[str | os.PathLike], test_csv: str | os.PathLike, *, high: float = HIGH,
           low: float = LOW, label_col: str = "toxic") -> pd.DataFrame:
    """The pseudo-labelled rows (see the module docstring), in the test file's order.

    Args:
        member_csvs: two or more members' test predictions (``id``, ``label_col``), each exactly the
            test ids (:func:`kitlib.outputs.blend.read_aligned`'s checks).
        test_csv: the test rows (``id``, ``content`` or ``comment_text``, ``lang``).
        high, low: the thresholds, ``0 <= low < high <= 1``.

    Raises:
        ValueError: fewer than two members, thresholds out of order; kitlib.outputs.blend.BlendError: a member's
            predictions are not exactly the test ids, or not finite numbers.
    """
    from ..outputs.blend import read_aligned
    from ..data import read_csv_checked, read_csv_strings

    if len(member_csvs) < 2:
        raise ValueError(f"pseudo-labels need two or more members' predictions to agree, got {len(member_csvs)}")
    if not 0 <= low < high <= 1:
        raise ValueError(f"thresholds low={low}, high={high}: need 0 <= low < high <= 1")
    test = read_csv_checked(test_csv)
    langs = read_csv_strings(test_csv, usecols=["lang"])["lang"] if "lang" in read_csv_strings(test_csv, nrows=0).columns else ""
    _, _, aligned = read_aligned(member_csvs, expected=pd.DataFrame({"id": test["id"], label_col: 0.0}),
                                 expected_name=str(test_csv))
    p = np.stack([a[label_col] for a in aligned])  # [members, rows]
    pos, neg = (p >= high).all(axis=0), (p <= low).all(axis=0)
    keep = pos | neg
    out = pd.DataFrame({"id": ID_PREFIX + test["id"], "comment_text": test["text"], "lang": langs, label_col: pos.astype(int)})
    return out[keep].reset_index(drop=True)


def write_pseudo(member_csvs: list[str | os.PathLike], test_csv: str | os.PathLike, out_csv: str | os.PathLike, *,
                 high: float = HIGH, low: float = LOW, label_col: str = "toxic") -> dict:
    """Write :func:`select`'s rows to ``out_csv`` and a summary beside it (``<out_csv>.json``), atomically.

    Returns:
        The summary: ``rows``, ``positives``, ``per_language`` (rows, positives), ``test_rows``, ``members``,
        ``high``, ``low``, and ``summary`` (one line of text).

    Raises:
        What :func:`select` raises; ValueError: no row is agreed on (nothing to add; lower ``high`` or raise ``low``).
    """
    from ..atomic import atomic_write

    rows = select(member_csvs, test_csv, high=high, low=low, label_col=label_col)
    if rows.empty:
        raise ValueError(f"no test row of {test_csv} has every member's prediction >= {high} or <= {low}: "
                         "nothing to pseudo-label; lower high or raise low")
    from ..data import read_csv_strings

    test_rows = len(read_csv_strings(test_csv, usecols=["id"]))
    per = {str(k): {"rows": len(g), "positives": int(g[label_col].sum())} for k, g in rows.groupby("lang")}
    summary = {"rows": len(rows), "positives": int(rows[label_col].sum()), "per_language": per, "test_rows": test_rows,
               "members": [str(m) for m in member_csvs], "high": high, "low": low}
    summary["summary"] = (f"{len(rows)} of {test_rows} test rows pseudo-labelled ({summary['positives']} toxic, every "
                          f"member >= {high}; {len(rows) - summary['positives']} not, every member <= {low}) from "
                          f"{len(member_csvs)} models: " + ", ".join(f"{k} {v['rows']}" for k, v in per.items()))
    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_csv, lambda tmp: rows.to_csv(tmp, index=False))
    atomic_write(Path(f"{out_csv}.json"), lambda tmp: Path(tmp).write_text(json.dumps(summary, indent=1)))
    return summary
