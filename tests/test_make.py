"""The Makefile's stamps (issue 33, item 8): `make test`'s set-up must not make `make submission` train
again when nothing the training reads changed. Run on a scratch copy of the Makefile with stand-in
inputs and stamps whose times are set; pip and the disk check replaced by ``:`` (make's own logic only)."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINED = "artifacts/xlmr-toxic/.make-trained"
INPUTS = ["requirements.txt", "requirements/dev.txt", "requirements/torch.txt", "requirements/push.txt",
          "requirements/keras.txt", "requirements/keras-hub.txt", "requirements/pretrained.txt", "constraints.txt",
          "pyproject.toml", "notebooks/xla_ddp_train.ipynb", "kitlib/a.py", "data/jigsaw-sample/train.csv"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _scratch(tmp_path: Path) -> Path:
    """The Makefile beside stand-ins: inputs 300 s old, the torch environment's stamp 200 s, a trained
    checkpoint's stamp 100 s (what `make submission` leaves), no `make test` environment yet."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    now = time.time()
    for name, age in [*((n, 300) for n in INPUTS), (".venv/bin/python", 300), (".venv/.kit-torch", 200), (TRAINED, 100)]:
        f = tmp_path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x\n")
        os.utime(f, (now - age, now - age))
    return tmp_path


def _make(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "PIP_INSTALL=:", "CHECK_DISK=:", *args], cwd=root,
                          capture_output=True, text=True, timeout=120)


def test_make_tests_set_up_keeps_the_trained_checkpoint_up_to_date(tmp_path):
    """The set-up touched .venv/.kit-torch, which the trained stamp depends on: after `make test`,
    `make submission` trained again (4 minutes here, 29 on a loaded machine) though nothing had changed."""
    root = _scratch(tmp_path)
    assert _make(root, "-q", TRAINED).returncode == 0  # up to date after make submission
    torch_mtime = (root / ".venv/.kit-torch").stat().st_mtime
    r = _make(root, ".venv/.kit-installed")  # make test's set-up
    assert r.returncode == 0, r.stdout + r.stderr
    assert (root / ".venv/.kit-installed").is_file()
    assert (root / ".venv/.kit-torch").stat().st_mtime == torch_mtime  # already installed: left alone
    q = _make(root, "-q", TRAINED)
    assert q.returncode == 0, "make submission would train again: " + _make(root, "-n", TRAINED).stdout


def test_make_tests_set_up_marks_the_torch_environment_when_it_was_not_or_changed(tmp_path):
    """`make test` first, on a fresh clone: its environment holds the torch one, which is marked
    installed too (make submission then installs nothing); a torch requirement changed since the torch
    stamp: the set-up reinstalled it, so the stamp is renewed and the checkpoint trained again."""
    root = _scratch(tmp_path)
    (root / ".venv/.kit-torch").unlink()
    assert _make(root, ".venv/.kit-installed").returncode == 0
    assert (root / ".venv/.kit-torch").is_file() and _make(root, "-q", ".venv/.kit-torch").returncode == 0

    root = _scratch(tmp_path / "changed")
    now = time.time()
    os.utime(root / "requirements/torch.txt", (now - 150, now - 150))  # after the torch stamp, before the training
    assert _make(root, ".venv/.kit-installed").returncode == 0
    assert (root / ".venv/.kit-torch").stat().st_mtime > now - 10
    assert _make(root, "-q", ".venv/.kit-torch").returncode == 0 and _make(root, "-q", TRAINED).returncode == 1
