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


@pytest.mark.slow  # builds the tiny checkpoint's tokenizer (about 30 s here)
def test_chunked_tokenization_gives_the_one_shot_tokens(tiny_checkpoint, tmp_path):
    """Chunks of rows (a boundary inside the sample) give exactly the tokens of one call over every row."""
    from transformers import AutoTokenizer

    from kitlib.data import Tokens, tokenize, tokenize_csv

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    texts = read_csv_checked(SAMPLE / "test.csv")["text"].tolist()
    one_shot = tok(texts, truncation=True, max_length=64)["input_ids"]  # what the kit did before, in one call
    for chunk_rows in (1000, 333, 7):  # one chunk; boundaries at 333, 666, 999; every 7 rows
        t = tokenize(tok, texts, 64, chunk_rows=chunk_rows)
        assert t.ids.dtype == np.int32 and t.offsets.dtype == np.int64 and len(t.offsets) == 1001
        assert [t.ids[t.offsets[i]:t.offsets[i + 1]].tolist() for i in range(1000)] == one_shot
    folder = tmp_path / "tokens"
    mapped = tokenize_csv(tok, SAMPLE / "test.csv", folder, 64, chunk_rows=333)
    assert isinstance(mapped.ids, np.memmap) and (folder / Tokens.IDS).stat().st_size == 4 * len(t.ids)
    np.testing.assert_array_equal(mapped.ids, t.ids)
    np.testing.assert_array_equal(mapped.offsets, t.offsets)
    assert (mapped.pad_id, mapped.filler.tolist()) == (t.pad_id, t.filler.tolist())
    t.save(tmp_path / "saved")
    np.testing.assert_array_equal(Tokens.load(tmp_path / "saved").ids, t.ids)


def test_checks_count_rows_over_the_whole_file_across_chunks(tmp_path):
    """Row numbers are the file's, whatever chunk a row falls in; a repeat across chunks is found."""
    from kitlib.data import iter_csv_checked

    p = tmp_path / "t.csv"
    p.write_text("id,content\n" + "".join(f"{i},text {i}\n" for i in range(10)) + "3,again\n")
    with pytest.raises(ValueError, match=r"id '3' repeated at data rows \[4, 11\]"):
        list(iter_csv_checked(p, chunk_rows=4))
    p.write_text("id,content\n" + "".join(f"{i},text {i}\n" for i in range(9)) + ",blank\n")
    with pytest.raises(ValueError, match=r"blank 'id' at data row\(s\) \[10\]"):
        list(iter_csv_checked(p, chunk_rows=4))
    p.write_text("id,comment_text,toxic\n" + "".join(f"{i},t,0\n" for i in range(6)) + "6,t,2\n")
    with pytest.raises(ValueError, match=r"column 'toxic' at data row 7 is '2'"):
        list(iter_csv_checked(p, label_cols=("toxic",), chunk_rows=4))
    chunks = list(iter_csv_checked(SAMPLE / "test.csv", chunk_rows=300))
    assert [len(c) for c in chunks] == [300, 300, 300, 100] and chunks[-1].index[0] == 900
