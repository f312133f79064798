"""How long this session may still run: Kaggle's session limits, the default time budget of training.

A Kaggle notebook session ends after a fixed time whatever it is doing (Kaggle's docs, "Notebooks:
technical specifications": 9 hours for a TPU VM session, 12 hours for CPU and GPU sessions; TPU
hours are also counted weekly). Training that is still running then is lost unless it stopped
first with its state saved (:mod:`kitlib.training.resume`). :func:`time_budget` turns the training
notebook's ``time_budget_minutes`` into ``TrainJob.time_budget_s``: by default, on Kaggle, what is
left of the session less :data:`MARGIN_S` (for the held-out scoring, the hand-off and saving the
output); elsewhere no limit. A Kaggle session is recognised by ``KAGGLE_KERNEL_RUN_TYPE``, which
Kaggle sets in every kernel (``Interactive`` or ``Batch``).

A session that ends, or a user who stops it, sends SIGTERM (Kaggle and Colab stop a kernel with it): inside
:func:`sigterm_saves` it no longer ends the process; it asks the run to stop (:func:`stop_requested`), and
the replicas save the run's state at their next step and return (:func:`kitlib.training.loop._save_point`),
so the same call continues it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

SESSION_LIMIT_S = {"tpu": 9 * 3600, "cuda": 12 * 3600, "cpu": 12 * 3600}  # by the session's hardware
MARGIN_S = 20 * 60
LEAVE_S = 30  # kept in hand at every stop decision besides the measured work (reserve_s)


def on_kaggle() -> bool:
    """True in a Kaggle kernel (``KAGGLE_KERNEL_RUN_TYPE`` is set)."""
    return bool(os.environ.get("KAGGLE_KERNEL_RUN_TYPE"))


def process_started() -> float:
    """When this process started (``time.time()`` seconds; the notebook kernel's, so the session's to
    within its start-up), from ``/proc``; now where ``/proc`` cannot say."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after the command name
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def time_budget(minutes: float, hardware: str) -> float | None:
    """``TrainJob.time_budget_s`` for the notebook parameter ``time_budget_minutes``.

    Args:
        minutes: ``-1`` (the default: on Kaggle, the session's limit for ``hardware`` less what has
            run and :data:`MARGIN_S`; elsewhere no limit), ``0`` (no limit), or the minutes to allow.
        hardware: ``"tpu"``, ``"cuda"`` or ``"cpu"`` (:data:`SESSION_LIMIT_S`).

    Returns:
        Seconds, or None for no limit.

    Raises:
        ValueError: ``minutes`` below -1, or a Kaggle session with less than a minute left.
    """
    if minutes == 0:
        return None
    if minutes > 0:
        return 60.0 * minutes
    if minutes != -1:
        raise ValueError(f"time_budget_minutes must be -1 (Kaggle's session limit), 0 (none) or a number of minutes, "
                         f"not {minutes}")
    if not on_kaggle():
        return None
    left = SESSION_LIMIT_S.get(hardware, SESSION_LIMIT_S["cpu"]) - MARGIN_S - (time.time() - process_started())
    if left < 60:
        raise ValueError(f"this Kaggle session has {left / 60:.0f} min left before its limit less a {MARGIN_S // 60}-min "
                         "margin: nothing to train in. Start a new session (the run continues from its saved state)")
    return left


def reserve_s(*, step_s: float, save_s: float, valid_s: float, steps_to_check: int, steps_left_in_epoch: int) -> float:
    """Seconds a run with a time budget keeps in hand at a save point: it stops there (saving its state) when
    fewer are left, since the budget must hold everything up to the next save point.

    That is the steps to the next check (``steps_to_check`` at the longest step so far, ``step_s``), a state
    save (twice the longest, ``save_s``) and :data:`LEAVE_S`; and, when the epoch's last batch comes before the
    next check (``steps_left_in_epoch <= steps_to_check``), what follows that batch: the validation
    (``valid_s``) and two more saves (the kept checkpoint and the epoch's state).

    Args:
        step_s, save_s: the longest optimizer step and state save so far (seconds).
        valid_s: the longest validation so far, prediction and keeping the checkpoint (seconds); before the
            first, an estimate (the caller's: its validation batches at the step time).
        steps_to_check: steps until the next stop decision; steps_left_in_epoch: steps until the epoch ends.
    """
    reserve = steps_to_check * step_s + 2 * save_s + LEAVE_S
    if steps_left_in_epoch <= steps_to_check:
        reserve += valid_s + 2 * save_s
    return reserve


STOPPED_BY_SIGTERM = "SIGTERM"  # history["stopped"] of a run stopped by SIGTERM
# A plain flag, set by the handler: a signal handler must take no lock. With threading.Event, a second SIGTERM
# arriving inside the first's handler (each replica's, or a user's second stop) waited on the Event's lock, held by
# the interrupted first call, for ever: the run hung instead of saving (tests/test_resume.py, the 2-replica case).
_STOP = {"requested": False}


def stop_requested() -> bool:
    """Whether SIGTERM arrived inside :func:`sigterm_saves` (in this process)."""
    return _STOP["requested"]


def _on_sigterm(signum, frame) -> None:
    """Ask the run to stop, and pass SIGTERM on to this process's child processes (the replicas)."""
    import multiprocessing as mp

    if _STOP["requested"]:  # a second SIGTERM: the first already asked, and passed it on
        return
    _STOP["requested"] = True
    for child in mp.active_children():
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGTERM)


@contextlib.contextmanager
def sigterm_saves():
    """Within the block, SIGTERM asks the run to stop with its state saved instead of ending the process.

    Installed in the main thread only (Python's rule for signal handlers; thread replicas share the
    process's flag); a block inside another (an in-process replica under :func:`kitlib.training.train.train`)
    or in a forked replica (which inherits the handler) keeps the one installed. The previous handler is
    put back at the end, so a notebook's kernel is left as it was.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is _on_sigterm:
        yield
        return
    _STOP["requested"] = False
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
