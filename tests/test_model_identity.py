"""What makes a model is part of a run's identity (issue 39 item 5, kitlib.checkpoint.MODEL_SETTINGS): a saved state
is never continued, nor a group blended, across another kind, prompt, answer tokens, LoRA setting or weights' width."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import SAMPLE
from kitlib import infer
from kitlib.checkpoint import HISTORY_FILE, MODEL_SETTINGS
from kitlib.models.weights import WeightsChoice
from kitlib.run.backends.precision import named
from kitlib.training import recipe as recipes
from kitlib.training import resume
from kitlib.training.job import TrainJob
from kitlib.training.plan import Plan, bound_kind
from support.tiny_decoders import build

GROUPS = ((40, 40_000), (2, 64))  # the optimizer's groups, the same in every plan here: only the model settings differ


@pytest.fixture(scope="module")
def causal_lm(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("lm") / "llama-lm", "llama", True)


def _plan(folder: Path, width: str = "fp32", **changes) -> Plan:
    """The plan of a LoRA run of ``folder`` (as make_plan makes it, without reading the rows or the hardware)."""
    job = recipes.resolve(TrainJob(checkpoint=str(folder), train_csv=str(SAMPLE / "train.csv"),
                                   valid_csv=str(SAMPLE / "validation.csv"), out_dir=str(folder.parent / "out"),
                                   batch_size=16, **{"lora_r": 4, **changes}))
    kind, _ = bound_kind(job)
    return Plan(job, recipes.RECIPES[job.recipe], named("fp32"), 480, "rows", None, "valid", ("print", None), kind=kind,
                weights=WeightsChoice(width, width, "asked for"))


def _resumed(saved: Plan, new: Plan):
    """``new``'s resume decision against the state ``saved``'s run left at epoch 1, batch 10."""
    settings = saved.for_world(1, GROUPS).settings(GROUPS)
    run = {"format": resume.STATE_FORMAT, "settings": json.loads(json.dumps(settings.to_json())),
           "position": {"epoch": 0, "batch": 10, "global_step": 10}, "history": {"epochs": []}, "finished": False}
    return replace(new, found=(Path("/runs/out.state"), run)).for_world(1, GROUPS).resume


@pytest.mark.parametrize("changes,named_,was,now", [
    (dict(prompt="Comment: {text}\nToxic? Answer Yes or No.\nAnswer:"), "prompt", "You are a forum moderator", "Comment: "),
    (dict(lora_alpha=16.0), "lora_alpha", "32.0", "16.0"),
    (dict(lora_r=8), "lora_r", "4", "8"),
    (dict(lora_targets="q_proj,v_proj"), "lora_targets", "'all-linear'", "'q_proj,v_proj'"),
    (dict(kind="decoder"), "kind", "'answer-tokens'", "'decoder'"),
])
def test_a_cut_off_answer_token_run_is_not_continued_with_its_model_made_another_way(causal_lm, changes, named_, was, now):
    """Before: "continued exactly" (the state recorded no kind, prompt or LoRA settings)."""
    saved = _plan(causal_lm)
    assert _resumed(saved, _plan(causal_lm)).how == "exact"  # the same run continues
    assert _resumed(saved, _plan(causal_lm, kind="answer-tokens")).how == "exact"  # "auto" resolved to the same kind
    with pytest.raises(ValueError) as e:
        _resumed(saved, _plan(causal_lm, **changes))
    msg = str(e.value)
    assert msg.startswith(f"/runs/out.state: that run made its model with {named_} {'' if named_ == 'prompt' else was}")
    assert f"this one makes it with {'' if named_ == 'prompt' else now}" in msg and now in msg and was in msg
    assert f"To continue it pass {named_}=" in msg and "or pass resume='never' to start afresh" in msg


def test_a_state_on_an_8_bit_base_is_not_continued_on_a_16_bit_one(causal_lm):
    with pytest.raises(ValueError, match=r"made its model with weights '8bit'; this one makes it with 'bf16': .*"
                                         r"To continue it pass weights='8bit', or pass resume='never'"):
        _resumed(_plan(causal_lm, width="8bit"), _plan(causal_lm, width="bf16"))


def test_the_model_settings_are_the_resolved_ones(causal_lm):
    made = _plan(causal_lm).model_settings
    assert tuple(made) == MODEL_SETTINGS
    assert made["kind"] == "answer-tokens" and made["prompt"].startswith("You are a forum moderator")
    assert made["answer_tokens"] == [[2, 4], [3, 5]]  # the tiny tokenizer's Yes, yes / No, no
    assert (made["lora_r"], made["lora_alpha"], made["lora_targets"], made["weights"]) == (4, 32.0, "all-linear", "fp32")
    full = _plan(causal_lm, kind="decoder", lora_r=0).model_settings
    assert full == {**made, "kind": "decoder", "prompt": "", "answer_tokens": [[], []], "lora_r": 0, "lora_alpha": None,
                    "lora_dropout": None, "lora_targets": None, "weights": "as saved"}


def _member(group: Path, name: str, **made) -> Path:
    m = group / name
    m.mkdir(parents=True)
    settings = {"kind": "decoder", "prompt": "", "answer_tokens": [[], []], "lora_r": 16, "lora_alpha": 32.0,
                "lora_dropout": 0.05, "lora_targets": "all-linear", "weights": "bf16", **made}
    (m / HISTORY_FILE).write_text(json.dumps({"config": {"epochs": 1, "lr": 2e-5}, "model_settings": settings}))
    return m


@pytest.mark.parametrize("made,says", [
    (dict(lora_r=8), "lora_r: 16 (fold-0, fold-1); 8 (fold-2)"),
    (dict(kind="answer-tokens"), "kind: 'decoder' (fold-0, fold-1); 'answer-tokens' (fold-2)"),
    (dict(prompt="Is it toxic? {text}"), "prompt: '' (fold-0, fold-1); 'Is it toxic? {text}' (fold-2)"),
    (dict(weights="4bit"), "weights: 'bf16' (fold-0, fold-1); '4bit' (fold-2)"),
])
def test_a_group_whose_members_made_their_models_two_ways_is_refused(tmp_path, made, says):
    """Before: the group's settings check read only the config's SHARED_SETTINGS, none of these."""
    members = [_member(tmp_path, "fold-0"), _member(tmp_path, "fold-1"), _member(tmp_path, "fold-2", **made)]
    infer.check_settings(members[:2])  # the same settings: a group
    with pytest.raises(infer.GroupError, match=r"trained two ways \(" + says.replace("(", r"\(").replace(")", r"\)")
                       .replace("?", r"\?").replace("{", r"\{").replace("}", r"\}")):
        infer.check_settings(members)
