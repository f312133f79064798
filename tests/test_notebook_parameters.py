"""Every notebook's `parameters` cell is what papermill's inspection (`papermill --help-notebook`) reads.

papermill parses the cell line by line with a regular expression, not with Python: a line with a
second "=" (for example in its help comment) is dropped with "Unable to parse line N". The names
and defaults Python sees in the cell must be exactly those papermill lists.
"""
from __future__ import annotations

import ast
import logging
from pathlib import Path

import nbformat
import papermill as pm
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def parameters_cell(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{path.name}: {len(cells)} cells tagged 'parameters', expected 1"
    return cells[0].source


def python_defaults(source: str) -> dict[str, object]:
    """name -> literal default of each assignment in the cell, in order, as Python reads it."""
    out = {}
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name), (
            f"line {node.lineno}: a parameters cell holds only `name = literal` lines")
        out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def test_every_notebook_is_checked():
    assert {p.stem for p in NOTEBOOKS} >= {"xla_multicore_inference", "xla_ddp_train", "keras_xlmr_train"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_papermill_lists_every_parameter_with_its_default(path, caplog):
    expected = python_defaults(parameters_cell(path))
    with caplog.at_level(logging.WARNING, logger="papermill"):
        listed = pm.inspect_notebook(str(path))
    assert not [r.getMessage() for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert list(listed) == list(expected), f"{path.name}: papermill lists {list(listed)}"
    for name, default in expected.items():
        got = ast.literal_eval(listed[name]["default"])
        assert got == default and type(got) is type(default), f"{path.name}: {name} = {got!r}, not {default!r}"


@pytest.mark.parametrize("name", ["xla_multicore_inference", "xla_ddp_train"])
def test_torch_notebooks_name_their_text_column(name):
    """Issue 27 item 7: text_col in both torch notebooks ("": content or comment_text)."""
    defaults = python_defaults(parameters_cell(ROOT / "notebooks" / f"{name}.ipynb"))
    assert defaults["text_col"] == ""
    source = (ROOT / "notebooks" / f"{name}.py").read_text()
    if name == "xla_multicore_inference":
        assert source.count("text_col=text_col or None") >= 2
    else:  # the training job takes every parameter by its name, "" read as None: tests/test_notebook_calls.py
        assert "job_from_params(globals(), rt, parts)" in source


def test_the_inference_notebook_may_run_without_a_sample_submission():
    from kitlib.infer import InferJob

    cell = parameters_cell(ROOT / "notebooks" / "xla_multicore_inference.ipynb")
    assert '"none": no sample' in cell
    assert InferJob(checkpoint="c", test_csv="t.csv", shard_dir="s", sample_submission="none").sample_submission is None
