"""From git to the leaderboard, round 2 (issue 25): a chain pushes, scores and submits exactly what
was meant. One test (or more) per numbered fault, against the fake Kaggle API
(tests/support/fake_kaggle.py) with the real ``kaggle`` client, as tests/test_kaggle_loop.py does."""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess

import pytest
from slugify import slugify

from test_kaggle_loop import INFER_SLUG, SAMPLE_IDS, TRAIN_SLUG, labels_and_predictions  # noqa: E402
from test_kernels import COMPETITION, ROOT, cli, make_project, meta_args  # noqa: E402

import kaggle_kit as kernels  # noqa: E402
from support.fake_kaggle import FakeKaggle  # noqa: E402

FAST = ["--poll", "0.05", "--score-poll", "0.05"]


@pytest.fixture(scope="module")
def chain_project(tmp_path_factory):
    """The repository's two chained notebooks and kernel-metadata.json (training with a model attached)."""
    return make_project(tmp_path_factory.mktemp("chain"), ["xla_ddp_train", "xla_multicore_inference"])


def chain_outputs(data: bytes) -> dict:
    return {TRAIN_SLUG: {1: {"artifacts/xlmr-toxic/config.json": b"{}"}}, INFER_SLUG: {2: {"submission.csv": data}}}


def injected(body: dict) -> str:
    cells = [c for c in json.loads(body["text"])["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    return "".join("".join(c["source"]) for c in cells)


# --- 1. a parameter meant for one notebook reaches all of them -----------------------------------
def test_role_parameter_is_refused_unqualified_and_aimed_at_one_member(tmp_path, chain_project):
    labels, preds, data = labels_and_predictions()
    with FakeKaggle(labels=labels, kernel_outputs=chain_outputs(data)) as fake:
        env = fake.client_env(tmp_path / "cfg")
        args = ["run", "xlmr", "--submit", *meta_args(chain_project, tmp_path / "b"), "--output", str(tmp_path / "o"), *FAST]
        r = cli([*args, "-p", "model=all-minilm-l6-v2"], env)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "-p model=...: 'model' means a different thing in each notebook of this run" in r.stderr
        assert "-p xla_ddp_train:model=... or -p xla_multicore_inference:model=..." in r.stderr
        assert fake.requests == []  # refused before anything was sent
        r = cli([*args, "-p", "xla_ddp_train:model=tiny-random", "-p", "max_len=64"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        train, infer = fake.calls("SaveKernel")
        assert injected(train["body"]) == '# Parameters\nmax_len = 64\nmodel = "tiny-random"\n'
        assert injected(infer["body"]) == "# Parameters\nmax_len = 64\n"  # the inference member keeps model="auto"
    table = r.stdout[r.stdout.index("effective parameters"):]
    row = next(line for line in table.splitlines() if line.split()[:1] == ["model"])
    assert row.split() == ["model", "'tiny-random'", "*", "'auto'"], table
    assert r.stdout.index("effective parameters") < r.stdout.index("pushed version 1")  # printed before pushing
    with pytest.raises(kernels.ParameterError, match="'xla_ddp_trian' is not a notebook of this run .*did you mean 'xla_ddp_train'"):
        kernels.parameters.split_parameters(["xla_ddp_trian:model=x"], {"xla_ddp_train": {"model": "auto"}})


# --- 2. a stale file can be submitted ------------------------------------------------------------
def test_submit_refuses_a_file_the_version_did_not_list(tmp_path, chain_project):
    labels, _, data = labels_and_predictions()
    out = tmp_path / "o"
    (out / INFER_SLUG).mkdir(parents=True)
    (out / INFER_SLUG / "submission.csv").write_bytes(data)  # an earlier run's file, where the old layout kept it
    outputs = {INFER_SLUG: {1: {"predictions.csv": b"id,toxic\n"}}}  # this version wrote no submission.csv
    with FakeKaggle(labels=labels, kernel_outputs=outputs) as fake:
        r = cli(["run", "xla_multicore_inference", "--submit", *meta_args(chain_project, tmp_path / "b"), "--output", str(out),
                 "-p", "model=tiny-random", *FAST], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 1, r.stdout + r.stderr
        assert (f"tester/{INFER_SLUG} version 1: its output listing holds no 'submission.csv' (it holds: predictions.csv): "
                "nothing was submitted") in r.stderr
        assert not fake.calls("StartSubmissionUpload") and not fake.calls("CreateSubmission")
    assert (out / INFER_SLUG / "v1" / "predictions.csv").is_file()  # the version's own folder


# --- 3. a chain's order is not checked -----------------------------------------------------------
@pytest.mark.parametrize("chain,uses,message", [
    (["xla_multicore_inference", "xla_ddp_train"], None,
     "chains.bad: xla_multicore_inference runs before xla_ddp_train, but notebooks.xla_multicore_inference.uses "
     "xla_ddp_train (it would read xla_ddp_train's previous output): list xla_ddp_train before xla_multicore_inference"),
    (["xla_ddp_train", "xla_multicore_inference", "xla_ddp_train"], None, "chains.bad: xla_ddp_train is listed twice"),
    (["xla_ddp_train", "xla_multicore_inference"], ["xla_multicore_inference"], "use each other in a cycle"),
])
def test_chain_is_a_dependency_graph_checked_before_anything_is_pushed(tmp_path, chain, uses, message):
    proj = make_project(tmp_path / "p", ["xla_ddp_train", "xla_multicore_inference"])
    meta = json.loads((proj / "kernel-metadata.json").read_text())
    meta["chains"]["bad"] = chain
    if uses:
        meta["notebooks"]["xla_ddp_train"]["uses"] = uses
    (proj / "kernel-metadata.json").write_text(json.dumps(meta))
    with FakeKaggle() as fake:
        r = cli(["run", "bad", *meta_args(proj, tmp_path / "b"), "-p", "xla_ddp_train:model=tiny-random", *FAST],
                fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 2, r.stdout + r.stderr
        assert message in r.stderr, r.stderr
        assert fake.requests == []


# --- 4. the internet-off check ignores -p --------------------------------------------------------
@pytest.mark.parametrize("param,message", [
    ("model=xlm-roberta-base", "parameter model = 'xlm-roberta-base' is a hub name, downloaded when the notebook runs"),
    ("model=multilingual-e5-small", "parameter model = 'multilingual-e5-small' names a packaged model, converted by "
                                    "kitlib from wheels that Kaggle's image lacks"),
    ("accelerator=cuda", "accelerator: the notebook runs with accelerator='cuda', but the kernel's machine is 'tpu'"),
    ("model=/kaggle/input/gemma-gguf/gemma-3-1b-it-Q4_K_M.gguf", "model: the notebook opens the GGUF file "
     "'/kaggle/input/gemma-gguf/gemma-3-1b-it-Q4_K_M.gguf', which a kernel cannot convert"),
])
def test_checks_read_the_effective_values(tmp_path, chain_project, param, message):
    r = cli(["validate", "--owner", "t", *meta_args(chain_project, tmp_path / "b"), "xla_multicore_inference", "-p", param])
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr, r.stderr
    assert "kernel(s) valid" not in r.stdout


# --- 5. submit spends a submission on a file it could have refused -------------------------------
def test_submit_checks_the_file_locally_before_spending_a_submission(tmp_path):
    labels, _, data = labels_and_predictions()
    wrong = tmp_path / "wrong.csv"  # 5,000 rows of other ids: what Kaggle answered "expected 1000 distinct ids" for
    wrong.write_text("id,toxic\n" + "".join(f"x{i},0.5\n" for i in range(5000)))
    outside = tmp_path / "outside.csv"  # one probability above 1
    outside.write_text("".join(f"{SAMPLE_IDS[7]},1.5\n" if line.startswith(f"{SAMPLE_IDS[7]},") else line + "\n"
                               for line in data.decode().splitlines()))
    with FakeKaggle(labels=labels) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["submit", str(wrong), "--score-poll", "0.05"], env)
        assert r.returncode == 1
        assert f"{wrong}: 1000 id(s) of " in r.stderr and "sample_submission.csv missing" in r.stderr, r.stderr
        assert "Refused before uploading" in r.stderr and "--force submits it unchecked" in r.stderr
        r = cli(["submit", str(outside), "--score-poll", "0.05"], env)
        assert r.returncode == 1
        assert f"{outside}: column 'toxic': 1 value(s) outside [0, 1], for id(s) {SAMPLE_IDS[7]!r} (got 1.5)" in r.stderr, r.stderr
        assert not fake.calls("StartSubmissionUpload") and not fake.calls("CreateSubmission")
        assert fake.calls("DownloadDataFile")[0]["body"] == {"competitionName": COMPETITION, "fileName": "sample_submission.csv"}
        good = tmp_path / "submission.csv"
        good.write_bytes(data)
        r = cli(["submit", str(good), "--score-poll", "0.05"], env)
        assert r.returncode == 0, r.stderr
        assert "1000 rows, columns toxic: the ids and columns of" in r.stdout
        r = cli(["submit", str(wrong), "--force", "--score-poll", "0.05"], env)  # --force: sent, and Kaggle's scorer refuses it
        assert r.returncode == 1 and "not checked (--force)" in r.stdout and "ended ERROR: expected 1000 distinct ids" in r.stderr
        assert len(fake.calls("CreateSubmission")) == 2


# --- 6, 7. the push tool stands on its own, on the newest client ---------------------------------
def _requirements(name: str) -> list[str]:
    return [ln.split("#")[0].strip() for ln in (ROOT / "requirements" / name).read_text().splitlines() if ln.split("#")[0].strip()]


def test_push_environment_is_small_and_on_the_newest_client():
    push = _requirements("push.txt")
    assert {"kaggle==2.2.5", "kagglesdk==0.1.38", "jupytext==1.19.6"} <= set(push)
    heavy = ("torch", "tensorflow", "jax", "keras", "transformers")
    assert not [r for r in push if re.split(r"[=<>\[ ]", r)[0] in heavy], push
    assert "-r push.txt" in _requirements("torch.txt")  # the main job's environment has the push tool
    constraints = (ROOT / "constraints.txt").read_text().splitlines()
    assert "kaggle==2.2.5" in constraints and "kagglesdk==0.1.38" in constraints
    keras = (ROOT / "requirements" / "keras.txt").read_text()
    assert "keras-hub" not in "".join(_requirements("keras.txt"))  # installed with --no-deps, its pin explained there
    hub = (ROOT / "requirements" / "keras-hub.txt").read_text()
    assert "keras-hub==0.32.0" in hub and "kagglesdk==0.1.28" in hub and "--no-deps" in hub and "keras-hub.txt" in keras
    makefile = (ROOT / "Makefile").read_text()
    assert "setup-push:" in makefile and "--no-deps -r requirements/keras-hub.txt" in makefile
    readme = (ROOT / "README.md").read_text()
    assert "make setup-push" in readme
    sdk = (ROOT / "kaggle_kit" / "sdk.py").read_text()
    assert "class ApiSubmissionLimits" not in sdk and "FieldMetadata" not in sdk  # the SDK's own messages, not copies


def test_the_client_tested_is_the_pinned_one():
    assert importlib.metadata.version("kaggle") == "2.2.5" and importlib.metadata.version("kagglesdk") == "0.1.38"


PUSH_PY = ROOT / ".venv-push" / "bin" / "python"


@pytest.mark.skipif(not PUSH_PY.exists() and not os.environ.get("CI"), reason="make setup-push makes .venv-push (CI does)")
def test_push_tool_runs_the_chain_in_its_own_small_environment(tmp_path, chain_project):
    """The push environment (requirements/push.txt: no torch, no TensorFlow) against the fake API:
    help, the pair check, a chain run that submits and reads the score back."""
    assert PUSH_PY.exists(), "CI runs make setup-push first"
    r = subprocess.run([str(PUSH_PY), "-c", "import importlib.util as u; print([m for m in ('torch', 'tensorflow', 'jax') "
                        "if u.find_spec(m)])"], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for args in (["-m", "kaggle_kit", "--help"], [str(ROOT / "scripts" / "check_pairs.py")]):
        r = subprocess.run([str(PUSH_PY), *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
    labels, preds, data = labels_and_predictions()
    with FakeKaggle(labels=labels, kernel_outputs=chain_outputs(data)) as fake:
        fenv = {**fake.client_env(tmp_path / "cfg"), "PYTHONPATH": str(ROOT)}
        r = subprocess.run([str(PUSH_PY), "-m", "kaggle_kit", "run", "xlmr", "--submit", *meta_args(chain_project, tmp_path / "b"),
                            "--output", str(tmp_path / "o"), "-p", "xla_ddp_train:model=tiny-random", *FAST],
                           capture_output=True, text=True, timeout=300, cwd=ROOT, env=fenv)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "submission 1000 (submission.csv) scored: public" in r.stdout
        r = subprocess.run([str(PUSH_PY), "-c", "import kaggle, kagglesdk, importlib.metadata as m; "
                            "print(m.version('kaggle'), m.version('kagglesdk'))"], capture_output=True, text=True,
                           timeout=60, env=fenv)
        assert r.stdout.split() == ["2.2.5", "0.1.38"], r.stdout + r.stderr


# --- 8. the accelerator table is behind Kaggle's -------------------------------------------------
@pytest.mark.parametrize("name,key,shape,runtimes", [
    ("TpuV6E8", "tpu-v6e", "TpuV6E8", ("tpu",)), ("tpuV5e8", "tpu", "TpuV5E8", ("tpu",)),
    ("NvidiaH100", "h100", "NvidiaH100", ("cuda",)), ("nvidiaL4", "l4", "NvidiaL4", ("cuda",)),
    ("NvidiaRtxPro6000", "rtx-pro-6000", "NvidiaRtxPro6000", ("cuda",)), ("nvidiaTeslaT4", "gpu", "NvidiaTeslaT4", ("cuda",)),
])
def test_accelerator_table_follows_kaggles_list(name, key, shape, runtimes):
    assert kernels.accelerator_name(name) == key
    row = kernels.ACCELERATORS[key]
    assert (row.machine_shape, row.runtimes) == (shape, runtimes)
    meta, acc = kernels.derive_metadata({"notebooks": {"x": {"title": "Some kernel title", "accelerator": name}}}, "x", "t")
    assert (acc, meta["machine_shape"], meta["enable_tpu"], meta["enable_gpu"]) == (key, shape, row.kind == "tpu", row.kind == "gpu")


def test_p100_is_refused_with_the_reason(staged_fixture):
    st = staged_fixture
    meta = dict(st.metadata, enable_tpu=False, enable_gpu=True, machine_shape="NvidiaTeslaP100")
    with pytest.raises(kernels.MetadataError) as e:
        kernels.validate_metadata(meta, kernels.accelerator_name("nvidiaTeslaP100"), st.folder)
    assert any("accelerator: 'p100' (NvidiaTeslaP100) is refused" in p and "kaggle-cli #1156" in p
               and "cudaErrorNoKernelImageForDevice" in p for p in e.value.problems), e.value.problems


@pytest.fixture(scope="module")
def staged_fixture(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixture")
    proj = make_project(tmp / "p", [], {"fixture_kernel": {"title": "Fixture kernel for tests", "accelerator": "none"}})
    return kernels.stage(proj / "notebooks" / "fixture_kernel.py", tmp / "b", "tester",
                         kernels.load_project_metadata(proj / "kernel-metadata.json"))


# --- 10. small messages --------------------------------------------------------------------------
def test_model_name_that_resolves_nowhere_is_refused_before_any_download(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from kitlib.models.model import resolve_checkpoint

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    for name, hint in (("xlm-roberta-bas", "Did you mean 'xlm-roberta-base'?"), ("artifacts/xlmr-toxic", "")):
        with pytest.raises(FileNotFoundError) as e:
            resolve_checkpoint(name, data_dir=ROOT / "data" / "jigsaw-sample", cache_dir=tmp_path / "c")
        msg = str(e.value)
        assert msg.startswith(f"model={name!r} is neither a packaged name ('auto', 'tiny-random', ")
        assert "'multilingual-e5-small'" in msg and f"no {tmp_path / name}" in msg and hint in msg
        assert msg.endswith("Nothing was downloaded.") and len(msg) < 900 and e.value.__cause__ is None
    assert not (tmp_path / "hub").exists() or not any((tmp_path / "hub").rglob("*.safetensors"))
    ckpt = tmp_path / "artifacts" / "xlmr-toxic"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")  # papermill --cwd notebooks with a repository-relative path
    with pytest.raises(FileNotFoundError, match=re.escape(f"A checkpoint is at {ckpt}: pass model={str(ckpt)!r}")):
        resolve_checkpoint("artifacts/xlmr-toxic", data_dir=ROOT / "data" / "jigsaw-sample", cache_dir=tmp_path / "c")


@pytest.mark.parametrize("content,message", [
    ('{"username": "tester", "key": ', "does not parse as JSON (line 1, column 31: Expecting value)"),
    ('{"user": "tester", "token": "x"}', "no 'username' and no 'key' key (it has 'token', 'user')"),
    ('{"username": "tester"}', "no 'key' key"),
])
def test_a_bad_kaggle_json_is_named_with_what_is_wrong(tmp_path, content, message):
    with FakeKaggle() as fake:
        env = fake.client_env(tmp_path / "cfg")
        del env["KAGGLE_USERNAME"], env["KAGGLE_KEY"]
        (tmp_path / "cfg").mkdir()
        cfg = tmp_path / "cfg" / "kaggle.json"
        cfg.write_text(content)
        cfg.chmod(0o600)
        r = cli(["status", "tester/fixture-kernel-for-tests"], env)
    assert r.returncode == 3
    assert f"error: {cfg}: {message}" in r.stderr, r.stderr


# --- publish a checkpoint, attached by name ------------------------------------------------------
def test_publish_a_checkpoint_as_a_dataset_version_and_attach_it(tmp_path):
    proj = make_project(tmp_path / "p", ["xla_ddp_train", "xla_multicore_inference"])
    folder = tmp_path / "e5"  # what kitlib.models.packaged writes for multilingual-e5-small (small stand-ins)
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "model.safetensors").write_bytes(b"weights v1")
    (folder / "kitlib-source.json").write_text('{"model": "multilingual-e5-small"}')
    labels, _, data = labels_and_predictions()
    with FakeKaggle(labels=labels, kernel_outputs=chain_outputs(data)) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["publish", str(folder), "--dataset", "tester/e5-small-converted", "--metadata", str(proj / "kernel-metadata.json")], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "tester/e5-small-converted: created" in r.stdout
        (folder / "model.safetensors").write_bytes(b"weights v2")
        r = cli(["publish", str(folder), "--dataset", "tester/e5-small-converted", "-m", "v2",
                 "--metadata", str(proj / "kernel-metadata.json")], env)
        assert r.returncode == 0 and "tester/e5-small-converted: new version" in r.stdout, r.stdout + r.stderr
        versions = fake.datasets["tester/e5-small-converted"]
        assert [v["files"].get("model.safetensors") for v in versions] == [b"weights v1", b"weights v2"]
        assert versions[1]["notes"] == "v2" and sorted(versions[1]["files"]) == ["config.json", "kitlib-source.json", "model.safetensors"]
        assert json.loads((proj / "kernel-metadata.json").read_text())["packaged_sources"] == {
            "multilingual-e5-small": "tester/e5-small-converted"}
        # the done-when run: training from the published e5, inference on "auto"
        r = cli(["run", "xlmr", "--submit", *meta_args(proj, tmp_path / "b"), "--output", str(tmp_path / "o"),
                 "-p", "xla_ddp_train:model=multilingual-e5-small", *FAST], env)
        assert r.returncode == 0, r.stdout + r.stderr
        train, infer = fake.calls("SaveKernel")
        assert train["body"]["datasetDataSources"] == ["tester/e5-small-converted"] and not infer["body"].get("datasetDataSources")
        assert "attached dataset tester/e5-small-converted" in r.stderr and "scored: public" in r.stdout


def test_packaged_model_finds_its_published_copy_under_kaggle_input(tmp_path):
    from kitlib.models.model import attached_packaged

    copy = tmp_path / "input" / "e5-small-converted"
    copy.mkdir(parents=True)
    (copy / "config.json").write_text("{}")
    (copy / "kitlib-source.json").write_text('{"model": "multilingual-e5-small"}')
    assert attached_packaged("multilingual-e5-small", tmp_path / "input") == copy
    assert attached_packaged("all-minilm-l6-v2", tmp_path / "input") is None


def test_publish_refuses_a_checkpoint_without_weights(tmp_path):
    """Issue 34.3: a training kernel's output holding only artifacts/xlmr-toxic/config.json was published as a checkpoint."""
    proj = make_project(tmp_path / "p", ["xla_ddp_train", "xla_multicore_inference"])
    labels, _, data = labels_and_predictions()
    with FakeKaggle(labels=labels, kernel_outputs=chain_outputs(data)) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["publish", f"tester/{TRAIN_SLUG}/1", "--dataset", "tester/xlmr-toxic-v1",
                 "--metadata", str(proj / "kernel-metadata.json")], env)
        assert r.returncode != 0, r.stdout + r.stderr
        assert (f"tester/{TRAIN_SLUG} version 1: " in r.stderr and "holds no weights (it holds: config.json); a checkpoint "
                "needs one of *.safetensors, *.bin (or adapter_model.safetensors)") in r.stderr, r.stderr
        assert "tester/xlmr-toxic-v1" not in fake.datasets
    from kaggle_kit.publish import PublishError, check_weights

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(PublishError, match=r"the folder: .*ckpt holds no weights \(it holds: config.json\)"):
        check_weights(folder, "the folder")
    (folder / "adapter_model.safetensors").write_bytes(b"w")
    check_weights(folder, "the folder")


# --- issue 32: a LoRA training kernel and an inference kernel that loads base + adapters ---------
def test_lora_chain_trains_adapters_and_predicts_on_the_attached_base(tmp_path):
    """SmolLM2 published once as a data set; the chain's training kernel fine-tunes it with LoRA (its parameters
    reach that kernel only) and the inference kernel loads the base (base_model, attached by name) + the adapters."""
    proj = make_project(tmp_path / "p", ["xla_ddp_train", "xla_multicore_inference"])
    base = tmp_path / "smollm2"  # what kitlib.models.packaged writes for smollm2-135m (small stand-ins)
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    (base / "model.safetensors").write_bytes(b"base weights")
    (base / "kitlib-source.json").write_text('{"model": "smollm2-135m"}')
    labels, _, data = labels_and_predictions()
    adapter = {"artifacts/xlmr-toxic/config.json": b"{}", "artifacts/xlmr-toxic/adapter_config.json": b"{}",
               "artifacts/xlmr-toxic/adapter_model.safetensors": b"lora", "artifacts/xlmr-toxic/kitlib-adapter.json": b"{}"}
    with FakeKaggle(labels=labels, kernel_outputs={TRAIN_SLUG: {1: adapter}, INFER_SLUG: {2: {"submission.csv": data}}}) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["publish", str(base), "--dataset", "tester/smollm2-135m", "--metadata", str(proj / "kernel-metadata.json")], env)
        assert r.returncode == 0, r.stdout + r.stderr
        r = cli(["run", "xlmr", "--submit", *meta_args(proj, tmp_path / "b"), "--output", str(tmp_path / "o"),
                 "-p", "xla_ddp_train:model=smollm2-135m", "-p", "xla_ddp_train:kind=decoder", "-p", "xla_ddp_train:lora_r=16",
                 "-p", "xla_multicore_inference:base_model=smollm2-135m", "-p", "merge_adapters=false", *FAST], env)
        assert r.returncode == 0, r.stdout + r.stderr
        train, infer = fake.calls("SaveKernel")
        assert injected(train["body"]) == '# Parameters\nmodel = "smollm2-135m"\nkind = "decoder"\nlora_r = 16\n'
        assert injected(infer["body"]) == '# Parameters\nmerge_adapters = False\nbase_model = "smollm2-135m"\n'
        assert train["body"]["datasetDataSources"] == ["tester/smollm2-135m"]
        assert infer["body"]["datasetDataSources"] == ["tester/smollm2-135m"]  # the base, attached for base_model
        assert "scored: public" in r.stdout
    assert (tmp_path / "o" / TRAIN_SLUG / "v1" / "artifacts" / "xlmr-toxic" / "adapter_model.safetensors").is_file()
