"""scripts/pip_install.sh: set-up survives a download the network breaks off (the CI run that failed
on "error: incomplete-download" of tensorflow-2.21.0, 110.1 MB of 572.6 MB), and fails at once on
anything else, as pip would."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/usr/bin/env bash
# Stands for `python`: `-m pip install ...`. Fails as the network would for the first $FAIL_NET runs.
[ "$4" = "--help" ] && { echo "  --resume-retries <resume_retries>"; exit 0; }
[ "$3" = "cache" ] && { echo "$COUNT.cache"; exit 0; }
n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo $n > "$COUNT"
echo "$*" >> "$COUNT.args"
if [ $n -le "$FAIL_NET" ]; then
  echo "error: incomplete-download" >&2
  echo "note: This is an issue with network connectivity, not pip." >&2; exit 1
fi
[ -n "$FAIL_OTHER" ] && { echo "ERROR: ResolutionImpossible: $FAIL_OTHER" >&2; exit 1; }
[ -n "$FAIL_DISK" ] && { echo "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device" >&2; exit 1; }
exit 0
"""


def _run(tmp_path, fail_net, fail_other="", tries=4, fail_disk=""):
    py = tmp_path / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    count = tmp_path / "count"
    env = dict(os.environ, COUNT=str(count), FAIL_NET=str(fail_net), FAIL_OTHER=fail_other, FAIL_DISK=fail_disk,
               PIP_INSTALL_TRIES=str(tries), PIP_INSTALL_WAITS="0")
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
    assert f"The disk holding {tmp_path.parent} has " in r.stderr
    assert f"pip's cache ({tmp_path}/count.cache) holds nothing" in r.stderr
    assert "pip cache purge" in r.stderr and "VENV=" in r.stderr
