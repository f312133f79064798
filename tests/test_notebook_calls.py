"""Issue 41 item 4: the training notebooks stop orchestrating.

Before: the training notebook decided its split in a cell of fifteen branches and spelled the held-out rows' name
three times; the two training notebooks built their jobs field by field and wrote the hand-off differently. Now
one call makes the split (:func:`kitlib.cv.heldout.make_split`), one builds the job from the parameters
(:func:`kitlib.training.job.job_from_params`) and one runs the hand-off (:func:`kitlib.training.handoff.run_handoff`),
the same three in both notebooks, and the held-out rows' names have one home (:data:`kitlib.cv.heldout.HELDOUT_NAMES`).
"""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import jupytext
import pandas as pd
import pytest

from conftest import SAMPLE

ROOT = Path(__file__).resolve().parents[1]
TRAINING_NOTEBOOKS = ("xla_ddp_train", "ttt_train_predict")
THE_CALLS = {"make_split": "kitlib.cv.heldout", "job_from_params": "kitlib.training.job",
             "run_handoff": "kitlib.training.handoff"}
# What the notebooks called themselves before, now behind the three calls.
ORCHESTRATION = {"TrainJob", "handoff", "check_reload", "check_predicted", "check_ready", "refuses_collapse",
                 "mark_passed", "resolve_checkpoint", "english_holdout_split", "holdout_split", "validation_split",
                 "ttt_split", "resolve_split", "write_folds", "fold_split", "fold_tags", "kit_id_copy", "InferJob"}
MAX_CELL_LINES = 25  # "a notebook cell is a few lines a reader can follow" (the parameters cell aside)


def code_cells(name: str) -> list[str]:
    """The code cells of ``notebooks/<name>.py`` but its parameters cell, magics dropped."""
    cells = jupytext.read(ROOT / "notebooks" / f"{name}.py").cells
    return ["\n".join(line for line in c.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            for c in cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])]


def calls_and_imports(name: str) -> tuple[dict[str, int], dict[str, str]]:
    """``({called name: times}, {imported name: module})`` of a notebook's code."""
    calls, imports = {}, {}
    for source in code_cells(name):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                calls[called] = calls.get(called, 0) + 1
            elif isinstance(node, ast.ImportFrom):
                imports.update({a.asname or a.name: node.module for a in node.names})
    return calls, imports


@pytest.mark.parametrize("name", TRAINING_NOTEBOOKS)
def test_both_training_notebooks_make_the_split_the_job_and_the_hand_off_with_the_same_three_calls(name):
    calls, imports = calls_and_imports(name)
    assert {c: calls.get(c) for c in THE_CALLS} == dict.fromkeys(THE_CALLS, 1), calls
    assert {c: imports.get(c) for c in THE_CALLS} == THE_CALLS
    assert sorted(ORCHESTRATION & set(calls)) == [], f"{name} still orchestrates what the three calls do"
    long = {i: len(s.strip().splitlines()) for i, s in enumerate(code_cells(name)) if len(s.strip().splitlines()) > MAX_CELL_LINES}
    assert long == {}, f"{name}: code cells over {MAX_CELL_LINES} lines (cell: lines)"


def _string_constants(tree: ast.AST) -> list[str]:
    """Every string literal of ``tree`` (f-string parts included) but docstrings."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_held_out_rows_are_named_in_one_place():
    """Each name of the held-out rows is one string literal in kitlib (kitlib/cv/heldout.py), none in a notebook's code."""
    from kitlib.cv.heldout import HELDOUT_NAMES, VALIDATION_NAME

    phrases = {n for n in (*HELDOUT_NAMES.values(), VALIDATION_NAME) if n != "held-out"}  # "held-out" alone is a word
    assert phrases == {"held-out English", "held-out multilingual", "multilingual validation"}
    found = {p: [] for p in phrases}
    for path in sorted((ROOT / "kitlib").rglob("*.py")):
        for text in _string_constants(ast.parse(path.read_text(encoding="utf-8"))):
            for p in phrases:
                if p in text:
                    found[p].append(path.relative_to(ROOT).as_posix())
    assert found == {p: ["kitlib/cv/heldout.py"] for p in phrases}
    for name in TRAINING_NOTEBOOKS:
        spelled = [t for s in code_cells(name) for t in _string_constants(ast.parse(s)) if any(p in t for p in phrases)]
        assert spelled == [], name


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """make_split's parts go to a scratch folder of the test's own (kitlib.paths.TMP_ENV)."""
    from kitlib.paths import TMP_ENV

    monkeypatch.setenv(TMP_ENV, str(tmp_path / "scratch"))
    return tmp_path / "scratch"


TRAINING = dict(data_dir=str(SAMPLE), train_csv="", valid_csv="", id_col="id", text_col="", label_col="toxic",
                split="auto", holdout_frac=0.2, seed=0, folds=0, fold=-1, pseudo_csv="", output_dir="")


@pytest.mark.parametrize("split, frac, heldout, final", [
    ("auto", 0.2, "held-out English", "multilingual validation"),
    ("english", 0.0, "multilingual validation", None),
    ("validation", 0.2, "held-out multilingual", "held-out multilingual"),
    ("holdout", 0.2, "held-out", "held-out"),
])
def test_make_split_names_the_rows_it_holds_out(scratch, split, frac, heldout, final):
    from kitlib.cv.heldout import make_split
    from kitlib.data import read_ids

    parts = make_split({**TRAINING, "split": split, "holdout_frac": frac})
    assert (parts.name, parts.heldout_name, parts.final_name) == ("english" if split == "auto" else split, heldout, final)
    assert not set(read_ids(parts.train_csv)) & set(read_ids(parts.heldout_csv))  # never trained on
    if split == "english":  # nothing held out of the English rows: validation.csv itself, every epoch
        assert parts.heldout_csv == SAMPLE / "validation.csv" and parts.final_csv is None
    elif split == "validation":
        assert parts.final_csv == parts.heldout_csv and len(read_ids(parts.heldout_csv)) == 500
    table = parts.table(train_limit=100)
    assert table["rows"].iloc[0] == 100 and table.index[1] == f"scored every epoch ({heldout})"
    assert parts.sources == (SAMPLE / "train.csv", SAMPLE / "validation.csv") and parts.tags == {} and parts.out_dir is None


def test_make_split_with_folds_holds_out_the_fold(scratch, tmp_path):
    from kitlib.cv.folds import FoldsError
    from kitlib.cv.heldout import make_split
    from kitlib.data import read_ids

    parts = make_split({**TRAINING, "folds": 3, "fold": 1, "output_dir": str(tmp_path / "group")})
    assert parts.heldout_name == "fold 1" and parts.out_dir == tmp_path / "group" / "fold-1"
    assert (parts.tags["fold"], parts.tags["folds"]) == (1, 3) and len(parts.tags["cv"]) == 12
    assert parts.final_name == "multilingual validation"  # validation.csv is still scored at the end
    assert not set(read_ids(parts.train_csv)) & set(read_ids(parts.heldout_csv))
    with pytest.raises(FoldsError, match="fold=3 with folds=3"):
        make_split({**TRAINING, "folds": 3, "fold": 3})


def test_job_from_params_takes_each_parameter_by_its_name(scratch, tiny_checkpoint, tmp_path):
    """Every TrainJob field a notebook parameter names is that parameter ("" and 0 read as None where the job means
    "the kit's choice" or "all rows"); the split gives the rows, the model folder is resolved once."""
    from kitlib import paths
    from kitlib.cv.heldout import make_split
    from kitlib.training.job import job_from_params

    rt = SimpleNamespace(backend=SimpleNamespace(hardware="cpu"))
    parts = make_split(TRAINING)
    params = {**TRAINING, "model": str(tiny_checkpoint), "cache_dir": str(tmp_path / "cache"), "epochs": 3,
              "batch_size": 4, "max_len": 48, "lr": 1e-4, "train_limit": 0, "valid_limit": 60, "pattern": "ddp",
              "lora_r": 0, "time_budget_minutes": 5.0, "accelerator": "cpu"}
    job = job_from_params(params, rt, parts)
    assert (job.checkpoint, job.train_csv, job.valid_csv) == (str(tiny_checkpoint), str(parts.train_csv), str(parts.heldout_csv))
    assert (job.epochs, job.batch_size, job.max_len, job.lr, job.pattern) == (3, 4, 48, 1e-4, "ddp")
    assert (job.text_col, job.train_limit, job.valid_limit, job.time_budget_s) == (None, None, 60, 300.0)
    assert job.out_dir == str(paths.working_dir(paths.project_root()) / paths.TRAINED_CHECKPOINT)
    assert job.compile_cache_dir == str(tmp_path / "cache" / "xla-compile")
    ttt = job_from_params({**params, "text_col": "comment_text", "time_budget_minutes": 0.0}, rt, parts,
                          default_out_dir=paths.TTT_CHECKPOINT, resume="never")
    assert (ttt.text_col, ttt.resume, ttt.time_budget_s) == ("comment_text", "never", None)
    assert ttt.out_dir.endswith(str(paths.TTT_CHECKPOINT))
    with pytest.raises(ValueError, match="pattern must be one of"):
        job_from_params({**params, "pattern": "allreduce"}, rt, parts)


def test_the_test_time_split_counts_its_parts(scratch, tmp_path):
    from kitlib.cv.heldout import TEST_TIME, make_split

    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    test["label"] = ["1" if i % 4 == 0 else "0" for i in range(20)] + [""] * (len(test) - 20)
    test.to_csv(tmp_path / "test.csv", index=False)
    parts = make_split({**TRAINING, "test_csv": str(tmp_path / "test.csv"), "test_label_col": "label",
                        "holdout_frac": 0.1}, TEST_TIME)
    c = parts.counts
    assert (c["labelled_test_rows"], c["test_rows"], parts.heldout_name, parts.final_csv) == (20, len(test), "held-out", None)
    table = parts.table(valid_limit=10)
    assert table["rows"].tolist() == [20, c["train_rows"], 10, len(test)]
    assert table.index[0] == "test, labelled (label): trained first"


def test_the_push_checks_still_see_which_notebooks_train_with_their_model():
    """kaggle_kit's model_sources rule reads how a notebook resolves ``model``: through job_from_params now, for training."""
    from kaggle_kit.rules import model_purpose

    purposes = {n: model_purpose(jupytext.read(ROOT / "notebooks" / f"{n}.py"))
                for n in (*TRAINING_NOTEBOOKS, "xla_multicore_inference")}
    assert purposes == {"xla_ddp_train": "training", "ttt_train_predict": "training", "xla_multicore_inference": "inference"}
