"""scripts/kernels.py (the package kaggle_kit): staging with vendored kitlib, metadata
rules, and pushes through the real ``kaggle`` client (2.2.5 / kagglesdk 0.1.38) to the fake Kaggle
API of tests/support/fake_kaggle.py on 127.0.0.1 (reached through ``HTTP_PROXY`` with
``KAGGLE_API_ENVIRONMENT=LOCALHOST``)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest
from slugify import slugify

ROOT = Path(__file__).resolve().parents[1]

import kaggle_kit as kernels  # noqa: E402
from kaggle_kit import pairs as check_pairs  # noqa: E402
from support.fake_kaggle import FakeKaggle  # noqa: E402

PY = sys.executable  # the interpreter running the tests: its kaggle client is the one tested
KAGGLE_CLI = str(Path(PY).parent / "kaggle")
COMPETITION = "jigsaw-multilingual-toxic-comment-classification"
REAL_NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))
# as `kaggle kernels pull -m` writes it (kagglesdk's example of the field)
ATTACHED_MODEL = "someone/xlm-roberta/transformers/base/1"
PINNED_IMAGE = "gcr.io/kaggle-images/python@sha256:f4b6dd72d4ac48c76fbb02bce0798b80b284102886ad37e6041e9ab721dc8873"

FIXTURE = '''\
# %% [markdown]
# # Fixture kernel: vendored kitlib in fork and spawn children

# %% tags=["parameters"]
nprocs = 2

# %%
import sys
from pathlib import Path

if not Path("kitlib").is_dir() and Path("../kitlib").is_dir():
    sys.path.insert(0, str(Path("..").resolve()))

import importlib.util
import json
import multiprocessing as mp
import shutil

import kitlib
from kitlib import paths

print("parent kitlib:", kitlib.__file__)

# %%
children = {}
for method in ("fork", "spawn"):
    with mp.get_context(method).Pool(nprocs) as pool:
        specs = pool.map(importlib.util.find_spec, ["kitlib.paths"] * nprocs)
        data = pool.apply(paths.default_data_dir)
    children[method] = {"kitlib": sorted({s.origin for s in specs}), "data": str(data)}
print(children)

# %%
work = paths.working_dir()
shutil.copy(paths.default_data_dir() / "sample_submission.csv", work / "submission.csv")
(work / "children.json").write_text(json.dumps({"parent": kitlib.__file__, **children}, indent=1))
'''


def make_project(tmp: Path, notebooks: list[str], entries: dict | None = None) -> Path:
    """A scratch project: jupytext.toml, kernel-metadata.json (the repository's shared fields, its
    entries for the named notebooks, + ``entries``), notebooks/ with the fixture notebook and copies
    of the named repository notebooks, each synced."""
    (tmp / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "jupytext.toml", tmp / "jupytext.toml")
    meta = json.loads((ROOT / "kernel-metadata.json").read_text())
    meta["notebooks"] = {k: v for k, v in meta["notebooks"].items() if k in notebooks}
    for entry in meta["notebooks"].values():  # only the notebooks copied here can be used
        if "uses" in entry:
            entry["uses"] = [u for u in entry["uses"] if u in notebooks]
            if not entry["uses"]:
                del entry["uses"]
    for name in ("xla_ddp_train", "ttt_train_predict", "keras_sharded_lora"):  # model="auto" trains from an attached checkpoint
        if name in meta["notebooks"]:
            meta["notebooks"][name]["model_sources"] = [ATTACHED_MODEL]
    meta["notebooks"]["fixture_kernel"] = {"title": "Fixture kernel for tests", "accelerator": "none"}
    meta["notebooks"].update(entries or {})
    (tmp / "kernel-metadata.json").write_text(json.dumps(meta, indent=1))
    (tmp / "notebooks" / "fixture_kernel.py").write_text(FIXTURE)
    for name in notebooks:
        shutil.copy(ROOT / "notebooks" / f"{name}.py", tmp / "notebooks" / f"{name}.py")
    for py in (tmp / "notebooks").glob("*.py"):
        check_pairs.sync_pair(check_pairs.Pair(py, py.with_suffix(".ipynb")), "py")
    return tmp


def cli(args: list[str], env: dict | None = None, cwd: Path = ROOT, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(ROOT / "scripts" / "kernels.py"), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Read-only scratch project shared by the module (tests write only under their own tmp_path)."""
    return make_project(tmp_path_factory.mktemp("proj"), REAL_NOTEBOOKS)


@pytest.fixture
def fake():
    f = FakeKaggle(outputs={"submission.csv": b"id,toxic\n0,0.5\n", "notes/run.txt": b"done\n"}, log="fake log line\n")
    f.start()
    yield f
    f.stop()


def staged_cells(body_text: str):
    nb = json.loads(body_text)
    return nb, nb["cells"]


# ---------------------------------------------------------------------------------------------
# metadata rules
# ---------------------------------------------------------------------------------------------
def valid_meta(tmp_path, accelerator="tpu"):
    proj = make_project(tmp_path / "p", [], {"fixture_kernel": {"title": "Fixture kernel for tests", "accelerator": accelerator}})
    st = kernels.stage(proj / "notebooks" / "fixture_kernel.py", tmp_path / "build", "tester",
                       kernels.load_project_metadata(proj / "kernel-metadata.json"))
    return st


@pytest.fixture(scope="module")
def staged_tpu(tmp_path_factory):
    return valid_meta(tmp_path_factory.mktemp("staged"))


@pytest.mark.parametrize("field,value", [
    ("title", "Tiny"),
    ("title", "A" * 51),
    ("id", "tester/not-the-title-slug"),
    ("id", "tester/fixture-kernel-for-tests/3"),
    ("id", "fixture-kernel-for-tests"),
    ("enable_tpu", False),
    ("enable_gpu", True),
    ("machine_shape", "TpuV38"),
    ("machine_shape", "NvidiaTeslaT4"),
    ("is_private", "yes"),
    ("enable_internet", "maybe"),
    ("language", "r"),
    ("kernel_type", "script"),
    ("dataset_sources", ["just-a-slug"]),
    ("dataset_sources", "owner/data"),
    ("competition_sources", ["Not A Slug"]),
    ("kernel_sources", ["a/b/c/d"]),
    ("kernel_sources", ["owner/kernel/latest"]),
    ("kernel_sources", ["code/owner/kernel"]),
    ("model_sources", ["google/bert/pyTorch/base"]),
    ("model_sources", ["google/bert/pyTorch/base/v1"]),
    ("keywords", "nlp"),
    ("docker_image_pinning_type", "newest"),
    ("docker_image", PINNED_IMAGE),
    ("code_file", "missing.ipynb"),
    ("enable_gpus", True),
])
def test_each_bad_field_is_refused_naming_it(staged_tpu, field, value):
    st = staged_tpu
    kernels.validate_metadata(st.metadata, "tpu", st.folder)  # the staged metadata is valid
    meta = dict(st.metadata, **{field: value})
    with pytest.raises(kernels.MetadataError) as e:
        kernels.validate_metadata(meta, "tpu", st.folder)
    named = [p for p in e.value.problems if p.startswith(f"{field}:") or (field == "enable_gpus" and "enable_gpus" in p)]
    assert named, e.value.problems


def test_short_slug_refused_even_when_it_matches_the_title(staged_tpu):
    st = staged_tpu
    meta = dict(st.metadata, title="!!!!!ab", id="tester/ab")
    with pytest.raises(kernels.MetadataError) as e:
        kernels.validate_metadata(meta, "tpu", st.folder)
    assert any(p.startswith("id: slug 'ab' is shorter than 5") for p in e.value.problems), e.value.problems


@pytest.mark.parametrize("acc,tpu,gpu,shape", [("tpu", True, False, "TpuV5E8"), ("gpu", False, True, "NvidiaTeslaT4"), ("none", False, False, None)])
def test_accelerator_sets_flags_and_machine_shape(tmp_path, acc, tpu, gpu, shape):
    st = valid_meta(tmp_path, acc)
    assert (st.metadata["enable_tpu"], st.metadata["enable_gpu"], st.metadata.get("machine_shape")) == (tpu, gpu, shape)
    assert json.loads((st.folder / "kernel-metadata.json").read_text()) == st.metadata
    for other in {"tpu", "gpu", "none"} - {acc}:
        with pytest.raises(kernels.MetadataError, match="disagrees with the notebook's accelerator"):
            kernels.validate_metadata(st.metadata, other, st.folder)


def test_notebook_marker_must_agree_with_the_entry(tmp_path):
    nb = jupytext.reads(FIXTURE, fmt="py:percent")
    nb.metadata["kaggle"] = {"accelerator": "gpu"}
    project = {"notebooks": {"x": {"title": "Some kernel title", "accelerator": "tpu"}}}
    with pytest.raises(kernels.MetadataError, match="accelerator: kernel-metadata.json says 'tpu'"):
        kernels.derive_metadata(project, "x", "tester", kernels.notebook_accelerator(nb))
    meta, acc = kernels.derive_metadata({"notebooks": {"x": {"title": "Some kernel title"}}}, "x", "tester", "gpu")
    assert (acc, meta["machine_shape"], meta["enable_gpu"]) == ("gpu", "NvidiaTeslaT4", True)
    with pytest.raises(kernels.MetadataError, match="accelerator: notebooks.x declares none"):
        kernels.derive_metadata({"notebooks": {"x": {"title": "Some kernel title"}}}, "x", "tester", None)
    with pytest.raises(kernels.MetadataError, match="notebooks.y: no entry"):
        kernels.derive_metadata(project, "y", "tester")


def test_accelerator_marker_in_the_notebook_header(tmp_path):
    proj = make_project(tmp_path / "p", [], {"hdr": {"title": "Header marker kernel"}})
    py = proj / "notebooks" / "hdr.py"
    py.write_text("# ---\n# jupyter:\n#   kaggle:\n#     accelerator: gpu\n#   kernelspec:\n#     display_name: Python 3\n"
                  "#     language: python\n#     name: python3\n# ---\n\n# %%\nimport kitlib\n")
    check_pairs.sync_pair(check_pairs.Pair(py, py.with_suffix(".ipynb")), "py")
    assert "#   kaggle:\n#     accelerator: gpu\n" in py.read_text()  # jupytext.toml keeps the block
    st = kernels.stage(py, tmp_path / "b", "me", kernels.load_project_metadata(proj / "kernel-metadata.json"))
    assert (st.accelerator, st.metadata["machine_shape"], st.metadata["enable_gpu"]) == ("gpu", "NvidiaTeslaT4", True)
    assert jupytext.read(st.notebook).metadata["kaggle"] == {"accelerator": "gpu"}


def test_sources_are_normalised():
    n = kernels.normalise_source
    assert n("kernel_sources", "code/owner/some-kernel") == "owner/some-kernel"
    assert n("kernel_sources", "https://www.kaggle.com/code/owner/some-kernel/") == "owner/some-kernel"
    assert n("dataset_sources", " https://www.kaggle.com/datasets/owner/data ") == "owner/data"
    assert n("competition_sources", "competitions/" + COMPETITION) == COMPETITION
    assert n("competition_sources", "https://www.kaggle.com/c/" + COMPETITION) == COMPETITION
    assert n("model_sources", "models/google/bert/pyTorch/base/1") == "google/bert/pyTorch/base/1"
    meta, _ = kernels.derive_metadata(
        {"kernel_sources": ["code/a/k1", "a/k1"], "notebooks": {"x": {"title": "Some kernel title", "accelerator": "none"}}},
        "x", "tester")
    assert meta["kernel_sources"] == ["a/k1"]


def test_vendored_cell_carries_kitlib_and_comes_after_the_parameters(tmp_path):
    st = valid_meta(tmp_path)
    nb = jupytext.read(st.notebook)
    # kaggle.com shows the story first: the title, the parameters (still what papermill sees), then kitlib
    assert [(c.cell_type, c.metadata.get("tags")) for c in nb.cells[:4]] == [
        ("markdown", None), ("code", ["parameters"]), ("code", [kernels.VENDOR_TAG]), ("code", None)]
    assert nb.cells[1].source == "nprocs = 2"
    vendored = nb.cells[2]
    # only what the fixture imports (kitlib, kitlib.paths), not the 20-odd other modules
    assert sorted(kernels.vendored_files(vendored.source)) == ["__init__.py", "paths.py"]
    assert {"__init__.py", "paths.py", "infer.py", "run/replica.py", "run/runtime.py"} <= set(kernels.kitlib_files())
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # staging twice gives the same bytes (deterministic ids, no outputs)
    before = st.notebook.read_bytes()
    st2 = kernels.stage(st.source, tmp_path / "build", "tester", kernels.load_project_metadata(st.source.parents[1] / "kernel-metadata.json"))
    assert st2.notebook.read_bytes() == before


def test_the_inference_kernel_is_thin():
    """The inference notebook's vendored cell carries inference's wing only (no kitlib.training, no kitlib.cv,
    followed through lazy imports too, nor the packaged checkpoints' converters: kaggle_kit.vendor.NOT_VENDORED,
    nor the Keras side's version drift) and stays at most 150 K characters (issue 31); the training kernel
    carries training and cv."""
    from kaggle_kit.vendor import vendor_cell_source

    files = kernels.kitlib_files()
    sizes, closures = {}, {}
    for name in ("xla_multicore_inference", "xla_ddp_train"):
        nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
        closures[name] = kernels.import_closure([c.source for c in nb.cells if c.cell_type == "code"], files)
        sizes[name] = len(vendor_cell_source(closures[name]))
    thin = set(closures["xla_multicore_inference"])
    assert not {m for m in thin if m.startswith(("training/", "cv/"))}
    assert {"infer.py", "checkpoint.py", "outputs/blend.py", "run/runtime.py"} <= thin
    assert {"training/train.py", "cv/groups.py"} <= set(closures["xla_ddp_train"])
    assert not {"models/e5_convert.py", "models/gguf_convert.py", "models/smollm2.py"} & (thin | set(closures["xla_ddp_train"]))
    assert "compat/keras.py" not in thin | set(closures["xla_ddp_train"])  # the Keras side's drift: its kernel's
    assert sizes["xla_multicore_inference"] <= 150_000 < sum(map(len, closures["xla_multicore_inference"].values()))


def test_the_sharded_keras_kernel_carries_keras_and_not_the_torch_side():
    """The sharded LoRA notebook's vendored cell (issue 40 item 6) carries the Keras side's sharded path and the
    surfaces a run needs (the runs table, the state, the hand-off's marks), and none of the torch replica program:
    no training loop or launcher, no torch_xla backends, no inference replicas, no packaged converters."""
    files = kernels.kitlib_files()
    nb = jupytext.read(ROOT / "notebooks" / "keras_sharded_lora.py")
    closure = set(kernels.import_closure([c.source for c in nb.cells if c.cell_type == "code"], files))
    assert {"keras/sharded.py", "keras/sharded_run.py", "keras/sharded_predict.py", "keras/mesh.py", "keras/chip_plan.py",
            "training/runs.py", "training/resume.py", "training/marks.py", "outputs/merge.py"} <= closure
    backends = {m for m in files if m.startswith("run/backends/")} - {"run/backends/__init__.py", "run/backends/precision.py"}
    assert {"run/backends/xla_threads.py", "run/backends/launchers.py", "run/backends/collectives.py"} <= backends
    torch_side = backends | {m for m in files if m in (
        "training/loop.py", "training/train.py", "training/handoff.py", "training/plan.py", "infer.py", "run/runtime.py",
        "run/replica.py", "models/smollm2.py", "keras/model.py", "keras/data.py", "cv/splits.py")}
    assert {"training/loop.py", "infer.py", "run/runtime.py"} <= torch_side  # the names still exist to be left out
    assert not closure & torch_side, sorted(closure & torch_side)


def test_stage_refuses_a_pair_out_of_sync(tmp_path):
    proj = make_project(tmp_path / "p", [])
    py = proj / "notebooks" / "fixture_kernel.py"
    py.write_text(py.read_text().replace("nprocs = 2", "nprocs = 3"))
    r = cli(["validate", "--owner", "tester", "--metadata", str(proj / "kernel-metadata.json"), "--out", str(tmp_path / "b"), str(py)])
    assert r.returncode == 2, r.stderr
    assert "fixture_kernel.ipynb: differs from what jupytext makes of" in r.stderr
    assert "check_pairs.py --sync" in r.stderr


# ---------------------------------------------------------------------------------------------
# dry run and push against the fake Kaggle API
# ---------------------------------------------------------------------------------------------
def test_dry_run_each_notebook_sends_nothing(project, fake, tmp_path):
    env = fake.client_env(tmp_path / "cfg")
    out = tmp_path / "build"
    names = REAL_NOTEBOOKS + ["fixture_kernel"]
    r = cli(["push", "--dry-run", "--metadata", str(project / "kernel-metadata.json"), "--out", str(out),
             *[str(project / "notebooks" / f"{n}.py") for n in names]], env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(names)} kernel(s) valid; dry run: nothing sent" in r.stdout
    assert fake.requests == []
    for meta_file in out.glob("*/kernel-metadata.json"):
        assert json.loads(meta_file.read_text())["id"].startswith("tester/")  # owner from the credentials
    assert len(list(out.glob("*/kernel-metadata.json"))) == len(names)


@pytest.mark.parametrize("name", REAL_NOTEBOOKS + ["fixture_kernel"])
def test_push_each_notebook_records_vendored_kitlib_and_metadata(project, fake, tmp_path, name):
    env = fake.client_env(tmp_path / "cfg")
    outputs = tmp_path / "outputs"
    r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "build"),
             "--wait", "--poll", "0.05", "--timeout", "30", "--output", str(outputs),
             str(project / "notebooks" / f"{name}.py")], env)
    assert r.returncode == 0, r.stdout + r.stderr
    entry = json.loads((project / "kernel-metadata.json").read_text())["notebooks"][name]
    slug = slugify(entry["title"])
    (save,) = fake.calls("SaveKernel")
    body = save["body"]
    assert save["path"] == "/api/v1/kernels.KernelsApiService/SaveKernel" and save["authorized"]
    assert body["slug"] == f"tester/{slug}"
    assert body["newTitle"] == entry["title"]
    assert body["language"] == "python" and body["kernelType"] == "notebook"
    assert body["competitionDataSources"] == [COMPETITION]
    assert body.get("enableInternet", True) is False  # default true is left out of the body
    if entry["accelerator"] == "tpu":
        assert body["enableTpu"] is True and body["machineShape"] == "TpuV5E8" and not body.get("enableGpu")
    elif entry["accelerator"] == "gpu":  # 2x T4 (the test-time training kernel)
        assert body["enableGpu"] is True and body["machineShape"] == "NvidiaTeslaT4" and not body.get("enableTpu")
    else:
        assert not body.get("enableTpu") and not body.get("enableGpu") and "machineShape" not in body
    nb, cells = staged_cells(body["text"])
    code = [c for c in cells if c["cell_type"] == "code"]
    assert [c["metadata"].get("tags") for c in code[:2]] == [["parameters"], [kernels.VENDOR_TAG]]  # after the parameters
    cell = code.pop(1)
    vendored = kernels.vendored_files(cell["source"])
    assert vendored == kernels.import_closure([c["source"] for c in code], kernels.kitlib_files())
    assert "paths.py" in vendored and len(cell["source"]) < sum(map(len, vendored.values())) / 2 + 4000  # compressed
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    source_nb = jupytext.read(project / "notebooks" / f"{name}.ipynb")
    assert [c["source"] for c in code] == [c.source for c in source_nb.cells if c.cell_type == "code"]
    # waited QUEUED -> RUNNING -> COMPLETE, then downloaded the output and the log
    assert [c["body"] for c in fake.calls("GetKernelSessionStatus")][0] == {"userName": "tester", "kernelSlug": slug,
                                                                             "versionLabel": "1"}
    assert len(fake.calls("GetKernelSessionStatus")) == 3
    assert "COMPLETE" in r.stdout and f"pushed version 1: http://localhost/code/tester/{slug}" in r.stdout
    assert (outputs / slug / "v1" / "submission.csv").read_bytes() == b"id,toxic\n0,0.5\n"  # the version's own folder
    assert (outputs / slug / "v1" / "notes" / "run.txt").read_text() == "done\n"
    assert (outputs / slug / "v1" / f"{slug}.log").read_text() == "fake log line\n"


def test_source_normalisation_reaches_the_request(tmp_path, fake):
    proj = make_project(tmp_path / "p", [], {"fixture_kernel": {
        "title": "Fixture kernel for tests", "accelerator": "gpu",
        "kernel_sources": ["code/someone/some-kernel"], "dataset_sources": ["https://www.kaggle.com/datasets/someone/xlmr-weights"],
        "model_sources": ["models/google/bert/pyTorch/base/1"]}})
    r = cli(["push", "--metadata", str(proj / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
             str(proj / "notebooks" / "fixture_kernel.py")], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 0, r.stderr
    body = fake.calls("SaveKernel")[0]["body"]
    assert body["kernelDataSources"] == ["someone/some-kernel"]
    assert body["datasetDataSources"] == ["someone/xlmr-weights"]
    assert body["modelDataSources"] == ["google/bert/pyTorch/base/1"]
    assert body["enableGpu"] is True and body["machineShape"] == "NvidiaTeslaT4" and not body.get("enableTpu")


def test_bad_metadata_is_refused_before_anything_is_sent(tmp_path, fake):
    proj = make_project(tmp_path / "p", [], {"fixture_kernel": {
        "title": "Fixture kernel for tests", "accelerator": "tpu", "machine_shape": "TpuV38", "enable_gpu": True,
        "competition_sources": ["Bad Slug"]}})
    r = cli(["push", "--metadata", str(proj / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
             str(proj / "notebooks" / "fixture_kernel.py")], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 2
    for field in ("machine_shape:", "enable_gpu:", "competition_sources:"):
        assert field in r.stderr, r.stderr
    assert fake.requests == []


def test_server_push_error_fails_with_nonzero_exit(tmp_path, project):
    with FakeKaggle(push_error="Notebook not found: competition rules not accepted") as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
                 str(project / "notebooks" / "fixture_kernel.py")], env)
        assert r.returncode == 1
        assert "Kernel push error: Notebook not found: competition rules not accepted" in r.stderr
        # what this guards against: the kaggle CLI prints the same error and exits 0
        folder = next((tmp_path / "b").iterdir())
        k = subprocess.run([KAGGLE_CLI, "kernels", "push", "-p", str(folder)], env=env, capture_output=True, text=True, timeout=120)
        assert k.returncode == 0 and "Kernel push error: Notebook not found" in k.stdout
        assert len(fake.calls("SaveKernel")) == 2


def test_409_is_retried_then_pushed(tmp_path, project):
    with FakeKaggle(conflicts=2) as fake:
        r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
                 "--retry-wait", "0.05", str(project / "notebooks" / "fixture_kernel.py")], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("HTTP 409") == 2 and "pushed version 1" in r.stdout
        assert len(fake.calls("SaveKernel")) == 3
    with FakeKaggle(conflicts=5) as fake:
        r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
                 "--retries", "2", "--retry-wait", "0.05", str(project / "notebooks" / "fixture_kernel.py")], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 1 and "HTTP 409" in r.stderr
        assert len(fake.calls("SaveKernel")) == 3


def test_failed_run_is_an_error_and_its_log_is_downloaded(tmp_path, project):
    with FakeKaggle(statuses=("QUEUED", "RUNNING", "ERROR"), failure_message="cell 3 raised", log="Traceback ...\n") as fake:
        r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
                 "--wait", "--poll", "0.05", "--output", str(tmp_path / "o"), str(project / "notebooks" / "fixture_kernel.py")],
                fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 1
        assert "run ended ERROR: cell 3 raised" in r.stderr
        assert (tmp_path / "o" / "fixture-kernel-for-tests" / "v1" / "fixture-kernel-for-tests.log").read_text() == "Traceback ...\n"


def test_wait_times_out(tmp_path, project):
    with FakeKaggle(statuses=("QUEUED", "RUNNING")) as fake:
        r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
                 "--wait", "--poll", "0.1", "--timeout", "0.5", str(project / "notebooks" / "fixture_kernel.py")],
                fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 1 and "still RUNNING after 0.5 s (timeout)" in r.stderr
        assert 2 <= len(fake.calls("GetKernelSessionStatus")) <= 8


def test_status_and_output_commands(tmp_path, fake):
    env = fake.client_env(tmp_path / "cfg")
    r = cli(["status", "tester/fixture-kernel-for-tests"], env)
    assert r.returncode == 0 and r.stdout.strip() == "tester/fixture-kernel-for-tests: QUEUED"
    r = cli(["output", "tester/fixture-kernel-for-tests", "-o", str(tmp_path / "o")], env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "fixture-kernel-for-tests" / "latest" / "submission.csv").read_bytes() == b"id,toxic\n0,0.5\n"


def test_access_token_credentials(tmp_path, project):
    with FakeKaggle(username="token-user") as fake:
        env = fake.client_env(tmp_path / "cfg")
        del env["KAGGLE_USERNAME"], env["KAGGLE_KEY"]
        env["KAGGLE_API_TOKEN"] = "fake-access-token"
        r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(tmp_path / "b"),
                 str(project / "notebooks" / "fixture_kernel.py")], env)
        assert r.returncode == 0, r.stderr
        assert fake.calls("IntrospectToken")[0]["body"]["token"] == "fake-access-token"
        assert fake.calls("SaveKernel")[0]["body"]["slug"] == "token-user/fixture-kernel-for-tests"


def test_missing_credentials_fail_clearly_before_any_work(tmp_path, project, fake):
    env = fake.client_env(tmp_path / "cfg")
    del env["KAGGLE_USERNAME"], env["KAGGLE_KEY"]
    out = tmp_path / "b"
    r = cli(["push", "--all", "--metadata", str(project / "kernel-metadata.json"), "--out", str(out)], env)
    assert r.returncode == 3
    assert r.stderr.startswith("error: no Kaggle credentials") and "KAGGLE_API_TOKEN" in r.stderr and "kaggle.json" in r.stderr
    assert not out.exists() and fake.requests == []
    # a dry run needs no credentials, only an owner for the id
    r = cli(["push", "--dry-run", "--metadata", str(project / "kernel-metadata.json"), "--out", str(out),
             str(project / "notebooks" / "fixture_kernel.py")], env)
    assert r.returncode == 2 and "id: no owner" in r.stderr
    r = cli(["push", "--dry-run", "--owner", "someone", "--metadata", str(project / "kernel-metadata.json"), "--out", str(out),
             str(project / "notebooks" / "fixture_kernel.py")], env)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "fixture-kernel-for-tests" / "kernel-metadata.json").read_text())["id"] == "someone/fixture-kernel-for-tests"


# ---------------------------------------------------------------------------------------------
# run as Kaggle would
# ---------------------------------------------------------------------------------------------
def test_run_local_fixture_vendored_kitlib_in_fork_and_spawn_children(tmp_path):
    proj = make_project(tmp_path / "p", [])
    root = tmp_path / "run"
    r = cli(["run-local", str(proj / "notebooks" / "fixture_kernel.py"), "--metadata", str(proj / "kernel-metadata.json"),
             "--root", str(root)])
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    base = (root / "fixture-kernel-for-tests").resolve()
    work = base / "working"
    info = json.loads((work / "children.json").read_text())
    vendored = base / "tmp" / "vendored" / "kitlib"  # outside the kernel's output
    assert info["parent"] == str(vendored / "__init__.py")
    data = str((base / "input" / "competitions" / COMPETITION).resolve())
    for method in ("fork", "spawn"):
        assert info[method] == {"kitlib": [str(vendored / "paths.py")], "data": data}, method
    assert (work / "submission.csv").read_bytes() == (ROOT / "data" / "jigsaw-sample" / "sample_submission.csv").read_bytes()
    assert (base / "__notebook__.ipynb").is_file()
    assert sorted(p.name for p in work.rglob("*")) == ["children.json", "submission.csv"]  # the output: nothing else
    assert "Executing Cell" in r.stderr and "parent kitlib: " in r.stdout + r.stderr  # cell output shown as it runs


def test_run_local_failing_cell_is_an_error(tmp_path):
    proj = make_project(tmp_path / "p", [], {"broken": {"title": "Broken kernel for tests", "accelerator": "none"}})
    py = proj / "notebooks" / "broken.py"
    py.write_text("# %%\nimport kitlib\n\n# %%\nraise ValueError('boom in the kernel')\n")
    check_pairs.sync_pair(check_pairs.Pair(py, py.with_suffix(".ipynb")), "py")
    r = cli(["run-local", str(py), "--metadata", str(proj / "kernel-metadata.json"), "--root", str(tmp_path / "run")])
    assert r.returncode == 1
    assert "raised ValueError: boom in the kernel" in r.stderr
    assert (tmp_path / "run" / "broken-kernel-for-tests" / "tmp" / "vendored" / "kitlib" / "__init__.py").is_file()  # the vendored cell ran first


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in REAL_NOTEBOOKS if n == "xla_multicore_inference"])
def test_run_local_inference_notebook_as_kaggle_would(tmp_path, name):
    import pandas as pd

    proj = make_project(tmp_path / "p", [name])
    root = tmp_path / "run"
    args = ["run-local", str(proj / "notebooks" / f"{name}.py"), "--metadata", str(proj / "kernel-metadata.json"),
            "--root", str(root), "-p", "max_len", "32", "-p", "batch_size", "64"]
    # With no checkpoint attached (no training kernel in its table), model="auto" would refuse on
    # Kaggle after the session started: staging refuses it first (a random model would score chance);
    # the tiny model runs only when named.
    r = cli(args, timeout=600)
    assert r.returncode == 2 and "kernel_sources: the notebook predicts with model='auto'" in r.stderr, r.stderr
    base = root / "xlm-r-multicore-inference-on-tpu"
    assert not (base / "working").exists()
    r = cli([*args, "-p", "model", "tiny-random"], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    sub = pd.read_csv(base / "working" / "submission.csv", dtype={"id": str})
    sample = pd.read_csv(ROOT / "data" / "jigsaw-sample" / "sample_submission.csv", dtype={"id": str})
    assert list(sub["id"]) == list(sample["id"])
    assert sub["toxic"].between(0, 1).all()
    executed = (base / "__notebook__.ipynb").read_text()
    assert str((base / "tmp" / "vendored" / "kitlib").resolve()) in executed
    assert str((base / "input" / "competitions" / COMPETITION).resolve()) in executed


# ---------------------------------------------------------------------------------------------
# issue 13: what is pushed is what was meant, and what comes back is what Kaggle produced
# ---------------------------------------------------------------------------------------------
def add_notebook(proj: Path, name: str, source: str, entry: dict | None) -> Path:
    """Write ``notebooks/<name>.py`` (synced to its .ipynb) and its entry (None: no entry)."""
    py = proj / "notebooks" / f"{name}.py"
    py.write_text(source, encoding="utf-8")
    check_pairs.sync_pair(check_pairs.Pair(py, py.with_suffix(".ipynb")), "py")
    if entry is not None:
        meta = json.loads((proj / "kernel-metadata.json").read_text(encoding="utf-8"))
        meta["notebooks"][name] = entry
        (proj / "kernel-metadata.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    return py


def meta_args(proj: Path, out: Path) -> list[str]:
    return ["--metadata", str(proj / "kernel-metadata.json"), "--out", str(out)]


SMALL = '# %% [markdown]\n# # Another kernel\n\n# %%\nimport kitlib\n'


# 1. code_file names the entry's own notebook; every entry a notebook, every notebook an entry
@pytest.mark.parametrize("code_file,why", [
    ("does_not_exist.ipynb", "names no notebook in"),
    ("other_kernel.ipynb", "is notebook other_kernel's file"),
])
def test_code_file_must_be_the_entrys_own_notebook(tmp_path, code_file, why):
    proj = make_project(tmp_path / "p", [], {"fixture_kernel": {
        "title": "Fixture kernel for tests", "accelerator": "none", "code_file": code_file}})
    add_notebook(proj, "other_kernel", SMALL, {"title": "Other kernel for tests", "accelerator": "none"})
    out = tmp_path / "b"
    r = cli(["validate", "--owner", "tester", *meta_args(proj, out), str(proj / "notebooks" / "fixture_kernel.py")])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"notebooks.fixture_kernel.code_file: {code_file!r} {why}" in r.stderr
    assert "remove code_file" in r.stderr
    assert not out.exists() or not any(out.iterdir())  # nothing staged


def test_entry_without_notebook_and_notebook_without_entry_are_refused(tmp_path, fake):
    proj = make_project(tmp_path / "p", [], {"fixture_kernal": {"title": "Typo kernel for tests", "accelerator": "none"}})
    fixture = str(proj / "notebooks" / "fixture_kernel.py")  # the table is checked whole, whichever notebook is pushed
    r = cli(["push", "--dry-run", *meta_args(proj, tmp_path / "b"), fixture], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 2, r.stdout
    assert "notebooks.fixture_kernal: no notebook" in r.stderr and "(did you mean 'fixture_kernel'?)" in r.stderr
    assert "kernel(s) valid" not in r.stdout
    proj2 = make_project(tmp_path / "p2", [])
    add_notebook(proj2, "orphan", SMALL, None)
    r = cli(["push", "--dry-run", *meta_args(proj2, tmp_path / "b2"), str(proj2 / "notebooks" / "fixture_kernel.py")],
            fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 2 and "orphan.py: no entry in kernel-metadata.json 'notebooks'" in r.stderr, r.stderr
    assert fake.requests == []


# 2. internet off, but the notebook needs it
OFFLINE_CASES = {
    "pip": ("# %%\n# !pip install transformers==4.46.0\n\n# %%\nimport kitlib\n",
            "notebook cell 0 runs `pip install transformers==4.46.0`: pip install downloads from PyPI"),
    "pip-magic": ("# %% [markdown]\n# # T\n\n# %%\n# %pip install -q sentencepiece\n",
                  "notebook cell 1 runs `pip install -q sentencepiece`"),
    "from_pretrained": ("# %%\nfrom transformers import AutoModel\n\n# %%\nm = AutoModel.from_pretrained(\"xlm-roberta-base\")\n",
                        "notebook cell 1 calls from_pretrained('xlm-roberta-base'): a hub name"),
    "model-parameter": ('# %% tags=["parameters"]\nmodel = "xlm-roberta-base"\n\n# %%\nimport kitlib\n',
                        "notebook cell 0 parameter model = 'xlm-roberta-base' is a hub name"),
    "keras-preset": ('# %% tags=["parameters"]\npreset = "xlm_roberta_base_multi"\n',
                     "notebook cell 0 parameter preset = 'xlm_roberta_base_multi' is a hub name"),
}


@pytest.mark.parametrize("case", sorted(OFFLINE_CASES))
def test_internet_off_refuses_a_notebook_that_needs_it(tmp_path, case):
    source, message = OFFLINE_CASES[case]
    proj = make_project(tmp_path / "p", [])
    py = add_notebook(proj, "needs_net", source, {"title": "Needs the internet", "accelerator": "tpu"})
    project = kernels.load_project_metadata(proj / "kernel-metadata.json")
    assert project["enable_internet"] is False
    with pytest.raises(kernels.MetadataError) as e:
        kernels.stage(py, tmp_path / "b", "tester", project)
    assert any(p.startswith(f"enable_internet: false, but {message}") for p in e.value.problems), e.value.problems
    assert not (tmp_path / "b" / "needs-the-internet").exists()
    # with the internet on, the same notebook stages
    project["notebooks"]["needs_net"]["enable_internet"] = True
    assert kernels.stage(py, tmp_path / "b", "tester", project).warnings == ()


@pytest.mark.parametrize("source", [
    "# %%\n# !pip install --no-index --find-links /kaggle/input/wheels sentencepiece\n",
    '# %% tags=["parameters"]\nmodel = "/kaggle/input/xlmr/transformers/base/1"\n\n# %%\nimport kitlib\n',
    '# %% tags=["parameters"]\nmodel = "auto"\n\n# %%\nfrom transformers import AutoModel\nAutoModel.from_pretrained(model)\n',
])
def test_internet_off_accepts_what_works_offline(tmp_path, source):
    proj = make_project(tmp_path / "p", [])
    py = add_notebook(proj, "offline_ok", source, {"title": "Offline kernel for tests", "accelerator": "none"})
    st = kernels.stage(py, tmp_path / "b", "tester", kernels.load_project_metadata(proj / "kernel-metadata.json"))
    assert st.warnings == ()


def test_internet_off_push_refuses_and_warns_naming_the_cell(tmp_path, fake):
    proj = make_project(tmp_path / "p", [])
    add_notebook(proj, "needs_net", OFFLINE_CASES["pip"][0], {"title": "Needs the internet", "accelerator": "tpu"})
    add_notebook(proj, "maybe_net", "# %%\nimport os\nname = os.environ['MODEL']\n\n# %%\n"
                 "from transformers import AutoModel\nAutoModel.from_pretrained(name)\n",
                 {"title": "Maybe needs the internet", "accelerator": "none"})
    env = fake.client_env(tmp_path / "cfg")
    r = cli(["push", *meta_args(proj, tmp_path / "b"), str(proj / "notebooks" / "needs_net.py")], env)
    assert r.returncode == 2 and "enable_internet: false, but notebook cell 0 runs `pip install" in r.stderr, r.stderr
    assert fake.requests == []
    r = cli(["push", *meta_args(proj, tmp_path / "b"), str(proj / "notebooks" / "maybe_net.py")], env)
    assert r.returncode == 0, r.stderr
    assert "warning: " in r.stderr and "notebook cell 1 calls from_pretrained(name): cannot tell" in r.stderr
    assert len(fake.calls("SaveKernel")) == 1


# 3. a pinned image with a TPU
def test_pinned_docker_image_with_tpu_is_refused_naming_both_fields(tmp_path):
    proj = make_project(tmp_path / "p", [], {"fixture_kernel": {
        "title": "Fixture kernel for tests", "accelerator": "tpu", "docker_image": PINNED_IMAGE}})
    fixture = str(proj / "notebooks" / "fixture_kernel.py")
    r = cli(["validate", "--owner", "tester", *meta_args(proj, tmp_path / "b"), fixture])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"docker_image: pinned to {PINNED_IMAGE!r} together with the TPU accelerator" in r.stderr
    assert "machine_shape 'TpuV5E8'" in r.stderr
    meta = json.loads((proj / "kernel-metadata.json").read_text())
    meta["notebooks"]["fixture_kernel"]["accelerator"] = "none"  # a pinned image without a TPU is Kaggle's business
    (proj / "kernel-metadata.json").write_text(json.dumps(meta))
    r = cli(["validate", "--owner", "tester", *meta_args(proj, tmp_path / "b"), fixture])
    assert r.returncode == 0, r.stderr


# 4. output download: every page, no error body on disk, sizes, exit 1 on a failure
def test_output_download_reads_every_page(tmp_path):
    outputs = {f"shards/part-{i}.csv": f"part {i}\n".encode() for i in range(8)}
    outputs["submission.csv"] = b"id,toxic\n0,0.5\n"  # the 9th file: on the third page
    with FakeKaggle(outputs=outputs, page_size=3, log="log\n") as fake:
        r = cli(["output", "tester/fixture-kernel-for-tests", "-o", str(tmp_path / "o")], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 0, r.stderr
        assert [c["body"].get("pageToken", "") for c in fake.calls("ListKernelSessionOutput")] == ["", "3", "6"]
    dest = tmp_path / "o" / "fixture-kernel-for-tests" / "latest"
    for name, data in outputs.items():
        assert (dest / name).read_bytes() == data, name
    assert f"downloaded {dest / 'submission.csv'} (15 bytes)" in r.stdout
    assert r.stdout.count(" bytes") == 10  # nine files and the log, each with its size


def test_output_download_never_writes_an_error_body(tmp_path):
    dest = tmp_path / "o" / "fixture-kernel-for-tests" / "latest"
    dest.mkdir(parents=True)
    (dest / "gone.csv").write_bytes(b"an earlier good copy\n")
    with FakeKaggle(outputs={"gone.csv": b"x", "submission.csv": b"id\n", "empty.txt": b""}, missing=("gone.csv",)) as fake:
        r = cli(["output", "tester/fixture-kernel-for-tests", "-o", str(tmp_path / "o")], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 1
    assert "1 output file(s) not downloaded" in r.stderr and "gone.csv: HTTP 404" in r.stderr, r.stderr
    assert (dest / "gone.csv").read_bytes() == b"an earlier good copy\n"
    assert (dest / "submission.csv").read_bytes() == b"id\n"
    assert (dest / "empty.txt").read_bytes() == b"" and f"downloaded {dest / 'empty.txt'} (0 bytes)" in r.stdout
    assert "warning: tester/fixture-kernel-for-tests: output empty.txt is empty (0 bytes)" in r.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["empty.txt", "gone.csv", "submission.csv"]  # no temporary files left


def test_push_wait_output_fails_when_a_file_fails(tmp_path, project):
    with FakeKaggle(outputs={"submission.csv": b"id\n"}, missing=("submission.csv",)) as fake:
        r = cli(["push", *meta_args(project, tmp_path / "b"), "--wait", "--poll", "0.05", "--output", str(tmp_path / "o"),
                 str(project / "notebooks" / "fixture_kernel.py")], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 1 and "submission.csv: HTTP 404" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "o" / "fixture-kernel-for-tests" / "v1" / "submission.csv").exists()


# 5. the client's warnings reach the user
def test_client_warning_on_readable_kaggle_json_is_passed_through(tmp_path, fake):
    env = fake.client_env(tmp_path / "cfg")
    del env["KAGGLE_USERNAME"], env["KAGGLE_KEY"]
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "kaggle.json").write_text(json.dumps({"username": "tester", "key": "fake-key"}))
    (tmp_path / "cfg" / "kaggle.json").chmod(0o644)
    r = cli(["status", "tester/fixture-kernel-for-tests"], env)
    assert r.returncode == 0, r.stderr
    assert "kaggle: Warning: Your Kaggle API key is readable by other users on this system!" in r.stderr
    assert f"chmod 600 {tmp_path / 'cfg' / 'kaggle.json'}" in r.stderr


# 6. the same characters under any locale
CP1252_CLI = """
import builtins, io, runpy, sys
_open = io.open
def cp1252_open(file, mode="r", buffering=-1, encoding=None, *args, **kwargs):
    if "b" not in mode and encoding in (None, "locale"):
        encoding = "cp1252"  # what open() uses by default on a Windows machine with a Western locale
    return _open(file, mode, buffering, encoding, *args, **kwargs)
builtins.open = io.open = cp1252_open
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0] + "/kernels.py", run_name="__main__")
"""
TURKISH = ('# %% [markdown]\n# # Örnek satır: “quoted”\n\n# %%\nimport kitlib\ntext = "Örnek satır “tırnak” ğüşiöç"\n')


@pytest.mark.parametrize("locale_kind", ["cp1252", "ascii"])
def test_non_ascii_notebook_is_sent_as_written_under_any_locale(tmp_path, fake, locale_kind):
    proj = make_project(tmp_path / "p", [])
    add_notebook(proj, "turkish", TURKISH, {"title": "Örnek satır kernel", "accelerator": "none"})
    env = fake.client_env(tmp_path / "cfg")
    args = ["push", *meta_args(proj, tmp_path / "b"), str(proj / "notebooks" / "turkish.py")]
    if locale_kind == "cp1252":
        r = subprocess.run([PY, "-c", CP1252_CLI, str(ROOT / "scripts"), *args], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=180)
    else:  # a real C locale without UTF-8 mode: open() decodes ASCII
        env.update(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", PYTHONIOENCODING="utf-8")
        r = cli(args, env)
    assert r.returncode == 0, r.stdout + r.stderr
    body = fake.calls("SaveKernel")[0]["body"]
    assert body["newTitle"] == "Örnek satır kernel" and body["slug"] == "tester/ornek-satir-kernel"
    cells = json.loads(body["text"])["cells"]
    assert cells[0]["source"] == "# Örnek satır: “quoted”"
    assert 'text = "Örnek satır “tırnak” ğüşiöç"' in cells[-1]["source"]
    staged = tmp_path / "b" / "ornek-satir-kernel"
    for f in staged.iterdir():
        f.read_bytes().decode("ascii")  # every staged file is ASCII: \u escapes in JSON


# 7. a notebook saved by Kaggle's editor names its accelerator Kaggle's way
@pytest.mark.parametrize("kaggle_name,entry,ok", [
    ("tpuV5e8", "tpu", True), ("nvidiaTeslaT4", "gpu", True), ("TpuV6E8", "tpu-v6e", True), ("NvidiaH100", "h100", True),
    ("nvidiaTeslaT4", "tpu", False), ("tpuV9000", "tpu", False), ("nvidiaTeslaP100", "gpu", False),
])
def test_kaggle_accelerator_names_are_understood(tmp_path, kaggle_name, entry, ok):
    proj = make_project(tmp_path / "p", [])
    py = add_notebook(proj, "edited", "# ---\n# jupyter:\n#   kaggle:\n#     accelerator: " + kaggle_name
                      + "\n#   kernelspec:\n#     display_name: Python 3\n#     language: python\n#     name: python3\n# ---\n"
                      "\n# %%\nimport kitlib\n", {"title": "Edited on Kaggle", "accelerator": entry})
    project = kernels.load_project_metadata(proj / "kernel-metadata.json")
    if ok:
        st = kernels.stage(py, tmp_path / "b", "tester", project)
        shape = kernels.ACCELERATORS[entry].machine_shape
        assert (st.accelerator, st.metadata["machine_shape"]) == (entry, shape)
    else:
        with pytest.raises(kernels.MetadataError, match=f"accelerator: .*{kaggle_name!r}"):
            kernels.stage(py, tmp_path / "b", "tester", project)


# 9. run-local refuses parameters the notebook does not define
def test_run_local_refuses_unknown_parameters(tmp_path):
    proj = make_project(tmp_path / "p", [])
    root = tmp_path / "run"
    r = cli(["run-local", str(proj / "notebooks" / "fixture_kernel.py"), "--metadata", str(proj / "kernel-metadata.json"),
             "--root", str(root), "-p", "nproc", "1", "-p", "batch_sise", "2"])
    assert r.returncode == 2, r.stdout + r.stderr[-2000:]
    assert "unknown parameter 'nproc': the notebook's parameters cell does not define it (did you mean 'nprocs'?)" in r.stderr
    assert "unknown parameter 'batch_sise'" in r.stderr and "the parameters cell defines: nprocs" in r.stderr
    assert not (root / "fixture-kernel-for-tests").exists()  # nothing ran
    with pytest.raises(kernels.ParameterError, match="unknown parameter"):
        kernels.check_parameters(proj / "notebooks" / "fixture_kernel.ipynb", {"nprocz": 1})
    kernels.check_parameters(proj / "notebooks" / "fixture_kernel.ipynb", {"nprocs": 1})


# the design: the vendored cell is a real .py file, read as text
def test_vendored_cell_is_vendor_cell_py_and_writes_kitlib(tmp_path, monkeypatch):
    files = {"__init__.py": "X = 1\n", "sub/mod.py": "Y = 'ğ'\n"}
    src = kernels.vendor_cell_source(files)
    cell_file = ROOT / "kaggle_kit" / "vendor_cell.py"
    assert cell_file.read_text(encoding="utf-8").rstrip("\n") in src
    assert kernels.vendored_files(src) == files
    monkeypatch.setenv("KAGGLE_TMP_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    saved = {k: v for k, v in sys.modules.items() if k == "kitlib" or k.startswith("kitlib.")}
    try:
        exec(compile(src, "vendored", "exec"), {})
    finally:
        sys.modules.update(saved)
    assert (tmp_path / "vendored" / "kitlib" / "sub" / "mod.py").read_text(encoding="utf-8") == "Y = 'ğ'\n"
    assert (tmp_path / "vendored" / "kitlib" / ".vendored-by-kaggle-kit").read_text().strip() == kernels.kitlib_digest(files)


def test_a_packaged_name_without_its_converter_names_the_data_set_to_attach(tmp_path, monkeypatch):
    """In a kernel the converters are not vendored (NOT_VENDORED): naming the checkpoint with nothing attached
    says what to attach instead of failing on a missing module."""
    import importlib

    from kitlib.models import packaged

    real = importlib.import_module

    def vendored_kit(name, *a, **k):
        if name == "kitlib.models.e5_convert":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", vendored_kit)
    with pytest.raises(ModuleNotFoundError, match=r"model='multilingual-e5-small': its converted folder is not attached.*"
                                                  r"kitlib/models/e5_convert.py.*attach the data set"):
        packaged.PRETRAINED[packaged.E5](tmp_path)
