"""The shard merger: padding arithmetic, order, exact string ids, and every refusal."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DistributedSampler

from kitlib.__main__ import main
from kitlib.merge import MergeError, merge_shards
from kitlib.shards import clear_shards, read_shard_info, shard_name, write_shard

SPECIAL_IDS = ["007", "NA", "1e5", "0x1F", "nan", "-0", "12345678901234567890"]


def make_ids(n: int) -> list[str]:
    ids = [f"{i:06d}" for i in range(n)]
    ids[: len(SPECIAL_IDS)] = SPECIAL_IDS
    return ids


def pred_of(rows: np.ndarray) -> np.ndarray:
    return ((rows * 7919) % 1000 / 1000.0).astype(np.float32)


def write_run(out, n: int, world: int, run_id: str = "run-a", ids=None) -> list[str]:
    """Shards exactly as the inference template writes them, from a real DistributedSampler."""
    ids = ids or make_ids(n)
    for rank in range(world):
        rows = np.fromiter(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=False), np.int64)
        write_shard(out, rank=rank, world_size=world, num_rows=n, rows=rows, ids=np.array(ids, dtype=object)[rows],
                    predictions={"toxic": pred_of(rows)}, run_id=run_id)
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


# ---- refusals: exit status 2, a message naming the problem, and no output file ----

def _corrupt(kind, d, tmp_path):
    """Break a good 4-rank run of 30 rows in one way; returns extra CLI args."""
    if kind == "missing rank":
        (d / shard_name(2, 4)).unlink()
    elif kind == "unreadable shard":
        (d / shard_name(1, 4)).write_bytes(b"this is not parquet")
    elif kind == "truncated shard":
        p = d / shard_name(3, 4)
        p.write_bytes(p.read_bytes()[:-100])
    elif kind == "blank id":
        ids = make_ids(30)
        ids[17] = "  "
        write_run(d, 30, 4, ids=ids)
    elif kind == "duplicates disagree":
        t = pq.read_table(d / shard_name(0, 4))
        meta = t.schema.metadata
        t = t.set_column(2, "toxic", pa.array(np.full(t.num_rows, 0.99, np.float32))).replace_schema_metadata(meta)
        pq.write_table(t, d / shard_name(0, 4))
    elif kind == "other run":
        write_run(tmp_path / "old", 30, 4, run_id="run-b")
        (d / shard_name(1, 4)).write_bytes((tmp_path / "old" / shard_name(1, 4)).read_bytes())
    elif kind == "missing ids":
        pd.DataFrame({"id": make_ids(30) + ["extra-1"], "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
        return ["--sample-submission", str(tmp_path / "ss.csv")]
    elif kind == "extra ids":
        pd.DataFrame({"id": make_ids(30)[:-2], "toxic": 0.5}).to_csv(tmp_path / "ss.csv", index=False)
        return ["--sample-submission", str(tmp_path / "ss.csv")]
    return []


@pytest.mark.parametrize("kind, message", [
    ("missing rank", "missing shard.*rank.*2 of world size 4"),
    ("unreadable shard", "shard-00001-of-00004.parquet: unreadable"),
    ("truncated shard", "shard-00003-of-00004.parquet: unreadable or truncated"),
    ("blank id", "blank id"),
    ("duplicates disagree", "padding duplicates disagree on 'toxic'"),
    ("other run", "different runs.*run_id"),
    ("missing ids", "1 id\\(s\\) of .*ss.csv have no prediction.*'extra-1'"),
    ("extra ids", "2 predicted id\\(s\\) are not in .*ss.csv"),
])
def test_refusals_exit_nonzero_and_write_nothing(tmp_path, capsys, kind, message):
    d = tmp_path / "shards"
    write_run(d, 30, 4)
    extra = _corrupt(kind, d, tmp_path)
    out = tmp_path / "submission.csv"
    assert main(["merge", str(d), "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    import re
    assert re.search(message, err), err
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
