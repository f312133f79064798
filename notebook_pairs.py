"""Paired notebooks: ``notebooks/X.py`` (percent format, what reviewers diff) and ``notebooks/X.ipynb`` (what Kaggle runs).

Jupytext does the pairing and every conversion: ``jupytext.toml`` at the repository root names the
formats and filters, and this module only calls jupytext's command line (``--to``, ``--update``,
``--set-kernel``) on scratch copies. What jupytext lacks, and this module adds, is the kit's rules:

* **A pair agrees** (:func:`disagreement`): converting either side with jupytext would not change
  the other side's file, so the ``.py`` a reviewer reads is exactly the notebook that runs.
* **An ``.ipynb`` is deterministic** (:func:`hygiene_problems`): nbformat 4.5+ with a cell ``id``
  on every cell, no outputs or execution counts, a ``kernelspec`` named ``python3`` (Kaggle's
  papermill run fails with "No kernel name found in notebook" without one), no
  ``jupytext_version`` in either file.
* **Sync never drops an edit** (:func:`sync_pair`): it takes the side git shows as changed and
  refuses when both sides changed or neither did (no telling which is the edit); and it refuses a
  sync whose round trip would change a cell of the edited side (type, source, tags: e.g. a markdown
  line starting with ``%%`` reads back as a cell marker). A refused sync writes nothing.

Sync also brings back a notebook saved by Kaggle's editor (nbformat 4.4 without cell ids: upgraded
with nbformat's own ``v4.upgrade``; its ``kaggle.accelerator`` kept as written, e.g. ``tpuV5e8``).
jupytext's own ``--sync`` / ``--pre-commit-mode`` (the pre-commit hook) pick a side by mtime or by
the git index; they do not refuse a lossy round trip, nor clear outputs.

The command line is ``scripts/check_pairs.py`` (CI: ``make test``); ``kaggle_kit`` stages
notebooks through :func:`pairs_for` and :func:`check_pair`.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jupytext
import jupytext.cli
import nbformat
from jupytext.config import find_jupytext_configuration_file

from kitlib.atomic import atomic_write

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"
KERNEL_NAME = "python3"
TEXT_FORMAT = "py:percent"
# the key itself ("jupytext_version": "1.19.6" / jupytext_version: 1.19.6), not the filter naming it
_VERSION_NOISE = re.compile(r"""\bjupytext_version["']?\s*:""")


class SyncRefused(RuntimeError):
    """Sync would drop an edit: both sides changed, neither did, or the round trip changes a cell."""


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
    if not args:
        stems = sorted({_display(p.with_suffix("")) for p in (*notebooks_dir.glob("*.py"), *notebooks_dir.glob("*.ipynb"))})
        return [Pair(s.with_suffix(".py"), s.with_suffix(".ipynb")) for s in stems]
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


def _jupytext(*args: str) -> None:
    """jupytext's own command line, in-process and quiet.

    Raises:
        RuntimeError: jupytext failed; the message holds the command and jupytext's output.
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = jupytext.cli.jupytext(["--quiet", *args])
        except SystemExit as e:  # argparse / jupytext usage errors
            rc = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # noqa: BLE001 -- jupytext raises on notebooks it cannot read
            buf.write(f"{type(e).__name__}: {e}")
            rc = 1
    if rc:
        raise RuntimeError(f"jupytext {' '.join(args)} failed: {buf.getvalue().strip()}")


@contextlib.contextmanager
def _scratch(pair: Pair):
    """A copy of ``pair`` (the sides that exist) in a scratch folder with the jupytext configuration
    that applies to it (jupytext's own lookup), so conversions there read the same filters."""
    with tempfile.TemporaryDirectory(prefix="pair-") as d:
        config = find_jupytext_configuration_file(str(pair.py.resolve().parent))
        if config:
            shutil.copy2(config, Path(d, Path(config).name))
        copy = Pair(Path(d, pair.py.name), Path(d, pair.ipynb.name))
        for real, c in ((pair.py, copy.py), (pair.ipynb, copy.ipynb)):
            if real.exists():
                shutil.copy2(real, c)
        yield copy


def _to_ipynb(pair: Pair, *extra: str) -> None:
    """``jupytext --to ipynb --update``: the ``.py``'s inputs into the ``.ipynb`` (its cell ids kept)."""
    _jupytext("--to", "ipynb", "--update", *extra, str(pair.py))


def _to_py(pair: Pair) -> None:
    """``jupytext --to py:percent``: the ``.ipynb`` as the percent script (``jupytext.toml``'s filters)."""
    _jupytext("--to", TEXT_FORMAT, str(pair.ipynb))


def disagreement(pair: Pair) -> list[str]:
    """How the two sides of ``pair`` disagree (a jupytext conversion of one side would change the
    other's file), each naming the file with a short diff; [] when they agree.

    Raises:
        RuntimeError: jupytext cannot convert a side.
    """
    problems = []
    for convert, target, source in ((_to_ipynb, "ipynb", "py"), (_to_py, "py", "ipynb")):
        have = getattr(pair, target).read_bytes()
        with _scratch(pair) as copy:
            convert(copy)
            want = getattr(copy, target).read_bytes()
        if want != have:
            path = getattr(pair, target)
            problems.append(f"{path}: differs from what jupytext makes of {getattr(pair, source)}{_diff(have, want, path)}")
    return problems


def _diff(have: bytes, want: bytes, path: Path, limit: int = 12) -> str:
    """The first ``limit`` lines of a unified diff from the file to what jupytext would write."""
    lines = list(difflib.unified_diff(have.decode("utf-8", "replace").splitlines(), want.decode("utf-8", "replace").splitlines(),
                                      f"{path} (now)", f"{path} (after sync)", n=1, lineterm=""))
    more = f"\n    ... {len(lines) - limit} more diff line(s)" if len(lines) > limit else ""
    return "".join(f"\n    {line}" for line in lines[:limit]) + more


def hygiene_problems(pair: Pair) -> list[str]:
    """Determinism problems of the ``.ipynb`` (and version noise in either file); [] when clean."""
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


def check_pair(pair: Pair) -> list[str]:
    """Every problem of ``pair`` (a missing side, disagreement, a non-deterministic ``.ipynb``); [] when honest.

    Raises:
        RuntimeError: jupytext cannot convert a side.
    """
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


def edited_side(pair: Pair) -> str:
    """The side (``"py"`` / ``"ipynb"``) holding the edit: the only one that exists, the only one git
    shows as changed, or ``"py"`` when the pair agrees (only hygiene to fix).

    Raises:
        SyncRefused: the sides disagree and both changed since the last commit, or neither did (or
            this is not a git work tree).
    """
    if not pair.ipynb.exists() or not pair.py.exists():
        return "py" if pair.py.exists() else "ipynb"
    if not disagreement(pair):
        return "py"
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
    return changed.pop()


def _deterministic_ipynb(path: Path) -> None:
    """Rewrite an ``.ipynb`` as the kit keeps it: outputs and execution counts cleared, nbformat 4.5+
    with an id on every cell (Kaggle's editor saves 4.4 without ids: nbformat's ``v4.upgrade``), no
    ``jupytext_version``; everything else as it was."""
    nb = jupytext.read(path, fmt="ipynb")
    if nb.nbformat == 4 and nb.nbformat_minor < 5:
        nb = nbformat.v4.upgrade(nb, from_version=4, from_minor=nb.nbformat_minor)
    for c in nb.cells:
        c.id = c.get("id") or nbformat.v4.nbbase.random_cell_id()
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    rep = (nb.metadata.get("jupytext") or {}).get("text_representation")
    if isinstance(rep, dict):
        rep.pop("jupytext_version", None)
        if not rep:
            del nb.metadata["jupytext"]["text_representation"]
    text = jupytext.writes(nb, fmt="ipynb").rstrip("\n") + "\n"  # as jupytext.write ends it
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


def round_trip_problem(src: Path, want: list, other: Path, have: list) -> str | None:
    """Why ``have`` (the cells read back from ``other``) is not ``want`` (the cells of ``src``),
    naming the first cell that differs; None when they are equal."""
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


def sync_pair(pair: Pair, source: str | None = None) -> str:
    """Bring ``pair`` together with jupytext, taking side ``source``; returns what was done.

    On a scratch copy: the source ``.ipynb`` is made deterministic (:func:`_deterministic_ipynb`),
    then ``jupytext --to ipynb --update --set-kernel python3`` from the ``.py`` (after
    ``jupytext --to py:percent`` from an ``.ipynb`` source) and ``--to py:percent`` back, so the
    ``.py`` carries the header jupytext writes. The pair is written (atomically, the ``.py`` last)
    only when every cell of the source reads back unchanged from both files and the copy passes
    :func:`check_pair`.

    Args:
        pair: the pair.
        source: ``"py"`` or ``"ipynb"`` to take that side; None: :func:`edited_side`.

    Raises:
        SyncRefused: :func:`edited_side` cannot tell the edit; a cell of the source would change in
            the round trip; or the result would still fail the check. Nothing is written.
        FileNotFoundError: the source side (or both sides) is missing.
        RuntimeError: jupytext failed.
    """
    if not pair.py.exists() and not pair.ipynb.exists():
        raise FileNotFoundError(f"{pair.py} / {pair.ipynb}: neither exists")
    source = source or edited_side(pair)
    src = pair.py if source == "py" else pair.ipynb
    if not src.exists():
        raise FileNotFoundError(f"{src}: missing, cannot sync from it")
    want = _cells(src)
    with _scratch(pair) as copy:
        if source == "ipynb":
            _deterministic_ipynb(copy.ipynb)  # ids first (nbformat 4.4 from Kaggle's editor), kept by --update
            _to_py(copy)
        _to_ipynb(copy, "--set-kernel", KERNEL_NAME)
        _deterministic_ipynb(copy.ipynb)  # --update kept the old outputs
        _to_py(copy)
        for side in (copy.py, copy.ipynb):
            problem = round_trip_problem(src, want, side, _cells(side))
            if problem:
                raise SyncRefused(problem)
        names = {str(copy.py): str(pair.py), str(copy.ipynb): str(pair.ipynb)}
        problems = [re.sub("|".join(map(re.escape, names)), lambda m: names[m.group(0)], p) for p in check_pair(copy)]
        if problems:
            raise SyncRefused(f"{pair.name}: syncing from {src} would leave problems, so nothing was written:\n  "
                              + "\n  ".join(problems))
        changed = []
        for real, new in ((pair.ipynb, copy.ipynb), (pair.py, copy.py)):  # the .py last: not older than its pair
            data = new.read_bytes()
            if not real.exists() or real.read_bytes() != data:
                real.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(real, lambda tmp, data=data: Path(tmp).write_bytes(data))
                changed.append(str(real))
    return f"{pair.name}: synced from {src}" + (f", updated {', '.join(reversed(changed))}" if changed else ", nothing to change")
