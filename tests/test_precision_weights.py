"""The weights' width by hardware, in the one precision rule (kitlib/models/weights.py, resolve_weights; the compute precision: kitlib/run/backends/precision.py)."""
from __future__ import annotations

import pytest

from kitlib.models import memory
from kitlib.models.weights import WeightsChoice, quantization_config, resolve_weights
from kitlib.run.backends.precision import Hardware, resolve

T4, H100, TPU = memory.DEVICES["T4"], memory.DEVICES["H100"], memory.DEVICES["TPU-v5e"]
CPU = memory.Device("this CPU", "cpu", 32.0)
RUN = dict(batch=8, length=256, train=True, lora_r=16)


@pytest.fixture(scope="module")
def qwen14(tmp_path_factory):
    """Qwen3-14B's shape as a LoRA r=16 decoder-kind run trains it (kitlib.training.plan.run_shape), counted on the
    meta device from its config (nothing allocated): a classifier of 13.99 B parameters, of which the adapters
    and the 1-logit score train (64.2 M)."""
    from transformers import Qwen3Config

    from kitlib.models.kinds import kind_for
    from kitlib.training.job import TrainJob
    from kitlib.training.plan import run_shape

    folder = tmp_path_factory.mktemp("q") / "Qwen3-14B"
    Qwen3Config(vocab_size=151936, hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
                num_key_value_heads=8, head_dim=128, architectures=["Qwen3ForCausalLM"]).save_pretrained(folder)
    job = TrainJob(checkpoint=str(folder), train_csv="t.csv", valid_csv="v.csv", out_dir="o", lora_r=16, kind="decoder")
    return run_shape(job, kind_for(folder, "decoder"))


# SmolLM2-135M's shape (kitlib/models/smollm2.py): 134.5 M parameters, 30 layers, hidden 576; LoRA r=16 on every
# Linear (2,142,720 (in + out) in all) and a 1-logit score train
SMOL = memory.Shape("SmolLM2-135M", params=134_515_008, linear_params=106_168_320, layers=30, hidden=576, heads=9,
                    intermediate=1536, trained=16 * 2_142_720 + 576)


def test_t4_is_fp16_with_the_scaler_and_fp16_weights():
    p = resolve("auto", Hardware("cuda", cuda_capability=(7, 5)), "cuda")
    assert p.name == "fp16" and p.grad_scaler() is not None
    lines = []
    w = resolve_weights("auto", p, SMOL, [T4, T4], say=lines.append, **RUN)
    assert (w.width, w.quantized) == ("fp16", False)
    assert len(lines) == 2 and lines[1].startswith("memory plan, replica 1 on a T4 (15 GB usable): SmolLM2-135M at fp16")


def test_compute_capability_8_is_bf16():
    p = resolve("auto", Hardware("cuda", cuda_capability=(8, 0)), "cuda")
    assert p.name == "bf16" and p.grad_scaler() is None
    assert resolve_weights("auto", p, SMOL, [H100], say=None, **RUN).width == "bf16"


def test_tpu_is_bf16_and_refuses_8_and_4_bit(qwen14):
    p = resolve("auto", Hardware("tpu"), "xla")
    assert p.name == "bf16"
    assert resolve_weights("auto", p, SMOL, [TPU] * 8, say=None, **RUN).width == "bf16"
    for width in ("8bit", "4bit"):
        with pytest.raises(ValueError, match=f"weights='{width}' on a TPU v5e chip: .*bitsandbytes, which the kit loads "
                                             "on CUDA only \\(it has no TPU \\(XLA\\) backend\\); use bf16"):
            resolve_weights(width, p, SMOL, [TPU], say=None, **RUN)
    # too big for a chip at bf16, and auto offers no 8/4-bit there: refused with the figure
    with pytest.raises(ValueError, match=r"Qwen3-14B at bf16 needs about 47.5 GB; a TPU v5e chip has 16 GB .*weights 27.98.*no width it takes fits"):
        resolve_weights("auto", p, qwen14, [TPU], say=None, **RUN)


@pytest.mark.parametrize("hw,width", [
    (Hardware("cpu", cpu_bf16="AMX", aten_isa="AVX512"), "bf16"),
    (Hardware("cpu", cpu_bf16=None, aten_isa="AVX2"), "fp32"),
    (Hardware("cpu", cpu_bf16="AMX", aten_isa="AVX2"), "fp32"),  # a process capped below AVX-512
])
def test_cpu_with_and_without_amx(hw, width):
    p = resolve("auto", hw, "cpu")
    assert p.name == width
    assert resolve_weights("auto", p, SMOL, [CPU], say=None, **RUN).width == width
    with pytest.raises(ValueError, match="weights='8bit' on this CPU: .*the kit loads on CUDA only .*; use fp32, or bf16 on a CPU with AMX"):
        resolve_weights("8bit", p, SMOL, [CPU], say=None, **RUN)


def test_too_big_on_t4_names_4bit_and_the_gigabytes(qwen14):
    p = resolve("auto", Hardware("cuda", cuda_capability=(7, 5)), "cuda")
    run = dict(batch=1, length=256, train=True, lora_r=16)
    with pytest.raises(ValueError) as e:
        resolve_weights("fp16", p, qwen14, [T4, T4], say=None, **run)
    msg = str(e.value)
    print(msg)
    assert msg.startswith("Qwen3-14B at fp16 needs about 31.8 GB") and "a T4 has 15 GB: weights='4bit' needs about" in msg
    gb = float(msg.split("weights='4bit' needs about ")[1].split(" GB")[0])
    assert 8 < gb < 15  # 13.2 B Linear weights at 4.5 bits (7.4 GB), the rest at 16 + LoRA state + activations + overhead
    lines = []
    w = resolve_weights("auto", p, qwen14, [T4, T4], say=lines.append, **run)
    assert w.width == "4bit" and "does not fit a T4 (15 GB); 4bit does" in w.reason
    assert all("Qwen3-14B at 4bit: about" in line for line in lines) and len(lines) == 2
    # a batch that does not fit even at 4 bits: refused, saying what to lower
    with pytest.raises(ValueError, match="no width it takes fits; use a smaller model, a smaller batch than 16"):
        resolve_weights("auto", p, qwen14, [T4], say=None, batch=16, length=1024, train=True, lora_r=16)


def test_quantization_config_needs_bitsandbytes_and_unknown_widths_are_refused():
    p = resolve("fp16", Hardware("cuda", cuda_capability=(7, 5)), "cuda")
    assert quantization_config(WeightsChoice("fp16", "auto", "").width, p.name) is None
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        with pytest.raises(ModuleNotFoundError, match="weights='4bit' needs bitsandbytes, .*pip install bitsandbytes"):
            quantization_config("4bit", p.name)
    with pytest.raises(ValueError, match="weights must be one of auto, fp32, bf16, fp16, 8bit, 4bit, not 'int4'"):
        resolve_weights("int4", p, SMOL, [T4], say=None, **RUN)


def test_device_for_reads_the_table_or_the_total():
    assert memory.device_for("cuda", "Tesla T4") is T4
    assert memory.device_for("cuda", "NVIDIA H200").gb == 140.0
    d = memory.device_for("cuda", "NVIDIA RTX 6000", total_gb=48.0)
    assert (d.gb, d.overhead_gb) == (45.1, 0.5)
    with pytest.raises(ValueError, match="device 'Quadro K1' .* is not in kitlib.models.memory.DEVICES"):
        memory.device_for("cuda", "Quadro K1")


def test_an_encoder_asked_for_4bit_weights_is_refused_by_training_as_by_inference(tiny_checkpoint, tmp_path):
    """Issue 39 item 8: inference refused weights='4bit' for an encoder while training silently ignored it (and
    trained at full width). Now training refuses it with inference's words, before any replica starts: nothing
    written."""
    import pandas as pd

    from conftest import SAMPLE
    from kitlib.infer import InferJob, predict
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    rows = pd.read_csv(SAMPLE / "train.csv", dtype=str, keep_default_na=False)
    rows = pd.concat([rows[rows["toxic"] == "1"].iloc[:16], rows[rows["toxic"] == "0"].iloc[:48]])
    rows.to_csv(tmp_path / "train.csv", index=False)
    rt = detect_runtime(1, "cpu")
    job = TrainJob(checkpoint=str(tiny_checkpoint), train_csv=str(tmp_path / "train.csv"),
                   valid_csv=str(tmp_path / "train.csv"), out_dir=str(tmp_path / "out"), batch_size=8, max_len=32,
                   weights="4bit")
    with pytest.raises(ValueError) as trained:
        train(job, rt)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError) as predicted:
        predict(InferJob(checkpoint=str(tiny_checkpoint), test_csv=str(SAMPLE / "test.csv"), max_len=32,
                         shard_dir=str(tmp_path / "shards"), weights="4bit"), rt)
    assert str(trained.value) == str(predicted.value) == (
        f"weights='4bit': {tiny_checkpoint} is an encoder, which loads as saved; 8-bit and 4-bit weights are for "
        "decoders (kitlib.models.memory); use weights='auto'")
