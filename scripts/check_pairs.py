"""Paired notebooks kept honest: ``notebooks/X.py`` (percent format, what reviewers diff) and ``notebooks/X.ipynb``.

Check (CI, pre-commit)::

    python scripts/check_pairs.py [NOTEBOOK ...]          # default: every pair under notebooks/

fails (exit 1, one line per problem, naming the file) when

* one side of a pair is missing;
* the pair disagrees: ``jupytext --sync`` run on a scratch copy, once from each side, would change
  either file (so the ``.py`` a reviewer reads is exactly the notebook that runs);
* the ``.ipynb`` is not deterministic: it has outputs or execution counts, a cell without an
  ``id``, no ``kernelspec`` named ``python3`` (Kaggle's papermill run fails with "No kernel name
  found in notebook" without one), or a ``jupytext_version`` (either file).

Sync::

    python scripts/check_pairs.py --sync [--from py|ipynb] [NOTEBOOK ...]

brings each disagreeing pair together with ``jupytext --sync``, taking the side that changed
since the last commit (``git status``). When both sides changed, or neither did (so there is no
telling which is the edit), it refuses, names both files and writes nothing: it never drops an
edit. ``--from`` picks the side explicitly (overwriting the other side's edits: your call). Sync
also clears outputs, sets the ``python3`` kernelspec when missing, drops ``jupytext_version``, and
brings back a notebook saved by Kaggle's editor (nbformat 4.4 without cell ids: upgraded to 4.5,
ids added; its ``kaggle.accelerator`` is kept as written, e.g. ``tpuV5e8``).

Sync works on a scratch copy and writes the pair only when the result passes the check and every
cell of the edited side reads back unchanged from both files (type, source, tags). A cell the
percent format cannot carry (e.g. a markdown line starting with ``%%``, read back as a cell
marker) makes it refuse, naming the cell; when it refuses it writes nothing.

Pairing itself is ``jupytext.toml`` at the repository root (``formats = "ipynb,py:percent"``);
jupytext's ``--sync`` keeps existing cell ids and takes inputs from the newest file by mtime
(jupytext docs, "Paired notebooks"), which is why sync sets mtimes itself rather than trusting them.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jupytext
import jupytext.cli
import nbformat
from jupytext.config import find_jupytext_configuration_file
from kitlib.atomic import atomic_write

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
KERNEL_NAME = "python3"
# the key itself ("jupytext_version": "1.19.6" / jupytext_version: 1.19.6), not the filter naming it
_VERSION_NOISE = re.compile(r"""\bjupytext_version["']?\s*:""")


class SyncRefused(RuntimeError):
    """Sync cannot tell which side of a pair holds the edit (both changed, or neither did)."""


@dataclass(frozen=True)
class Pair:
    """One paired notebook: ``py`` (percent script) and ``ipynb``; either may be missing on disk."""

    py: Path
    ipynb: Path

    @property
    def name(self) -> str:
        return str(self.py.with_suffix(""))


def _display(p: Path) -> Path:
    """``p`` relative to the current folder when it is under it (shorter messages), else as is."""
    try:
        return p.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return p


def pairs_for(args: list[str] | None = None, notebooks_dir: Path | None = None) -> list[Pair]:
    """The pairs named by ``args`` (``X``, ``X.py`` or ``X.ipynb``), default every pair in ``notebooks_dir``
    (default: ``./notebooks`` when the current folder has one, else this repository's).

    Raises:
        FileNotFoundError: a named notebook has neither a ``.py`` nor an ``.ipynb``.
    """
    if notebooks_dir is None:
        notebooks_dir = Path("notebooks") if Path("notebooks").is_dir() else NOTEBOOKS
    if args:
        out = []
        for a in args:
            p = Path(a)
            stem = p.with_suffix("") if p.suffix in (".py", ".ipynb") else p
            if not stem.parent.parts and not stem.with_suffix(".py").exists():
                stem = notebooks_dir / stem
            pair = Pair(stem.with_suffix(".py"), stem.with_suffix(".ipynb"))
            if not pair.py.exists() and not pair.ipynb.exists():
                raise FileNotFoundError(f"{a}: no {pair.py} or {pair.ipynb}")
            out.append(pair)
        return out
    stems = sorted({_display(p.with_suffix("")) for p in (*notebooks_dir.glob("*.py"), *notebooks_dir.glob("*.ipynb"))})
    return [Pair(s.with_suffix(".py"), s.with_suffix(".ipynb")) for s in stems]


def _jupytext(*args: str) -> tuple[int, str]:
    """Run jupytext's own CLI in-process; returns (exit code, its output)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = jupytext.cli.jupytext(list(args))
        except SystemExit as e:  # argparse / jupytext errors
            rc = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # jupytext raises on inconsistent pairs in some modes
            print(f"{type(e).__name__}: {e}")
            rc = 1
    return int(rc or 0), buf.getvalue()


def _config_for(path: Path) -> Path | None:
    """The jupytext configuration file that applies to ``path`` (jupytext's own lookup), or None."""
    found = find_jupytext_configuration_file(str(path.resolve().parent))
    return Path(found) if found else None


def _sync_copy(pair: Pair, newer: str) -> tuple[bytes, bytes, str]:
    """``jupytext --sync`` on a scratch copy of ``pair`` with side ``newer`` ("py"/"ipynb") newest.

    Returns the (py, ipynb) bytes after the sync and jupytext's output.
    """
    config = _config_for(pair.py)
    with tempfile.TemporaryDirectory(prefix="pair-check-") as d:
        d = Path(d)
        if config:
            shutil.copy2(config, d / config.name)
        py, nb = d / pair.py.name, d / pair.ipynb.name
        shutil.copyfile(pair.py, py)
        shutil.copyfile(pair.ipynb, nb)
        src, other = (py, nb) if newer == "py" else (nb, py)
        os.utime(other, (1_000_000_000, 1_000_000_000))
        os.utime(src, (1_000_000_100, 1_000_000_100))
        rc, out = _jupytext("--sync", "--quiet", str(src))
        if rc:
            raise RuntimeError(f"jupytext --sync failed on a copy of {pair.name}: {out.strip()}")
        return py.read_bytes(), nb.read_bytes(), out


def hygiene_problems(pair: Pair) -> list[str]:
    """Determinism problems of the ``.ipynb`` (and version noise in the ``.py``); [] when clean."""
    problems = []
    nb = json.loads(pair.ipynb.read_text(encoding="utf-8"))
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0) >= 5) != (4, True):
        problems.append(f"{pair.ipynb}: nbformat {nb.get('nbformat')}.{nb.get('nbformat_minor')}, want 4.5+ (cell ids)")
    if nb.get("metadata", {}).get("kernelspec", {}).get("name") != KERNEL_NAME:
        problems.append(f"{pair.ipynb}: metadata.kernelspec.name is not {KERNEL_NAME!r} (papermill/Kaggle need it)")
    for i, c in enumerate(nb.get("cells", [])):
        if not c.get("id"):
            problems.append(f"{pair.ipynb}: cell {i} has no id")
        if c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count") is not None):
            problems.append(f"{pair.ipynb}: cell {i} has outputs or an execution count (clear them)")
    for p in (pair.py, pair.ipynb):
        if _VERSION_NOISE.search(p.read_text(encoding="utf-8")):
            problems.append(f"{p}: carries jupytext_version (version noise)")
    return problems


def disagreement(pair: Pair) -> list[str]:
    """How the two sides of ``pair`` disagree (``jupytext --sync`` would change a file); [] when they agree."""
    want_py, want_nb = pair.py.read_bytes(), pair.ipynb.read_bytes()
    problems = []
    for newer in ("py", "ipynb"):
        py, nb, _ = _sync_copy(pair, newer)
        if nb != want_nb:
            problems.append(f"{pair.ipynb}: differs from what jupytext makes of {pair.py}{_diff(want_nb, nb, pair.ipynb)}")
        if py != want_py:
            problems.append(f"{pair.py}: differs from what jupytext makes of {pair.ipynb}{_diff(want_py, py, pair.py)}")
    return list(dict.fromkeys(problems))


def _diff(have: bytes, want: bytes, path: Path, limit: int = 12) -> str:
    """The first ``limit`` lines of a unified diff from the file to what jupytext would write."""
    lines = list(difflib.unified_diff(have.decode("utf-8", "replace").splitlines(), want.decode("utf-8", "replace").splitlines(),
                                      f"{path} (now)", f"{path} (after sync)", n=1, lineterm=""))
    more = f"\n    ... {len(lines) - limit} more diff line(s)" if len(lines) > limit else ""
    return "".join(f"\n    {line}" for line in lines[:limit]) + more


def check_pair(pair: Pair) -> list[str]:
    """Every problem of ``pair`` (missing side, disagreement, non-deterministic ``.ipynb``); [] when honest."""
    missing = [f"{p}: missing (its pair {q} exists)" for p, q in ((pair.py, pair.ipynb), (pair.ipynb, pair.py)) if not p.exists()]
    if missing:
        return missing
    return disagreement(pair) + hygiene_problems(pair)


def git_changed(path: Path) -> bool | None:
    """True when ``path`` differs from the last commit (modified, staged, untracked or deleted);
    None when it is not in a git work tree."""
    try:
        r = subprocess.run(["git", "status", "--porcelain", "--", path.name], cwd=path.parent,
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode:
        return None
    return bool(r.stdout.strip())


def _clean_ipynb(path: Path) -> None:
    """Clear outputs/execution counts and jupytext_version in an .ipynb, keeping ids and everything else.

    A notebook older than nbformat 4.5 (Kaggle's editor saves 4.4) is upgraded with nbformat's own
    ``v4.upgrade``, which gives every cell an id; a 4.5 cell without an id gets a new one.
    """
    nb = jupytext.read(path, fmt="ipynb")
    if nb.nbformat == 4 and nb.nbformat_minor < 5:
        nb = nbformat.v4.upgrade(nb, from_version=4, from_minor=nb.nbformat_minor)
    for c in nb.cells:
        if not c.get("id"):
            c.id = nbformat.v4.nbbase.random_cell_id()
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    rep = (nb.metadata.get("jupytext") or {}).get("text_representation")
    if isinstance(rep, dict):
        rep.pop("jupytext_version", None)
        if not rep:
            del nb.metadata["jupytext"]["text_representation"]
    text = jupytext.writes(nb, fmt="ipynb").rstrip("\n") + "\n"  # jupytext.write ends the file with a newline
    if text != path.read_text(encoding="utf-8"):
        path.write_text(text, encoding="utf-8")


def _cells(path: Path) -> list[tuple[str, str, tuple]]:
    """The cells of a notebook file as jupytext reads them: (type, source, tags) each."""
    return [(c.cell_type, c.source, tuple(c.get("metadata", {}).get("tags") or ())) for c in jupytext.read(path).cells]


def _describe(cell: tuple | None) -> str:
    if cell is None:
        return "nothing"
    first = cell[1].splitlines()[0] if cell[1] else ""
    return f"a {cell[0]} cell {first[:60]!r}" + ("..." if len(cell[1]) > len(first[:60]) else "")


def _round_trip_problem(src: Path, want: list, other: Path, have: list) -> str | None:
    """Why ``have`` (the cells read back from ``other``) is not ``want`` (the cells of ``src``), naming the cell; None when equal."""
    if have == want:
        return None
    i = next((k for k, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
    cell = want[i] if i < len(want) else None
    got = have[i] if i < len(have) else None
    msg = (f"{src}: cell {i} ({_describe(cell)}) does not survive the round trip through {other.suffix}: it reads back "
           f"as {_describe(got)} ({len(want)} cells become {len(have)})")
    if cell and cell[0] != "code" and re.search(r"^\s*(# )?%%", cell[1], re.M):
        msg += (". A line starting with '%%' in a markdown cell reads as a cell marker in the percent format: put it "
                "inside a ``` code fence or reword it")
    return msg + ". Refusing to sync; nothing written"


def _sync_scratch(pair: Pair, source: str) -> None:
    """jupytext --sync from side ``source`` of ``pair`` (a scratch copy), then hygiene, then settle."""
    src, dst = (pair.py, pair.ipynb) if source == "py" else (pair.ipynb, pair.py)
    if source == "ipynb":
        _clean_ipynb(src)  # ids first (nbformat 4.4 from Kaggle's editor), so that the sync keeps them
    args = ["--sync", "--quiet"]
    if jupytext.read(src).metadata.get("kernelspec", {}).get("name") != KERNEL_NAME:
        args += ["--set-kernel", KERNEL_NAME]
    if dst.exists():
        t = dst.stat().st_mtime
        os.utime(src, (t + 1, t + 1))
    rc, out = _jupytext(*args, str(src))
    if rc:
        raise RuntimeError(f"jupytext --sync {src.name} failed: {out.strip()}")
    if not pair.ipynb.exists():  # e.g. a .py with uncommented magics reads as 'hydrogen', not py:percent
        fmt = jupytext.formats.guess_format(pair.py.read_text(encoding="utf-8"), ".py")[0]
        raise RuntimeError(f"jupytext --sync {src.name} wrote no {pair.ipynb.name}: it reads {src.name} as {fmt!r}, not the "
                           f"paired 'percent' format (comment out magics: '# !pip ...'): {out.strip()}")
    _clean_ipynb(pair.ipynb)
    for _ in range(3):  # a header written by the first pass can settle on the next (bounded)
        if not disagreement(pair):
            break
        t = pair.ipynb.stat().st_mtime  # both hold the same inputs now: settle from the .py side
        os.utime(pair.py, (t + 1, t + 1))
        rc, out = _jupytext("--sync", "--quiet", str(pair.py))
        if rc:
            raise RuntimeError(f"jupytext --sync {pair.py.name} failed: {out.strip()}")
        _clean_ipynb(pair.ipynb)


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (:func:`kitlib.atomic.atomic_write`: never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def sync_pair(pair: Pair, source: str | None = None) -> str:
    """Bring ``pair`` together with ``jupytext --sync``; returns what was done.

    The sync runs on a scratch copy; the pair is written only when the result passes
    :func:`check_pair` and every cell of the source side reads back unchanged from both files.

    Args:
        pair: the pair.
        source: ``"py"`` or ``"ipynb"`` to take that side; None: the side changed since the last commit.

    Raises:
        SyncRefused: both sides changed since the last commit, or neither did / not in git and the
            pair disagrees, and no ``source`` was given; or a cell of the source side would change
            in the round trip; or the result would still fail the check. Nothing is written.
        RuntimeError: jupytext failed.
    """
    if not pair.py.exists() and not pair.ipynb.exists():
        raise FileNotFoundError(f"{pair.py} / {pair.ipynb}: neither exists")
    if source is None:
        if not pair.ipynb.exists():
            source = "py"
        elif not pair.py.exists():
            source = "ipynb"
        elif disagreement(pair):
            changed = {side for side, p in (("py", pair.py), ("ipynb", pair.ipynb)) if git_changed(p)}
            if changed == {"py", "ipynb"}:
                raise SyncRefused(
                    f"{pair.py} and {pair.ipynb} both changed since the last commit and disagree: refusing to sync "
                    "(one side's edits would be lost). Move the edits into one file and revert the other "
                    "(git checkout -- FILE), or pass --from py|ipynb to overwrite the other side.")
            if not changed:
                raise SyncRefused(
                    f"{pair.py} and {pair.ipynb} disagree, and git shows neither as changed (or this is not a git "
                    "work tree): cannot tell which holds the edit. Pass --from py|ipynb.")
            (source,) = changed
        else:
            source = "py"  # they agree: only hygiene to fix
    src = pair.py if source == "py" else pair.ipynb
    if not src.exists():
        raise FileNotFoundError(f"{src}: missing, cannot sync from it")
    with tempfile.TemporaryDirectory(prefix="pair-sync-") as d:
        d = Path(d)
        config = _config_for(pair.py)
        if config:
            shutil.copy2(config, d / config.name)
        scratch = Pair(d / pair.py.name, d / pair.ipynb.name)
        for real, copy in ((pair.py, scratch.py), (pair.ipynb, scratch.ipynb)):
            if real.exists():
                shutil.copy2(real, copy)
        want = _cells(src)
        _sync_scratch(scratch, source)
        for side in (scratch.py, scratch.ipynb):
            problem = _round_trip_problem(src, want, side, _cells(side))
            if problem:
                raise SyncRefused(problem)
        names = {str(scratch.py): str(pair.py), str(scratch.ipynb): str(pair.ipynb)}
        problems = [re.sub("|".join(map(re.escape, names)), lambda m: names[m.group(0)], p) for p in check_pair(scratch)]
        if problems:
            raise SyncRefused(f"{pair.name}: syncing from {src} would leave problems, so nothing was written:\n  "
                              + "\n  ".join(problems))
        changed = []
        for real, new in ((pair.ipynb, scratch.ipynb), (pair.py, scratch.py)):  # the .py last: not older than its pair
            data = new.read_bytes()
            if not real.exists() or real.read_bytes() != data:
                _write_atomic(real, data)
                changed.append(str(real))
    return f"{pair.name}: synced from {src}" + (f", updated {', '.join(reversed(changed))}" if changed else ", nothing to change")


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring): 0 all pairs honest, 1 a problem (or a refused sync), 2 bad usage."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", help="X, X.py or X.ipynb (default: every pair in notebooks/)")
    p.add_argument("--sync", action="store_true", help="sync disagreeing pairs (refuses when both sides changed)")
    p.add_argument("--from", dest="source", choices=("py", "ipynb"), help="with --sync: take this side")
    a = p.parse_args(argv)
    try:
        pairs = pairs_for(a.notebooks)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = 0
    for pair in pairs:
        if a.sync:
            try:
                print(sync_pair(pair, a.source))
            except (SyncRefused, FileNotFoundError, RuntimeError) as e:
                print(f"error: {e}", file=sys.stderr)
                failed += 1
                continue
        problems = check_pair(pair)
        for msg in problems:
            print(f"error: {msg}", file=sys.stderr)
        failed += bool(problems)
    if not a.sync:
        print(f"{len(pairs) - failed}/{len(pairs)} notebook pair(s) in sync" + ("" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
