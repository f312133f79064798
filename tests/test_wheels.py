"""Wheels as an attached data set for internet-off kernels (issue 41.2; kaggle_kit/wheels.py,
kaggle_kit/images.py, kaggle_kit/wheels_cell.py): what a notebook needs that its Kaggle image lacks,
the wheels built by pip from a local folder of tiny wheels written here (nothing big downloaded),
published through the fake Kaggle API, attached, and installed by the staged cell with a pip that can
reach no index (``--no-index``, ``PIP_NO_INDEX=1``, ``PIP_INDEX_URL`` on a closed port)."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_kernels import ROOT, cli, make_project, meta_args  # noqa: E402

from kaggle_kit import images, wheels  # noqa: E402
from kaggle_kit.images import IMAGES, Image  # noqa: E402
from support.fake_kaggle import FakeKaggle  # noqa: E402
from support.tiny_wheels import make_wheel, offline_env  # noqa: E402

HERE = f"cp{sys.version_info.major}{sys.version_info.minor}"  # the Python running the tests
OTHER_PYTHON = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
OTHER = "cp" + OTHER_PYTHON.replace(".", "")
PINS = wheels.tested_pins()


def run_cell(manifest: dict, input_dir: Path, target: Path) -> subprocess.CompletedProcess:
    """Run the staged install cell as the kernel would (its source exactly), pip installing into ``target``."""
    source = wheels.cell_source(manifest, "ttt_train_predict")
    code = source + f"\nimport sys; sys.path.insert(0, {str(target)!r}); import tinypkg; print('imported', tinypkg.VALUE)\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env=offline_env(KAGGLE_INPUT_DIR=str(input_dir), PIP_TARGET=str(target)))


# --- what a notebook needs ------------------------------------------------------------------------
def test_the_t4_decoder_kernel_needs_bitsandbytes_and_peft_on_the_gpu_image():
    py, image, wanted = wheels.plan("ttt_train_predict", ROOT / "kernel-metadata.json", {}, [])
    assert py.stem == "ttt_train_predict" and image is IMAGES["gpu"] and image.python == "3.12"
    assert {d: v for d, (v, _) in wanted.items()} == {"bitsandbytes": PINS["bitsandbytes"], "peft": PINS["peft"]}
    assert "weights='auto'" in wanted["bitsandbytes"][1] and "gpu image lacks it" in wanted["bitsandbytes"][1]
    assert f"gpu image has 0.19, the kit is tested with {PINS['peft']}" in wanted["peft"][1]
    # full-width weights and no LoRA: nothing the image lacks
    _, _, wanted = wheels.plan("ttt_train_predict", ROOT / "kernel-metadata.json", {"weights": "fp16", "lora_r": 0}, [])
    assert wanted == {}
    _, _, wanted = wheels.plan("ttt_train_predict", ROOT / "kernel-metadata.json", {"weights": "fp16"}, ["gguf==0.19.0"])
    assert {d: v for d, (v, _) in wanted.items()} == {"peft": PINS["peft"], "gguf": "0.19.0"}


def test_the_tpu_kernels_need_nothing_the_tpu_image_lacks():
    for stem in ("xla_multicore_inference", "xla_ddp_train", "keras_xlmr_train", "keras_sharded_lora"):
        _, image, wanted = wheels.plan(stem, ROOT / "kernel-metadata.json", {}, [])
        assert image is IMAGES["tpu"] and wanted == {}, (stem, wanted)


def test_needs_reads_top_level_imports_only():
    import ast

    code = ("import numpy as np\nfrom sklearn import metrics\nimport os\nfrom . import x\n"
            "try:\n    import vllm\nexcept ImportError:\n    vllm = None\n"
            "def f():\n    import torch_xla\n")
    assert wheels.top_imports(ast.parse(code).body) == {"numpy", "sklearn", "os"}
    assert [wheels.dist_of(m) for m in ("sklearn", "os", "kitlib", "yaml", "torch_xla")] == [
        "scikit-learn", None, None, "pyyaml", "torch-xla"]


def test_an_accelerator_without_an_image_is_refused_naming_it():
    with pytest.raises(ValueError, match="accelerator 'none': no Kaggle image recorded .*give the notebook an accelerator"):
        images.image_for("none")


# --- building -------------------------------------------------------------------------------------
def test_build_takes_the_wheels_from_a_local_folder_and_writes_the_manifest(tmp_path):
    src = make_wheel(tmp_path / "links", "tinypkg", "1.0")
    make_wheel(tmp_path / "links", "tinypkg", "2.0")
    m = wheels.build({"tinypkg": ("1.0", "asked")}, IMAGES["gpu"], tmp_path / "out", "me/tiny-wheels", tmp_path / "links")
    assert m["dataset"] == "me/tiny-wheels" and m["image"] == "gpu" and m["python"] == "3.12"
    (row,) = m["wheels"]
    assert row == {"name": "tinypkg", "version": "1.0", "file": src.name, "tags": ["py3-none-any"], "why": "asked",
                   "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    assert json.loads((tmp_path / "out" / wheels.MANIFEST).read_text()) == m
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [src.name, wheels.MANIFEST]


def test_build_refuses_a_wheel_for_another_python(tmp_path):
    make_wheel(tmp_path / "links", "tinyc", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    with pytest.raises(wheels.WheelsError, match=r"tinyc==1.0: no wheel in .*links for Kaggle's gpu image \(Python 3.12, "
                                                 r"manylinux_2_35_x86_64\): .*--with NAME==VERSION"):
        wheels.build({"tinyc": ("1.0", "asked")}, IMAGES["gpu"], tmp_path / "out", "me/tiny-wheels", tmp_path / "links")
    # and one pip would take but the image's Python does not fit (a table row with another Python)
    row = wheels.wheel_record(make_wheel(tmp_path / "w", "tinyc", "1.0", tag="cp312-cp312-manylinux_2_17_x86_64"), "x")
    old = IMAGES["gpu"]._replace(python="3.11")
    (problem,) = wheels.fit_problems([row], tmp_path / "w", old)
    assert problem.startswith("tinyc-1.0-cp312-cp312-manylinux_2_17_x86_64.whl: built for cp312-cp312-manylinux_2_17_x86_64, "
                              "not for Kaggle's gpu image (Python 3.11")


def test_build_refuses_what_neither_the_image_nor_the_wheels_provide(tmp_path):
    make_wheel(tmp_path / "links", "tinyneeds", "1.0", requires=["notinimage>=1", "peft>=0.20", "numpy",
                                                                   "winonly; sys_platform == 'win32'"])
    with pytest.raises(wheels.WheelsError) as e:
        wheels.build({"tinyneeds": (None, "asked")}, IMAGES["gpu"], tmp_path / "out", "me/tiny-wheels", tmp_path / "links")
    msg = str(e.value)
    assert "tinyneeds-1.0-py3-none-any.whl requires notinimage>=1, which Kaggle's gpu image lacks: add it (--with notinimage)" in msg
    assert "requires peft>=0.20; Kaggle's gpu image has peft 0.19: add a version that fits" in msg
    assert "numpy" not in msg.replace("tinyneeds", "") and "winonly" not in msg  # in the image; not on Linux
    make_wheel(tmp_path / "links", "peft", "0.21.2")  # shipped alongside: met
    make_wheel(tmp_path / "links", "notinimage", "1.5")
    m = wheels.build({"tinyneeds": (None, "asked"), "peft": ("0.21.2", "asked"), "notinimage": (None, "asked")},
                     IMAGES["gpu"], tmp_path / "out", "me/tiny-wheels", tmp_path / "links")
    assert [w["file"] for w in m["wheels"]] == ["notinimage-1.5-py3-none-any.whl", "peft-0.21.2-py3-none-any.whl",
                                                "tinyneeds-1.0-py3-none-any.whl"]


# --- the staged cell, offline ----------------------------------------------------------------------
@pytest.fixture
def built(tmp_path):
    """A wheels data set of tinypkg 1.0, attached as Kaggle mounts it (input/<slug>/)."""
    make_wheel(tmp_path / "links", "tinypkg", "1.0")
    folder = tmp_path / "input" / "tiny-wheels"
    manifest = wheels.build({"tinypkg": ("1.0", "asked")}, IMAGES["gpu"], folder, "me/tiny-wheels", tmp_path / "links")
    return manifest, folder


def test_the_cell_installs_offline_before_anything_imports(tmp_path, built):
    manifest, _ = built
    r = run_cell(manifest, tmp_path / "input", tmp_path / "target")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wheels: installed tinypkg==1.0 from {tmp_path / 'input' / 'tiny-wheels'} (data set me/tiny-wheels, offline)" in r.stdout
    assert "imported tinypkg 1.0" in r.stdout
    assert (tmp_path / "target" / "tinypkg" / "__init__.py").is_file()


def test_the_cell_refuses_a_wheel_for_another_python(tmp_path):
    other = Image("gpu", OTHER_PYTHON, IMAGES["gpu"].platforms, IMAGES["gpu"].packages)
    make_wheel(tmp_path / "links", "tinypkg", "1.0", tag=f"{OTHER}-{OTHER}-manylinux_2_17_x86_64")
    manifest = wheels.build({"tinypkg": ("1.0", "asked")}, other, tmp_path / "input" / "w", "me/tiny-wheels", tmp_path / "links")
    r = run_cell(manifest, tmp_path / "input", tmp_path / "target")
    assert r.returncode != 0
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (f"RuntimeError: wheels: tinypkg-1.0-{OTHER}-{OTHER}-manylinux_2_17_x86_64.whl is built for "
            f"{OTHER}-{OTHER}-manylinux_2_17_x86_64, not for this Python {py} ({HERE}). Nothing was installed. Fix: rebuild "
            "and publish the wheels: python -m kaggle_kit wheels ttt_train_predict --dataset me/tiny-wheels") in r.stderr, r.stderr
    assert f"kaggle_kit/images.py records Python {OTHER_PYTHON} for Kaggle's gpu image" in r.stderr
    assert not (tmp_path / "target").exists()


def test_the_cell_refuses_a_missing_or_changed_wheel_and_a_data_set_not_attached(tmp_path, built):
    manifest, folder = built
    (folder / manifest["wheels"][0]["file"]).unlink()
    r = run_cell(manifest, tmp_path / "input", tmp_path / "target")
    assert f"wheels: tinypkg-1.0-py3-none-any.whl (tinypkg 1.0) is missing from {folder}" in r.stderr, r.stderr
    make_wheel(folder, "tinypkg", "1.0", requires=["numpy"])  # same name, other bytes
    r = run_cell(manifest, tmp_path / "input", tmp_path / "target")
    assert "tinypkg-1.0-py3-none-any.whl in" in r.stderr and "(sha256 differs)" in r.stderr, r.stderr
    r = run_cell(manifest, tmp_path / "elsewhere", tmp_path / "target")
    assert (f"wheels: the data set me/tiny-wheels is not attached (no wheels-manifest.json naming it under "
            f"{tmp_path / 'elsewhere'}): add it to the kernel's dataset_sources") in r.stderr, r.stderr
    assert r.returncode != 0 and not (tmp_path / "target").exists()


# --- the command, against the fake Kaggle API --------------------------------------------------------
def test_wheels_command_publishes_records_and_the_push_attaches_and_installs_first(tmp_path):
    proj = make_project(tmp_path / "p", ["ttt_train_predict"])
    links = tmp_path / "links"
    bnb = make_wheel(links, "bitsandbytes", PINS["bitsandbytes"], tag="py3-none-manylinux_2_24_x86_64", requires=["torch>=2.3"])
    peft = make_wheel(links, "peft", PINS["peft"], requires=["accelerate>=0.21.0", "transformers"])
    args = ["wheels", "ttt_train_predict", "--dataset", "tester/ttt-wheels", "--find-links", str(links),
            "--out", str(tmp_path / "w"), "--metadata", str(proj / "kernel-metadata.json")]
    with FakeKaggle() as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(args, env)
        assert r.returncode == 0, r.stdout + r.stderr
        (version,) = fake.datasets["tester/ttt-wheels"]
        assert sorted(version["files"]) == sorted([bnb.name, peft.name, wheels.MANIFEST])
        assert version["files"][bnb.name] == bnb.read_bytes()
        manifest = json.loads((proj / "kernel-metadata.json").read_text())["wheels_sources"]["ttt_train_predict"]
        assert json.loads(version["files"][wheels.MANIFEST]) == manifest
        assert [(w["name"], w["version"]) for w in manifest["wheels"]] == [("bitsandbytes", PINS["bitsandbytes"]), ("peft", PINS["peft"])]
        r = cli(["push", "ttt_train_predict", *meta_args(proj, tmp_path / "b")], env)
        assert r.returncode == 0, r.stdout + r.stderr
        (push,) = fake.calls("SaveKernel")
    assert "tester/ttt-wheels" in push["body"]["datasetDataSources"]
    cells = json.loads(push["body"]["text"])["cells"]
    tags = [c["metadata"].get("tags", []) for c in cells]
    params = next(i for i, t in enumerate(tags) if "parameters" in t)
    at = next(i for i, t in enumerate(tags) if wheels.WHEELS_TAG in t)
    assert at == params + 1 and tags[at + 1] == ["kitlib-vendored"]  # after the parameters, before kitlib
    source = "".join(cells[at]["source"])
    assert hashlib.sha256(bnb.read_bytes()).hexdigest() in source and "_install_wheels(" in source
    assert "note: " in r.stderr and "attached dataset tester/ttt-wheels and a first cell installing its wheels" in r.stderr
    assert not [line for line in r.stderr.splitlines() if line.startswith("warning:") and ("bitsandbytes:" in line or "peft:" in line)]


def test_staging_warns_when_the_internet_is_off_and_no_wheels_provide_a_need(tmp_path):
    import kaggle_kit as kernels

    proj = make_project(tmp_path / "p", ["ttt_train_predict"])
    st = kernels.stage(proj / "notebooks" / "ttt_train_predict.py", tmp_path / "b", "tester",
                       kernels.load_project_metadata(proj / "kernel-metadata.json"))
    found = [w for w in st.warnings if w.startswith(("bitsandbytes:", "peft:"))]
    assert [w.split(":")[0] for w in found] == ["bitsandbytes", "peft"], st.warnings
    assert found[0].endswith("build and attach one: python -m kaggle_kit wheels ttt_train_predict --dataset OWNER/SLUG")
    st = kernels.stage(proj / "notebooks" / "ttt_train_predict.py", tmp_path / "b", "tester",
                       kernels.load_project_metadata(proj / "kernel-metadata.json"), parameters={"weights": "fp16", "lora_r": 0})
    assert not [w for w in st.warnings if w.startswith(("bitsandbytes:", "peft:"))], st.warnings
