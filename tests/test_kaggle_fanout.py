"""Issue 26 on Kaggle: ``run --folds K`` / ``--seeds`` fans a chain out into one training kernel per
fold or seed, within the account's concurrency (the rest queued), then one inference kernel that
reads every fold's output and blends them, against the fake Kaggle API."""
from __future__ import annotations

import json

import pytest
from slugify import slugify

from test_kaggle_chain import injected  # noqa: E402
from test_kaggle_loop import INFER_SLUG, labels_and_predictions  # noqa: E402
from test_kernels import cli, make_project, meta_args  # noqa: E402

from support.fake_kaggle import FakeKaggle  # noqa: E402

TRAIN_TITLE = "XLM-R DDP training with torch_xla"
FAST = ["--poll", "0.05", "--score-poll", "0.05"]


@pytest.fixture(scope="module")
def chain_project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("fan"), ["xla_ddp_train", "xla_multicore_inference"])


def test_run_folds_pushes_one_training_kernel_per_fold_queued_then_one_inference_kernel_on_all(tmp_path, chain_project):
    labels, _, data = labels_and_predictions()
    folds = [slugify(f"{TRAIN_TITLE} fold {i}") for i in range(3)]
    outputs = {slug: {i + 1: {"artifacts/xlmr-toxic/config.json": f"fold {i}".encode()}} for i, slug in enumerate(folds)}
    outputs[INFER_SLUG] = {4: {"submission.csv": data}}
    with FakeKaggle(labels=labels, kernel_outputs=outputs, max_sessions=2) as fake:
        r = cli(["run", "xlmr", "--folds", "3", "--submit", *meta_args(chain_project, tmp_path / "b"),
                 "--output", str(tmp_path / "o"), "--max-concurrent", "3", "-p", "xla_ddp_train:model=tiny-random", *FAST],
                fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 0, r.stdout + r.stderr
        # three training kernels and one inference kernel, never more than the account's 2 sessions at once
        assert fake.kernel_versions == {folds[0]: 1, folds[1]: 2, folds[2]: 3, INFER_SLUG: 4}
        assert fake.peak_running == 2
        assert f"tester/{folds[2]}: queued" in r.stdout  # Kaggle refused the third while two ran: back in the queue
        saves = [c["body"] for c in fake.calls("SaveKernel")]
        pushed = {b["slug"]: b for b in saves}
        for i, slug in enumerate(folds):
            assert injected(pushed[f"tester/{slug}"]) == f'# Parameters\nmodel = "tiny-random"\nfold = {i}\nfolds = 3\n'
        infer = pushed[f"tester/{INFER_SLUG}"]
        assert infer["kernelDataSources"] == [f"tester/{s}" for s in folds]  # reads every fold's output
        assert saves[-1]["slug"] == f"tester/{INFER_SLUG}"  # pushed after every fold completed
        assert "scored: public" in r.stdout
    for i, slug in enumerate(folds):
        assert (tmp_path / "o" / slug / f"v{i + 1}" / "artifacts" / "xlmr-toxic" / "config.json").read_bytes() == f"fold {i}".encode()
    table = r.stdout[r.stdout.index("effective parameters"):]
    head = table.splitlines()[1].split()
    assert head[:2] == ["parameter", "xla_ddp_train"] and "xla_multicore_inference" in head
    fold_row = next(line for line in table.splitlines() if line.split()[:1] == ["fold"])
    assert fold_row.split() == ["fold", "0", "*", "1", "*", "2", "*", "-"], table


def test_run_seeds_fans_out_over_seed(tmp_path, chain_project):
    labels, _, data = labels_and_predictions()
    seeds = [slugify(f"{TRAIN_TITLE} seed {s}") for s in (7, 8)]
    with FakeKaggle(labels=labels, kernel_outputs={INFER_SLUG: {3: {"submission.csv": data}}}) as fake:
        r = cli(["run", "xlmr", "--seeds", "7,8", *meta_args(chain_project, tmp_path / "b"), "--output", str(tmp_path / "o"),
                 "-p", "xla_ddp_train:model=tiny-random", *FAST], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 0, r.stdout + r.stderr
        pushed = {c["body"]["slug"]: c["body"] for c in fake.calls("SaveKernel")}
        assert [injected(pushed[f"tester/{s}"]) for s in seeds] == [
            f'# Parameters\nmodel = "tiny-random"\nseed = {s}\n' for s in (7, 8)]
        assert pushed[f"tester/{INFER_SLUG}"]["kernelDataSources"] == [f"tester/{s}" for s in seeds]


@pytest.mark.parametrize("args,message", [
    (["--folds", "3", "-p", "fold=1"], "-p fold: set by the fan-out itself for each kernel"),
    (["--folds", "1"], "--folds 1: K folds need K >= 2"),
    (["--folds", "3", "--seeds", "0,1"], "--folds and --seeds: give one"),
    (["--seeds", "1,1"], "--seeds 1,1: give distinct integers"),
    # issue 33 item 8: "... seed -1" and "... seed 1" are one slug; both were pushed as one kernel
    (["--seeds=-1,1"], f"'xla_ddp_train seed -1' and 'xla_ddp_train seed 1' would both be pushed as the kernel "
                       f"tester/{slugify(TRAIN_TITLE + ' seed 1')} (Kaggle's slug keeps letters, digits and hyphens only)"),
])
def test_fan_out_refusals_send_nothing(tmp_path, chain_project, args, message):
    with FakeKaggle() as fake:
        r = cli(["run", "xlmr", *meta_args(chain_project, tmp_path / "b"), "-p", "xla_ddp_train:model=tiny-random", *args],
                fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 2 and message in r.stderr, r.stdout + r.stderr
        assert fake.requests == []


def test_a_failed_fold_stops_the_run_before_inference(tmp_path, chain_project):
    with FakeKaggle(statuses=("QUEUED", "RUNNING", "ERROR"), failure_message="fold raised") as fake:
        r = cli(["run", "xlmr", "--folds", "2", *meta_args(chain_project, tmp_path / "b"), "--output", str(tmp_path / "o"),
                 "-p", "xla_ddp_train:model=tiny-random", *FAST], fake.client_env(tmp_path / "cfg"))
        assert r.returncode == 1
        assert "run ended ERROR: fold raised" in r.stderr and f"not pushed: tester/{INFER_SLUG}" in r.stderr, r.stderr
        assert f"tester/{INFER_SLUG}" not in {c["body"]["slug"] for c in fake.calls("SaveKernel")}
