"""Inference with real torch_xla on PJRT CPU: device count, start method, shapes, compilations."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import write_slice
from kitlib.infer_template import InferConfig, _mp_fn
from kitlib.merge import merge_shards
from kitlib.runtime import detect_runtime, launch
from kitlib.shards import read_shard_info

pytestmark = pytest.mark.slow


def run(checkpoint, test_csv, out_dir, devices, start_method="fork", batch_size=8, max_len=64, buckets=(), processes=False):
    rt = detect_runtime(devices, prefer="cpu", cpu_processes=processes)
    cfg = InferConfig(checkpoint=str(checkpoint), test_csv=str(test_csv), shard_dir=str(out_dir / "shards"),
                      batch_size=batch_size, max_len=max_len, length_buckets=buckets,
                      processes=rt.processes, num_devices=rt.num_devices)
    launch(_mp_fn, (cfg,), rt, start_method)
    merge_shards([out_dir / "shards"], out_dir / "sub.csv", test=test_csv)
    infos = [read_shard_info(pq.read_schema(p)) for p in sorted((out_dir / "shards").iterdir())]
    return pd.read_csv(out_dir / "sub.csv", dtype={"id": str}, keep_default_na=False), infos


@pytest.fixture(scope="module")
def slice_103(tmp_path_factory):
    return write_slice(tmp_path_factory.mktemp("slice"), 103)[0]


@pytest.fixture(scope="module")
def one_device(sharp_checkpoint, slice_103, tmp_path_factory):
    return run(sharp_checkpoint, slice_103, tmp_path_factory.mktemp("d1"), 1)


def test_one_and_four_devices_agree(sharp_checkpoint, slice_103, one_device, tmp_path):
    sub1, infos1 = one_device
    sub4, infos4 = run(sharp_checkpoint, slice_103, tmp_path, 4)
    assert [i.world_size for i in infos4] == [4] * 4 and sorted(i.rank for i in infos4) == [0, 1, 2, 3]
    assert [i.num_samples for i in infos4] == [26] * 4  # ceil(103 / 4): one padding duplicate
    expected_ids = pd.read_csv(slice_103, dtype=str, keep_default_na=False)["id"].tolist()
    assert sub1["id"].tolist() == expected_ids == sub4["id"].tolist()
    assert sub1["toxic"].std() > 0.05  # a model whose outputs differ per row, so agreement means something
    np.testing.assert_allclose(sub4["toxic"].to_numpy(), sub1["toxic"].to_numpy(), atol=1e-5)


def test_spawn_start_method_matches_fork(sharp_checkpoint, slice_103, one_device, tmp_path):
    sub2, infos = run(sharp_checkpoint, slice_103, tmp_path, 2, start_method="spawn")
    assert sorted(i.rank for i in infos) == [0, 1]
    np.testing.assert_allclose(sub2["toxic"].to_numpy(), one_device[0]["toxic"].to_numpy(), atol=1e-5)


def test_one_process_per_cpu_device(sharp_checkpoint, slice_103, one_device, tmp_path):
    """cpu_processes: 3 processes with one PJRT CPU device each, ranked by the launcher."""
    sub3, infos = run(sharp_checkpoint, slice_103, tmp_path, 3, processes=True)
    assert sorted(i.rank for i in infos) == [0, 1, 2] and {i.world_size for i in infos} == {3}
    assert [i.num_samples for i in infos] == [35] * 3  # ceil(103 / 3): two padding duplicates
    assert {i.stats["xla_compiles"] for i in infos} == {1}  # each process compiles its own single graph
    np.testing.assert_allclose(sub3["toxic"].to_numpy(), one_device[0]["toxic"].to_numpy(), atol=1e-5)


def test_matches_plain_torch_on_cpu(sharp_checkpoint, slice_103, one_device):
    """The XLA path computes what eager PyTorch computes for the same padded inputs."""
    import torch

    from kitlib.data import read_csv_checked
    from kitlib.model import load_classifier, probabilities

    tok, model = load_classifier(sharp_checkpoint)
    texts = read_csv_checked(slice_103)["text"].tolist()
    enc = tok(texts, padding="max_length", truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        eager = probabilities(model(**enc).logits).numpy()
    np.testing.assert_allclose(one_device[0]["toxic"].to_numpy(), eager, atol=1e-5)


def test_compilations_do_not_grow_with_data(sharp_checkpoint, one_device, tmp_path):
    """Fixed [batch, max_len] shapes: one XLA graph, for 37 rows (ragged tail of 5) as for 103."""
    small = write_slice(tmp_path / "s", 37)[0]
    _, infos_small = run(sharp_checkpoint, small, tmp_path, 1)
    big = one_device[1][0].stats
    assert big["batches"] == 13 and infos_small[0].stats["batches"] == 5
    assert infos_small[0].stats["xla_compiles"] == big["xla_compiles"] == 1


def test_length_buckets_same_predictions_same_order(sharp_checkpoint, slice_103, one_device, tmp_path):
    """Rows sorted by length and padded to a few lengths: same rows, same order, same values."""
    from kitlib.infer_template import length_buckets

    buckets = length_buckets(sharp_checkpoint, slice_103, 64, 3)
    assert 2 <= len(buckets) <= 3 and buckets[-1] <= 64
    sub, infos = run(sharp_checkpoint, slice_103, tmp_path, 1, buckets=buckets)
    assert sub["id"].tolist() == one_device[0]["id"].tolist()
    np.testing.assert_allclose(sub["toxic"].to_numpy(), one_device[0]["toxic"].to_numpy(), atol=1e-5)
    # one graph per padded length that a batch used (PJRT CPU threads would each count their own)
    assert 2 <= infos[0].stats["xla_compiles"] <= len(buckets)
