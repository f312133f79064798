"""Training and predicting before a deadline: a probe of the step and prediction times, and the run that fits.

The code-competition path (``notebooks/ttt_train_predict.py``: internet off, base weights attached) trains and
predicts in one kernel, which Kaggle stops at its session limit with no submission. So before the real run,
:func:`probe` trains a few steps and scores a few held-out rows with the real model on the real devices, and
:func:`fit_deadline` turns those times into the run that fits what is left, in this order (the 2025 write-ups
trained one epoch when time was short, and kept every row they could):

1. as asked;
2. one epoch instead of several, every row;
3. one epoch on the first rows only (``TrainJob.train_limit``: :func:`kitlib.cv.splits.ttt_split` puts the
   test set's labelled rows first);
4. refused (:class:`DeadlineError`) when fewer than ``min_rows`` would train, or predicting the test set alone
   would not fit, naming the times and the fix.

Every estimate is multiplied by :data:`SAFETY` before it is compared with the time left. The training run is
also given the time it may take (``Fit.train_budget`` as ``TrainJob.time_budget_s``), so a run slower than
its probe stops with its state saved rather than eating the prediction's time.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

SAFETY = 1.25  # estimates are multiplied by this before they are compared with the time left (a probe of a few steps)
DEFAULT_TPU_REPLICAS = 8  # the probe's rows when torch_xla counts the replicas itself (rt.world_size None): a v5e-8


class DeadlineError(RuntimeError):
    """The run cannot train and predict before the deadline; the message names the times and the fix."""


@dataclass(frozen=True)
class Probe:
    """What a few real steps took (seconds), from :func:`probe`.

    ``launch_s``: a launch's fixed cost (starting the replicas, loading the model, the first step's warm-up
    beyond a step, saving); ``step_s``: one optimizer step at the global batch; ``row_s``: predicting one row
    (every replica together); ``global_batch``: rows per step, all replicas.
    """

    launch_s: float
    step_s: float
    row_s: float
    global_batch: int

    @classmethod
    def from_run(cls, history: dict, wall_s: float, valid_rows: int, batch_size: int) -> "Probe":
        """The figures of one probe run: its ``train`` history, its wall time and its held-out row count.

        The first step's excess over the others (on XLA, the compilation) counts as launch time, once per run.

        Raises:
            ValueError: the history has no finished epoch (the probe stopped early).
        """
        if not history.get("epochs"):
            raise ValueError(f"the probe run has no finished epoch (stopped: {history.get('stopped')!r}); "
                             "nothing to time the run by")
        epoch = history["epochs"][0]
        steps, train_s, first_s = epoch["steps"], epoch["train_seconds"], epoch.get("first_step_seconds", 0.0)
        step_s = (train_s - first_s) / (steps - 1) if steps > 1 else train_s
        launch_s = max(wall_s - train_s - epoch["valid_seconds"], 0.0) + max(first_s - step_s, 0.0)
        return cls(launch_s=launch_s, step_s=step_s, row_s=epoch["valid_seconds"] / max(valid_rows, 1),
                   global_batch=batch_size * history["world_size"])


@dataclass(frozen=True)
class Fit:
    """The run :func:`fit_deadline` chose: ``epochs`` over the first ``train_rows`` rows.

    ``train_s`` and ``predict_s``: the estimates (seconds, before :data:`SAFETY`); ``left_s``: the time that was
    left (None: no deadline); ``why``: ``"as asked"`` or what was cut, with the figures.
    """

    epochs: int
    train_rows: int
    train_s: float
    predict_s: float
    left_s: float | None
    why: str
    launch_s: float = 0.0

    @property
    def shrunk(self) -> bool:
        return self.why != "as asked"

    def train_budget(self, left_s: float | None) -> float | None:
        """``TrainJob.time_budget_s`` when ``left_s`` seconds are left, just before ``train`` is called: those less
        the prediction's share (:data:`SAFETY` times its estimate) and the launch (the budget counts from the
        replicas' start); None: no deadline."""
        return None if left_s is None else left_s - SAFETY * self.predict_s - self.launch_s

    def describe(self) -> str:
        left = "no deadline" if self.left_s is None else f"{self.left_s / 60:.1f} min left"
        return (f"{self.epochs} epoch(s) over {self.train_rows:,} rows: about {self.train_s / 60:.1f} min training and "
                f"{self.predict_s / 60:.1f} min predicting ({left}; estimates x{SAFETY} must fit): {self.why}")


def estimate(probe: Probe, *, train_rows: int, epochs: int, valid_rows: int, test_rows: int,
             check_rows: int = 0) -> tuple[float, float]:
    """``(train_s, predict_s)``: seconds to train ``epochs`` over ``train_rows`` rows (whole global batches, as
    ``drop_last`` trains them; the held-out rows scored every epoch; what the training loop keeps in hand at its
    last stop decision, a step and :data:`kitlib.training.session.LEAVE_S`) and to predict ``test_rows``, a launch
    each; ``check_rows``: the hand-off's held-out rows predicted again before that, a launch of their own
    (:func:`kitlib.training.handoff.check_predicted`), counted in ``predict_s``."""
    from .session import LEAVE_S

    steps = train_rows // probe.global_batch
    train_s = probe.launch_s + epochs * (steps * probe.step_s + valid_rows * probe.row_s) + probe.step_s + LEAVE_S
    check_s = probe.launch_s + check_rows * probe.row_s if check_rows else 0.0
    return train_s, check_s + probe.launch_s + test_rows * probe.row_s


def fit_deadline(probe: Probe, left_s: float | None, *, train_rows: int, epochs: int, valid_rows: int, test_rows: int,
                 min_rows: int, check_rows: int = 0) -> Fit:
    """The run that trains and predicts within ``left_s`` seconds (the module's order: as asked, one epoch, fewer rows).

    Args:
        probe: the measured times (:func:`probe`).
        left_s: seconds left before the deadline; None: no deadline (the run as asked).
        train_rows: the training rows available; epochs: the epochs asked for.
        valid_rows: held-out rows scored after every epoch; test_rows: rows to predict; check_rows: the
            hand-off's rows predicted again first (:func:`estimate`).
        min_rows: the fewest training rows worth a run.

    Returns:
        The :class:`Fit`.

    Raises:
        DeadlineError: predicting alone does not fit, or fewer than ``min_rows`` rows would (the figures named).
    """
    def fit(n_epochs: int, rows: int, why: str) -> Fit:
        t, p = estimate(probe, train_rows=rows, epochs=n_epochs, valid_rows=valid_rows, test_rows=test_rows,
                        check_rows=check_rows)
        return Fit(n_epochs, rows, t, p, left_s, why, probe.launch_s)

    asked = fit(epochs, train_rows, "as asked")
    if left_s is None:
        return asked
    total = lambda f: SAFETY * (f.train_s + f.predict_s)
    if total(asked) <= left_s:
        return asked
    minutes = f"{epochs} epoch(s) over all {train_rows:,} rows would take about {total(asked) / 60:.1f} min with the " \
              f"margin, and {left_s / 60:.1f} min are left"
    one = fit(1, train_rows, f"1 epoch instead of {epochs}: {minutes}")
    if epochs > 1 and total(one) <= left_s:
        return one
    room = left_s / SAFETY - one.predict_s - estimate(probe, train_rows=0, epochs=1, valid_rows=valid_rows, test_rows=0)[0]
    rows = min(train_rows, max(int(room // probe.step_s), 0) * probe.global_batch)
    fix = ("a smaller model or max_len, more devices, a larger time_budget_minutes, or train in a kernel of its own "
           "and predict with the inference notebook")
    if one.predict_s * SAFETY >= left_s:
        raise DeadlineError(f"predicting the {test_rows:,} test rows alone takes about {one.predict_s * SAFETY / 60:.1f} "
                            f"min with the margin, and {left_s / 60:.1f} min are left: nothing would train. Use {fix}")
    if rows < min_rows:
        raise DeadlineError(f"only {rows:,} training rows fit before the deadline (min_train_rows {min_rows:,}): "
                            f"{minutes} (a step of {probe.global_batch} rows takes {probe.step_s:.2f} s, a launch "
                            f"{probe.launch_s:.0f} s). Use {fix}")
    return fit(1, rows, f"the first {rows:,} of {train_rows:,} rows, 1 epoch: {minutes}")


def probe(job, rt, start_method: str = "fork", *, steps: int = 4, out_dir: str | Path) -> tuple[Probe, float]:
    """Time ``steps`` training steps and the scoring of as many batches of held-out rows: ``job`` as it will run
    (model, precision, batch, length, LoRA), on the same runtime, into ``out_dir`` (scratch).

    Args:
        job: the :class:`~kitlib.training.job.TrainJob` to be fitted (its rows, epochs and budget are replaced here).
        rt: the runtime (:func:`kitlib.run.runtime.detect_runtime`).
        steps: optimizer steps timed (at least 2: the first one's warm-up is told apart).
        out_dir: where the probe's checkpoint goes (thrown away).

    Returns:
        ``(probe, seconds)``: the figures and the probe's own wall time.

    Raises:
        ValueError: ``steps`` below 2, or the probe stopped before its epoch ended.
    """
    from .train import train

    if steps < 2:
        raise ValueError(f"probe_steps={steps}: at least 2 steps are timed (the first includes the warm-up)")
    rows = steps * job.batch_size * (rt.world_size or DEFAULT_TPU_REPLICAS)
    small = dataclasses.replace(job, out_dir=str(out_dir), epochs=1, train_limit=rows, valid_limit=rows,
                                time_budget_s=None, save_every_minutes=0.0, resume="never", patience=0, tracker="none")
    t0 = time.monotonic()
    history = train(small, rt, start_method)
    wall = time.monotonic() - t0
    return Probe.from_run(history, wall, valid_rows=min(rows, _rows(job.valid_csv)), batch_size=job.batch_size), wall


def _rows(csv: str) -> int:
    """Data rows of a CSV (the kit's reader)."""
    from ..data import read_csv_strings

    return len(read_csv_strings(csv, usecols=["id"]))
