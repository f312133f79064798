"""One pytest process runs the whole suite: TensorFlow stays out of it (with torch_xla it aborts).

TF tests run their TensorFlow side in child processes (tests/support/child_process.py, tests/support/keras_worker.py).
This collects the whole suite in a fresh process and checks that no test module imported TensorFlow.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GUARD = '''
import json, os, sys
def pytest_collection_finish(session):
    with open(os.environ["KIT_GUARD_OUT"], "w") as f:
        json.dump({"items": len(session.items), "tensorflow": "tensorflow" in sys.modules,
                   "torch_xla": "torch_xla" in sys.modules}, f)
'''


@pytest.mark.slow  # collects the whole suite in a child (as long as a collection)
def test_collecting_the_suite_imports_no_tensorflow(tmp_path):
    (tmp_path / "kit_tf_guard.py").write_text(GUARD)
    out = tmp_path / "guard.json"
    env = {**os.environ, "KIT_GUARD_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "kit_tf_guard", "-p",
                        "no:cacheprovider", "-m", "", "tests"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["items"] > 50 and got["torch_xla"]  # the whole suite was collected, torch_xla tests included
    assert not got["tensorflow"], "a test module imports TensorFlow at collection: run its TF side in a child process"
