"""Data-parallel training as one call: ``train(job, rt)`` -> the master's history.

::

    rt = detect_runtime(num_devices, accelerator)          # touches no device
    job = TrainJob(checkpoint=..., train_csv=..., valid_csv=..., out_dir=..., pattern="optimizer_step")
    history = train(job, rt)                               # make_plan(job, rt), launch(_mp_fn, plan, rt), the history

:func:`train` checks the output folder and the model (:func:`kitlib.models.limits.preflight`), makes the
run's :class:`kitlib.training.plan.Plan` once in the calling process (recipe, precision, batch, steps per
epoch, the resume decision, the data fingerprint), prints its notes, launches the replica program
:func:`kitlib.training.loop._mp_fn` with it on every replica (:func:`kitlib.run.runtime.launch`), and
appends the run's row to the runs table (:mod:`kitlib.training.runs`). The job is
:class:`kitlib.training.job.TrainJob`; what the replicas do, and what ``out_dir`` ends up holding, is
:mod:`kitlib.training.loop`'s docstring.

The readers and writers of a trained folder are :mod:`kitlib.checkpoint`'s (``save_checkpoint``,
``read_history``, ``kept_epoch``, ``checkpoint_report``); ``save_scores`` is :mod:`kitlib.training.runs`'s.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from . import resume
from .job import TrainJob
from .loop import _mp_fn
from .plan import Plan, make_plan
from .runs import append_run, code_fingerprint, git_commit, runs_table
from .session import sigterm_saves
from ..atomic import check_replaceable
from ..checkpoint import HISTORY_FILE, kept_epoch, read_history
from ..models.limits import preflight
from ..run.runtime import Runtime, holds_global_rank0, launch


def train(job: TrainJob, rt: Runtime, start_method: str = "fork") -> dict | None:
    """Check, make the run's plan once (:func:`kitlib.training.plan.make_plan`), print its notes, launch
    :func:`kitlib.training.loop._mp_fn` with it on every replica of ``rt``, record the run, and return the
    master's training history.

    In a multi-host run (torchrun, TPU pod) only the process of global rank 0 returns it (the
    master wrote ``out_dir`` on its host); the others return None.

    Args:
        job: a :class:`kitlib.training.job.TrainJob`.
        rt: from :func:`kitlib.run.runtime.detect_runtime`.
        start_method: ``"fork"`` or ``"spawn"``.

    ``out_dir`` ends up holding the epoch kept by ``job.monitor`` (the history says which, and why).
    A run that was cut off, or a run started from an earlier run's folder, continues that run
    (:mod:`kitlib.training.resume` states the rule) and prints how; a run stopped by its ``time_budget_s``
    returns with ``history["finished"]`` False, to be continued by the same call, and so does a run sent
    SIGTERM (``history["stopped"]`` ``"SIGTERM"``: the replicas save the state at their next step,
    :func:`kitlib.training.session.sigterm_saves`). Every run appends a
    row to the runs table beside ``out_dir`` (:mod:`kitlib.training.runs`).

    Raises:
        kitlib.atomic.NotOwnedError: ``out_dir`` (or its state folder), or the folder it links to, holds
            entries the kit did not write (checked first: the kit replaces only what it owns).
        ValueError: the model cannot take the run (:func:`kitlib.models.limits.preflight`: ``max_len`` above
            its positions, token ids past its embedding, a head whose labels do not name
            ``label_col``, an attention the device lacks); ``rt``'s launch mode has
            no collectives for more than one replica (``xla-cpu-processes``); the precision cannot
            train there (fp16 on XLA: :mod:`kitlib.run.backends.precision`); the training labels
            hold one class (:func:`kitlib.training.job.check_labels`); the saved state cannot be continued by this run
            (another recipe, other parameter groups, no epoch left: :func:`kitlib.training.resume.plan`); the
            recipe is unknown (:func:`kitlib.training.recipe.resolve`).
        kitlib.run.runtime.ReplicaError: a replica failed; names its rank and the original error.
        kitlib.locks.FolderLocked: another run writes ``out_dir`` (its lock names the holder).
    """
    import contextlib

    from ..locks import output_lock

    locked = holds_global_rank0(rt)  # the process that writes out_dir (torchrun's other workers on this host too run train)
    with output_lock(job.out_dir, "training output folder") if locked else contextlib.nullcontext():
        return _train(job, rt, start_method)


def _train(job: TrainJob, rt: Runtime, start_method: str) -> dict | None:
    """:func:`train`'s work, under the lock of its output folder."""
    check_replaceable(job.out_dir, "the training output folder (out_dir)")
    check_replaceable(resume.state_dir(job.out_dir), "the run's state folder")
    preflight(job.checkpoint, max_len=job.max_len, device=rt.backend.device, target=job.label_col, head_for_training=True)
    plan = make_plan(job, rt)
    for note in plan.notes:
        print(note)
    started = time.time()
    with sigterm_saves():  # SIGTERM (Kaggle, Colab): passed to the replicas, which save the state and return
        launch(_mp_fn, plan, rt, start_method, precision=plan.precision)
    if not holds_global_rank0(rt):
        return None
    kept = Path(job.out_dir) / HISTORY_FILE
    history = read_history(job.out_dir) if kept.is_file() else resume.read_run(resume.state_dir(job.out_dir))["history"]
    _record_run(plan, history, started)
    if not history.get("finished"):
        print(f"note: the run stopped ({history.get('stopped')}) before its last epoch; its state is in "
              f"{resume.state_dir(job.out_dir)}: run the same again to continue it")
    return history


def _record_run(plan: Plan, history: dict, started: float) -> None:
    """Append the run's row to the runs table beside ``out_dir`` (:mod:`kitlib.training.runs`; ``data``: the
    plan's fingerprint of the training rows)."""
    import datetime as dt

    job = plan.job
    best, kept = history.get("best") or {}, kept_epoch(history)

    def stamp(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    stopped = history.get("stopped")
    status = "finished" if not stopped else stopped if history.get("finished") else f"stopped: {stopped}"
    append_run(runs_table(job.out_dir), {
        "run_id": history.get("run_id"), "started": stamp(started), "ended": stamp(time.time()), "status": status,
        "git_commit": git_commit(), "kitlib": code_fingerprint(),
        "data": plan.data_fingerprint, "train_csv": job.train_csv,
        "valid_csv": job.valid_csv, "checkpoint": job.checkpoint, "out_dir": job.out_dir, "recipe": job.recipe,
        "lr": job.lr, "epochs": len(history.get("epochs", [])), "batch_size": job.batch_size,
        "world_size": history.get("world_size"), "precision": history.get("precision"), "seed": job.seed,
        "tags": job.tags, "best_epoch": best.get("epoch"), "monitor": best.get("monitor"), "best_value": best.get("value"),
        "valid_auc": kept.get("valid_auc"), "train_seconds": round(float(history.get("train_seconds") or 0.0), 1),
        "params": asdict(job)})


def describe_kept(history: dict, heldout_name: str = "held-out") -> str:
    """One line on what a run's folder holds: ``kept epoch <e> of <n> (<why>); <heldout_name> ROC AUC <auc>`` (or
    why it is undefined), and why it stopped early if it did; ``history`` is :func:`train`'s."""
    best, kept = history.get("best") or {}, kept_epoch(history)
    auc = kept.get("valid_auc", float("nan"))
    return (f"kept epoch {best.get('epoch')} of {len(history.get('epochs') or [])} ({best.get('why')}); {heldout_name} ROC AUC "
            + (f"{auc:.4f}" if auc == auc else "undefined (one class only; the epoch lines above say which)")
            + (f"; stopped early: {history['stopped']}" if history.get("stopped") else ""))
