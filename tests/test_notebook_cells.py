"""What a notebook run shows is what its cells print or display: no cell ends in a bare value.

Jupyter shows the value of a cell's last expression (an ``execute_result``): every notebook run used
to print a stray ``{}``, the return value of ``check_notebook_parameters(globals())`` ending the cell
after the parameters (issue 27.11). The rule: a code cell's last statement is a statement, or a
call to one of :data:`SHOWS` (which return None), or ends with ``;``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
SHOWS = {"print", "display", "show"}  # print(...), display(...), plt.show() / fig.show()


def bare_values(path: Path) -> list[str]:
    """``"cell N: <expression>"`` for each code cell of ``path`` whose last statement leaves a value shown."""
    out = []
    for i, cell in enumerate(jupytext.read(path).cells):
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        body = ast.parse(source).body
        if not body or not isinstance(body[-1], ast.Expr) or source.rstrip().endswith(";"):
            continue
        last = body[-1].value
        func = last.func if isinstance(last, ast.Call) else None
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name not in SHOWS:
            out.append(f"cell {i}: {ast.unparse(last)[:80]}")
    return out


def test_the_rule_finds_the_stray_value():
    assert bare_values_of("x = 1\ncheck_notebook_parameters(globals())") == ["cell 0: check_notebook_parameters(globals())"]
    assert bare_values_of("print(1)") == bare_values_of("plt.show()") == bare_values_of("f();") == []


def bare_values_of(source: str, tmp=Path("/tmp")) -> list[str]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=tmp, delete=False) as f:
        f.write("# %%\n" + source + "\n")
    try:
        return bare_values(Path(f.name))
    finally:
        Path(f.name).unlink()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_cell_ends_in_a_bare_value(path):
    assert bare_values(path) == [], f"{path.name}: these cells show a stray value; assign it or print it"
