"""kitlib.compat's version report: what the notebooks print about the packages they found."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from kitlib import compat

ROOT = Path(__file__).resolve().parents[1]
# Notebooks whose setup cell prints compat.version_report(...) (the torch notebooks: being added).
REPORTING = ["keras_xlmr_train", "xla_multicore_inference", "xla_ddp_train", "keras_sharded_lora"]


def test_tested_table_covers_the_kits_frameworks():
    for dist in ("python", "torch", "torch-xla", "transformers", "keras", "keras-hub", "jax", "tensorflow"):
        lo, hi = compat.TESTED[dist]
        assert compat._major_minor(lo) <= compat._major_minor(hi)
    assert set(compat.TORCH_PACKAGES) | set(compat.KERAS_PACKAGES) <= set(compat.TESTED)


def test_versions_inside_the_tested_range_give_no_warning():
    ok = {"torch": "2.8.0", "torch-xla": "2.9.0+cpu", "transformers": "5.24.1", "jax": "0.12.0.1", "tensorflow": "2.21.0"}
    assert compat.version_warnings(ok) == []
    assert compat.version_warnings({"some-other-package": "0.0.1"}) == []  # not in TESTED: not checked


@pytest.mark.parametrize("dist, version, shown", [
    ("torch", "2.7.1", "(2.8 to 2.9)"),
    ("torch-xla", "2.10.0rc1", "(2.8 to 2.9)"),
    ("transformers", "6.0.0", "(5.24 to 5.25)"),
    ("transformers", "4.57.1", "(5.24 to 5.25)"),
    ("keras", "3.16.0", "(3.15)"),
])
def test_a_version_outside_the_tested_range_is_one_warning_line(dist, version, shown):
    (line,) = compat.version_warnings({dist: version, "python": "3.12.1"})
    assert line.startswith(f"warning: {dist} {version} is outside") and shown in line and "\n" not in line


def test_both_tensorflow_wheels_are_a_warning():
    (line,) = compat.version_warnings({"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"})
    assert "tensorflow 2.21.0 and tensorflow-cpu 2.21.0 are both installed" in line and "JAX" in line


def test_unreadable_version_is_an_error():
    with pytest.raises(ValueError, match="'abc'"):
        compat.version_warnings({"torch": "abc"})


def test_report_names_the_installed_versions_and_imports_nothing():
    code = ("import sys; from kitlib import compat; print(compat.version_report()); "
            "print(sorted(m for m in ('torch', 'torch_xla', 'tensorflow', 'jax', 'keras', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    *report, imported = out.strip().splitlines()
    assert imported == "[]"
    head = report[0]
    assert head.startswith(f"versions: python {sys.version.split()[0]}, torch {importlib.metadata.version('torch')}, ")
    assert f"torch-xla {importlib.metadata.version('torch-xla')}" in head
    assert f"transformers {importlib.metadata.version('transformers')}" in head
    assert all(line.startswith("warning: ") for line in report[1:])
    assert compat.version_report(("python", "no-such-distribution")) == f"versions: python {sys.version.split()[0]}"


def test_this_environment_is_inside_the_tested_ranges():
    """Both environments the kit is tested in (`make test`, `make test-kaggle-image`) are in TESTED.

    The Kaggle-image twin takes the newest release of what the image leaves unpinned: a new
    release fails here until it is tested and TESTED says so.
    """
    found = {d: v for d in compat.TESTED if (v := compat.installed_version(d)) is not None}
    assert {"python", "torch", "torch-xla", "transformers"} <= set(found)
    assert [w for w in compat.version_warnings(found) if "outside" in w] == []


@pytest.mark.parametrize("name", REPORTING)
def test_notebook_setup_cell_prints_the_version_report(name):
    import jupytext

    nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    # the setup cell: the first code cell after the parameters and their type check (kitlib.params)
    setup = next(c for c in nb.cells[params + 1:]
                 if c.cell_type == "code" and "check_notebook_parameters(" not in c.source)
    assert "print(compat.version_report(" in setup.source


def test_the_torch_xla_names_the_kit_calls_exist():
    pytest.importorskip("torch_xla")
    assert compat.missing_xla_api() == []
    compat.XLA_API["torch_xla"] += ("no_such_function",)
    try:
        assert compat.missing_xla_api() == ["torch_xla.no_such_function"]
    finally:
        compat.XLA_API["torch_xla"] = compat.XLA_API["torch_xla"][:-1]


def test_hub_kernels_are_off_before_a_model_loads_and_a_users_choice_is_kept(tiny_checkpoint, monkeypatch):
    """transformers 5.25 turns hub kernels on by default: model.eval() on an XLA device then raised "Unsupported
    device type 'xla'" (6 tests of the Kaggle twin). The kit's loaders set USE_HUB_KERNELS=NO first, so the
    model is not marked for kernels; a value the user set is left as it is."""
    import os

    from kitlib.models.model import load_model

    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    model = load_model(tiny_checkpoint)
    assert os.environ["USE_HUB_KERNELS"] == "NO" and not getattr(model, "use_kernels", False)
    monkeypatch.setenv("USE_HUB_KERNELS", "YES")
    compat.keep_hub_kernels_off()
    assert os.environ["USE_HUB_KERNELS"] == "YES"
