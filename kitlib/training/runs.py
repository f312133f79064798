"""A record of runs: one row per training run in a runs table, and the curves through a tracker.

Every :func:`kitlib.training.train.train` appends one row to ``runs.csv`` in the folder of its ``out_dir``
(``artifacts/runs.csv`` for the notebooks, so a Kaggle kernel's output carries it; :func:`runs_table`):
the run's id (also in its ``train_history.json``, ``run_id``), when it started and ended and how,
the code (git commit where there is one, and a fingerprint of ``kitlib``'s sources, which a kernel
vendors), the data (a fingerprint of the training rows, :func:`kitlib.training.resume.rows_fingerprint`), its
parameters, the epoch kept and its figures, and the seconds trained. Figures measured later are
added to the run's row by id (:func:`update_run`: the training notebook's held-out AUC through the
inference path, a cross-validation's out-of-fold AUC). Read it with ``pandas.read_csv``.

Two rules for a shared record (issue 33, item 6):

* **Writes are locked** (:func:`locked`): every change reads the table, changes it and replaces it
  while holding ``.runs.csv.lock`` beside it (:func:`kitlib.locks.record_lock`: ``flock``, released
  when the holder dies, the file removed when released). The atomic replace alone keeps a file whole, not every writer's row: six
  processes appending 25 rows each to one table kept 42 of 150 rows without the lock, 150 with it.
* **A run id names one record, its latest state**: a run continued after a cut-off (same run id)
  replaces its earlier row (keeping when the run first started, :func:`append_run`); a table that
  holds an id twice (written before this rule) is read as its last row (:func:`read_runs`), and
  among several tables the row that ended last wins, tables taken in version order (``v10`` after
  ``v2``, :func:`find_runs`).

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
import re
import subprocess
from pathlib import Path

RUNS_FILE = "runs.csv"
LOCK_TIMEOUT_S = 300.0  # how long a writer waits for the table's lock (another process's read-change-replace takes ms)
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


def locked(table: str | os.PathLike):
    """Hold the lock of a shared record while reading, changing and replacing it (the module's rule):
    :func:`kitlib.locks.record_lock`, waiting up to :data:`LOCK_TIMEOUT_S` seconds.

    Raises:
        TimeoutError: another process held the lock for :data:`LOCK_TIMEOUT_S` seconds (named, with the fix).
    """
    from ..locks import record_lock

    return record_lock(table, LOCK_TIMEOUT_S)


def _cell(v):
    return json.dumps(v) if isinstance(v, (dict, list, tuple)) else v


def _latest(rows: list[dict]) -> list[dict]:
    """One row per run id, its last (the latest state), in the order the runs last ended; rows without an id as they are."""
    out: dict = {}
    for i, r in enumerate(rows):
        key = r.get("run_id") or ("", i)
        out.pop(key, None)
        out[key] = r
    return list(out.values())


def append_run(table: str | os.PathLike, row: dict) -> Path:
    """Record ``row`` (column -> value; dicts and lists as JSON) in the runs table, under its lock
    (:func:`locked`), the whole file replaced atomically (a reader never sees half a row).

    A row whose ``run_id`` the table holds already (a run continued after a cut-off) replaces that
    row, keeping its ``started``: a run id names one record, its latest state (the module's rule).
    Returns the table.
    """
    table = Path(table)
    table.parent.mkdir(parents=True, exist_ok=True)
    row = {k: _cell(v) for k, v in row.items()}
    with locked(table):
        rows = _latest(_read(table))
        earlier = [r for r in rows if row.get("run_id") and r.get("run_id") == row.get("run_id")]
        if earlier and earlier[0].get("started"):
            row["started"] = earlier[0]["started"]
        _write(table, [r for r in rows if not any(r is e for e in earlier)] + [row])
    return table


def update_run(table: str | os.PathLike, run_id: str, **values) -> bool:
    """Set ``values`` in the row of ``run_id`` (e.g. ``heldout_auc=0.9017``), under the table's lock;
    False when no row has that id."""
    table = Path(table)
    if not table.is_file():
        return False
    with locked(table):
        rows = _latest(_read(table))
        hit = [r for r in rows if r.get("run_id") == run_id]
        for r in hit:
            r.update({k: _cell(v) for k, v in values.items()})
        if hit:
            _write(table, rows)
    return bool(hit)


def read_runs(table: str | os.PathLike) -> list[dict]:
    """The rows of a runs table (strings, as written), one per run id (its latest row), oldest first;
    [] when there is none."""
    return _latest(_read(Path(table)))


def save_scores(out_dir: str | os.PathLike, scores: dict) -> Path:
    """Write ``scores`` (the saved checkpoint's held-out ROC AUC, overall and per language, as the
    training notebook measures it through the inference path) to ``<out_dir>/heldout_scores.json``,
    atomically (:func:`kitlib.atomic.atomic_write`), and fill the run's ``heldout_auc`` in the runs
    table beside ``out_dir`` (:func:`update_run`: the run's row was appended by
    :func:`kitlib.training.train.train`, before these scores existed)."""
    from ..atomic import atomic_write
    from ..checkpoint import HISTORY_FILE, SCORES_FILE, read_history

    path = Path(out_dir) / SCORES_FILE
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(scores, indent=1)))
    run_id = read_history(out_dir).get("run_id") if (Path(out_dir) / HISTORY_FILE).is_file() else None
    if run_id and runs_table(out_dir).is_file() and scores.get("roc_auc") is not None:
        update_run(runs_table(out_dir), run_id, heldout_auc=scores["roc_auc"])
    return path


# --- which run a submission came from ---

RUNS_TAG_RE = r"\[runs? ([0-9a-f]{6,32}(?:,[0-9a-f]{6,32})*)\]"  # in a Kaggle submission's description


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


def _version_order(path: Path) -> list:
    """``path`` as a sort key in which numbers count as numbers (``v2`` before ``v10``)."""
    return [int(t) if i % 2 else t for i, t in enumerate(re.split(r"(\d+)", str(path)))]


def find_runs(run_ids, roots) -> dict[str, tuple[Path, dict]]:
    """``run_id -> (table, row)`` for each id found in a runs table (``runs.csv``) under ``roots``
    (searched recursively: ``artifacts/``, the kernels' downloaded outputs ``outputs/kernels/<slug>/v<N>/``).

    An id in several tables is its latest row: the one that ended last (``ended``), then the one in
    the later table in version order (``v10`` after ``v2``): the module's rule."""
    wanted, found = set(run_ids), {}
    for root in roots:
        root = Path(root)
        if not wanted or not root.is_dir():
            continue
        for table in root.rglob(RUNS_FILE):
            for row in read_runs(table):
                rid = row.get("run_id")
                if rid in wanted:
                    key = (row.get("ended") or "", _version_order(table))
                    if rid not in found or key >= found[rid][0]:
                        found[rid] = (key, table, row)
    return {rid: (table, row) for rid, (_, table, row) in found.items()}


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
    ``purge_step``: a resumed run's first step; TensorBoard then drops the events a cut-off call wrote at
    that step and after (``SummaryWriter(purge_step=...)``), so a curve never holds a step twice.

    Raises:
        ImportError: ``tensorboard`` asked for but the ``tensorboardX`` package is missing (named, with the fix).
    """

    def __init__(self, kind: str, folder: str | os.PathLike, purge_step: int | None = None):
        if kind not in TRACKERS:
            raise ValueError(f"tracker must be one of {', '.join(TRACKERS)}, not {kind!r}")
        self.kind, self.folder, self._writer = kind, Path(folder), None
        if kind == "tensorboard":
            try:
                from tensorboardX import SummaryWriter
            except ImportError as e:
                raise ImportError(f"tracker='tensorboard' needs the tensorboardX package ({e}): pip install tensorboardX, "
                                  "or tracker='none'") from None
            self._writer = SummaryWriter(log_dir=str(self.folder), purge_step=purge_step)

    def log(self, step: int, values: dict) -> None:
        if self._writer is not None:
            for name, value in values.items():
                if value is not None and value == value:  # NaN (an undefined AUC) is left out
                    self._writer.add_scalar(name, float(value), step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
