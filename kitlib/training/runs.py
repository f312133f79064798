"""A record of runs: one row per training run in a runs table, and the curves through a tracker.

Every :func:`kitlib.training.train.train` appends one row to ``runs.csv`` in the folder of its ``out_dir``
(``artifacts/runs.csv`` for the notebooks, so a Kaggle kernel's output carries it; :func:`runs_table`):
the run's id (also in its ``train_history.json``, ``run_id``), when it started and ended and how,
the code (git commit where there is one, and a fingerprint of ``kitlib``'s sources, which a kernel
vendors), the data (a fingerprint of the training rows, :func:`kitlib.training.resume.rows_fingerprint`), its
parameters, the epoch kept and its figures, and the seconds trained. Figures measured later are
added to the run's row by id (:func:`update_run`: the training notebook's held-out AUC through the
inference path, a cross-validation's out-of-fold AUC). Read it with ``pandas.read_csv``.

Curves go through a well-kept tracker format when one is asked for (``TrainJob.tracker``), never a
home-made one: ``"tensorboard"`` writes TensorBoard event files under ``<out_dir>.tensorboard/<run_id>/``
(open them with ``tensorboard --logdir``) through ``tensorboardX.SummaryWriter`` (the ``tensorboardX``
package, as Lightning's ``TensorBoardLogger`` does without TensorFlow): ``torch.utils.tensorboard``
needs the ``tensorboard`` package, which imports TensorFlow where it is installed, and TensorFlow
loaded before torch_xla aborts the process (``kitlib.run.backends.accelerators``).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
from pathlib import Path

RUNS_FILE = "runs.csv"
TRACKERS = ("none", "tensorboard")
COLUMNS = ("run_id", "started", "ended", "status", "git_commit", "kitlib", "data", "train_csv", "valid_csv",
           "checkpoint", "out_dir", "recipe", "lr", "epochs", "batch_size", "world_size", "precision", "seed",
           "tags", "best_epoch", "monitor", "best_value", "valid_auc", "heldout_auc", "oof_auc",
           "train_seconds", "params")


def runs_table(out_dir: str | os.PathLike) -> Path:
    """Where the runs of ``out_dir`` are recorded: ``runs.csv`` beside it (beside what a linked
    ``out_dir`` points to: :func:`kitlib.atomic.real_target`)."""
    from ..atomic import real_target

    return real_target(out_dir).parent / RUNS_FILE


def git_commit(root: str | os.PathLike | None = None) -> str:
    """The commit checked out in ``root`` (default: the kit's repository), with ``+changes`` when the work
    tree differs; ``""`` outside a git checkout (a Kaggle kernel)."""
    root = Path(root) if root else Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() + ("+changes" if dirty else "")


def code_fingerprint() -> str:
    """16 hex digits of sha256 over ``kitlib``'s ``.py`` files (relative path and content): the same
    code gives the same print, in a repository or vendored into a kernel."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _read(table: Path) -> list[dict]:
    if not table.is_file():
        return []
    with open(table, newline="") as f:
        return list(csv.DictReader(f))


def _write(table: Path, rows: list[dict]) -> None:
    from ..atomic import atomic_write

    columns = list(COLUMNS) + sorted({k for r in rows for k in r} - set(COLUMNS))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if r.get(k) is None else r.get(k) for k in columns})
    atomic_write(table, lambda tmp: Path(tmp).write_text(buf.getvalue()))


def append_run(table: str | os.PathLike, row: dict) -> Path:
    """Add ``row`` (column -> value; dicts and lists as JSON) to the runs table, atomically (the whole
    file is rewritten under a temporary name, so a reader never sees half a row). Returns the table."""
    table = Path(table)
    table.parent.mkdir(parents=True, exist_ok=True)
    row = {k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in row.items()}
    _write(table, _read(table) + [row])
    return table


def update_run(table: str | os.PathLike, run_id: str, **values) -> bool:
    """Set ``values`` in the row of ``run_id`` (e.g. ``heldout_auc=0.9017``); False when no row has that id."""
    table = Path(table)
    rows = _read(table)
    hit = [r for r in rows if r.get("run_id") == run_id]
    for r in hit:
        r.update({k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in values.items()})
    if hit:
        _write(table, rows)
    return bool(hit)


def read_runs(table: str | os.PathLike) -> list[dict]:
    """The rows of a runs table (strings, as written), oldest first; [] when there is none."""
    return _read(Path(table))


# --- which run a submission came from ---

RUNS_TAG_RE = r"\[runs? ([0-9a-f]{6,32}(?:,[0-9a-f]{6,32})*)\]"  # in a Kaggle submission's description


def run_ids_of(checkpoint: str | os.PathLike) -> list[str]:
    """The training run(s) a checkpoint folder holds: its ``train_history.json``'s ``run_id``; [] for a
    folder the kit did not train (a packaged or hub model) or that cannot be read."""
    from ..checkpoint import HISTORY_FILE

    try:
        run_id = json.loads((Path(checkpoint) / HISTORY_FILE).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError, TypeError):
        return []
    return [run_id] if isinstance(run_id, str) and run_id else []


def runs_tag(run_ids) -> str:
    """What ``python -m kaggle_kit submit`` appends to a submission's description, e.g. ``"[runs 3f2a9c01be77]"``
    (:data:`RUNS_TAG_RE`); ``""`` with no run."""
    ids = [r for r in dict.fromkeys(run_ids) if r]
    return f"[runs {','.join(ids)}]" if ids else ""


def runs_in_description(description: str | None) -> list[str]:
    """The run ids :func:`runs_tag` put in a submission's description; [] when it holds none."""
    import re

    m = re.search(RUNS_TAG_RE, description or "")
    return m.group(1).split(",") if m else []


def find_runs(run_ids, roots) -> dict[str, tuple[Path, dict]]:
    """``run_id -> (table, row)`` for each id found in a runs table (``runs.csv``) under ``roots``
    (searched recursively: ``artifacts/``, the kernels' downloaded outputs ``outputs/kernels/<slug>/v<N>/``)."""
    wanted, found = set(run_ids), {}
    for root in roots:
        root = Path(root)
        if not wanted or not root.is_dir():
            continue
        for table in sorted(root.rglob(RUNS_FILE)):
            for row in _read(table):
                if row.get("run_id") in wanted and row["run_id"] not in found:
                    found[row["run_id"]] = (table, row)
    return found


def describe_run(row: dict) -> str:
    """One line for a run's row: recipe, epoch kept and its figure, the held-out AUC, code and data."""
    parts = [f"recipe {row.get('recipe') or '?'}", f"kept epoch {row.get('best_epoch') or '?'} of {row.get('epochs') or '?'}"]
    if row.get("best_value"):
        parts.append(f"{row.get('monitor')} {float(row['best_value']):.4f}")
    for name in ("heldout_auc", "oof_auc"):
        if row.get(name):
            parts.append(f"{name} {float(row[name]):.4f}")
    parts.append(f"commit {(row.get('git_commit') or '-')[:10]}, kitlib {row.get('kitlib') or '-'}, data {row.get('data') or '-'}")
    return ", ".join(parts)


class Tracker:
    """The run's curves in a tracker's own format (master only): ``log(step, {name: value})``, ``close()``.

    ``kind="none"`` does nothing. ``kind="tensorboard"``: ``tensorboardX.SummaryWriter`` in ``folder``
    (scalars: ``loss/step``, ``loss/train``, ``loss/valid``, ``auc/valid``, by optimizer step).

    Raises:
        ImportError: ``tensorboard`` asked for but the ``tensorboardX`` package is missing (named, with the fix).
    """

    def __init__(self, kind: str, folder: str | os.PathLike):
        if kind not in TRACKERS:
            raise ValueError(f"tracker must be one of {', '.join(TRACKERS)}, not {kind!r}")
        self.kind, self.folder, self._writer = kind, Path(folder), None
        if kind == "tensorboard":
            try:
                from tensorboardX import SummaryWriter
            except ImportError as e:
                raise ImportError(f"tracker='tensorboard' needs the tensorboardX package ({e}): pip install tensorboardX, "
                                  "or tracker='none'") from None
            self._writer = SummaryWriter(log_dir=str(self.folder))

    def log(self, step: int, values: dict) -> None:
        if self._writer is not None:
            for name, value in values.items():
                if value is not None and value == value:  # NaN (an undefined AUC) is left out
                    self._writer.add_scalar(name, float(value), step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
