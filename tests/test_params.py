"""Notebook parameters of the wrong type (issue 21.5): kitlib.params, in every notebook and in the tooling.

From the input: ``papermill -p mixed_precision false`` reaches the Keras notebook as the string
"false" (truthy); the notebook must read it as False or refuse. Each notebook is executed by
papermill's own command line up to its parameter-check cell (the cells after it import the
frameworks and run the job), plus one cell that prints what the parameters became.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kitlib.params import ParameterTypeError, check_notebook_parameters, check_parameters, check_value, parameter_defaults

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("default,value,want", [
    (True, "false", False), (True, "TRUE", True), (False, True, True), (0.1, 3, 3.0), (16, 32, 32),
    ("auto", "tiny-random", "tiny-random"), ("", "x", "x"), (None, 5, 5), ([1], [2, 3], [2, 3]),
])
def test_values_of_the_defaults_type_are_accepted(default, value, want):
    got = check_value("p", value, default)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("default,value", [
    (True, "no"), (True, 1), (True, "0"), (16, "32"), (16, 2.5), (16, True), (0.1, "1e-5"), (0.1, False),
    ("auto", 5), ("", None), ([1], "1,2"),
])
def test_values_of_another_type_are_refused_naming_the_parameter(default, value):
    with pytest.raises(ParameterTypeError, match=r"parameter 'p': got .*its default"):
        check_value("p", value, default)


def test_defaults_are_read_from_the_cell_source():
    src = 'a = 1  # c\nb: float = 0.5\nc = "x"\nd = os.environ["X"]\ne = f = True\n'
    assert parameter_defaults(src) == {"a": 1, "b": 0.5, "c": "x", "e": True, "f": True}
    with pytest.raises(ParameterTypeError) as e:
        check_parameters({"a": "1", "c": 2, "z": 9}, parameter_defaults(src))
    assert [p.split(":")[0] for p in e.value.problems] == ["parameter 'a'", "parameter 'c'"]


def test_the_notebook_side_reads_the_history_as_papermill_leaves_it():
    ns = {"In": ["", "flag = True\nn = 2\n", "# Parameters\nflag = \"false\"\n", "check()"], "flag": "false", "n": 2}
    assert check_notebook_parameters(ns) == {"flag": False}
    assert ns["flag"] is False
    ns = {"In": ["", "flag = True\nn = 2\n", "# Parameters\nn = \"3\"\n"], "flag": True, "n": "3"}
    with pytest.raises(ParameterTypeError, match="parameter 'n'"):
        check_notebook_parameters(ns)
    assert check_notebook_parameters({"In": ["", "x = 1\n"], "x": "whatever"}) == {}  # nothing injected: nothing to check


def head_of(name: str, tmp: Path) -> Path:
    """The notebook up to its parameter-check cell, then a cell printing the parameters (JSON)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    i = next(i for i, c in enumerate(nb.cells) if "check_notebook_parameters(globals())" in c.source)
    names = list(parameter_defaults(next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))))
    nb.cells = nb.cells[: i + 1] + [nbformat.v4.new_code_cell(
        "import json\nprint('PARAMS=' + json.dumps({k: globals()[k] for k in %r}))" % names)]
    out = tmp / f"{name}.ipynb"
    nbformat.write(nb, out)
    return out


def papermill(nb: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = nb.with_name("out-" + nb.name)
    r = subprocess.run([PY, "-m", "papermill", str(nb), str(out), "-k", "python3", "--cwd", str(ROOT / "notebooks"), *args],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        return r, None
    text = json.dumps(nbformat.read(out, as_version=4).cells[-1].outputs)
    params = json.loads(text.split("PARAMS=")[1].split("\\n")[0].replace('\\"', '"'))
    return r, params


def test_keras_notebook_reads_mixed_precision_false_as_false(tmp_path):
    nb = head_of("keras_xlmr_train", tmp_path)
    r, params = papermill(nb, "-p", "mixed_precision", "false")
    assert r.returncode == 0, r.stderr[-2000:]
    assert params["mixed_precision"] is False  # never the truthy string "false"
    r, params = papermill(nb, "-p", "mixed_precision", "True")
    assert r.returncode == 0 and params["mixed_precision"] is True


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_refuses_a_string_for_a_number(tmp_path, name):
    r, _ = papermill(head_of(name, tmp_path), "-r", "max_len", "32")
    assert r.returncode != 0
    assert "ParameterTypeError" in r.stderr and re.search(r"parameter 'max_len': got '32' \(str\), but its default \d+ wants an integer", r.stderr)


def test_the_notebook_side_refuses_an_injected_name_the_parameters_cell_lacks():
    ns = {"In": ["", "save_every_minutes = 30.0\nseed = 0\n", "# Parameters\nsave_every_steps = 5\n"], "save_every_steps": 5}
    with pytest.raises(ParameterTypeError) as e:
        check_notebook_parameters(ns)
    assert e.value.problems == ["unknown parameter 'save_every_steps': the notebook's parameters cell does not define it "
                                "(did you mean 'save_every_minutes'?)"]
    ns = {"In": ["", "a = 1\nb = os.getcwd()\n", "# Parameters\nb = \"x\"\nzzz = 1\n"], "b": "x", "zzz": 1}
    with pytest.raises(ParameterTypeError, match=r"unknown parameter 'zzz'.*\(the parameters cell defines: a, b\)"):
        check_notebook_parameters(ns)  # b (not a literal) is a parameter; zzz has no close match: every name is listed


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_refuses_an_unknown_parameter_before_any_work(tmp_path, name):
    r, _ = papermill(head_of(name, tmp_path), "-p", "save_every_steps", "5", "-p", "seed", "1")
    assert r.returncode != 0
    assert "UnknownParameterError" in r.stderr and "unknown parameter 'save_every_steps'" in r.stderr, r.stderr[-2000:]


def test_a_refused_parameter_reaches_the_user_as_one_short_block(tmp_path):
    """Issue 34.5: through papermill, the kit's refusal sat inside a 40-80-line traceback; the kit's
    runner (python -m kitlib.notebook, what the Makefile and the docs run) prints it as one block."""
    nb = head_of("xla_ddp_train", tmp_path)
    out = tmp_path / "out.ipynb"
    r = subprocess.run([PY, "-m", "kitlib.notebook", str(nb), str(out), "-k", "python3", "--cwd", str(ROOT / "notebooks"),
                        "--no-progress-bar", "-p", "save_every_steps", "5"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 1, r.stderr[-3000:]
    lines = r.stderr.splitlines()  # papermill's few lines (input, output, working directory, kernel), then the block
    assert len(lines) <= 8 and lines[-2:] == [
        "error: UnknownParameterError: unknown parameter 'save_every_steps': the notebook's parameters cell does not "
        "define it (did you mean 'save_every_minutes'?)",
        f"  (cell 3 of {nb} failed; the whole traceback is in {out})"], r.stderr
    assert "Traceback" not in r.stderr
    kept = [o for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert kept[0].ename == "UnknownParameterError" and len(kept[0].traceback) > 3  # the traceback stays in the output notebook
