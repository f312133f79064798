"""The shard merger: padding arithmetic, order, exact string ids, notes, and every refusal."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DistributedSampler

from kitlib.__main__ import main
from kitlib.outputs.merge import DUPLICATE_ATOL, MergeError, merge_shards
from kitlib.outputs.shards import META_KEY, clear_shards, read_shard_info, sampler_padding, shard_name, write_shard

SPECIAL_IDS = ["007", "NA", "1e5", "0x1F", "nan", "-0", "12345678901234567890"]


def make_ids(n: int) -> list[str]:
    ids = [f"{i:06d}" for i in range(n)]
    ids[: len(SPECIAL_IDS)] = SPECIAL_IDS
    return ids


def pred_of(rows: np.ndarray) -> np.ndarray:
    return ((rows * 7919) % 1000 / 1000.0).astype(np.float32)


def sampler_rows(n: int, world: int, rank: int) -> np.ndarray:
    return np.fromiter(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=False), np.int64)


def write_run(out, n: int, world: int, run_id: str = "run-a", ids=None, mark: bool = True, noise: float = 0.0) -> list[str]:
    """Shards as the inference template writes them, from a real DistributedSampler.

    ``mark``: store the padding column (format 2) or not (compared by value, as format 1).
    ``noise``: added to the padding duplicates' predictions (a bfloat16 run in another batch).
    """
    ids = ids or make_ids(n)
    for rank in range(world):
        rows = sampler_rows(n, world, rank)
        pad = sampler_padding(rank, world, n, len(rows))
        write_shard(out, rank=rank, world_size=world, num_rows=n, rows=rows, ids=np.array(ids, dtype=object)[rows],
                    predictions={"toxic": pred_of(rows) + noise * pad}, run_id=run_id, padding=pad if mark else None)
    return ids


def read_sub(path) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"id": str}, keep_default_na=False)


def test_padding_arithmetic_1003_rows_over_8_ranks(tmp_path):
    ids = write_run(tmp_path / "shards", 1003, 8)
    # DistributedSampler pads to ceil(1003 / 8) * 8 = 1008 samples: 5 duplicates
    assert sum(read_shard_info(pq.read_schema(p)).num_samples for p in (tmp_path / "shards").iterdir()) == 1008
    r = merge_shards([tmp_path / "shards"], tmp_path / "sub.csv")
    assert (r.num_rows, r.num_shards, r.num_padding_duplicates) == (1003, 8, 5)
    sub = read_sub(tmp_path / "sub.csv")
    assert sub["id"].tolist() == ids  # test-set order, exact strings ("007", "NA", "1e5" ...)
    np.testing.assert_allclose(sub["toxic"].to_numpy(), pred_of(np.arange(1003)), atol=1e-7)


def test_sample_submission_order_and_columns(tmp_path):
    ids = write_run(tmp_path / "shards", 101, 4)
    order = np.random.default_rng(0).permutation(101)
    pd.DataFrame({"id": np.array(ids)[order], "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
    merge_shards([tmp_path / "shards"], tmp_path / "sub.csv", sample_submission=tmp_path / "ss.csv")
    sub = read_sub(tmp_path / "sub.csv")
    assert list(sub.columns) == ["id", "toxic"]
    assert sub["id"].tolist() == [ids[i] for i in order]
    np.testing.assert_allclose(sub["toxic"].to_numpy(), pred_of(order), atol=1e-7)
    assert (tmp_path / "sub.csv").read_text().splitlines()[0] == "id,toxic"


def test_test_file_checked_row_by_row(tmp_path):
    ids = write_run(tmp_path / "shards", 20, 3)
    pd.DataFrame({"id": ids, "content": "x"}).to_csv(tmp_path / "test.csv", index=False)
    merge_shards([tmp_path / "shards"], tmp_path / "sub.csv", test=tmp_path / "test.csv")
    pd.DataFrame({"id": ids[::-1], "content": "x"}).to_csv(tmp_path / "other.csv", index=False)
    with pytest.raises(MergeError, match="do not match"):
        merge_shards([tmp_path / "shards"], tmp_path / "sub2.csv", test=tmp_path / "other.csv")
    assert not (tmp_path / "sub2.csv").exists()


def test_seed_pattern_shards(tmp_path):
    """Plain `id,toxic` CSVs per rank (the usual Kaggle notebook), duplicates included."""
    n, world = 50, 4
    ids = make_ids(n)
    (tmp_path / "seed").mkdir()
    for rank in range(world):
        rows = np.fromiter(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False), np.int64)
        pd.DataFrame({"id": np.array(ids)[rows], "toxic": pred_of(rows)}).to_csv(tmp_path / "seed" / f"submission_{rank}.csv", index=False)
    pd.DataFrame({"id": ids, "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
    r = merge_shards([tmp_path / "seed"], tmp_path / "sub.csv", sample_submission=tmp_path / "ss.csv")
    assert (r.num_rows, r.num_padding_duplicates) == (50, 2)
    sub = read_sub(tmp_path / "sub.csv")
    assert sub["id"].tolist() == ids
    np.testing.assert_allclose(sub["toxic"].to_numpy(), pred_of(np.arange(n)), atol=1e-6)
    with pytest.raises(MergeError, match="--sample-submission or --test"):
        merge_shards([tmp_path / "seed"], tmp_path / "sub2.csv")


def test_clear_shards_only_removes_shards(tmp_path):
    write_run(tmp_path, 10, 2)
    (tmp_path / "notes.txt").write_text("keep")
    assert clear_shards(tmp_path) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]



def rewrite(path, meta: dict | None = None, **columns) -> None:
    """Replace columns of a kit shard (keeping its metadata, or updating keys of it)."""
    t = pq.read_table(path)
    info = json.loads(t.schema.metadata[META_KEY])
    info.update(meta or {})
    for name, values in columns.items():
        if values is None:
            t = t.drop_columns([name])
        elif name in t.column_names:
            t = t.set_column(t.column_names.index(name), name, pa.array(values))
        else:
            t = t.append_column(name, pa.array(values))
    pq.write_table(t.replace_schema_metadata({META_KEY: json.dumps(info).encode()}), path)


def column(path, name) -> np.ndarray:
    return pq.read_table(path).column(name).to_numpy(zero_copy_only=False).copy()


# ---- issue 12 item 4: the sampler's padding, marked in the shard ----

@pytest.mark.parametrize("n, world", [(1003, 8), (30, 4), (12, 5), (3, 8), (16, 4), (1, 1), (0, 3)])
def test_sampler_padding_matches_torch_distributed_sampler(n, world):
    samplers = [DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=False, drop_last=False) for r in range(world)]
    masks = [sampler_padding(r, world, n, s.num_samples) for r, s in enumerate(samplers)]
    rows = [np.fromiter(s, np.int64, count=s.num_samples) for s in samplers]
    assert all(m.dtype == np.bool_ and m.shape == (s.num_samples,) for m, s in zip(masks, samplers))
    assert sum(int(m.sum()) for m in masks) == samplers[0].total_size - n  # exactly the sampler's padding
    real = np.concatenate([r[~m] for r, m in zip(rows, masks)])
    assert sorted(real.tolist()) == list(range(n))  # the unmarked rows cover each input row once
    with pytest.raises(ValueError, match="rank 4 outside"):
        sampler_padding(4, 4, 10, 3)


def test_marked_padding_dropped_without_comparing_values(tmp_path):
    """A padding duplicate 0.01 off (bfloat16 in a batch of another length) merges when marked."""
    write_run(tmp_path / "marked", 30, 4, noise=0.01)
    assert pq.read_schema(tmp_path / "marked" / shard_name(0, 4)).field("padding").type == pa.bool_()
    assert read_shard_info(pq.read_schema(tmp_path / "marked" / shard_name(0, 4))).format == 2
    r = merge_shards([tmp_path / "marked"], tmp_path / "sub.csv")
    assert (r.num_rows, r.num_padding_duplicates) == (30, 2)
    np.testing.assert_allclose(read_sub(tmp_path / "sub.csv")["toxic"], pred_of(np.arange(30)), atol=1e-7)
    # the same run without the mark is compared by value, with the tolerance stated
    write_run(tmp_path / "unmarked", 30, 4, mark=False, noise=0.01)
    with pytest.raises(MergeError, match=r"padding duplicates disagree on 'toxic' by more than 0\.0001 for input row\(s\) 0, 1 \(ranks 2, 3 and 0, 1\)"):
        merge_shards([tmp_path / "unmarked"], tmp_path / "sub2.csv")
    # within the tolerance it merges
    write_run(tmp_path / "close", 30, 4, mark=False, noise=DUPLICATE_ATOL / 2)
    assert merge_shards([tmp_path / "close"], tmp_path / "sub3.csv").num_padding_duplicates == 2


def test_format_1_shards_still_merge(tmp_path):
    write_run(tmp_path / "s", 30, 4, mark=False)
    for rank in range(4):
        rewrite(tmp_path / "s" / shard_name(rank, 4), meta={"format": 1})
    assert read_shard_info(pq.read_schema(tmp_path / "s" / shard_name(0, 4))).format == 1
    r = merge_shards([tmp_path / "s"], tmp_path / "sub.csv")
    assert (r.num_rows, r.num_padding_duplicates) == (30, 2)


def test_write_shard_checks_padding(tmp_path):
    kw = dict(rank=0, world_size=1, num_rows=3, rows=np.arange(3), ids=["a", "b", "c"], predictions={"toxic": np.zeros(3)}, run_id="r")
    with pytest.raises(ValueError, match=r"padding must be a bool array of shape \(3,\)"):
        write_shard(tmp_path, padding=np.zeros(3, np.int64), **kw)
    with pytest.raises(ValueError, match=r"padding must be a bool array of shape \(3,\)"):
        write_shard(tmp_path, padding=np.zeros(2, bool), **kw)
    with pytest.raises(ValueError, match=r"\['padding'\] are the shard's own columns"):
        write_shard(tmp_path, **{**kw, "predictions": {"padding": np.zeros(3)}})
    assert list(tmp_path.iterdir()) == []


# ---- issue 12 item 1: non-finite predictions ----

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_kit_prediction_refused(tmp_path, capsys, bad):
    d = tmp_path / "shards"
    ids = write_run(d, 30, 4)
    p = d / shard_name(2, 4)
    rows = column(p, "row")
    tox = column(p, "toxic")
    tox[[1, 3]] = bad
    rewrite(p, toxic=tox)
    out = tmp_path / "sub.csv"
    out.write_text("earlier\n")
    assert main(["merge", str(d), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"shard-00002-of-00004.parquet (rank 2): 2 non-finite 'toxic' value(s) (nan or inf) for id(s) {ids[rows[1]]!r}, {ids[rows[3]]!r}" in err
    assert out.read_text() == "earlier\n"


def test_non_finite_in_a_marked_padding_row_is_not_written(tmp_path):
    d = tmp_path / "shards"
    write_run(d, 30, 4)
    p = d / shard_name(3, 4)  # rank 3's last sample (global position 31) is padding for row 1
    pad, tox = column(p, "padding"), column(p, "toxic")
    assert pad.tolist() == [False] * 7 + [True]
    tox[-1] = np.nan
    rewrite(p, toxic=tox)
    merge_shards([d], tmp_path / "sub.csv")
    assert np.isfinite(read_sub(tmp_path / "sub.csv")["toxic"]).all()


def test_non_finite_seed_csv_refused(tmp_path):
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "submission_0.csv").write_text("id,toxic\na1,0.5\na2,inf\na3,-inf\n")
    (tmp_path / "test.csv").write_text("id,content\na1,x\na2,y\na3,z\n")
    with pytest.raises(MergeError, match=r"submission_0.csv: 2 non-finite 'toxic' value\(s\) \(nan or inf\) for id\(s\) 'a2', 'a3'"):
        merge_shards([tmp_path / "seed"], tmp_path / "sub.csv", test=tmp_path / "test.csv")
    assert not (tmp_path / "sub.csv").exists()


# ---- issue 12 items 5 and 6: stray columns, integer ids ----

def write_seed(d, n=20, world=2, index=False, content=False, fmt="csv") -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    ids = make_ids(n)
    for rank in range(world):
        rows = sampler_rows(n, world, rank)
        df = pd.DataFrame({"id": np.array(ids)[rows], "toxic": pred_of(rows)}, index=rows + 1000)
        if content:
            df["content"] = "some text"
        if fmt == "csv":
            df.to_csv(d / f"submission_{rank}.csv", index=index)
        else:
            df.to_parquet(d / f"submission_{rank}.parquet", index=index)
    return ids


def test_pandas_index_column_dropped_with_a_note(tmp_path, capsys):
    ids = write_seed(tmp_path / "seed", index=True)  # df.to_csv(path): header ",id,toxic"
    assert (tmp_path / "seed" / "submission_0.csv").read_text().startswith(",id,toxic\n")
    pd.DataFrame({"id": ids, "content": "x"}).to_csv(tmp_path / "test.csv", index=False)
    out = tmp_path / "sub.csv"
    assert main(["merge", str(tmp_path / "seed"), "-o", str(out), "--test", str(tmp_path / "test.csv")]) == 0
    assert out.read_text().splitlines()[0] == "id,toxic"
    assert read_sub(out)["id"].tolist() == ids
    err = capsys.readouterr().err
    assert "note: dropped column '': a row index" in err and "submission_0.csv, submission_1.csv" in err


def test_pandas_parquet_index_dropped(tmp_path):
    ids = write_seed(tmp_path / "seed", index=True, fmt="parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "seed" / "submission_0.parquet").names
    pd.DataFrame({"id": ids, "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
    r = merge_shards([tmp_path / "seed"], tmp_path / "sub.csv", sample_submission=tmp_path / "ss.csv")
    assert r.prediction_columns == ("toxic",) and any("'__index_level_0__'" in n for n in r.notes)
    assert list(read_sub(tmp_path / "sub.csv").columns) == ["id", "toxic"]


def test_extra_column_ignored_when_the_sample_submission_names_the_targets(tmp_path):
    ids = write_seed(tmp_path / "seed", content=True)
    pd.DataFrame({"id": ids, "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
    r = merge_shards([tmp_path / "seed"], tmp_path / "sub.csv", sample_submission=tmp_path / "ss.csv")
    assert r.notes == ["ignored column 'content': not a column of the sample submission (in submission_0.csv, submission_1.csv)"]
    sub = read_sub(tmp_path / "sub.csv")
    assert list(sub.columns) == ["id", "toxic"] and sub["id"].tolist() == ids
    np.testing.assert_allclose(sub["toxic"], pred_of(np.arange(20)), atol=1e-6)


def test_integer_ids_in_parquet_shards(tmp_path):
    """pandas writes an int64 id column; ids are compared as the sample submission's strings."""
    (tmp_path / "seed").mkdir()
    for rank in range(2):
        rows = sampler_rows(9, 2, rank)
        pd.DataFrame({"id": rows + 100, "toxic": pred_of(rows)}).to_parquet(tmp_path / "seed" / f"p{rank}.parquet", index=False)
    assert pq.read_schema(tmp_path / "seed" / "p0.parquet").field("id").type == pa.int64()
    pd.DataFrame({"id": [str(i) for i in range(108, 99, -1)], "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
    r = merge_shards([tmp_path / "seed"], tmp_path / "sub.csv", sample_submission=tmp_path / "ss.csv")
    assert (r.num_rows, r.num_padding_duplicates) == (9, 1)
    assert r.notes == ["integer ids (int64) compared as their decimal strings (in p0.parquet, p1.parquet)"]
    sub = read_sub(tmp_path / "sub.csv")
    assert sub["id"].tolist() == [str(i) for i in range(108, 99, -1)]
    np.testing.assert_allclose(sub["toxic"], pred_of(np.arange(8, -1, -1)), atol=1e-6)


# ---- refusals: exit status 2, a message naming the problem, and no output file ----
# Each case builds its own input and must reach its own branch: the message pattern is specific
# to that branch. Cases get the folder `d` with a good 4-rank kit run of 30 rows (marked padding)
# and return (shard inputs, extra CLI args).

N, W = 30, 4


def _kit(d, tmp_path):
    write_run(d, N, W)
    return [d], []


def _seed(tmp_path, frames: dict[str, pd.DataFrame | str]):
    s = tmp_path / "seed"
    s.mkdir()
    for name, f in frames.items():
        (s / name).write_text(f) if isinstance(f, str) else f.to_csv(s / name, index=False)
    return s


def _ss(tmp_path, ids=None, cols=("toxic",), text=None):
    p = tmp_path / "ss.csv"
    if text is not None:
        p.write_text(text)
    else:
        pd.DataFrame({"id": make_ids(N) if ids is None else ids, **{c: 0.5 for c in cols}}).to_csv(p, index=False)
    return ["--sample-submission", str(p)]


def _test(tmp_path, ids):
    pd.DataFrame({"id": ids, "content": "x"}).to_csv(tmp_path / "test.csv", index=False)
    return ["--test", str(tmp_path / "test.csv")]


def case_no_such_path(d, tmp_path):
    return [tmp_path / "nowhere"], []


def case_empty_folder(d, tmp_path):
    d.mkdir()
    (d / "readme.txt").write_text("no shards here")
    return [d], []


def case_unreadable_parquet(d, tmp_path):
    _kit(d, tmp_path)
    (d / shard_name(1, W)).write_bytes(b"this is not parquet")
    return [d], []


def case_truncated_tail(d, tmp_path):  # cut bytes: the footer is gone, so the file is unreadable
    _kit(d, tmp_path)
    p = d / shard_name(3, W)
    p.write_bytes(p.read_bytes()[:-100])
    return [d], []


def case_truncated_rows(d, tmp_path):  # a readable shard with fewer rows than its metadata says
    _kit(d, tmp_path)
    p = d / shard_name(3, W)
    t = pq.read_table(p)
    pq.write_table(t.slice(0, 6).replace_schema_metadata(t.schema.metadata), p)
    return [d], []


def case_newer_format(d, tmp_path):
    _kit(d, tmp_path)
    rewrite(d / shard_name(0, W), meta={"format": 3})
    return [d], []


def case_kit_without_row(d, tmp_path):
    _kit(d, tmp_path)
    rewrite(d / shard_name(0, W), row=None)
    return [d], []


def case_other_run(d, tmp_path):
    _kit(d, tmp_path)
    write_run(tmp_path / "old", N, W, run_id="run-b")
    shutil.copy(tmp_path / "old" / shard_name(1, W), d / shard_name(1, W))
    return [d], []


def case_rank_twice(d, tmp_path):
    _kit(d, tmp_path)
    shutil.copy(d / shard_name(1, W), tmp_path / "copy.parquet")
    return [d, tmp_path / "copy.parquet"], []


def case_missing_rank(d, tmp_path):
    _kit(d, tmp_path)
    (d / shard_name(2, W)).unlink()
    return [d], []


def case_row_out_of_range(d, tmp_path):
    _kit(d, tmp_path)
    p = d / shard_name(1, W)
    rows = column(p, "row")
    rows[2] = 99
    rewrite(p, row=rows)
    return [d], []


def case_row_absent(d, tmp_path):
    _kit(d, tmp_path)
    p = d / shard_name(0, W)  # rank 0 holds rows 0, 4, 8, ...: write row 8 twice, row 4 never
    rows = column(p, "row")
    rows[1] = 8
    rewrite(p, row=rows)
    return [d], []


def case_real_row_marked_as_padding(d, tmp_path):
    _kit(d, tmp_path)
    p = d / shard_name(1, W)  # rows 1, 5, 9, ...: mark row 5 as padding
    pad = column(p, "padding")
    pad[1] = True
    rewrite(p, padding=pad)
    return [d], []


def case_padding_id_disagrees(d, tmp_path):
    _kit(d, tmp_path)
    p = d / shard_name(3, W)  # its last sample is the padding duplicate of row 1
    ids = column(p, "id")
    ids[-1] = "someone-else"
    rewrite(p, id=ids)
    return [d], []


def case_twice_unmarked(d, tmp_path):
    _kit(d, tmp_path)
    p = d / shard_name(3, W)
    rewrite(p, padding=np.zeros(8, bool))
    return [d], []


def case_unmarked_values_disagree(d, tmp_path):
    write_run(d, N, W, mark=False, noise=0.5)
    return [d], []


def case_kit_nan(d, tmp_path):
    _kit(d, tmp_path)
    p = d / shard_name(2, W)
    tox = column(p, "toxic")
    tox[0] = np.nan  # row 2
    rewrite(p, toxic=tox)
    return [d], []


def case_kit_blank_id(d, tmp_path):
    ids = make_ids(N)
    ids[17] = "  "
    write_run(d, N, W, ids=ids)
    return [d], []


def case_mixed_kinds(d, tmp_path):
    _kit(d, tmp_path)
    pd.DataFrame({"id": ["a"], "toxic": [0.5]}).to_csv(d / "extra.csv", index=False)
    return [d, d / "extra.csv"], []


def case_seed_without_order(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\n"})], []


def case_seed_unreadable_csv(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\ny,0.5,extra\n"})], _ss(tmp_path, ["x", "y"])


def case_seed_no_id(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "ident,toxic\nx,0.5\n"})], _ss(tmp_path, ["x"])


def case_seed_float_ids(d, tmp_path):
    s = tmp_path / "seed"
    s.mkdir()
    pd.DataFrame({"id": [1.0, 2.5], "toxic": [0.1, 0.2]}).to_parquet(s / "a.parquet")
    return [s], _ss(tmp_path, ["1", "2.5"])


def case_seed_columns_differ(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\n", "b.csv": "id,insult\ny,0.5\n"})], _test(tmp_path, ["x", "y"])


def case_seed_duplicates_disagree(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\ny,0.1\n", "b.csv": "id,toxic\nx,0.6\n"})], _test(tmp_path, ["x", "y"])


def case_seed_text_column_without_targets(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic,content\nx,0.5,hello\n"})], _test(tmp_path, ["x"])


def case_seed_lacks_target(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,insult\nx,0.5\n"})], _ss(tmp_path, ["x"])


def case_seed_target_not_numeric(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,high\n"})], _ss(tmp_path, ["x"])


def case_seed_nan_value(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\ny,0.5\nz,nan\n"})], _test(tmp_path, ["x", "y", "z"])


def case_seed_inf_value(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\ny,inf\n"})], _test(tmp_path, ["x", "y"])


def case_seed_no_prediction(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id\nx\n"})], _test(tmp_path, ["x"])


def case_seed_blank_id(d, tmp_path):
    return [_seed(tmp_path, {"a.csv": "id,toxic\nx,0.5\n,0.5\n"})], _test(tmp_path, ["x"])


def case_ss_no_id(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, text="ident,toxic\nx,0.5\n")


def case_ss_blank_id(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, text="id,toxic\nx,0.5\n ,0.5\n")


def case_ss_duplicate_ids(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, ids=make_ids(N) + ["007"])


def case_ss_no_prediction_column(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, text="id\n" + "\n".join(make_ids(N)) + "\n")


def case_ss_column_not_predicted(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, cols=("toxic", "severe_toxic"))


def case_missing_ids(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, ids=make_ids(N) + ["extra-1"])


def case_extra_ids(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _ss(tmp_path, ids=make_ids(N)[:-2])


def case_test_order_differs(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _test(tmp_path, make_ids(N)[::-1])


def case_test_length_differs(d, tmp_path):
    _kit(d, tmp_path)
    return [d], _test(tmp_path, make_ids(N)[:-1])


REFUSALS = {
    case_no_such_path: r"nowhere: no such shard file or folder",
    case_empty_folder: r"no shard files found in .*shards",
    case_unreadable_parquet: r"shard-00001-of-00004\.parquet: unreadable Parquet shard",
    case_truncated_tail: r"shard-00003-of-00004\.parquet: unreadable Parquet shard",
    case_truncated_rows: r"shard-00003-of-00004\.parquet: truncated shard: 6 rows, its metadata says 8",
    case_newer_format: r"shard-00000-of-00004\.parquet: shard format 3 is newer than this kitlib reads \(2\)",
    case_kit_without_row: r"shard-00000-of-00004\.parquet: kit shard without column\(s\) \['row'\]",
    case_other_run: r"shards from different runs: .* run_id='run-a', .* has 'run-b'",
    case_rank_twice: r"rank 1 has two shards: .*shard-00001-of-00004\.parquet and .*copy\.parquet",
    case_missing_rank: r"missing shard\(s\) for rank\(s\) 2 of world size 4: expected 'shard-00002-of-00004\.parquet'",
    case_row_out_of_range: r"row index outside \[0, 30\) in the shards of .*: 99 \(rank\(s\) 1\)",
    case_row_absent: r"1 input row\(s\) have no prediction in any shard \(0-based rows 4\)$",
    case_real_row_marked_as_padding: r"1 input row\(s\) have no prediction .*rows 5\); 1 of them appear only in rows marked as padding",
    case_padding_id_disagrees: r"padding duplicates disagree on the id of input row\(s\) 1$",
    case_twice_unmarked: r"input row\(s\) 1 predicted twice, neither marked as padding \(ranks 3 and 1\)",
    case_unmarked_values_disagree: r"padding duplicates disagree on 'toxic' by more than 0\.0001 for input row\(s\) 0, 1 .*write the padding mark",
    case_kit_nan: r"shard-00002-of-00004\.parquet \(rank 2\): 1 non-finite 'toxic' value\(s\) \(nan or inf\) for id\(s\) '1e5'",
    case_kit_blank_id: r"blank id at input row\(s\) 18$",
    case_mixed_kinds: r"extra\.csv is not a kit shard but .*shard-00000-of-00004\.parquet is",
    case_seed_without_order: r"seed-pattern shards carry no row index: pass --sample-submission or --test",
    case_seed_unreadable_csv: r"a\.csv: unreadable CSV",
    case_seed_no_id: r"a\.csv: no 'id' column \(columns: ident, toxic\)",
    case_seed_float_ids: r"a\.parquet: column 'id' is double; write ids as strings",
    case_seed_columns_differ: r"b\.csv: prediction columns \('insult',\) differ from a\.csv's \('toxic',\)",
    case_seed_duplicates_disagree: r"duplicate ids disagree on 'toxic' by more than 0\.0001: 'x'$",
    case_seed_text_column_without_targets: r"a\.csv: column 'content' \(string\) is not a prediction, and nothing names the prediction columns",
    case_seed_lacks_target: r"a\.csv: no column\(s\) \['toxic'\], which the sample submission asks for \(columns: id, insult\)",
    case_seed_target_not_numeric: r"a\.csv: prediction column 'toxic' is string, not numeric",
    case_seed_nan_value: r"a\.csv: column 'toxic' is blank or nan at data row\(s\) 3$",
    case_seed_inf_value: r"a\.csv: 1 non-finite 'toxic' value\(s\) \(nan or inf\) for id\(s\) 'y'",
    case_seed_no_prediction: r"a\.csv: no prediction column besides 'id'$",
    case_seed_blank_id: r"a\.csv: blank id at data row\(s\) 2$",
    case_ss_no_id: r"the sample submission: \S*ss\.csv: no 'id' column \(id_col='id'; its header is ",
    case_ss_blank_id: r"ss\.csv: blank id at data row\(s\) 2$",
    case_ss_duplicate_ids: r"ss\.csv: duplicate id\(s\) '007'$",
    case_ss_no_prediction_column: r"ss\.csv: the sample submission names no prediction column besides 'id'",
    case_ss_column_not_predicted: r"ss\.csv asks for column\(s\) \['severe_toxic'\]; the shards predict \['toxic'\]",
    case_missing_ids: r"1 id\(s\) of .*ss\.csv have no prediction in 4 shard\(s\) in .*: 'extra-1'",
    case_extra_ids: r"2 predicted id\(s\) are not in .*ss\.csv: '000028', '000029'",
    case_test_order_differs: r"shard ids do not match .*test\.csv row by row$",
    case_test_length_differs: r"shard ids do not match .*test\.csv row by row \(30 rows in the shards, 29 in the test file\)",
}


@pytest.mark.parametrize("build", list(REFUSALS), ids=[f.__name__[5:] for f in REFUSALS])
def test_refusals_exit_2_and_write_nothing(tmp_path, capsys, build):
    d = tmp_path / "shards"
    inputs, extra = build(d, tmp_path)
    out = tmp_path / "submission.csv"
    assert main(["merge", *map(str, inputs), "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(REFUSALS[build], err.rstrip("\n")), err
    assert "np.int64" not in err and "np.float" not in err  # plain numbers (item 7)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".submission.csv")]  # no temp file left


def test_refusal_keeps_an_existing_output(tmp_path):
    d = tmp_path / "shards"
    write_run(d, 30, 4)
    out = tmp_path / "submission.csv"
    out.write_text("earlier good submission\n")
    (d / shard_name(0, 4)).unlink()
    with pytest.raises(MergeError):
        merge_shards([d], out)
    assert out.read_text() == "earlier good submission\n"


def test_cli_subprocess(tmp_path):
    write_run(tmp_path / "shards", 12, 5)
    ok = subprocess.run([sys.executable, "-m", "kitlib", "merge", str(tmp_path / "shards"), "-o", str(tmp_path / "s.csv")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "12 rows from 5 shard(s), 3 padding duplicate(s)" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "kitlib", "merge", str(tmp_path / "nowhere"), "-o", str(tmp_path / "t.csv")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no such shard file or folder" in bad.stderr
    assert not (tmp_path / "t.csv").exists()


# ---- a run merges only its own shards (issue 21.1) ----


def test_a_run_merges_only_its_own_shards(tmp_path):
    """Run B's shards land in run A's folder after A's replicas finished: A refuses, naming the file."""
    d = tmp_path / "shards"
    write_run(d, 30, 4, run_id="run-a")
    assert merge_shards([d], tmp_path / "a.csv", run_id="run-a", world_size=4).num_rows == 30
    # B, same world size: its shards replace A's file by file (one of A's is left)
    write_run(tmp_path / "b", 30, 4, run_id="run-b")
    for r in range(3):
        shutil.copy(tmp_path / "b" / shard_name(r, 4), d / shard_name(r, 4))
    with pytest.raises(MergeError, match=r"shard-00000-of-00004\.parquet is a shard of another run \(run_id='run-b', "
                                         r"world size 4\), not of this run \(run_id='run-a'.*two runs share"):
        merge_shards([d], tmp_path / "out.csv", run_id="run-a", world_size=4)
    # B cleared the folder and wrote a complete run of its own (world size 3): a consistent set, not A's
    clear_shards(d)
    write_run(d, 30, 3, run_id="run-b")
    assert merge_shards([d], tmp_path / "b.csv").num_rows == 30  # without a run id: B's run merges
    with pytest.raises(MergeError, match=r"is a shard of another run \(run_id='run-b', world size 3\)"):
        merge_shards([d], tmp_path / "out.csv", run_id="run-a", world_size=4)
    # B cleared the folder and has not written yet
    clear_shards(d)
    with pytest.raises(MergeError, match=r"no shard files found in .*: no shard of this run \(run-a\) is there; did another run"):
        merge_shards([d], tmp_path / "out.csv", run_id="run-a", world_size=4)
    # the same run id with another world size is not this run either
    clear_shards(d)
    write_run(d, 30, 2, run_id="run-a")
    with pytest.raises(MergeError, match=r"world size 2\), not of this run \(run_id='run-a', world size 4\)"):
        merge_shards([d], tmp_path / "out.csv", run_id="run-a", world_size=4)
    assert not (tmp_path / "out.csv").exists()


def test_the_replica_table_shows_only_the_merged_runs_shards(tmp_path):
    """The inference notebook's per-replica table reads the run the merge read (``MergeResult.run_id``),
    not every shard a shared folder holds. A stray parquet file without the kit's metadata is left out."""
    from kitlib.infer import replica_stats

    d = tmp_path / "shards"
    write_run(d, 30, 4, run_id="run-a")
    result = merge_shards([d], tmp_path / "a.csv", run_id="run-a", world_size=4)
    assert result.run_id == "run-a"
    write_run(tmp_path / "b", 30, 3, run_id="run-b")
    shutil.copy(tmp_path / "b" / shard_name(0, 3), d / shard_name(0, 3))  # B's rank 0 lands beside A's shards
    pq.write_table(pa.table({"id": ["x"]}), d / shard_name(9, 10))  # not a kit shard
    mine = replica_stats(d, run_id=result.run_id)
    assert [(s["rank"], s["world_size"], s["run_id"]) for s in mine] == [(r, 4, "run-a") for r in range(4)]
    assert sorted((s["run_id"], s["world_size"]) for s in replica_stats(d)) == [("run-a", 4)] * 4 + [("run-b", 3)]
    assert merge_shards([tmp_path / "b"], tmp_path / "b.csv").run_id is None  # no run named: none reported


# ---- CSV rules that do not depend on the file's size (issue 21.7) ----


def text_of(n: int) -> list[str]:
    return ['line one, "quoted"\nline two\r\nline three ' + "x" * (1600 + i % 7) for i in range(n)]


def big_test_csv(path, n=700) -> list[str]:
    """A valid test.csv over 1 MB whose quoted comments hold newlines (and commas, quotes)."""
    ids = make_ids(n)
    pd.DataFrame({"id": ids, "content": text_of(n), "lang": "en"}).to_csv(path, index=False)
    assert path.stat().st_size > 1 << 20
    return ids


def test_merge_reads_a_test_file_over_1mb_with_quoted_newlines(tmp_path, capsys):
    from kitlib.data import read_csv_checked

    ids = big_test_csv(tmp_path / "test.csv")
    assert read_csv_checked(tmp_path / "test.csv")["id"].tolist() == ids
    write_run(tmp_path / "shards", len(ids), 3, ids=ids)
    out = tmp_path / "sub.csv"
    assert main(["merge", str(tmp_path / "shards"), "-o", str(out), "--test", str(tmp_path / "test.csv")]) == 0, capsys.readouterr().err
    assert read_sub(out)["id"].tolist() == ids
    # seed shards ordered by the same file
    pd.DataFrame({"id": ids[::-1], "toxic": pred_of(np.arange(len(ids)))[::-1]}).to_csv(tmp_path / "seed.csv", index=False)
    assert main(["merge", str(tmp_path / "seed.csv"), "-o", str(out), "--test", str(tmp_path / "test.csv")]) == 0
    np.testing.assert_allclose(read_sub(out)["toxic"].to_numpy(), pred_of(np.arange(len(ids))), atol=1e-7)
    # a seed CSV shard over 1 MB whose quoted field holds a newline (a note column): read by the same rules
    seed = pd.DataFrame({"id": ids, "toxic": pred_of(np.arange(len(ids))), "note": text_of(len(ids))})
    seed.to_csv(tmp_path / "seed.csv", index=False)
    assert (tmp_path / "seed.csv").stat().st_size > 1 << 20
    ss = tmp_path / "ss.csv"
    pd.DataFrame({"id": ids, "toxic": 0.5}).to_csv(ss, index=False)
    assert main(["merge", str(tmp_path / "seed.csv"), "-o", str(out), "--sample-submission", str(ss)]) == 0, capsys.readouterr().err
    assert read_sub(out)["id"].tolist() == ids


# ---- I/O failures in the CLI: one line, exit status 1, the old file intact (issue 21.9) ----


@pytest.mark.parametrize("code", ["ENOSPC", "EFBIG", "EACCES", "EROFS"])
def test_cli_write_failure_is_one_line_naming_the_output(tmp_path, capsys, monkeypatch, code):
    import errno
    import os

    import pyarrow.csv as pacsv

    write_run(tmp_path / "shards", 30, 4)
    out = tmp_path / "submission.csv"
    out.write_text("id,toxic\nold,0.5\n")

    def full(*args, **kwargs):
        raise OSError(getattr(errno, code))  # what a write() of a full disk, or of a read-only mount, raises

    monkeypatch.setattr(pacsv, "write_csv", full)
    assert main(["merge", str(tmp_path / "shards"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: cannot write {out}: {os.strerror(getattr(errno, code))}\n"
    assert out.read_text() == "id,toxic\nold,0.5\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards", "submission.csv"]  # no temporary file left


@pytest.mark.parametrize("code", ["ENOSPC", "EROFS"])
def test_blend_cli_write_failure_is_the_same_one_line(tmp_path, capsys, monkeypatch, code):
    import errno
    import os

    pd.DataFrame({"id": ["a", "b"], "toxic": [0.1, 0.2]}).to_csv(tmp_path / "x.csv", index=False)
    pd.DataFrame({"id": ["b", "a"], "toxic": [0.9, 0.4]}).to_csv(tmp_path / "y.csv", index=False)  # blends to 0.25, 0.55 (not collapsed)
    out = tmp_path / "blend.csv"
    out.write_text("id,toxic\nold,0.5\n")
    real = pd.DataFrame.to_csv

    def full(self, path=None, *args, **kwargs):
        if path is not None and ".blend.csv." in str(path):  # the blend's temporary output
            raise OSError(getattr(errno, code))
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    assert main(["blend", str(tmp_path / "x.csv"), str(tmp_path / "y.csv"), "-o", str(out)]) == 1
    assert capsys.readouterr().err == f"error: cannot write {out}: {os.strerror(getattr(errno, code))}\n"
    assert out.read_text() == "id,toxic\nold,0.5\n"
    monkeypatch.undo()
    ro = "/sys/kitlib-test-blend.csv"
    assert main(["blend", str(tmp_path / "x.csv"), str(tmp_path / "y.csv"), "-o", ro]) == 1
    assert re.fullmatch(rf"error: cannot write {re.escape(ro)}: (Permission denied|Read-only file system)\n",
                        capsys.readouterr().err)


def test_cli_output_in_a_read_only_folder(tmp_path, capsys):
    """Tests run as root, for whom chmod stops nothing: /sys is a folder no process may create files in."""
    import os

    write_run(tmp_path / "shards", 12, 2)
    out = "/sys/kitlib-test-submission.csv"
    if os.path.exists(out):
        pytest.skip(f"{out} exists")
    assert main(["merge", str(tmp_path / "shards"), "-o", out]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(rf"error: cannot write {re.escape(out)}: (Permission denied|Read-only file system)\n", err), err
    assert main(["merge", str(tmp_path / "shards"), "-o", str(tmp_path / "no-such-folder" / "s.csv")]) == 1
    assert capsys.readouterr().err.endswith("no-such-folder/s.csv: No such file or directory\n")


def test_file_url_output_is_the_path_it_names(tmp_path):
    from pathlib import Path

    write_run(tmp_path / "my shards", 12, 2)
    folder = tmp_path / "run #1 é"
    folder.mkdir()
    out = folder / "sub mission.csv"
    r = merge_shards([(tmp_path / "my shards").as_uri()], out.as_uri())
    assert r.num_rows == 12 and out.is_file() and Path(r.output) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my shards", "run #1 é"]  # nothing at an encoded name
