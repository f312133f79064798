"""The confidence cascade (kitlib/outputs/cascade.py, ``python -m kitlib cascade``)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kitlib.outputs import provenance
from kitlib.outputs.blend import BlendError
from kitlib.outputs.cascade import (CascadeError, cascade, combine, pick_ids, uncertain_rows, write_picked_rows)

ROOT = Path(__file__).resolve().parents[1]
IDS = ["007", "7", "a,b", "x", "y", "z", "NA", "q", "r", "s"]
A = [0.05, 0.48, 0.9, 0.56, 0.3, 0.51, 0.99, 0.2, 0.6, 0.45]
# |A - 0.5|: 0.45 0.02 0.40 0.06 0.20 0.01 0.49 0.30 0.10 0.05 -> the three least certain: rows 5, 1, 9
PICKED = [1, 5, 9]


def write(path: Path, ids, values, col="toxic") -> Path:
    pd.DataFrame({"id": ids, col: values}).to_csv(path, index=False)
    return path


@pytest.fixture
def files(tmp_path):
    a = write(tmp_path / "a.csv", IDS, A)
    # B scored only the picked rows ("7", "z", "s"), in another order
    b = write(tmp_path / "b.csv", ["s", "7", "z"], [0.7, 0.9, 0.1])
    return a, b


def read(path):
    return pd.read_csv(path, dtype={"id": str}, keep_default_na=False).set_index("id")["toxic"]


def test_uncertain_rows_by_probability_and_by_rank():
    assert uncertain_rows(A, 0.3).tolist() == PICKED
    assert uncertain_rows(A, 0.3).dtype == np.int64
    assert uncertain_rows(A, 1.0).tolist() == list(range(10))
    assert uncertain_rows(A, 0.01).tolist() == [5]  # ceil(0.1) = 1 row: the nearest 0.5
    # by rank: rank/10 of A: row 3 (0.56) is 7th -> 0.7; row 7 (0.2) is 2nd -> 0.2
    assert uncertain_rows(A, 0.1, by="rank", center=0.7).tolist() == [3]
    assert uncertain_rows(A, 0.1, by="rank", center=0.2).tolist() == [7]
    # ranks ignore the scale: a monotone transform of A picks the same rows
    assert uncertain_rows(np.array(A) ** 3, 0.3, by="rank").tolist() == uncertain_rows(A, 0.3, by="rank").tolist()
    # two columns: a row's most uncertain column counts (row 0's second column is 0.5 exactly)
    two = np.column_stack([A, [0.5] + [0.0] * 9])
    assert uncertain_rows(two, 0.1).tolist() == [0]


def test_combine_rules_hand_computed():
    b = [0.9, 0.1, 0.7]  # for rows 1, 5, 9
    assert combine(A, b, PICKED, rule="replace")[PICKED].tolist() == [0.9, 0.1, 0.7]
    mean = combine(A, b, PICKED, rule="mean", weight=0.25)
    assert mean[PICKED] == pytest.approx([0.75 * 0.48 + 0.25 * 0.9, 0.75 * 0.51 + 0.25 * 0.1, 0.75 * 0.45 + 0.25 * 0.7])
    # reorder: A's values of rows 1, 5, 9 (0.48, 0.51, 0.45) handed out in B's order: 5 < 9 < 1
    re = combine(A, b, PICKED, rule="reorder")
    assert re[[5, 9, 1]].tolist() == [0.45, 0.48, 0.51]
    for out in (mean, re):  # the other rows keep A's values
        keep = [i for i in range(10) if i not in PICKED]
        assert out[keep].tolist() == [A[i] for i in keep]


def test_cascade_writes_b_for_the_picked_rows_and_records_itself(tmp_path, files):
    a, b = files
    out = tmp_path / "sub.csv"
    r = cascade(a, b, out, fraction=0.3)
    got = read(out)
    assert list(got.index) == IDS  # A's order, ids the exact strings ("007", "NA")
    want = list(A)
    want[1], want[5], want[9] = 0.9, 0.1, 0.7
    assert got.tolist() == pytest.approx(want)
    assert (r.num_rows, r.rescored, r.columns) == (10, 3, ("toxic",))
    record = json.loads((tmp_path / ("sub.csv" + provenance.RECORD_SUFFIX)).read_text())
    assert record["writer"] == provenance.CASCADE and record["rows"] == 10
    # B scored every row: the same result (its other rows are not used)
    b_of = {"7": 0.9, "z": 0.1, "s": 0.7}
    full = write(tmp_path / "b_all.csv", IDS[::-1], [b_of.get(i, 0.0) for i in IDS[::-1]])
    cascade(a, full, tmp_path / "sub2.csv", fraction=0.3)
    assert read(tmp_path / "sub2.csv").tolist() == pytest.approx(want)


def test_misaligned_ids_are_refused_naming_the_file(tmp_path, files):
    a, _ = files
    missing = write(tmp_path / "b_missing.csv", ["s", "7"], [0.7, 0.9])
    with pytest.raises(BlendError, match=r"b_missing.csv: 1 id\(s\) of the 3 rows the cascade picked .* missing: 'z'"):
        cascade(a, missing, tmp_path / "o.csv", fraction=0.3)
    stranger = write(tmp_path / "b_extra.csv", ["s", "7", "z", "nope"], [0.7, 0.9, 0.1, 0.2])
    with pytest.raises(BlendError, match=r"b_extra.csv: 1 id\(s\) not in .*'nope'"):
        cascade(a, stranger, tmp_path / "o.csv", fraction=0.3)
    sample = write(tmp_path / "sample.csv", IDS[:-1] + ["other"], [0.5] * 10)
    with pytest.raises(BlendError, match=r"a.csv: 1 id\(s\) of .*sample.csv missing: 'other'"):
        cascade(a, files[1], tmp_path / "o.csv", fraction=0.3, sample_submission=sample)
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("kw,message", [
    (dict(fraction=0), r"fraction=0.0: .* must be in \(0, 1\]"),
    (dict(fraction=1.5), r"fraction=1.5"),
    (dict(fraction=float("nan")), r"fraction=nan"),
    (dict(fraction="a fifth"), r"fraction='a fifth': give the share"),
    (dict(fraction=0.3, rule="max"), r"rule='max' is not one of 'replace', 'mean', 'reorder'"),
    (dict(fraction=0.3, weight=2), r"weight=2 must be a number in \[0, 1\]"),
    (dict(fraction=0.3, by="entropy"), r"by='entropy' is not one of 'probability', 'rank'"),
])
def test_parameters_are_validated(tmp_path, files, kw, message):
    with pytest.raises(CascadeError, match=message):
        cascade(*files, tmp_path / "o.csv", **kw)
    assert not (tmp_path / "o.csv").exists()


def test_pick_ids_and_write_picked_rows(tmp_path, files):
    a, _ = files
    ids = pick_ids(a, 0.3)
    assert list(ids) == ["7", "z", "s"]
    test = tmp_path / "test.csv"
    pd.DataFrame({"id": IDS, "content": [f"text {i}, with \"quotes\"\nand a newline" for i in range(10)]}).to_csv(test, index=False)
    assert write_picked_rows(test, ids, tmp_path / "rows_for_b.csv") == 3
    got = pd.read_csv(tmp_path / "rows_for_b.csv", dtype=str, keep_default_na=False)
    assert got["id"].tolist() == ["7", "z", "s"]
    assert got["content"].tolist()[0] == 'text 1, with "quotes"\nand a newline'
    with pytest.raises(CascadeError, match=r"test.csv: 1 picked id\(s\) not in the test file: \['gone'\]"):
        write_picked_rows(test, ["7", "gone"], tmp_path / "x.csv")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kitlib", "cascade", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_cli_exit_codes(tmp_path, files):
    a, b = files
    out = tmp_path / "sub.csv"
    r = cli(a, b, "-o", out, "--fraction", "0.3", "--rule", "reorder")
    assert r.returncode == 0, r.stderr
    assert "10 rows, 3 re-scored" in r.stdout and "rule reorder" in r.stdout
    assert read(out)[["z", "s", "7"]].tolist() == [0.45, 0.48, 0.51]
    bad = cli(a, b, "-o", tmp_path / "o.csv", "--fraction", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("error: fraction=0.0")
    short = write(tmp_path / "b_missing.csv", ["s"], [0.7])
    r = cli(a, short, "-o", tmp_path / "o.csv", "--fraction", "0.3")
    assert r.returncode == 2 and "b_missing.csv" in r.stderr and not (tmp_path / "o.csv").exists()


def test_the_readme_cascade_command_is_the_one_make_decoder_measured():
    """Issue 39 item 9: README's cross-kind cascade ran the CLI's default rule (replace by probability, which needs
    both files on one scale) while ``make decoder`` (scripts/decoder.py) measured "reorder by rank"."""
    import re

    root = Path(__file__).resolve().parents[1]
    measured = re.search(r'cascade\([^)]*rule="(\w+)", by="(\w+)"', (root / "scripts" / "decoder.py").read_text())
    documented = re.search(r"`python -m kitlib cascade ([^`]*)`", (root / "README.md").read_text()).group(1).split()
    option = {k: v for k, v in zip(documented, documented[1:]) if k.startswith("--")}
    assert (option.get("--rule"), option.get("--by")) == measured.groups() == ("reorder", "rank"), documented
    assert "--center" in option
