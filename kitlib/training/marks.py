"""The marks a hand-off leaves in a trained folder, and the block that writes one or the other.

A folder every check passed is marked ready (:func:`mark_passed`: :data:`kitlib.checkpoint.READY_FILE`); a folder a check
refused is marked refused (:func:`refusal_marked`: :data:`kitlib.checkpoint.REFUSED_FILE`); :func:`handoff` runs the checks
as one block and writes one mark or the other. The rule that reads them is :func:`kitlib.checkpoint.not_ready`.

Apart from the checks (:mod:`kitlib.training.handoff`: the torch side's reload through the inference path), so that a
run which checks its folder its own way (the sharded Keras run, :mod:`kitlib.keras.sharded_run`) writes the same marks
without importing the torch replica program.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

RELOAD_ROWS = 64  # the first held-out rows a hand-off predicts again (kitlib.training.handoff, kitlib.keras.sharded_run)


class HandoffMismatch(RuntimeError):
    """The saved checkpoint does not predict what the in-memory model predicted."""


def mark_passed(out_dir: str | os.PathLike, checks: dict) -> Path:
    """Mark ``out_dir`` ready: write :data:`kitlib.checkpoint.READY_FILE` (atomically) with the run's id and epoch
    count from its history and ``checks`` (what passed: JSON values), after every hand-off check passed. The
    training notebooks reach it through :func:`handoff`; :func:`kitlib.checkpoint.not_ready` reads it. A new training run into
    ``out_dir`` replaces the folder and the mark with it.

    Raises:
        FileNotFoundError: ``out_dir`` holds no training history (nothing was trained there).
    """
    from ..atomic import atomic_write
    from ..checkpoint import HISTORY_FILE, READY_FILE

    history = json.loads((Path(out_dir) / HISTORY_FILE).read_text(encoding="utf-8"))
    record = json.dumps({"run_id": history.get("run_id"), "epochs": len(history.get("epochs") or []),
                         "checks": checks}, indent=1, default=float)
    mark = Path(out_dir) / READY_FILE
    atomic_write(mark, lambda tmp: Path(tmp).write_text(record, encoding="utf-8"))
    return mark


@contextlib.contextmanager
def refusal_marked(out_dir: str | os.PathLike):
    """Around the hand-off's checks: a refusal marks ``out_dir`` so that nothing picks it later.

    When the block raises :class:`HandoffMismatch` or :class:`kitlib.outputs.collapse.CollapsedModelError`,
    ``out_dir/handoff_refused.json`` (:data:`kitlib.checkpoint.REFUSED_FILE`) is written with the
    error's type and message, atomically, and the same exception goes on (its traceback kept), its
    message ending with what the mark does and how to undo it. Other exceptions pass untouched.
    """
    from ..atomic import atomic_write
    from ..checkpoint import REFUSED_FILE
    from ..outputs.collapse import CollapsedModelError

    try:
        yield
    except (HandoffMismatch, CollapsedModelError) as e:
        mark = Path(out_dir) / REFUSED_FILE
        record = json.dumps({"error": type(e).__name__, "reason": str(e)}, indent=1)
        atomic_write(mark, lambda tmp: Path(tmp).write_text(record, encoding="utf-8"))
        e.args = (f"{e.args[0] if e.args else ''} The folder is marked refused ({mark}): model='auto' will not pick "
                  f"it and the inference notebook refuses it by name; training again into {out_dir} replaces it (and the "
                  f"mark), or delete {REFUSED_FILE} to use it anyway.", *e.args[1:])
        raise


@contextlib.contextmanager
def handoff(out_dir: str | os.PathLike):
    """The hand-off's checks as one block, the same in both training notebooks: yields a dict for the block to
    fill with what each check found (JSON values); a refusal inside marks ``out_dir`` refused
    (:func:`refusal_marked`), and the block's end, every check passed, marks it ready (:func:`mark_passed`, with
    the dict), so no notebook can run its checks and forget the mark (issue 39 item 8: the test-time kernel did).

    Raises:
        What the block raises (a refusal with :func:`refusal_marked`'s words added); FileNotFoundError: ``out_dir``
        holds no training history (:func:`mark_passed`).
    """
    checks: dict = {}
    with refusal_marked(out_dir):
        yield checks
    mark_passed(out_dir, checks)
