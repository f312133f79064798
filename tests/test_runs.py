"""The runs table as a shared record (issue 33, item 6, :mod:`kitlib.training.runs`): appends are locked, and a
run id names one record, its latest state, in one table and across the kernels' downloaded tables."""
from __future__ import annotations

import multiprocessing

from kitlib.training import runs

WRITERS, APPENDS = 6, 25


def _append_many(table: str, writer: int) -> None:
    for i in range(APPENDS):
        runs.append_run(table, {"run_id": f"{writer:02d}{i:04d}aaaa", "recipe": "e5", "epochs": 1, "best_epoch": 1})


def test_six_processes_appending_to_one_table_keep_every_row(tmp_path):
    """Issue 33: six processes appending 25 rows each to one runs.csv kept 42 of 150 rows (an atomic
    replace keeps the file whole, not every writer's row); under the table's lock all 150 stay."""
    table = tmp_path / "artifacts" / runs.RUNS_FILE
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(table), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    ids = [r["run_id"] for r in runs.read_runs(table)]
    assert len(ids) == WRITERS * APPENDS == 150
    assert sorted(ids) == sorted(f"{w:02d}{i:04d}aaaa" for w in range(WRITERS) for i in range(APPENDS))
    assert table.read_text().count("\n") == 151  # the header and one line per row: no row written twice


def _row(run_id: str, epochs: int, best: int, ended: str = "", started: str = "") -> dict:
    return {"run_id": run_id, "started": started, "ended": ended, "recipe": "e5", "epochs": epochs,
            "best_epoch": best, "monitor": "valid_auc", "best_value": 0.8 + best / 100, "git_commit": "0123456789ab",
            "kitlib": "k1", "data": "d1"}


def test_a_continued_run_is_one_row_its_latest_state(tmp_path):
    """A run cut off after epoch 1 and continued to epoch 2 (same run id) appended two rows, and the
    lookup `submissions` uses showed the first: "kept epoch 1 of 1" for a 2-epoch checkpoint."""
    table = tmp_path / runs.RUNS_FILE
    runs.append_run(table, _row("3f2a9c01be77", 1, 1, ended="2026-01-02T10:00:00+00:00", started="2026-01-02T09:00:00+00:00"))
    runs.append_run(table, _row("0a0a0a0a0a0a", 1, 1))  # another run in between
    runs.append_run(table, _row("3f2a9c01be77", 2, 2, ended="2026-01-02T12:00:00+00:00", started="2026-01-02T11:00:00+00:00"))
    rows = runs.read_runs(table)
    assert [(r["run_id"], r["epochs"], r["best_epoch"]) for r in rows] == [("0a0a0a0a0a0a", "1", "1"), ("3f2a9c01be77", "2", "2")]
    assert rows[1]["started"] == "2026-01-02T09:00:00+00:00"  # when the run first started
    assert table.read_text().count("3f2a9c01be77") == 1
    table_, row = runs.find_runs(["3f2a9c01be77"], [tmp_path])["3f2a9c01be77"]
    assert table_ == table and runs.describe_run(row).startswith("recipe e5, kept epoch 2 of 2, valid_auc 0.8200")
    assert runs.update_run(table, "3f2a9c01be77", heldout_auc=0.9017)
    assert [r.get("heldout_auc") for r in runs.read_runs(table)] == ["", "0.9017"]


def test_a_table_written_with_a_run_twice_is_read_as_its_last_row(tmp_path):
    """A table written before the rule (the run's two rows, appended as they were) reads as one row."""
    table = tmp_path / runs.RUNS_FILE
    runs._write(table, [_row("3f2a9c01be77", 1, 1), _row("3f2a9c01be77", 2, 2)])
    assert [(r["epochs"], r["best_epoch"]) for r in runs.read_runs(table)] == [("2", "2")]
    assert "kept epoch 2 of 2" in runs.describe_run(runs.find_runs(["3f2a9c01be77"], [tmp_path])["3f2a9c01be77"][1])


def test_find_runs_takes_the_latest_table_in_version_order_then_by_time(tmp_path):
    """The kernels' outputs are downloaded to <slug>/v<N>/: a run in two versions is its latest one.
    Tables were taken in lexicographic order, first found kept: v1 won over v2 and would have over v10."""
    root = tmp_path / "kernels" / "train"
    for version, (epochs, best) in {"v1": (1, 1), "v2": (2, 2)}.items():
        runs.append_run(root / version / "artifacts" / runs.RUNS_FILE, _row("aaaaaaaaaaaa", epochs, best))
    for version, (epochs, best) in {"v9": (1, 1), "v10": (2, 2)}.items():
        runs.append_run(root / version / "artifacts" / runs.RUNS_FILE, _row("bbbbbbbbbbbb", epochs, best))
    found = runs.find_runs(["aaaaaaaaaaaa", "bbbbbbbbbbbb"], [tmp_path / "kernels"])
    assert found["aaaaaaaaaaaa"][0] == root / "v2" / "artifacts" / runs.RUNS_FILE
    assert found["bbbbbbbbbbbb"][0] == root / "v10" / "artifacts" / runs.RUNS_FILE
    assert all("kept epoch 2 of 2" in runs.describe_run(row) for _, row in found.values())
    # the time a row ended decides before the folder's name: a table copied later into v3 holds the older row
    runs.append_run(root / "v3" / "artifacts" / runs.RUNS_FILE, _row("cccccccccccc", 1, 1, ended="2026-01-01T10:00:00+00:00"))
    runs.append_run(root / "v2" / "artifacts" / runs.RUNS_FILE, _row("cccccccccccc", 2, 2, ended="2026-01-01T12:00:00+00:00"))
    table, row = runs.find_runs(["cccccccccccc"], [tmp_path / "kernels"])["cccccccccccc"]
    assert table == root / "v2" / "artifacts" / runs.RUNS_FILE and row["epochs"] == "2"
