"""The memory plan charges optimizer state for what the run trains (issue 39 item 7): the parameters that require
grad in the model a replica builds (the kind's model, wrapped with the run's LoRA), counted on its skeleton."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import SAMPLE
from kitlib.models import adapters, memory
from kitlib.models.kinds import kind_for
from kitlib.run.backends.precision import Hardware, resolve
from kitlib.training.job import TrainJob
from kitlib.training.plan import memory_plan
from support.tiny_decoders import build

CPU = SimpleNamespace(backend=SimpleNamespace(hardware="cpu"), world_size=1)
T4 = SimpleNamespace(backend=SimpleNamespace(hardware="cuda"), world_size=1)


def _job(folder, tmp_path, **changes) -> TrainJob:
    return TrainJob(checkpoint=str(folder), train_csv=str(SAMPLE / "train.csv"), valid_csv=str(SAMPLE / "validation.csv"),
                    out_dir=str(tmp_path / "out"), **changes)


@pytest.mark.parametrize("causal,kind,targets", [
    (True, "answer-tokens", "all-linear"),  # the LM head is frozen: adapters only
    (True, "decoder", "all-linear"),        # a causal LM trained as a classifier: a new 1-logit score, no LM head
    (False, "decoder", "q_proj,v_proj"),    # adapters on two modules, not on every Linear
])
def test_the_plan_charges_state_for_the_parameters_the_run_trains(tmp_path, causal, kind, targets):
    """Before: the plan charged LoRA on every Linear plus the checkpoint's head (a causal LM's whole LM head)."""
    folder = build(tmp_path / "m", "qwen3", causal)
    job = _job(folder, tmp_path, kind=kind, lora_r=4, lora_targets=targets, weights="fp32", batch_size=2, max_len=16)
    bound = kind_for(folder, kind)
    model = adapters.wrap(bound.load(folder, head_for_training=True), bound, job.lora)  # as a replica does (loop._load_model)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    choice = memory_plan(job, CPU, resolve("fp32", Hardware("cpu"), "cpu"), bound)
    (_, plan), = choice.plans
    assert plan.lora == memory.TRAIN_BYTES_PER_PARAM * trained


@pytest.mark.parametrize("kind", ["answer-tokens", "decoder"])
def test_qwen3_8b_with_lora_r16_fits_a_t4_at_8_bits_with_0_7_gb_of_state(tmp_path, kind):
    """Before: about 10.6 GB of state (the 622 M-parameter LM head charged as trained), so no width fit a T4 at
    batch 1 and 256 tokens. The shape is Qwen3-8B's config alone (no weights: counted on the meta device)."""
    from transformers import Qwen3Config

    folder = tmp_path / "qwen3-8b"
    Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, architectures=["Qwen3ForCausalLM"]).save_pretrained(folder)
    job = _job(folder, tmp_path, kind=kind, lora_r=16, batch_size=1, max_len=256)
    choice = memory_plan(job, T4, resolve("auto", Hardware("cuda", cuda_capability=(7, 5)), "cuda"), kind_for(folder, kind))
    (_, plan), = choice.plans
    adapters_r16 = 16 * 36 * (2 * 4096 + 2 * (4096 + 1024) + 2 * 4096 + 3 * (4096 + 12288))  # q, k, v, o, gate, up, down
    head = 4096 if kind == "decoder" else 0  # the new 1-logit score trains; the LM head is frozen
    assert plan.lora == memory.TRAIN_BYTES_PER_PARAM * (adapters_r16 + head)  # 43.6 M parameters: 0.70 GB
    assert choice.width == "8bit" and plan.total < memory.DEVICES["T4"].gb * memory.GB
