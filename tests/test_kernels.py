"""scripts/kernels.py (the package scripts/kaggle_kernels): staging with vendored kitlib, metadata
rules, and pushes through the real ``kaggle`` client (2.2.1 / kagglesdk 0.1.28) to the fake Kaggle
API of scripts/fake_kaggle.py on 127.0.0.1 (reached through ``HTTP_PROXY`` with
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
sys.path.insert(0, str(ROOT / "scripts"))

import check_pairs  # noqa: E402
import kaggle_kernels as kernels  # noqa: E402
from fake_kaggle import FakeKaggle  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
KAGGLE_CLI = str(Path(PY).parent / "kaggle")
COMPETITION = "jigsaw-multilingual-toxic-comment-classification"
REAL_NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.py"))

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


def test_vendored_cell_carries_kitlib_and_comes_first(tmp_path):
    st = valid_meta(tmp_path)
    nb = jupytext.read(st.notebook)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.metadata["tags"] == [kernels.VENDOR_TAG]
    assert kernels.vendored_files(first_code.source) == kernels.kitlib_files()
    assert {"__init__.py", "paths.py", "infer_template.py", "runtime.py"} <= set(kernels.kitlib_files())
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # staging twice gives the same bytes (deterministic ids, no outputs)
    before = st.notebook.read_bytes()
    st2 = kernels.stage(st.source, tmp_path / "build", "tester", kernels.load_project_metadata(st.source.parents[1] / "kernel-metadata.json"))
    assert st2.notebook.read_bytes() == before


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
    else:
        assert not body.get("enableTpu") and not body.get("enableGpu") and "machineShape" not in body
    nb, cells = staged_cells(body["text"])
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code[0]["metadata"]["tags"] == [kernels.VENDOR_TAG]
    assert kernels.vendored_files(code[0]["source"]) == kernels.kitlib_files()
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    source_nb = jupytext.read(project / "notebooks" / f"{name}.ipynb")
    assert [c["source"] for c in code[1:]] == [c.source for c in source_nb.cells if c.cell_type == "code"]
    # waited QUEUED -> RUNNING -> COMPLETE, then downloaded the output and the log
    assert [c["body"] for c in fake.calls("GetKernelSessionStatus")][0] == {"userName": "tester", "kernelSlug": slug}
    assert len(fake.calls("GetKernelSessionStatus")) == 3
    assert "COMPLETE" in r.stdout and f"pushed version 1: http://localhost/code/tester/{slug}" in r.stdout
    assert (outputs / slug / "submission.csv").read_bytes() == b"id,toxic\n0,0.5\n"
    assert (outputs / slug / "notes" / "run.txt").read_text() == "done\n"
    assert (outputs / slug / f"{slug}.log").read_text() == "fake log line\n"


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
        assert (tmp_path / "o" / "fixture-kernel-for-tests" / "fixture-kernel-for-tests.log").read_text() == "Traceback ...\n"


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
    assert (tmp_path / "o" / "fixture-kernel-for-tests" / "submission.csv").read_bytes() == b"id,toxic\n0,0.5\n"


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
    r = cli(["push", "--metadata", str(project / "kernel-metadata.json"), "--out", str(out)], env)
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
    work = (root / "working").resolve()
    info = json.loads((work / "children.json").read_text())
    assert info["parent"] == str(work / "kitlib" / "__init__.py")
    data = str((root / "input" / "competitions" / COMPETITION).resolve())
    for method in ("fork", "spawn"):
        assert info[method] == {"kitlib": [str(work / "kitlib" / "paths.py")], "data": data}, method
    assert (work / "submission.csv").read_bytes() == (ROOT / "data" / "jigsaw-sample" / "sample_submission.csv").read_bytes()
    assert (root / "__notebook__.ipynb").is_file()


def test_run_local_failing_cell_is_an_error(tmp_path):
    proj = make_project(tmp_path / "p", [], {"broken": {"title": "Broken kernel for tests", "accelerator": "none"}})
    py = proj / "notebooks" / "broken.py"
    py.write_text("# %%\nimport kitlib\n\n# %%\nraise ValueError('boom in the kernel')\n")
    check_pairs.sync_pair(check_pairs.Pair(py, py.with_suffix(".ipynb")), "py")
    r = cli(["run-local", str(py), "--metadata", str(proj / "kernel-metadata.json"), "--root", str(tmp_path / "run")])
    assert r.returncode == 1
    assert "raised ValueError: boom in the kernel" in r.stderr
    assert (tmp_path / "run" / "working" / "kitlib" / "paths.py").is_file()  # the vendored cell ran first


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in REAL_NOTEBOOKS if n == "xla_multicore_inference"])
def test_run_local_inference_notebook_as_kaggle_would(tmp_path, name):
    import pandas as pd

    proj = make_project(tmp_path / "p", [name])
    root = tmp_path / "run"
    r = cli(["run-local", str(proj / "notebooks" / f"{name}.py"), "--metadata", str(proj / "kernel-metadata.json"),
             "--root", str(root), "-p", "max_len", "32", "-p", "batch_size", "64"], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    sub = pd.read_csv(root / "working" / "submission.csv", dtype={"id": str})
    sample = pd.read_csv(ROOT / "data" / "jigsaw-sample" / "sample_submission.csv", dtype={"id": str})
    assert list(sub["id"]) == list(sample["id"])
    assert sub["toxic"].between(0, 1).all()
    executed = (root / "__notebook__.ipynb").read_text()
    assert str((root / "working" / "kitlib").resolve()) in executed
    assert str((root / "input" / "competitions" / COMPETITION).resolve()) in executed
