"""scripts/pip_install.sh: set-up survives a download the network breaks off (the CI run that failed
on "error: incomplete-download" of tensorflow-2.21.0, 110.1 MB of 572.6 MB), and fails at once on
anything else, as pip would. What to do is decided on pip's final error, never on a marker
anywhere in its output (issue 27.10: a resolver error after pip's own "Read timed out" retries was
tried 4 times and called a network failure)."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/usr/bin/env bash
# Stands for `python`: `-m pip install ...`. Fails as the network would for the first $FAIL_NET runs.
[ "$4" = "--help" ] && { echo "  --resume-retries <resume_retries>"; exit 0; }
[ "$3" = "cache" ] && { echo "$COUNT.cache"; exit 0; }
n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo $n > "$COUNT"
echo "$*" >> "$COUNT.args"
[ -n "$FAIL_LOG" ] && { cat "$FAIL_LOG" >&2; exit 1; }
if [ $n -le "$FAIL_NET" ]; then
  echo "error: incomplete-download" >&2
  echo "note: This is an issue with network connectivity, not pip." >&2; exit 1
fi
[ -n "$FAIL_OTHER" ] && { echo "ERROR: ResolutionImpossible: $FAIL_OTHER" >&2; exit 1; }
[ -n "$FAIL_DISK" ] && { echo "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device" >&2; exit 1; }
exit 0
"""


def _run(tmp_path, fail_net, fail_other="", tries=4, fail_disk="", log="", env=None):
    py = tmp_path / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    count = tmp_path / "count"
    if log:
        (tmp_path / "pip.log").write_text(log)
    env = dict(os.environ, COUNT=str(count), FAIL_NET=str(fail_net), FAIL_OTHER=fail_other, FAIL_DISK=fail_disk,
               FAIL_LOG=str(tmp_path / "pip.log") if log else "", PIP_INSTALL_TRIES=str(tries), PIP_INSTALL_WAITS="0",
               **(env or {}))
    r = subprocess.run(["bash", str(ROOT / "scripts" / "pip_install.sh"), str(py), "-q", "-r", "req.txt"],
                       env=env, capture_output=True, text=True, timeout=60)
    runs = int(count.read_text()) if count.exists() else 0
    args = (tmp_path / "count.args").read_text().splitlines() if runs else []
    return r, runs, args


def test_a_broken_download_is_tried_again_with_resume_and_then_succeeds(tmp_path):
    r, runs, args = _run(tmp_path, fail_net=2)
    assert r.returncode == 0, r.stderr
    assert runs == 3
    assert all(a == "-m pip install --resume-retries 20 --timeout 60 -q -r req.txt" for a in args), args
    assert r.stderr.count("the network broke off a download") == 2


def test_a_resolver_error_fails_at_once_with_pips_message(tmp_path):
    r, runs, _ = _run(tmp_path, fail_net=0, fail_other="torch==9")
    assert r.returncode == 1 and runs == 1
    assert "ResolutionImpossible: torch==9" in r.stderr
    assert "trying again" not in r.stderr


def test_the_network_failing_every_time_ends_with_what_to_do(tmp_path):
    r, runs, _ = _run(tmp_path, fail_net=99, tries=3)
    assert r.returncode == 1 and runs == 3
    assert "pip install failed 3 times on the network" in r.stderr
    assert "run the same make command again" in r.stderr


def test_a_full_disk_fails_at_once_saying_where_and_what_to_do(tmp_path):
    # what pip printed when a CI run's disk filled up during the test environment's set-up
    r, runs, _ = _run(tmp_path, fail_net=0, fail_disk="1")
    assert r.returncode == 1 and runs == 1
    assert "the disk is full" in r.stderr and "trying again" not in r.stderr
    assert f"the environment ({tmp_path.parent})" in r.stderr
    assert f"pip's cache ({tmp_path}/count.cache)" in r.stderr
    assert "pip cache purge" in r.stderr and "VENV=" in r.stderr and "TMPDIR=" in r.stderr


# pip 25's output when the index answered slowly at first, then the requirement does not exist
RESOLVER_AFTER_TIMEOUTS = """\
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by \
'ReadTimeoutError("HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. (read timeout=60)")': /simple/torch/
ERROR: Could not find a version that satisfies the requirement torch==9.9.9 (from versions: 2.8.0, 2.9.0)
ERROR: No matching distribution found for torch==9.9.9
"""

# pip giving up on a download that timed out (its last error is the network's)
TIMEOUT_AT_THE_END = """\
ERROR: Could not find a version that satisfies the requirement nothing-here (from versions: none)
Collecting torch==2.9.0
ERROR: Exception:
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pip/_vendor/urllib3/response.py", line 438, in _error_catcher
    yield
pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='files.pythonhosted.org', port=443): Read timed out.
"""


def test_a_resolver_error_after_timeout_warnings_fails_at_once(tmp_path):
    r, runs, _ = _run(tmp_path, fail_net=0, log=RESOLVER_AFTER_TIMEOUTS)
    assert r.returncode == 1 and runs == 1, r.stderr
    assert "trying again" not in r.stderr and "failed 4 times on the network" not in r.stderr
    assert ("not tried again: pip's final error (ERROR: No matching distribution found for torch==9.9.9) is not a "
            "network failure") in r.stderr


def test_a_network_final_error_is_tried_again_whatever_came_before(tmp_path):
    r, runs, _ = _run(tmp_path, fail_net=0, log=TIMEOUT_AT_THE_END, tries=2)
    assert r.returncode == 1 and runs == 2, r.stderr
    assert r.stderr.count("the network broke off a download") == 1
    assert "pip install failed 2 times on the network" in r.stderr


def test_a_full_disk_names_the_filesystem_pip_could_not_write(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem (/dev/shm) to put TMPDIR on")
    log = ("WARNING: No space left on device while caching\n"
           f"ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device: '{shm}/pip-unpack-x/torch.whl'\n")
    r, runs, _ = _run(tmp_path, fail_net=0, log=log, env={"TMPDIR": str(shm)})
    assert r.returncode == 1 and runs == 1
    assert f"It filled on the filesystem holding TMPDIR ({shm}) (pip's error names {shm}/pip-unpack-x/torch.whl)" in r.stderr, r.stderr
    assert f"elsewhere, the environment ({tmp_path.parent}) and pip's cache" in r.stderr
