"""``python -m kitlib blend`` (kitlib/blend.py): weighted and rank blends with the merger's guarantees."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kitlib.blend import BlendError, blend

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, ids, values, col="toxic") -> Path:
    pd.DataFrame({"id": ids, col: values}).to_csv(path, index=False)
    return path


@pytest.fixture
def two(tmp_path):
    ids = ["007", "7", "a,b", "x"]
    a = write(tmp_path / "a.csv", ids, [0.1, 0.9, 0.5, 0.3])
    b = write(tmp_path / "b.csv", ["x", "a,b", "7", "007"], [100.0, 10.0, 1.0, 0.0])  # another order, another scale
    return ids, a, b


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kitlib", "blend", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_weighted_mean_in_the_first_files_order(tmp_path, two):
    ids, a, b = two
    out = tmp_path / "s.csv"
    r = blend([a, b], out, weights=[3, 1])
    got = pd.read_csv(out, dtype={"id": str})
    assert list(got["id"]) == ids  # exact strings, "007" is not "7"
    assert np.allclose(got["toxic"], 0.75 * np.array([0.1, 0.9, 0.5, 0.3]) + 0.25 * np.array([0.0, 1.0, 10.0, 100.0]))
    assert r.weights == (0.75, 0.25) and r.num_rows == 4


def test_rank_blend_and_sample_submission_order(tmp_path, two):
    ids, a, b = two
    sample = write(tmp_path / "sample.csv", ["x", "7", "007", "a,b"], [0.5] * 4)
    out = tmp_path / "s.csv"
    r = subprocess.run([sys.executable, "-m", "kitlib", "blend", str(a), str(b), "-o", str(out), "--rank",
                        "--sample-submission", str(sample)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(out, dtype={"id": str}).set_index("id")
    assert list(got.index) == ["x", "7", "007", "a,b"]
    # ranks / 4: a: 007 1, 7 4, a,b 3, x 2; b: 007 1, 7 2, a,b 3, x 4
    want = {"007": 0.25, "7": 0.75, "a,b": 0.75, "x": 0.75}
    assert got["toxic"].to_dict() == pytest.approx(want)
    assert "ranks" in r.stdout


@pytest.mark.parametrize("case,message", [
    ("missing", "b.csv: 1 id(s) of {a} missing: 'x'"),
    ("extra", "b.csv: 1 id(s) not in {a}: 'y'"),
    ("nan", "b.csv: column 'toxic': 1 value(s) that are not finite numbers, for id(s) '7'"),
    ("text", "b.csv: column 'toxic': 1 value(s) that are not finite numbers, for id(s) '7' (got 'high')"),
    ("dup", "b.csv: duplicate id(s) '7'"),
    ("column", "b.csv: no column(s) 'toxic'"),
    ("weights", "--weights: 1 weight(s) for 2 input file(s)"),
])
def test_refusals_name_the_file_and_id_and_write_nothing(tmp_path, two, case, message):
    ids, a, _ = two
    b = tmp_path / "b.csv"
    vals = [0.1, 0.2, 0.3, 0.4]
    if case == "missing":
        write(b, ids[:3], vals[:3])
    elif case == "extra":
        write(b, ids + ["y"], vals + [0.5])
    elif case == "nan":
        write(b, ids, [0.1, float("nan"), 0.3, 0.4])
    elif case == "text":
        write(b, ids, ["0.1", "high", "0.3", "0.4"])
    elif case == "dup":
        write(b, ["007", "7", "7", "x"], vals)
    elif case == "column":
        write(b, ids, vals, col="severe_toxic")
    else:
        write(b, ids, vals)
    out = tmp_path / "s.csv"
    out.write_text("an earlier submission\n")
    args = ["--weights", "1"] if case == "weights" else []
    r = cli(a, b, "-o", out, *args)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and message.format(a=a) in r.stderr, r.stderr
    assert out.read_text() == "an earlier submission\n"  # nothing partial, the old file kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv", "s.csv"]


def test_one_input_is_refused(two, tmp_path):
    with pytest.raises(BlendError, match="two or more"):
        blend([two[1]], tmp_path / "s.csv")
