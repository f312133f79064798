"""The wheels cell of an internet-off kernel, run by the image's Python with a pip that can reach no index
(issue 41.2; kaggle_kit/wheels_cell.py). In the Kaggle-image twin (``make test-kaggle-image``) this is
Kaggle's TPU image's Python 3.12 with its packages; in ``make test`` the suite's Python.

The data set is built by the push tool (``kaggle_kit wheels``' :func:`kaggle_kit.wheels.build` and
:func:`~kaggle_kit.wheels.cell_source`) where the kit's Kaggle client imports: here, else the push tool's own
environment (``.venv-push``, ``make setup-push``; the twin's keras-hub holds kagglesdk at 0.1.28, which the
kit's client 2.2.5 cannot run on, and a kernel never imports kaggle_kit). The cell then runs here, as the
kernel's first cell would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.tiny_wheels import make_wheel, offline_env

ROOT = Path(__file__).resolve().parents[1]
PUSH_PY = ROOT / ".venv-push" / "bin" / "python"
HERE = f"cp{sys.version_info.major}{sys.version_info.minor}"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

BUILD = """
import json, sys
from kaggle_kit import wheels
from kaggle_kit.images import IMAGES
image = IMAGES["tpu"]._replace(python=sys.argv[1])  # the image's row, with the Python that runs the cell
m = wheels.build({"tinyplat": ("1.0", "asked"), "tinypure": ("2.0", "asked")}, image, sys.argv[2], "me/tiny-wheels", sys.argv[3])
print(json.dumps({"manifest": m, "cell": wheels.cell_source(m, "keras_xlmr_train")}))
"""


def push_python() -> str:
    """The interpreter that builds the data set: this one when the kit's Kaggle client imports here, else ``.venv-push``'s."""
    try:
        import kaggle_kit.wheels  # noqa: F401
        return sys.executable
    except ImportError:
        assert PUSH_PY.exists(), "this environment cannot import kaggle_kit: make setup-push first (make test-kaggle-image does)"
        return str(PUSH_PY)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A wheels data set of a platform wheel for this Python (``tinyplat``, needing ``tinypure``) and a pure one,
    attached as Kaggle mounts it (``input/tiny-wheels/``), and its install cell."""
    tmp = tmp_path_factory.mktemp("wheels")
    make_wheel(tmp / "links", "tinyplat", "1.0", tag=f"{HERE}-{HERE}-manylinux_2_17_x86_64", requires=["tinypure>=2"])
    make_wheel(tmp / "links", "tinypure", "2.0")
    folder = tmp / "input" / "tiny-wheels"
    r = subprocess.run([push_python(), "-c", BUILD, PYTHON, str(folder), str(tmp / "links")], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={**offline_env(), "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp, json.loads(r.stdout.strip().splitlines()[-1])


def run_cell(cell: str, input_dir: Path, target: Path) -> subprocess.CompletedProcess:
    """The cell's source exactly, then an import of what it installed, in this Python, pip reaching no index."""
    code = cell + (f"\nimport sys; sys.path.insert(0, {str(target)!r}); import tinyplat, tinypure; "
                   "print('imported', tinyplat.VALUE, tinypure.VALUE)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=offline_env(KAGGLE_INPUT_DIR=str(input_dir), PIP_TARGET=str(target)))


def test_the_images_python_installs_the_data_set_offline(dataset, tmp_path):
    tmp, built = dataset
    assert [(w["name"], w["version"], w["tags"]) for w in built["manifest"]["wheels"]] == [
        ("tinyplat", "1.0", [f"{HERE}-{HERE}-manylinux_2_17_x86_64"]), ("tinypure", "2.0", ["py3-none-any"])]
    r = run_cell(built["cell"], tmp / "input", tmp_path / "target")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"wheels: installed tinyplat==1.0, tinypure==2.0 from {tmp / 'input' / 'tiny-wheels'} "
            "(data set me/tiny-wheels, offline)") in r.stdout, r.stdout
    assert "imported tinyplat 1.0 tinypure 2.0" in r.stdout


def test_a_wheel_the_data_set_lost_is_refused_before_pip_runs(dataset, tmp_path):
    tmp, built = dataset
    cell = built["cell"].replace(built["manifest"]["wheels"][1]["sha256"], "0" * 64)  # the manifest's record changed
    r = run_cell(cell, tmp / "input", tmp_path / "target")
    assert r.returncode != 0 and "tinypure-2.0-py3-none-any.whl in" in r.stderr and "(sha256 differs)" in r.stderr, r.stderr
    assert not (tmp_path / "target").exists()  # nothing installed, not even tinyplat
