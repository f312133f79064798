"""CSV checks name the file, row and field; batches have one fixed shape."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import SAMPLE
from kitlib.data import plan_batches, read_csv_checked


def test_real_sample_reads_with_exact_ids():
    test = read_csv_checked(SAMPLE / "test.csv")
    assert len(test) == 1000 and list(test.columns) == ["id", "text"]
    assert test["id"].iloc[0] == "56496" and test["id"].map(type).eq(str).all()
    train = read_csv_checked(SAMPLE / "train.csv", label_cols=("toxic",))
    assert len(train) == 2299 and int(train["toxic"].sum()) == 200


@pytest.mark.parametrize("body, message", [
    ("id,content\n1,a\n,b\n", r"blank 'id' at data row\(s\) \[2\]"),
    ("id,content\n7,a\n8,b\n7,c\n", r"id '7' repeated at data rows \[1, 3\]"),
    ("id,text_x\n1,a\n", r"no text column"),
    ("id,comment_text,toxic\n1,a,0\n2,b,yes\n", r"column 'toxic' at data row 2 is 'yes'"),
    ("id,content\n", r"no data rows"),
])
def test_bad_input_is_named(tmp_path, body, message):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    labels = ("toxic",) if "toxic" in body else ()
    with pytest.raises(ValueError, match=message) as e:
        read_csv_checked(p, label_cols=labels)
    assert str(p) in str(e.value)


def test_ids_that_look_like_numbers_stay_strings(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("id,content\n007,a\nNA,b\n1e5,c\n")
    assert read_csv_checked(p)["id"].tolist() == ["007", "NA", "1e5"]


def test_plan_batches_pads_the_tail_with_filler():
    plans = plan_batches(np.arange(10), batch_size=4, seq_len=32)
    assert [len(p.rows) for p in plans] == [4, 4, 4] and {p.seq_len for p in plans} == {32}
    assert plans[-1].rows.tolist() == [8, 9, -1, -1]
    assert plans[-1].valid.tolist() == [True, True, False, False]


def test_buckets_minimise_padding_and_keep_every_row():
    from kitlib.data import choose_bucket_lengths, padding_waste

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(4.3, 0.6, 2000).astype(np.int64), 3, 256)
    buckets = choose_bucket_lengths(lengths, 256, 4)
    assert len(buckets) <= 4 and buckets[-1] >= lengths.max() and all(b % 8 == 0 for b in buckets[:-1])
    single = plan_batches(np.arange(2000), 32, 256)
    bucketed = plan_batches(np.arange(2000), 32, 256, lengths, buckets)
    assert sorted(np.concatenate([p.rows[p.valid] for p in bucketed]).tolist()) == list(range(2000))
    assert all(lengths[p.rows[p.valid]].max() <= p.seq_len for p in bucketed)
    assert padding_waste(bucketed, lengths) < 0.5 * padding_waste(single, lengths)
    assert choose_bucket_lengths(lengths, 256, 1) == (256,)
