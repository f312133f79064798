"""runs.csv's heldout_auc (issue 34.5): always empty, because the training notebook saves its held-out
scores (kitlib.training.runs.save_scores) after train() appended the run's row; save_scores now fills it."""
from __future__ import annotations

import json

from kitlib.training.runs import append_run, read_runs, runs_table
from kitlib.checkpoint import HISTORY_FILE, SCORES_FILE
from kitlib.training.runs import save_scores


def test_saving_the_heldout_scores_fills_the_runs_row(tmp_path):
    out = tmp_path / "artifacts" / "xlmr-toxic"
    out.mkdir(parents=True)
    (out / HISTORY_FILE).write_text(json.dumps({"run_id": "run-b", "epochs": []}))
    table = runs_table(out)
    append_run(table, {"run_id": "run-a", "valid_auc": 0.81})
    append_run(table, {"run_id": "run-b", "valid_auc": 0.9023})
    save_scores(out, {"rows": "held-out multilingual", "roc_auc": 0.9017, "per_language": {"tr": 0.88}})
    rows = {r["run_id"]: r for r in read_runs(table)}
    assert rows["run-b"]["heldout_auc"] == "0.9017" and rows["run-b"]["valid_auc"] == "0.9023"
    assert rows["run-a"]["heldout_auc"] == ""  # another run's row is left alone
    assert json.loads((out / SCORES_FILE).read_text())["roc_auc"] == 0.9017
