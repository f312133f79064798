"""``python -m kitlib blend`` (kitlib/outputs/blend.py): weighted and rank blends with the merger's guarantees."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kitlib.outputs.blend import BlendError, blend

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


# issue 27 item 9: files saved with pandas' index blended into "id,Unnamed: 0,toxic".
def test_an_index_column_is_dropped_with_a_note(tmp_path, capsys):
    from kitlib.__main__ import main

    ids = ["007", "7", "x"]
    pd.DataFrame({"id": ids, "toxic": [0.1, 0.9, 0.3]}).to_csv(tmp_path / "a.csv")  # index written: ",id,toxic"
    pd.DataFrame({"id": ids[::-1], "toxic": [0.5, 0.7, 0.2]}).to_csv(tmp_path / "b.csv")
    pd.read_csv(tmp_path / "b.csv", dtype=str).to_csv(tmp_path / "c.csv", index=False)  # "Unnamed: 0,id,toxic"
    out = tmp_path / "s.csv"
    assert main(["blend", str(tmp_path / "a.csv"), str(tmp_path / "c.csv"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    got = pd.read_csv(out, dtype={"id": str}, keep_default_na=False)
    assert list(got.columns) == ["id", "toxic"]
    assert got["id"].tolist() == ids and np.allclose(got["toxic"], [(0.1 + 0.2) / 2, (0.9 + 0.7) / 2, (0.3 + 0.5) / 2])
    assert "note: dropped column '' of a.csv: a row index, not a prediction" in err
    assert "note: dropped column 'Unnamed: 0' of c.csv: a row index" in err


def test_the_prediction_columns_are_the_sample_submissions(tmp_path):
    """The sample's own index column is not a prediction column either; other columns are."""
    ids = ["1", "2", "3"]
    pd.DataFrame({"id": ids, "toxic": [0.5] * 3}).to_csv(tmp_path / "sample.csv")  # with its index
    a = write(tmp_path / "a.csv", ids, [0.1, 0.2, 0.3])
    pd.DataFrame({"id": ids, "toxic": [0.5, 0.6, 0.7], "extra": [9, 9, 9]}).to_csv(tmp_path / "b.csv")
    r = blend([a, tmp_path / "b.csv"], tmp_path / "s.csv", sample_submission=tmp_path / "sample.csv")
    assert r.columns == ("toxic",)
    got = pd.read_csv(tmp_path / "s.csv", dtype={"id": str})
    assert list(got.columns) == ["id", "toxic"] and np.allclose(got["toxic"], [0.3, 0.4, 0.5])
    assert any("dropped column '' of sample.csv" in n for n in r.notes)


def test_submit_check_reads_an_index_column_the_same_way(tmp_path):
    from kitlib.outputs.blend import check_submission

    ids = ["1", "2"]
    write(tmp_path / "sample.csv", ids, [0.5, 0.5])
    pd.DataFrame({"id": ids, "toxic": [0.1, 0.9]}).to_csv(tmp_path / "sub.csv")
    rows, columns, notes = check_submission(tmp_path / "sub.csv", tmp_path / "sample.csv")
    assert (rows, columns) == (2, ("toxic",)) and notes == ("dropped column '' of sub.csv: a row index, not a prediction "
                                                            "(pandas writes one unless index=False)",)
