"""No function in kitlib/ or kaggle_kit/ is over :data:`MAX_LINES` lines (issue 31).

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (docstring and nested
functions included; each nested function is counted on its own as well).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kitlib", "kaggle_kit")
MAX_LINES = 60


def long_functions(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """``file:line name length`` for every function of the packages longer than ``limit`` lines."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > limit:
                        found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} {length}")
    return found


def test_no_function_over_60_lines():
    offenders = long_functions()
    assert not offenders, f"{len(offenders)} function(s) over {MAX_LINES} lines (split them into named steps):\n" + "\n".join(offenders)


def test_the_check_counts_nested_functions_and_docstrings(tmp_path):
    (tmp_path / "kitlib").mkdir()
    (tmp_path / "kaggle_kit").mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES - 1))  # inner: def + docstring + these
    (tmp_path / "kitlib" / "long.py").write_text(
        f'def outer():\n    """Doc."""\n    def inner():\n        """Doc."""\n{body}\n    return 0\n\n\ndef short():\n    return 1\n')
    assert long_functions(tmp_path) == [f"kitlib/long.py:1 outer {MAX_LINES + 4}", f"kitlib/long.py:3 inner {MAX_LINES + 1}"]
    assert long_functions(tmp_path, limit=MAX_LINES + 1) == [f"kitlib/long.py:1 outer {MAX_LINES + 4}"]


def test_the_package_map_names_every_module():
    """Issue 31: ``kitlib/__init__.py`` is the map: every module of kitlib is named there."""
    import kitlib

    root = Path(kitlib.__file__).parent
    doc = kitlib.__doc__
    missing = [".".join(p.relative_to(root.parent).with_suffix("").parts) for p in sorted(root.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py")
               and ".".join(p.relative_to(root.parent).with_suffix("").parts) not in doc
               and f"~{'.'.join(p.relative_to(root.parent).with_suffix('').parts)}" not in doc]
    assert not missing, f"kitlib/__init__.py's map does not name: {', '.join(missing)}"
