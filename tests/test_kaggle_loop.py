"""From git to the leaderboard (issue 19): run a chain, submit, read the score back, against the fake
Kaggle API (tests/support/fake_kaggle.py) with the real ``kaggle`` client, as tests/test_kernels.py does.

Each numbered fault of issue 19 has a test here (or in tests/test_kernels.py / tests/test_params.py /
tests/test_blend.py, named in docs/kernels.md)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest
from slugify import slugify

from test_kernels import COMPETITION, ROOT, add_notebook, cli, make_project, meta_args  # noqa: E402

import kaggle_kit as kernels  # noqa: E402
from support.fake_kaggle import FakeKaggle, _auc  # noqa: E402

PY = sys.executable  # the interpreter running the tests: its kaggle client is the one tested
TRAIN_SLUG = slugify("XLM-R DDP training with torch_xla")
INFER_SLUG = slugify("XLM-R multicore inference on TPU")
SAMPLE_IDS = [line.split(",")[0] for line in (ROOT / "data" / "jigsaw-sample" / "sample_submission.csv").read_text().splitlines()[1:]]


def labels_and_predictions(seed=0):
    """Hidden labels for the sample's test ids, and a submission that scores well but not perfectly."""
    rng = random.Random(seed)
    labels = {i: int(rng.random() < 0.3) for i in SAMPLE_IDS}
    preds = {i: round(min(max(0.35 * y + rng.random() * 0.65, 0.0), 1.0), 6) for i, y in labels.items()}
    csv = "id,toxic\n" + "".join(f"{i},{preds[i]}\n" for i in SAMPLE_IDS)
    return labels, preds, csv.encode()


def expected_scores(labels, preds):
    from sklearn.metrics import roc_auc_score

    ids = sorted(labels)
    return tuple(f"{roc_auc_score([labels[i] for i in part], [preds[i] for i in part]):.5f}" for part in (ids[0::2], ids[1::2]))


def test_fake_scores_roc_auc_as_sklearn_does():
    labels, preds, _ = labels_and_predictions()
    from sklearn.metrics import roc_auc_score

    ids = sorted(labels)
    assert abs(_auc([labels[i] for i in ids], [preds[i] for i in ids]) - roc_auc_score([labels[i] for i in ids], [preds[i] for i in ids])) < 1e-12


# --- fault 1: nothing submits, no score comes back ----------------------------------------------
def test_submit_a_file_ends_complete_with_its_score_read_back(tmp_path):
    labels, preds, data = labels_and_predictions()
    sub = tmp_path / "submission.csv"
    sub.write_bytes(data)
    public, private = expected_scores(labels, preds)
    with FakeKaggle(labels=labels, pending_polls=2) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["submit", str(sub), "-m", "blend v1", "--score-poll", "0.05"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"{COMPETITION}: 5 submission(s) left today" in r.stdout
        assert f"submission 1000 (submission.csv) scored: public {public}, private {private}" in r.stdout
        start, = fake.calls("StartSubmissionUpload")
        assert start["body"]["competitionName"] == COMPETITION and start["body"]["contentLength"] == len(data)
        put, = [c for c in fake.requests if c["verb"] == "PUT"]
        assert put["body"] == {"_bytes": len(data)}
        assert fake.calls("CreateSubmission")[0]["body"]["submissionDescription"] == "blend v1"
        assert len(fake.calls("GetSubmission")) == 3  # PENDING, PENDING, COMPLETE
        r = cli(["submissions"], env)
        assert r.returncode == 0, r.stderr
        assert "1 submission(s)" in r.stdout and "COMPLETE" in r.stdout and f"public {public}" in r.stdout and "blend v1" in r.stdout


def test_a_submission_names_its_training_run_and_submissions_looks_it_up(tmp_path):
    """Issue 26 (a record of runs): the writer record of an inference's submission names the training
    run (kitlib.checkpoint.run_ids_of); submit puts it in the description; submissions finds the run's row
    in a downloaded kernel output's runs.csv and shows what it was."""
    from kitlib.outputs import provenance
    from kitlib.training import runs

    labels, _, data = labels_and_predictions()
    sub = tmp_path / "submission.csv"
    sub.write_bytes(data)
    provenance.record_writer(sub, provenance.INFER, source="model x", rows=len(labels), runs=["3f2a9c01be77"])
    root = tmp_path / "kernels"
    runs.append_run(root / "train-slug" / "v2" / "artifacts" / runs.RUNS_FILE, {
        "run_id": "3f2a9c01be77", "recipe": "e5", "epochs": 2, "best_epoch": 1, "monitor": "valid_auc",
        "best_value": 0.90231, "heldout_auc": 0.9017, "git_commit": "0123456789abcdef", "kitlib": "k1", "data": "d1"})
    with FakeKaggle(labels=labels) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["submit", str(sub), "-m", "e5 one epoch", "--score-poll", "0.05"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert fake.calls("CreateSubmission")[0]["body"]["submissionDescription"] == "e5 one epoch [runs 3f2a9c01be77]"
        r = cli(["submissions", "--runs-root", str(root)], env)
    assert r.returncode == 0, r.stderr
    assert ("run 3f2a9c01be77: recipe e5, kept epoch 1 of 2, valid_auc 0.9023, heldout_auc 0.9017, commit 0123456789, "
            "kitlib k1, data d1") in r.stdout, r.stdout
    assert str(root / "train-slug" / "v2" / "artifacts" / "runs.csv") in r.stdout


def test_submit_names_no_run_for_a_file_changed_after_its_writer_record(tmp_path):
    """Issue 33 item 6: a submission overwritten by hand keeps the old writer record beside it; submit
    tagged the new file with the old file's run. Now the record is checked against the file's sha256."""
    from kitlib.outputs import provenance

    labels, preds, data = labels_and_predictions()
    sub = tmp_path / "submission.csv"
    sub.write_bytes(data)
    provenance.record_writer(sub, provenance.INFER, source="model x", rows=len(labels), runs=["3f2a9c01be77"])
    _, _, other = labels_and_predictions(seed=1)
    sub.write_bytes(other)  # another model's predictions, copied over by hand
    with FakeKaggle(labels=labels) as fake:
        r = cli(["submit", str(sub), "-m", "copied by hand", "--score-poll", "0.05"], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 0, r.stdout + r.stderr
        assert fake.calls("CreateSubmission")[0]["body"]["submissionDescription"] == "copied by hand"
    assert f"note: {provenance.record_path(sub)} names run(s) 3f2a9c01be77, but {sub} changed after" in r.stdout


def test_submit_that_ends_error_exits_nonzero_with_the_reason(tmp_path):
    labels, _, data = labels_and_predictions()
    sub = tmp_path / "submission.csv"
    sub.write_bytes(data.replace(f"\n{SAMPLE_IDS[3]},".encode(), b"\nnot-an-id,"))
    with FakeKaggle(labels=labels) as fake:
        # --force: past the local check (issue 25.5), to see Kaggle's scorer refuse it
        r = cli(["submit", str(sub), "--score-poll", "0.05", "--force"], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 1
    assert "submission 1000 (submission.csv) ended ERROR: expected" in r.stderr and "1 unknown, 1 missing" in r.stderr


def test_submit_refused_by_the_daily_limit_says_how_many_remain_and_sends_nothing(tmp_path):
    labels, _, data = labels_and_predictions()
    sub = tmp_path / "submission.csv"
    sub.write_bytes(data)
    with FakeKaggle(labels=labels, daily_limit=1) as fake:
        env = fake.client_env(tmp_path / "cfg")
        assert cli(["submit", str(sub), "--score-poll", "0.05"], env).returncode == 0
        r = cli(["submit", str(sub), "--score-poll", "0.05"], env)
        assert r.returncode == 1
        assert f"{COMPETITION}: no submissions left today (0 remaining; 1 made today" in r.stderr and "nothing was sent" in r.stderr
        assert len(fake.calls("StartSubmissionUpload")) == 1 and len(fake.calls("CreateSubmission")) == 1


def test_submit_a_kernel_output_and_a_code_submission_by_version(tmp_path):
    labels, preds, data = labels_and_predictions()
    public, _ = expected_scores(labels, preds)
    with FakeKaggle(labels=labels, kernel_outputs={INFER_SLUG: {3: {"submission.csv": data}}}) as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["submit", "--kernel", f"tester/{INFER_SLUG}", "--version", "3", "--score-poll", "0.05"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert fake.calls("ListKernelSessionOutput")[0]["body"]["versionLabel"] == "3"
        assert f"public {public}" in r.stdout
        r = cli(["submit", "--kernel", f"tester/{INFER_SLUG}", "--version", "3", "--code", "--score-poll", "0.05"], env)
        assert r.returncode == 0, r.stdout + r.stderr
        body = fake.calls("CreateCodeSubmission")[0]["body"]
        assert body == {"competitionName": COMPETITION, "kernelOwner": "tester", "kernelSlug": INFER_SLUG, "kernelVersion": 3,
                        "fileName": "submission.csv", "submissionDescription": f"tester/{INFER_SLUG} v3"}
        assert f"public {public}" in r.stdout


# --- faults 3, 4, 5: the chain, its wiring, waiting, stale files ---------------------------------
@pytest.fixture
def repo_project(tmp_path):
    """The repository's kernel-metadata.json (chains, uses) with the training entry's model attached."""
    return make_project(tmp_path / "p", ["xla_ddp_train", "xla_multicore_inference"])


def test_full_chain_run_pushes_training_then_inference_on_its_output_and_submits(tmp_path, repo_project):
    labels, preds, data = labels_and_predictions()
    public, private = expected_scores(labels, preds)
    outputs = {TRAIN_SLUG: {1: {"artifacts/xlmr-toxic/config.json": b"{}", "artifacts/xlmr-toxic/train_history.json": b"{}"}},
               INFER_SLUG: {2: {"submission.csv": data}}}
    with FakeKaggle(labels=labels, kernel_outputs=outputs, statuses=("QUEUED", "RUNNING", "COMPLETE")) as fake:
        out = tmp_path / "o"
        r = cli(["run", "xlmr", "--submit", *meta_args(repo_project, tmp_path / "b"), "--output", str(out),
                 "--poll", "0.05", "--score-poll", "0.05", "-p", "epochs=1", "-p", "max_len=64"],
                fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 0, r.stdout + r.stderr
        saves = fake.calls("SaveKernel")
        assert [s["body"]["slug"] for s in saves] == [f"tester/{TRAIN_SLUG}", f"tester/{INFER_SLUG}"]
        assert saves[1]["body"]["kernelDataSources"] == [f"tester/{TRAIN_SLUG}"]  # filled in from owner/slug
        # -p goes to the notebooks that define it (epochs: training only), injected as papermill would
        for s, want in zip(saves, ["# Parameters\nepochs = 1\nmax_len = 64\n", "# Parameters\nmax_len = 64\n"]):
            injected = [c for c in json.loads(s["body"]["text"])["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
            assert ["".join(c["source"]) for c in injected] == [want]
        # each wait and download addressed the version just pushed
        assert {c["body"]["versionLabel"] for c in fake.calls("GetKernelSessionStatus")} == {"1", "2"}
        assert "RUNNING (0 min 00 s elapsed)" in r.stdout and f"  | {TRAIN_SLUG} version 1 log" in r.stdout
        # each version into its own folder (issue 25.2)
        assert (out / TRAIN_SLUG / "v1" / "artifacts" / "xlmr-toxic" / "config.json").read_bytes() == b"{}"
        assert (out / INFER_SLUG / "v2" / "submission.csv").read_bytes() == data
        assert (out / INFER_SLUG / "v2" / f"{INFER_SLUG}.log").read_text() == f"{INFER_SLUG} version 2 log\n"  # text, not Kaggle's JSON
        assert f"submission 1000 (submission.csv) scored: public {public}, private {private}" in r.stdout


def test_owner_is_followed_into_kernel_sources(tmp_path, repo_project):
    out = tmp_path / "b"
    r = cli(["validate", "--owner", "someone", *meta_args(repo_project, out), "xla_multicore_inference"])
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / INFER_SLUG / "kernel-metadata.json").read_text())
    assert meta["kernel_sources"] == [f"someone/{TRAIN_SLUG}"] and meta["id"] == f"someone/{INFER_SLUG}"


def test_timeout_downloads_nothing_stale_and_says_how_to_fetch_the_version_later(tmp_path, repo_project):
    stale = {TRAIN_SLUG: {1: {"artifacts/xlmr-toxic/config.json": b"previous version"}}}
    with FakeKaggle(kernel_outputs=stale, statuses=("QUEUED", "RUNNING")) as fake:
        fake._versions = 1  # version 1 ran earlier; this push is version 2
        out = tmp_path / "o"
        r = cli(["run", "xlmr", *meta_args(repo_project, tmp_path / "b"), "--output", str(out), "--poll", "0.1",
                 "--timeout", "0.6"], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 1
        assert "still RUNNING after 0.6 s (timeout). The run goes on on Kaggle; nothing was downloaded" in r.stderr
        assert f"python scripts/kernels.py output tester/{TRAIN_SLUG} --version 2 -o {out}" in r.stderr
        assert f"not pushed: tester/{INFER_SLUG}" in r.stderr and len(fake.calls("SaveKernel")) == 1
        assert not out.exists()  # the previous version's files were not handed over
        assert all(c["body"].get("versionLabel") == "2" for c in fake.calls("ListKernelSessionOutput"))


def test_default_wait_is_the_session_limit(tmp_path):
    r = subprocess.run([PY, str(ROOT / "scripts" / "kernels.py"), "run", "--help"], capture_output=True, text=True, timeout=120)
    assert "default 32400" in r.stdout and "9-hour TPU session limit" in r.stdout


def test_shipped_notebooks_that_would_surely_fail_are_refused(tmp_path):
    proj = tmp_path / "p"
    make_project(proj, ["xla_ddp_train", "xla_multicore_inference"])
    meta = json.loads((proj / "kernel-metadata.json").read_text())
    del meta["notebooks"]["xla_ddp_train"]["model_sources"]  # as shipped: no checkpoint attached
    del meta["notebooks"]["xla_multicore_inference"]["uses"]
    (proj / "kernel-metadata.json").write_text(json.dumps(meta))
    r = cli(["validate", "--owner", "t", *meta_args(proj, tmp_path / "b"), "xla_ddp_train", "xla_multicore_inference"])
    assert r.returncode == 2
    assert "model_sources: the notebook trains with model='auto'" in r.stderr
    assert "kernel_sources: the notebook predicts with model='auto'" in r.stderr
    r = cli(["validate", "--owner", "t", *meta_args(proj, tmp_path / "b"), "-p", "model=tiny-random",
             "xla_ddp_train", "xla_multicore_inference"])
    assert r.returncode == 0, r.stderr  # a smoke run named on purpose


def test_the_sharded_notebook_as_shipped_is_refused_naming_what_to_attach(tmp_path):
    """Issue 40 item 6: keras_sharded_lora pushed as it is (internet off, nothing attached) would refuse on Kaggle after
    the session started (kitlib.keras.sharded_run.resolve_base): the push refuses first, naming what to attach."""
    proj = tmp_path / "p"
    make_project(proj, ["keras_sharded_lora"])
    meta = json.loads((proj / "kernel-metadata.json").read_text())
    del meta["notebooks"]["keras_sharded_lora"]["model_sources"]  # as shipped
    (proj / "kernel-metadata.json").write_text(json.dumps(meta))
    r = cli(["validate", "--owner", "t", *meta_args(proj, tmp_path / "b"), "keras_sharded_lora"])
    assert r.returncode == 2 and "model_sources: the notebook trains with model='auto'" in r.stderr, r.stderr
    assert "or a decoder to shard), or pass -p model=tiny-random for a smoke run" in r.stderr
    r = cli(["validate", "--owner", "t", *meta_args(proj, tmp_path / "b"), "-p", "model=tiny-random", "keras_sharded_lora"])
    assert r.returncode == 0, r.stderr


def test_push_without_names_refuses_to_push_everything(tmp_path, repo_project):
    with FakeKaggle() as fake:
        env = fake.client_env(tmp_path / "cfg")
        r = cli(["push", *meta_args(repo_project, tmp_path / "b")], env)
        assert r.returncode == 2 and "name the notebooks to push" in r.stderr and "--all" in r.stderr
        assert fake.requests == []
        r = cli(["push", "--all", *meta_args(repo_project, tmp_path / "b")], env)
        assert r.returncode == 0, r.stderr
        assert len(fake.calls("SaveKernel")) == 3


# --- fault 2: parameters for a push, the same as the rehearsal -----------------------------------
def test_push_takes_parameters_checked_and_injected_as_the_rehearsal_does(tmp_path):
    proj = make_project(tmp_path / "p", [])
    fixture = str(proj / "notebooks" / "fixture_kernel.py")
    with FakeKaggle() as fake:
        env = fake.client_env(tmp_path / "cfg")
        for bad, message in (("nprocz=3", "unknown parameter 'nprocz': the notebook's parameters cell does not define it (did you mean 'nprocs'?)"),
                             ("nprocs=three", "parameter 'nprocs': got 'three' (str), but its default 2 wants an integer")):
            r = cli(["push", *meta_args(proj, tmp_path / "b"), "-p", bad, fixture], env)
            assert r.returncode == 2 and message in r.stderr, r.stderr
        assert fake.requests == []
        r = cli(["push", *meta_args(proj, tmp_path / "b"), "-p", "nprocs=3", fixture], env)
        assert r.returncode == 0, r.stderr
        pushed = json.loads(fake.calls("SaveKernel")[0]["body"]["text"])
    root = tmp_path / "run"
    r = cli(["run-local", fixture, "--metadata", str(proj / "kernel-metadata.json"), "--root", str(root), "-p", "nprocs", "3"])
    assert r.returncode == 0, r.stderr[-3000:]
    rehearsed = json.loads((root / ".staged" / "fixture-kernel-for-tests" / "fixture-kernel-for-tests.ipynb").read_text())
    text = lambda c: "".join(c["source"])  # noqa: E731 (the client sends sources as strings, nbformat writes lists)
    assert [text(c) for c in rehearsed["cells"]] == [text(c) for c in pushed["cells"]]
    executed = jupytext.read(root / "fixture-kernel-for-tests" / "__notebook__.ipynb")
    assert sum("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells) == 1


# --- fault 8: what Kaggle's editor left in the notebook -------------------------------------------
def test_staging_strips_the_editor_image_pin_and_disagreeing_flags_with_a_note(tmp_path):
    proj = make_project(tmp_path / "p", [])
    py = add_notebook(proj, "edited", "# ---\n# jupyter:\n#   kaggle:\n#     accelerator: tpuV5e8\n#     dockerImageVersionId: 30787\n"
                      "#     isInternetEnabled: true\n#     isGpuEnabled: false\n#   kernelspec:\n#     display_name: Python 3\n"
                      "#     language: python\n#     name: python3\n# ---\n\n# %%\nimport kitlib\n",
                      {"title": "Edited on Kaggle", "accelerator": "tpu"})
    nb = jupytext.read(py.with_suffix(".ipynb"))
    assert nb.metadata["kaggle"]["dockerImageVersionId"] == 30787  # the pair keeps what the editor wrote
    r = cli(["validate", "--owner", "t", *meta_args(proj, tmp_path / "b"), str(py)])
    assert r.returncode == 0, r.stderr
    staged = json.loads((tmp_path / "b" / "edited-on-kaggle" / "edited-on-kaggle.ipynb").read_text())
    assert staged["metadata"]["kaggle"] == {"isGpuEnabled": False, "accelerator": "tpu"}
    assert "note: " in r.stderr and "removed metadata.kaggle.dockerImageVersionId = 30787" in r.stderr
    assert "removed metadata.kaggle.isInternetEnabled = True" in r.stderr and "enable_internet: False" in r.stderr


# --- fault 4: run-local mounts sources; one root holds both rehearsals ---------------------------
PRODUCER = '# %%\nimport kitlib\nfrom kitlib import paths\n(paths.working_dir() / "model.txt").write_text("weights v1")\n'
CONSUMER = ('# %%\nimport kitlib\nfrom kitlib import paths\n'
            'src = paths.kaggle_input_dir() / "producer-kernel" / "model.txt"\n'
            '(paths.working_dir() / "submission.csv").write_text("id,toxic\\n0," + str(len(src.read_text())) + "\\n")\n')


def test_run_local_mounts_an_earlier_rehearsal_and_keeps_both(tmp_path):
    proj = make_project(tmp_path / "p", [])
    add_notebook(proj, "producer", PRODUCER, {"title": "Producer kernel", "accelerator": "none"})
    add_notebook(proj, "consumer", CONSUMER, {"title": "Consumer kernel", "accelerator": "none", "uses": ["producer"]})
    root = tmp_path / "run"
    args = ["--metadata", str(proj / "kernel-metadata.json"), "--root", str(root)]
    r = cli(["run-local", str(proj / "notebooks" / "consumer.py"), *args])
    assert r.returncode == 2 and "kernel_sources: 'local/producer-kernel': no earlier rehearsal wrote" in r.stderr, r.stderr
    assert cli(["run-local", str(proj / "notebooks" / "producer.py"), *args]).returncode == 0
    r = cli(["run-local", str(proj / "notebooks" / "consumer.py"), *args])
    assert r.returncode == 0, r.stderr[-3000:]
    assert (root / "consumer-kernel" / "working" / "submission.csv").read_text() == "id,toxic\n0,10\n"
    assert (root / "producer-kernel" / "working" / "model.txt").read_text() == "weights v1"  # not wiped
    assert (root / "consumer-kernel" / "input" / "producer-kernel" / "model.txt").is_file()
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "model.txt").write_text("weights v22")
    r = cli(["run-local", str(proj / "notebooks" / "consumer.py"), *args, "--input", f"producer-kernel={other}"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert (root / "consumer-kernel" / "working" / "submission.csv").read_text() == "id,toxic\n0,11\n"


def test_run_local_refuses_an_input_slug_the_kernel_does_not_read(tmp_path):
    """Issue 34.3: --input <slug>=DIR with a slug none of the kernel's sources was ignored, silently."""
    proj = make_project(tmp_path / "p", [])
    add_notebook(proj, "producer", PRODUCER, {"title": "Producer kernel", "accelerator": "none"})
    add_notebook(proj, "consumer", CONSUMER, {"title": "Consumer kernel", "accelerator": "none", "uses": ["producer"]})
    root, other = tmp_path / "run", tmp_path / "elsewhere"
    other.mkdir()
    (other / "model.txt").write_text("weights v22")
    args = ["--metadata", str(proj / "kernel-metadata.json"), "--root", str(root)]
    r = cli(["run-local", str(proj / "notebooks" / "consumer.py"), *args, "--input", f"producer-kernal={other}"])
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    assert ("--input producer-kernal=...: 'producer-kernal' is not a source of kernel 'local/consumer-kernel', so it "
            "would not be mounted; did you mean 'producer-kernel'? its kernel and data set sources: producer-kernel "
            "(local/producer-kernel)") in r.stderr, r.stderr
    assert not (root / "consumer-kernel").exists()  # nothing ran


# --- fault 7: the vendored cell carries the import closure, subpackages included ------------------
def test_import_closure_follows_subpackages_and_relative_imports():
    files = {"__init__.py": "", "paths.py": "import os\n", "data.py": "from .paths import x\n", "unused.py": "",
             "keras/__init__.py": "", "keras/model.py": "from ..data import y\n\ndef f():\n    from . import runtime\n",
             "keras/runtime.py": "", "keras/extra.py": ""}
    got = kernels.import_closure(["from kitlib.keras.model import build\n"], files)
    assert sorted(got) == ["__init__.py", "data.py", "keras/__init__.py", "keras/model.py", "keras/runtime.py", "paths.py"]
    assert sorted(kernels.import_closure(["from kitlib import keras, paths\n"], files)) == ["__init__.py", "keras/__init__.py", "paths.py"]


def test_vendored_cells_of_the_notebooks_are_thin_and_readable():
    files = kernels.kitlib_files()
    for name in ("xla_multicore_inference", "keras_xlmr_train"):
        nb = jupytext.read(ROOT / "notebooks" / f"{name}.ipynb")
        cells = kernels.vendor_notebook(nb, files).cells
        cell = next(c for c in cells if kernels.VENDOR_TAG in (c.metadata.get("tags") or []))
        first_code = next(c for c in cells if c.cell_type == "code")
        assert first_code.metadata["tags"] == ["parameters"]  # the story first, then kitlib
        vendored = kernels.vendored_files(cell.source)
        assert len(cell.source) < sum(map(len, vendored.values())) / 3 + 4000  # compressed (all of kitlib as text: 260 KB before)
        assert len(vendored) < len(files)
        assert cell.source.startswith("# kitlib, vendored by kaggle_kit")
        assert max(len(line) for line in cell.source.splitlines()) <= 130
        torch_side = {"infer.py", "run/replica.py", "run/runtime.py", "models/model.py"}
        keras_side = {k for k in files if k.startswith("keras") or k == "strategy.py"}
        if name == "keras_xlmr_train":
            assert not torch_side & set(vendored)
        else:
            assert torch_side <= set(vendored) and not keras_side & set(vendored)


# --- fault 5: downloads stream, the log is text ---------------------------------------------------
def test_download_streams_a_large_file_and_writes_the_log_as_text(tmp_path):
    big = bytes(range(256)) * (3 * 4096 + 7)  # 3 MB and a bit: several chunks
    log = json.dumps([{"stream_name": "stdout", "time": 0.5, "data": "epoch 1\n"}, {"stream_name": "stderr", "time": 1, "data": "done\n"}])
    with FakeKaggle(outputs={"artifacts/model.safetensors": big}, log=log) as fake:
        r = cli(["output", "tester/fixture-kernel-for-tests", "-o", str(tmp_path / "o")], fake.client_env(tmp_path / "cfg"))
    assert r.returncode == 0, r.stderr
    dest = tmp_path / "o" / "fixture-kernel-for-tests" / "latest"
    assert (dest / "artifacts" / "model.safetensors").read_bytes() == big
    assert (dest / "fixture-kernel-for-tests.log").read_text() == "epoch 1\ndone\n"


# --- fault 6: a kernel's output holds what the user needs ----------------------------------------
@pytest.mark.slow
def test_rehearsed_outputs_hold_only_what_the_user_needs(tmp_path, repo_project):
    """A training rehearsal, then an inference rehearsal on its output, in one root (as Kaggle would
    run them): each working folder (the kernel's output on Kaggle) holds the checkpoint, the history,
    the validation predictions, the submission, the run's state (to continue it) and its row of the
    runs table; no vendored code, caches, split copies or shards."""
    root = tmp_path / "run"
    args = ["--metadata", str(repo_project / "kernel-metadata.json"), "--root", str(root)]
    small = ["-p", "max_len", "32", "-p", "num_devices", "1", "-p", "batch_size", "8"]
    r = cli(["run-local", "xla_ddp_train", *args, *small, "-p", "model", "tiny-random", "-p", "epochs", "1",
             "-p", "train_limit", "96", "-p", "valid_limit", "32"], timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    r2 = cli(["run-local", "xla_multicore_inference", *args, *small], timeout=1200)
    assert r2.returncode == 0, r2.stdout[-2000:] + r2.stderr[-4000:]
    train_out = {p.relative_to(root / TRAIN_SLUG / "working").as_posix() for p in (root / TRAIN_SLUG / "working").rglob("*") if p.is_file()}
    infer_out = {p.relative_to(root / INFER_SLUG / "working").as_posix() for p in (root / INFER_SLUG / "working").rglob("*") if p.is_file()}
    ckpt = "artifacts/xlmr-toxic/"
    assert {ckpt + "config.json", ckpt + "model.safetensors", ckpt + "train_history.json"} <= train_out, train_out
    assert "submission.csv" in infer_out, infer_out
    clutter = ("kitlib/", ".cache/", "shards/", "english-holdout", "xla-compile", ".pyc", "tiny-xlmr")
    for name, files in ((TRAIN_SLUG, train_out), (INFER_SLUG, infer_out)):
        assert not [f for f in files if any(c in f for c in clutter)], (name, sorted(files))
    assert train_out == {ckpt + f for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                            "heldout_scores.json", "train_history.json", "valid_predictions.csv",
                                            "heldout_predictions.csv", "heldout_predictions.csv.writer.json", "curves.png",
                                            "handoff_passed.json", ".kitlib-owned")} | {  # the ready mark; what the kit wrote there (kitlib.atomic.MANIFEST)
        "artifacts/xlmr-toxic.state/" + f for f in ("run.json", "tensors.pt", "model.pt", ".kitlib-owned")} | {
        "artifacts/runs.csv"}, sorted(train_out)  # no lock files: removed when released (kitlib.locks)
    assert infer_out == {"submission.csv", "submission.csv.writer.json"}, sorted(infer_out)
    # the submission names the training run it came from (what submit puts in its description)
    history = json.loads((root / TRAIN_SLUG / "working" / ckpt / "train_history.json").read_text())
    record = json.loads((root / INFER_SLUG / "working" / "submission.csv.writer.json").read_text())
    assert record["runs"] == [history["run_id"]], record
