"""The one probe of the machine that the torch runtime and the TF/Keras detectors share."""
from __future__ import annotations

from kitlib.run import hardware
from kitlib.keras import runtime as keras_runtime
from kitlib.keras import strategy


def test_tpu_evidence_reads_environment_and_device_files(monkeypatch):
    monkeypatch.setattr(hardware.glob, "glob", lambda pattern: [])
    for var in (*hardware.TPU_ENV_VARS, "PJRT_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    assert hardware.tpu_evidence() is None
    monkeypatch.setenv("TPU_PROCESS_ADDRESSES", "local")  # what Kaggle's TPU v5e-8 image sets
    assert hardware.tpu_evidence() == "TPU_PROCESS_ADDRESSES=local"
    monkeypatch.delenv("TPU_PROCESS_ADDRESSES")
    monkeypatch.setattr(hardware.glob, "glob", lambda pattern: ["/dev/accel0"] if "accel" in pattern else [])
    assert hardware.tpu_evidence() == "TPU device files in /dev"


def test_torch_and_keras_detectors_use_the_same_probe():
    assert strategy.tpu_evidence is hardware.tpu_evidence
    assert keras_runtime.Probes().tpu_evidence is hardware.tpu_evidence


def test_counts_without_accelerators():
    assert hardware.cpu_cores() >= 1
    assert hardware.cuda_device_count() == 0  # no GPU here; counted through NVML, CUDA untouched
    import torch

    assert not torch.cuda.is_initialized()
