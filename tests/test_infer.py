"""Inference through ``predict(job, rt)``: every launch mode gives the same submission.

Eager CPU (the default with no accelerator), torch_xla on PJRT CPU as threads (``xla-cpu``, the
TPU rehearsal) and as processes, 1 to 4 replicas, ``fork`` and ``spawn``: the same predictions to
1e-5, from a model whose outputs spread (std > 0.05), so agreement means something.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE, write_slice
from kitlib.infer import InferJob, predict, replica_stats
from kitlib.outputs.merge import MergeError
from kitlib.run.runtime import ReplicaError, detect_runtime



def run(checkpoint, test_csv, out_dir, devices, accelerator="cpu", start_method="fork", **job):
    rt = detect_runtime(devices, accelerator)
    job = InferJob(checkpoint=str(checkpoint), test_csv=str(test_csv), shard_dir=str(out_dir / "shards"),
                   output_csv=str(out_dir / "sub.csv"),
                   # fp32: these tests compare predictions across paths ("auto" is bf16 on AMX / avx512_bf16 CPUs)
                   # collapsed="warn": tiny_checkpoint is the random model, named on purpose (kitlib.outputs.collapse)
                   **{"batch_size": 8, "max_len": 64, "num_buckets": 1, "precision": "fp32", "collapsed": "warn", **job})
    result = predict(job, rt, start_method)
    sub = pd.read_csv(out_dir / "sub.csv", dtype={"id": str}, keep_default_na=False)
    return sub, replica_stats(out_dir / "shards"), result


@pytest.fixture(scope="module")
def slice_103(tmp_path_factory):
    return write_slice(tmp_path_factory.mktemp("slice"), 103)[0]


@pytest.fixture(scope="module")
def reference(sharp_checkpoint, slice_103, tmp_path_factory):
    """One eager CPU replica, every batch max_len long."""
    return run(sharp_checkpoint, slice_103, tmp_path_factory.mktemp("ref"), 1)


def test_eager_cpu_is_the_default_and_matches_plain_torch(sharp_checkpoint, slice_103, reference, monkeypatch):
    import torch

    from kitlib.run import runtime
    from kitlib.data import read_csv_checked
    from kitlib.models.model import load_classifier, probabilities

    monkeypatch.setattr(runtime.hardware, "tpu_evidence", lambda: None)
    monkeypatch.setattr(runtime.hardware, "cuda_device_count", lambda: 0)
    assert detect_runtime().mode == "cpu"
    bf16 = runtime.hardware.cpu_bf16_feature()  # the precision rule: bf16 where the CPU computes it
    assert detect_runtime().backend.precision("auto") == ("bf16" if bf16 else "fp32")
    sub, stats, result = reference
    assert stats[0]["device"] == "cpu" and stats[0]["precision"] == "fp32" and "xla_compiles" not in stats[0]
    expected_ids = pd.read_csv(slice_103, dtype=str, keep_default_na=False)["id"].tolist()
    assert sub["id"].tolist() == expected_ids and result.num_rows == 103
    assert sub["toxic"].std() > 0.05  # a model whose outputs differ per row, so agreement means something
    tok, model = load_classifier(sharp_checkpoint)
    enc = tok(read_csv_checked(slice_103)["text"].tolist(), padding="max_length", truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        eager = probabilities(model(**enc).logits).numpy()
    np.testing.assert_allclose(sub["toxic"].to_numpy(), eager, atol=1e-5)


@pytest.mark.slow
def test_eager_replicas_and_buckets_agree(sharp_checkpoint, slice_103, reference, tmp_path):
    sub, stats, result = run(sharp_checkpoint, slice_103, tmp_path, 3, num_buckets=3)
    assert sorted(s["rank"] for s in stats) == [0, 1, 2] and {s["world_size"] for s in stats} == {3}
    assert sum(s["rows"] for s in stats) == 103 and result.num_padding_duplicates == 0  # split by tokens, no padding
    assert sub["id"].tolist() == reference[0]["id"].tolist()
    np.testing.assert_allclose(sub["toxic"].to_numpy(), reference[0]["toxic"].to_numpy(), atol=1e-5)


def test_replicas_get_rows_by_tokens_not_by_row_count(sharp_checkpoint, tmp_path):
    """Issue 39 item 9: every other row is long, so a round-robin split handed rank 0 every long row (640
    tokens against 40). Each rank's tokens, counted here from its shard's rows, are within one row of the
    other's, and the submission holds every input row once, in the test set's order."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    texts = [("toxic words and more words " * 20).strip() if i % 2 == 0 else "hi" for i in range(20)]
    test = pd.DataFrame({"id": [f"r{i:02d}" for i in range(20)], "content": texts})
    test.to_csv(tmp_path / "test.csv", index=False)
    sub, stats, result = run(sharp_checkpoint, tmp_path / "test.csv", tmp_path, 2, sample_submission="none")
    tok = AutoTokenizer.from_pretrained(str(sharp_checkpoint))
    length = {i: len(tok(t, truncation=True, max_length=64)["input_ids"]) for i, t in zip(test["id"], texts)}
    counted = {}
    for f in sorted((tmp_path / "shards").glob("shard-*.parquet")):
        shard = pq.read_table(f).to_pandas()
        counted[len(counted)] = sum(length[i] for i in shard["id"])
    assert sum(counted.values()) == sum(length.values())
    assert abs(counted[0] - counted[1]) <= max(length.values()), counted  # round-robin: 640 against 40
    assert [s["tokens"] for s in stats] == [counted[0], counted[1]]  # what each replica says it read
    assert sub["id"].tolist() == test["id"].tolist() and result.num_rows == 20 and result.num_padding_duplicates == 0


@pytest.mark.slow
def test_xla_cpu_threads_match_eager_and_compile_once_per_shape(sharp_checkpoint, slice_103, reference, tmp_path):
    sub, stats, _ = run(sharp_checkpoint, slice_103, tmp_path / "a", 4, accelerator="xla-cpu")
    assert [s["world_size"] for s in stats] == [4] * 4 and sum(s["rows"] for s in stats) == 103
    assert all(s["device"].startswith("xla:") for s in stats)
    # thread replicas share one process's compile counter: labelled as the process's, not a replica's
    assert all("xla_compiles_process" in s and "xla_compiles" not in s for s in stats)
    np.testing.assert_allclose(sub["toxic"].to_numpy(), reference[0]["toxic"].to_numpy(), atol=1e-5)
    # fixed [batch, max_len] shapes: one graph for 37 rows (ragged tail) as for 103, per process
    small = write_slice(tmp_path / "s", 37)[0]
    _, small_stats, _ = run(sharp_checkpoint, small, tmp_path / "b", 1, accelerator="xla-cpu-processes")
    _, big_stats, _ = run(sharp_checkpoint, slice_103, tmp_path / "c", 1, accelerator="xla-cpu-processes")
    assert small_stats[0]["batches"] == 5 and big_stats[0]["batches"] == 13
    assert small_stats[0]["xla_compiles"] == big_stats[0]["xla_compiles"] == 1


@pytest.mark.slow
def test_xla_cpu_processes_with_spawn_and_buckets(sharp_checkpoint, slice_103, reference, tmp_path):
    """One process per PJRT CPU device, ranked by the launcher; each counts its own compilations."""
    sub, stats, _ = run(sharp_checkpoint, slice_103, tmp_path, 2, accelerator="xla-cpu-processes",
                        start_method="spawn", num_buckets=3)
    assert sorted(s["rank"] for s in stats) == [0, 1] and all("xla_compiles" in s for s in stats)
    assert all(1 <= s["xla_compiles"] <= 3 for s in stats)  # one graph per padded length a batch used
    np.testing.assert_allclose(sub["toxic"].to_numpy(), reference[0]["toxic"].to_numpy(), atol=1e-5)


@pytest.mark.slow
def test_max_len_beyond_the_position_table_is_refused(tiny_checkpoint, slice_103, tmp_path):
    """XLM-R has 514 position slots, 512 usable: max_len=600 used to give a wrong value on XLA, exit 0."""
    with pytest.raises(ValueError, match=r"max_len=600 .* holds 512 tokens per row\. Set max_len <= 512"):
        run(tiny_checkpoint, slice_103, tmp_path, 1, accelerator="xla-cpu", max_len=600)
    assert not (tmp_path / "sub.csv").exists() and not (tmp_path / "shards").exists()
    run(tiny_checkpoint, slice_103, tmp_path, 1, max_len=512)  # the limit itself is fine


@pytest.mark.slow
def test_a_failing_replica_names_its_rank_and_leaves_no_submission(sharp_checkpoint, slice_103, tmp_path):
    """Rank 1 cannot write its shard (a folder sits at its shard's name): no merge, no submission."""
    (tmp_path / "shards" / "shard-00001-of-00002.parquet").mkdir(parents=True)
    (tmp_path / "sub.csv").write_text("id,toxic\nold,0.5\n")  # an earlier submission stays as it was
    with pytest.raises(ReplicaError, match=r"replica rank 1 failed: CannotWrite: cannot write \S*shard-00001-of-00002\.parquet: "
                                           r"Is a directory") as e:
        run(sharp_checkpoint, slice_103, tmp_path, 2)
    assert e.value.rank == 1
    assert (tmp_path / "sub.csv").read_text() == "id,toxic\nold,0.5\n"


@pytest.mark.slow
def test_bf16_autocast_keeps_float32_probabilities(sharp_checkpoint, tmp_path):
    """Under autocast the head runs in float32: logits leave the model as float32, 256 rows keep
    ~256 distinct probabilities."""
    import torch

    from kitlib.models.model import keep_head_float32, load_classifier

    tok, model = load_classifier(sharp_checkpoint)
    enc = tok(["a short comment", "another, longer comment here"], padding=True, return_tensors="pt")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(**enc).logits.dtype == torch.bfloat16  # what autocast gives without the kit
        keep_head_float32(model)
        assert model(**enc).logits.dtype == torch.float32
    csv = write_slice(tmp_path / "d", 256)[0]
    sub, stats, _ = run(sharp_checkpoint, csv, tmp_path, 1, precision="bf16", batch_size=32)
    assert stats[0]["precision"] == "bf16"
    assert sub["toxic"].nunique() >= 250


@pytest.mark.slow
def test_two_runs_sharing_a_shard_folder_never_exchange_predictions(sharp_checkpoint, tiny_checkpoint, slice_103,
                                                                    reference, tmp_path, monkeypatch):
    """Run B (another model, 3 replicas) starts in A's shard folder after A's replicas finished and
    before A merges: B clears the folder and writes its shards. A refuses; B's submission is B's.

    On one host B is refused at its start by A's lock on the folder (kitlib.infer.output_locks;
    tests/test_locks.py); B here runs as a run the lock cannot see would (another host of a multi-host
    run on a shared disk, or a process outside the kit): the merge's run check is the second line."""
    import contextlib

    from kitlib import infer

    real_launch = infer.launch
    real_locks = infer.output_locks
    shared = tmp_path / "shared"
    job_b = InferJob(checkpoint=str(tiny_checkpoint), test_csv=str(slice_103), shard_dir=str(shared),
                     output_csv=str(tmp_path / "b.csv"), batch_size=8, max_len=64, num_buckets=1,
                     collapsed="warn")  # the random tiny model, on purpose

    def a_then_b(fn, plan, rt, start_method="fork", **kw):
        real_launch(fn, plan, rt, start_method, **kw)
        if plan.job.checkpoint == str(sharp_checkpoint):  # A's replicas are done: B runs now, unseen by A's lock
            monkeypatch.setattr(infer, "launch", real_launch)
            monkeypatch.setattr(infer, "output_locks", lambda job, rt: contextlib.ExitStack())
            predict(job_b, detect_runtime(3, "cpu"))
            monkeypatch.setattr(infer, "output_locks", real_locks)

    monkeypatch.setattr(infer, "launch", a_then_b)
    job_a = InferJob(checkpoint=str(sharp_checkpoint), test_csv=str(slice_103), shard_dir=str(shared),
                     output_csv=str(tmp_path / "a.csv"), batch_size=8, max_len=64, num_buckets=1)
    with pytest.raises(MergeError, match=r"shard-00000-of-00003\.parquet is a shard of another run \(run_id='[0-9a-f]{32}', "
                                         r"world size 3\), not of this run \(run_id='[0-9a-f]{32}', world size 1\): two runs share"):
        predict(job_a, detect_runtime(1, "cpu"))
    assert not (tmp_path / "a.csv").exists()
    b = pd.read_csv(tmp_path / "b.csv", dtype={"id": str}, keep_default_na=False)
    a = reference[0]  # what A predicts alone
    assert b["id"].tolist() == a["id"].tolist()
    assert np.abs(b["toxic"].to_numpy() - a["toxic"].to_numpy()).max() > 0.05  # B's model really differs from A's


@pytest.mark.slow
def test_predict_without_sample_submission_reads_a_big_test_csv_with_quoted_newlines(tiny_checkpoint, tmp_path):
    """Over 1 MB, comments with newlines: the merge orders by the test file as read_csv_checked reads it."""
    from kitlib.data import read_csv_checked

    rows = 450
    text = [f"comment {i}, first line\n\"second\" line\r\n" + "word " * 500 for i in range(rows)]
    test = tmp_path / "test.csv"
    pd.DataFrame({"id": [f"{i:04d}" for i in range(rows)], "content": text}).to_csv(test, index=False)
    assert test.stat().st_size > 1 << 20
    rt = detect_runtime(2, "cpu")
    result = predict(InferJob(checkpoint=str(tiny_checkpoint), test_csv=str(test), shard_dir=str(tmp_path / "shards"),
                              output_csv=str(tmp_path / "sub.csv"), batch_size=32, max_len=16, num_buckets=1,
                              collapsed="warn"), rt)  # the random tiny model, on purpose
    sub = pd.read_csv(tmp_path / "sub.csv", dtype={"id": str}, keep_default_na=False)
    assert result.num_rows == rows and sub["id"].tolist() == read_csv_checked(test)["id"].tolist()


@pytest.mark.slow
def test_the_parent_tokenizes_in_chunks_and_keeps_no_text(tiny_checkpoint, tmp_path, monkeypatch):
    """5,000 rows: no tokenizer call in predict's process sees more than CHUNK_ROWS rows (one call
    over every row kept transformers' per-row lists for the whole set: 9.9 GB on the real test set)."""
    import transformers

    from kitlib import data, infer

    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    big = pd.concat([test.assign(id=test["id"] + f"-{k}") for k in range(5)])
    big.to_csv(tmp_path / "test.csv", index=False)
    calls, real = [], transformers.AutoTokenizer.from_pretrained

    def spying(*args, **kwargs):
        tok = real(*args, **kwargs)
        call = tok.__call__

        class Spy(type(tok)):
            def __call__(self, text, *a, **kw):
                calls.append(1 if isinstance(text, str) else len(text))
                return call(text, *a, **kw)

        tok.__class__ = Spy
        return tok

    seen = {}
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spying)
    monkeypatch.setattr(infer, "launch", lambda fn, plan, rt, start_method, **kw: seen.update(
        tokens=data.Tokens.load(plan.tokens_file), rows=plan.num_rows))
    predict(InferJob(checkpoint=str(tiny_checkpoint), test_csv=str(tmp_path / "test.csv"), shard_dir=str(tmp_path / "s"),
                     max_len=64), detect_runtime(1, "cpu"))
    assert sum(calls) >= 5000 and max(calls) <= data.CHUNK_ROWS, calls
    assert seen["rows"] == 5000 and isinstance(seen["tokens"].ids, np.memmap)  # the replicas map the packed ids


def stub_launch(spread: bool = True):
    """A launch that writes what the replicas would (one shard of every row) without a model:
    what reaches the merge is then predict's own doing."""
    from kitlib.data import read_ids
    from kitlib.outputs.shards import write_shard

    def launch(fn, plan, rt, start_method="fork", **kw):
        ids = read_ids(plan.job.test_csv)
        n = len(ids)
        probs = np.linspace(0.01, 0.99, n, dtype=np.float32) if spread else np.full(n, 0.5, np.float32)
        write_shard(plan.job.shard_dir, rank=0, world_size=1, num_rows=n, rows=np.arange(n), ids=ids,
                    predictions={plan.job.prediction_column: probs}, padding=np.zeros(n, bool), run_id=plan.run_id)
    return launch


def test_a_home_path_reaches_every_reader_and_writer(tiny_checkpoint, tmp_path, monkeypatch):
    """Issue 27 item 6: "~/test.csv" was "no such file"; "~/shards" was written as ./~/shards while
    pyarrow's merge read $HOME/shards. Every path is normalised once, in InferJob."""
    from kitlib import infer

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    write_slice(home, 20)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(infer, "launch", stub_launch())
    job = InferJob(checkpoint=str(tiny_checkpoint), test_csv="~/test.csv", shard_dir="~/shards",
                   output_csv="~/sub.csv", sample_submission="~/sample_submission.csv", max_len=32)
    assert (job.test_csv, job.shard_dir) == (str(home / "test.csv"), str(home / "shards"))
    result = predict(job, detect_runtime(1, "cpu"))
    assert result.num_rows == 20 and result.output == home / "sub.csv"
    assert [p.name for p in (home / "shards").iterdir()] == ["shard-00000-of-00001.parquet"]
    assert list(cwd.iterdir()) == []  # no literal ./~ folder


def test_train_job_paths_are_normalised_once(tmp_path, monkeypatch):
    from kitlib.training.job import TrainJob

    monkeypatch.setenv("HOME", str(tmp_path))
    job = TrainJob(checkpoint="~/ckpt", train_csv="~/train.csv", valid_csv="file://" + str(tmp_path / "v%20a.csv"),
                   out_dir="~/out")
    assert (job.checkpoint, job.train_csv, job.valid_csv, job.out_dir) == (
        str(tmp_path / "ckpt"), str(tmp_path / "train.csv"), str(tmp_path / "v a.csv"), str(tmp_path / "out"))


# issue 27 item 7: what the run's end needs is checked before the first replica starts.
def never_launch(fn, plan, rt, start_method="fork", **kw):
    raise AssertionError("a replica started before the run's end was checked")


def end_job(tiny_checkpoint, tmp_path, **kw):
    test, sample = write_slice(tmp_path / "d", 20)
    return InferJob(**{"checkpoint": str(tiny_checkpoint), "test_csv": str(test), "shard_dir": str(tmp_path / "shards"),
                       "output_csv": str(tmp_path / "out" / "sub.csv"), "sample_submission": str(sample), "max_len": 32, **kw})


@pytest.mark.parametrize("case,error,message", [
    ("extra column", ValueError, r"sample_submission\.csv: the sample submission's prediction columns are toxic, severe; "
                                 r"this run predicts toxic \(not predicted: severe\)"),
    ("misspelt", FileNotFoundError, r"sample_submission=\S*sample_submision\.csv: no such file\. .*sample_submission='none'"),
    ("other ids", ValueError, r"the sample submission's ids are not \S*test\.csv's: 1 test id\(s\) not in it: '\w+'; "
                              r"1 id\(s\) not in the test set: 'not-a-test-id'"),
])
def test_a_sample_submission_that_does_not_fit_is_refused_before_any_replica(tiny_checkpoint, tmp_path, monkeypatch,
                                                                             case, error, message):
    from kitlib import infer

    monkeypatch.setattr(infer, "launch", never_launch)
    job = end_job(tiny_checkpoint, tmp_path)
    sample = pd.read_csv(job.sample_submission, dtype=str, keep_default_na=False)
    if case == "extra column":
        sample.assign(severe="0.5").to_csv(job.sample_submission, index=False)
    elif case == "other ids":
        sample.iloc[1:].pipe(lambda d: pd.concat([d, pd.DataFrame({"id": ["not-a-test-id"], "toxic": ["0.5"]})])).to_csv(
            job.sample_submission, index=False)
    else:
        job = InferJob(**{**job.__dict__, "sample_submission": job.sample_submission.replace("submission", "submision")})
    with pytest.raises(error, match=message):
        predict(job, detect_runtime(1, "cpu"))
    assert not (tmp_path / "shards").exists() or not any((tmp_path / "shards").iterdir())


def test_an_output_folder_that_cannot_be_written_is_refused_before_any_replica(tiny_checkpoint, tmp_path, monkeypatch):
    from kitlib import infer
    from kitlib.storage import CannotWrite

    monkeypatch.setattr(infer, "launch", never_launch)
    (tmp_path / "out").write_text("a file where the output folder should be")
    with pytest.raises(CannotWrite, match=r"cannot write \S*out \(output_csv, checked before any work\): "):
        predict(end_job(tiny_checkpoint, tmp_path), detect_runtime(1, "cpu"))
    (tmp_path / "shards-file").write_text("a file where the shard folder should be")
    with pytest.raises(CannotWrite, match=r"cannot write \S*shards-file \(shard_dir, checked before any work\): "):
        predict(end_job(tiny_checkpoint, tmp_path, output_csv=str(tmp_path / "ok.csv"), shard_dir=str(tmp_path / "shards-file")),
                detect_runtime(1, "cpu"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_output_folder_is_refused_before_any_replica(tiny_checkpoint, tmp_path, monkeypatch):
    from kitlib import infer
    from kitlib.storage import CannotWrite

    monkeypatch.setattr(infer, "launch", never_launch)
    (tmp_path / "out").mkdir()
    (tmp_path / "out").chmod(0o555)
    try:
        with pytest.raises(CannotWrite, match=r"Permission denied"):
            predict(end_job(tiny_checkpoint, tmp_path), detect_runtime(1, "cpu"))
    finally:
        (tmp_path / "out").chmod(0o755)


def test_sample_submission_none_writes_the_test_sets_order(tiny_checkpoint, tmp_path, monkeypatch):
    from kitlib import infer

    monkeypatch.setattr(infer, "launch", stub_launch())
    job = end_job(tiny_checkpoint, tmp_path, sample_submission="none")
    assert job.sample_submission is None
    result = predict(job, detect_runtime(1, "cpu"))
    sub = pd.read_csv(result.output, dtype={"id": str}, keep_default_na=False)
    test = pd.read_csv(job.test_csv, dtype={"id": str}, keep_default_na=False)
    assert sub["id"].tolist() == test["id"].tolist() and list(sub.columns) == ["id", "toxic"]


def test_a_read_only_output_mount_is_refused_before_any_replica(tiny_checkpoint, tmp_path, monkeypatch):
    """As root a chmod does not stop a write (the test above is skipped): the mount's EROFS, as the system gives it."""
    import errno
    import tempfile

    from kitlib import infer, storage
    from kitlib.storage import CannotWrite

    real = tempfile.mkstemp

    def read_only(*a, dir=None, **kw):
        if dir is not None and Path(dir) == tmp_path / "out":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*a, dir=dir, **kw)

    monkeypatch.setattr(infer, "launch", never_launch)
    monkeypatch.setattr(storage.tempfile, "mkstemp", read_only)
    with pytest.raises(CannotWrite, match=r"cannot write \S*out \(output_csv, checked before any work\): Read-only file system") as e:
        predict(end_job(tiny_checkpoint, tmp_path), detect_runtime(1, "cpu"))
    assert e.value.errno == errno.EROFS


def test_an_eager_run_pads_to_a_few_lengths_however_many_rows():
    """Issue 27.12: eager replicas padded each sorted batch to its own longest row, so a run used up to
    max_len shapes, more the more rows it had; the CPU keeps memory for every shape it ran (oneDNN's
    primitives), and the notebook's process grew with the rows."""
    from kitlib.infer import EAGER_LENGTHS, padded_lengths

    rt = detect_runtime(1, "cpu")
    job = InferJob(checkpoint="unused", test_csv="unused", shard_dir="unused", max_len=128)
    rng = np.random.default_rng(0)
    for rows in (1_000, 32_000):
        lengths = np.minimum(rng.geometric(1 / 60, rows) + 2, 128)
        chosen = padded_lengths(lengths, job, rt)
        assert len(chosen) == EAGER_LENGTHS == 16 and chosen[-1] == lengths.max()
        assert list(chosen) == sorted(set(chosen)) and all(0 < c <= 128 for c in chosen)
    xla = detect_runtime(1, "xla-cpu")
    assert len(padded_lengths(lengths, job, xla)) == job.num_buckets  # XLA: num_buckets compiled shapes, as before


def test_an_eager_replica_gives_back_what_its_batches_freed(sharp_checkpoint, slice_103, reference, tmp_path, monkeypatch):
    """Issue 27.12: glibc kept what each batch freed (the notebook's process grew about 1 MiB a batch):
    the replica's loop gives it back every kitlib.run.heap.EVERY batches, and its logits go into one buffer."""
    from kitlib.run import heap

    calls = []
    monkeypatch.setattr(heap, "give_back_freed", lambda: calls.append(1) or True)
    sub, stats, _ = run(sharp_checkpoint, slice_103, tmp_path, 1, batch_size=4)
    assert stats[0]["batches"] == 26 and heap.EVERY == 8
    assert len(calls) == 1 + 26 // 8  # once after tokenizing, then every 8 batches
    np.testing.assert_allclose(sub["toxic"].to_numpy(), reference[0]["toxic"].to_numpy(), atol=1e-5)


def test_the_id_column_follows_the_sample_submissions_header(sharp_checkpoint, tmp_path):
    """Issue 39 item 10: a competition whose sample submission says ``row_id`` (ids like "007", strings, not 7) gets
    a submission with ``row_id`` in the sample's order through predict/merge, blend and cascade; an ``id_col`` that
    disagrees with the sample's header is refused before any work, naming both."""
    from kitlib.outputs.blend import blend
    from kitlib.outputs.cascade import cascade

    ids = ["007", "010", "0", "1e3", "42", "08"]
    pd.DataFrame({"row_id": ids, "content": [f"comment number {i} " * (i + 1) for i in range(6)]}).to_csv(
        tmp_path / "test.csv", index=False)
    order = ids[::-1]
    pd.DataFrame({"row_id": order, "toxic": 0.5}).to_csv(tmp_path / "sample.csv", index=False)
    read = lambda p: pd.read_csv(p, dtype=str, keep_default_na=False)  # noqa: E731
    with pytest.raises(ValueError, match=r"sample\.csv: no 'id' column \(id_col='id'; its header is row_id,toxic\)"):
        run(sharp_checkpoint, tmp_path / "test.csv", tmp_path, 1, sample_submission=str(tmp_path / "sample.csv"))
    assert not any((tmp_path / "shards").glob("*")) and not (tmp_path / "sub.csv").exists()  # refused before any work
    with pytest.raises(ValueError):  # the default: the header must say "id"
        run(sharp_checkpoint, tmp_path / "test.csv", tmp_path, 1)
    job = dict(sample_submission=str(tmp_path / "sample.csv"), id_col="row_id")
    rt = detect_runtime(1, "cpu")
    predict(InferJob(checkpoint=str(sharp_checkpoint), test_csv=str(tmp_path / "test.csv"),
                     shard_dir=str(tmp_path / "shards"), output_csv=str(tmp_path / "sub.csv"), batch_size=4, max_len=32,
                     precision="fp32", collapsed="warn", **job), rt)
    sub = read(tmp_path / "sub.csv")
    assert list(sub.columns) == ["row_id", "toxic"] and sub["row_id"].tolist() == order
    other = tmp_path / "other.csv"
    sub.assign(toxic=1 - pd.to_numeric(sub["toxic"])).iloc[::-1].to_csv(other, index=False)
    blend([tmp_path / "sub.csv", other], tmp_path / "blend.csv", rank=True, sample_submission=tmp_path / "sample.csv",
          collapsed="warn", id_col="row_id")
    cascade(tmp_path / "sub.csv", other, tmp_path / "cascade.csv", fraction=0.5, rule="reorder",
            sample_submission=tmp_path / "sample.csv", collapsed="warn", id_col="row_id")
    for name in ("blend.csv", "cascade.csv"):
        out = read(tmp_path / name)
        assert list(out.columns) == ["row_id", "toxic"] and out["row_id"].tolist() == order, name
