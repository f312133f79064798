"""``launch`` owns the replicas it starts, and a replica's failure comes back whole.

* SIGINT to the calling process alone (``kill -INT <pid>``, what a notebook front end sends) while
  2 replica processes run: both are terminated and joined before ``launch`` returns, and nothing
  they would have written appears afterwards (issue 21.4);
* a replica that raises deep in its program: :class:`~kitlib.run.runtime.ReplicaError` names its rank
  and carries, and shows, its whole traceback (not only the last line);
* a torch_xla replica process killed by a signal (torch_xla says only ``BrokenProcessPool``): a ReplicaError too.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT
from kitlib.run.runtime import ReplicaError, Runtime, launch


def failing_program(replica, out):  # noqa: D103 - a replica program for the test below
    replica.barrier("both joined")  # (rank 0 must not leave the process group while rank 1 still joins it)
    if replica.rank == 1:
        _deep_helper(out)


def _deep_helper(out):
    raise ValueError(f"rank 1 cannot read {out}")


def test_a_replica_error_carries_the_whole_traceback(tmp_path):
    with pytest.raises(ReplicaError, match=r"replica rank 1 failed: ValueError: rank 1 cannot read") as e:
        launch(failing_program, str(tmp_path), Runtime("cpu", 2, "test"), "fork")
    err = e.value
    assert err.rank == 1 and err.original == f"ValueError: rank 1 cannot read {tmp_path}"
    # where it failed, not only what: the frames of the replica program, with their file
    assert "in failing_program" in err.traceback and "in _deep_helper" in err.traceback
    assert "test_launch.py" in err.traceback and 'raise ValueError(f"rank 1 cannot read {out}")' in err.traceback
    assert "in _deep_helper" in str(err)  # shown to the user, who has no other way to see it


PARENT = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from kitlib.run.runtime import Runtime, launch

def slow_writer(replica, out):
    Path(out, f"started-{{replica.rank}}").write_text(str(os.getpid()))
    time.sleep(12)
    Path(out, f"late-{{replica.rank}}").write_text("written after the interrupt")

try:
    launch(slow_writer, {out!r}, Runtime("cpu", 2, "test"), "fork")
except KeyboardInterrupt:
    print("INTERRUPTED", time.time(), flush=True)
"""


def test_sigint_to_the_parent_alone_stops_every_replica_before_launch_returns(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PARENT.format(root=str(ROOT), out=str(out)))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("started-*"))) < 2:
            assert parent.poll() is None and time.monotonic() < deadline, parent.communicate()
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in sorted(out.glob("started-*"))]
        os.kill(parent.pid, signal.SIGINT)  # the parent's pid only, not its process group
        stdout, stderr = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert "INTERRUPTED" in stdout, stderr[-3000:]
    for pid in pids:  # gone (reaped by launch), not merely signalled
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    time.sleep(14)  # past the moment the replicas would have written
    assert not list(out.glob("late-*"))


def crashing_program(replica, out):  # noqa: D103 - a replica program for the test below
    if replica.rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)  # what a crash inside torch_xla's _XLAC does to its process
    time.sleep(30)


def test_an_xla_replica_process_killed_by_a_signal_is_a_replica_error(tmp_path):
    """Seen once in CI: both PJRT CPU thread replicas segfaulted inside torch_xla
    (``torch_xla::runtime::metrics::Counter::GetData``), and ``train`` raised only torch_xla's
    ``BrokenProcessPool: A process in the process pool was terminated abruptly``. Now a ReplicaError names
    the ranks, the likely causes and where to look, and nothing is merged."""
    from kitlib.run.runtime import detect_runtime

    with pytest.raises(ReplicaError, match=r"replica rank 0 failed: a torch_xla replica process of ranks 0-1 died "
                                           r"without a Python error: killed by a signal") as e:
        launch(crashing_program, str(tmp_path), detect_runtime(2, "xla-cpu"), "fork")
    assert "dmesg" in str(e.value)
