"""kitlib.training.recipe: which recipe a checkpoint gets, its learning rates, schedule, frozen parameters, loss weighting."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kitlib.training import recipe as recipes
from kitlib.training.recipe import RECIPES, lr_factor, make_optimizer, make_scheduler, positive_weight, recipe_for


def _folder(tmp_path, name, **config):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


def test_each_checkpoint_gets_its_recipe(tmp_path, tiny_checkpoint):
    assert recipe_for(tiny_checkpoint) == "tiny"
    assert recipe_for(_folder(tmp_path, "e5", model_type="bert", kitlib_recipe="e5")) == "e5"
    assert recipe_for(_folder(tmp_path, "xlmr", model_type="xlm-roberta")) == "standard"
    with pytest.raises(ValueError, match=r"kitlib_recipe 'nope' is not one of tiny, standard, e5"):
        recipe_for(_folder(tmp_path, "bad", kitlib_recipe="nope"))


def test_lr_zero_means_the_recipes_and_a_given_lr_is_kept(tmp_path):
    from kitlib.training.job import TrainJob

    e5 = _folder(tmp_path, "e5", kitlib_recipe="e5")
    job = TrainJob(checkpoint=str(e5), train_csv="t", valid_csv="v", out_dir="o", lr=0.0)
    assert (recipes.resolve(job).recipe, recipes.resolve(job).lr) == ("e5", 3e-5)
    assert recipes.resolve(TrainJob(checkpoint=str(e5), train_csv="t", valid_csv="v", out_dir="o", lr=1e-5)).lr == 1e-5
    plain = _folder(tmp_path, "plain", model_type="bert")
    assert recipes.resolve(TrainJob(checkpoint=str(plain), train_csv="t", valid_csv="v", out_dir="o", lr=0.0)).lr == 2e-5
    with pytest.raises(ValueError, match="recipe must be 'auto' or one of"):
        TrainJob(checkpoint="c", train_csv="t", valid_csv="v", out_dir="o", recipe="fast")
    with pytest.raises(ValueError, match=r"lr must be > 0, or 0 for the recipe's \(3e-05 for 'e5'\)"):
        recipes.resolve(TrainJob(checkpoint=str(e5), train_csv="t", valid_csv="v", out_dir="o", lr=-1.0))


def test_e5_schedule_warms_up_then_decays_linearly_to_zero():
    e5 = RECIPES["e5"]
    f = [lr_factor(s, e5, 100) for s in range(100)]
    assert f[0] == pytest.approx(1 / 20) and f[19] == pytest.approx(1.0) and f[20] == pytest.approx(1.0)
    assert f[99] == pytest.approx(1 / 80) and all(a <= b for a, b in zip(f[:20], f[1:20]))
    assert all(a >= b for a, b in zip(f[20:], f[21:]))
    assert lr_factor(50, RECIPES["standard"], 100) == 1.0 and make_scheduler(None, RECIPES["standard"], 100) is None


def test_the_schedule_built_after_the_optimizer_step_sees_each_step_and_warns_nothing():
    """The training loop builds the backend's step, then the scheduler; a step that kept the bound
    ``optimizer.step`` from before the scheduler wrapped it made torch warn "lr_scheduler.step() before
    optimizer.step()" at the first step (seen in `make submission`'s output)."""
    import warnings

    import torch

    from kitlib.run.replica import OptimizerStep

    layer = torch.nn.Linear(3, 1)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    take_step = OptimizerStep(optimizer, None)
    scheduler = make_scheduler(optimizer, RECIPES["e5"], 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            take_step(layer(torch.ones(2, 3)).sum())
            scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * 4 / 20)  # warm-up step 4 of 20


def _small_mean_pooled():
    import torch
    from transformers import BertConfig

    from kitlib.models.mean_pooling import BertMeanPooledClassifier

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     num_labels=1)
    return BertMeanPooledClassifier(cfg)


def test_e5_optimizer_freezes_word_embeddings_and_gives_the_head_its_rate():
    import torch

    model = _small_mean_pooled()
    e5 = RECIPES["e5"]
    recipes.prepare_model(model, e5)
    opt = make_optimizer(model, e5, 3e-5, 0.0)
    body, head = opt.param_groups
    assert (body["lr"], head["lr"]) == (3e-5, 1e-3)
    assert {id(p) for p in head["params"]} == {id(p) for p in model.classifier.parameters()}
    word = model.get_input_embeddings().weight
    assert not word.requires_grad and all(p is not word for g in opt.param_groups for p in g["params"])
    sched = make_scheduler(opt, e5, 40)
    before = word.detach().clone()
    lrs = []
    for _ in range(25):
        ids = torch.randint(0, 50, (4, 6))
        loss = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.pow(2).mean()
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        lrs.append(opt.param_groups[0]["lr"])
    assert torch.equal(word, before)  # frozen: not even weight decay moved it
    assert max(lrs) == pytest.approx(3e-5) and lrs[-1] < lrs[19]  # warm-up to the peak, then decay


def test_freeze_layers_keeps_the_embeddings_and_the_bottom_layers_and_trains_the_rest():
    """``freeze_layers=1`` of a 2-layer body: the embedding block and layer 0 stay as they were
    (no AdamW state), layer 1 and the head move; more layers than the body has is refused."""
    import dataclasses

    import torch
    from transformers import BertConfig

    from kitlib.models.mean_pooling import BertMeanPooledClassifier

    torch.manual_seed(0)
    model = BertMeanPooledClassifier(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                                num_attention_heads=2, intermediate_size=32, num_labels=1))
    recipe = dataclasses.replace(RECIPES["e5"], freeze_layers=1)
    recipes.prepare_model(model, recipe)
    body = model.base_model
    frozen = [*body.embeddings.parameters(), *body.encoder.layer[0].parameters()]
    trained = [*body.encoder.layer[1].parameters(), *model.classifier.parameters()]
    assert not any(p.requires_grad for p in frozen) and all(p.requires_grad for p in trained)
    before = [p.detach().clone() for p in frozen + trained]
    opt = make_optimizer(model, recipe, 1e-2, 0.0)
    assert not {id(p) for p in frozen} & {id(p) for g in opt.param_groups for p in g["params"]}
    ids = torch.randint(0, 50, (4, 6))
    model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.pow(2).mean().backward()
    opt.step()
    assert all(torch.equal(p, b) for p, b in zip(frozen, before))
    assert all(not torch.equal(p, b) for p, b in zip(trained, before[len(frozen):]) if p.dim() > 1)
    with pytest.raises(ValueError, match="freeze_layers=3 is more than the body's 2 layers"):
        recipes.prepare_model(model, dataclasses.replace(recipe, freeze_layers=3))


def test_positive_weight_and_the_weighted_loss():
    import torch

    from conftest import head_loss

    labels = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0], np.float32)
    assert positive_weight(labels, RECIPES["e5"]) == 4.0 and positive_weight(labels, RECIPES["standard"]) is None
    with pytest.raises(ValueError, match="weights the positive rows, but the training rows have none"):
        positive_weight(np.zeros(5), RECIPES["e5"])
    logits, y = torch.zeros(2, 1), torch.tensor([1.0, 0.0])
    plain, weighted = head_loss(logits, y), head_loss(logits, y, torch.tensor(4.0))
    assert weighted.item() == pytest.approx(plain.item() * 5 / 2)  # (4 * ln2 + ln2) / 2 vs ln2


@pytest.mark.slow  # torch_xla in a subprocess: about a minute on 2 cores
def test_e5_recipe_on_xla_compiles_no_graph_per_step_and_keeps_the_embeddings(tiny_checkpoint, tmp_path):
    """The schedule changes the rate every step: torch_xla must take it as data, not compile a graph per step."""
    import os
    import subprocess
    import sys
    from dataclasses import asdict

    from safetensors.torch import load_file

    from conftest import ROOT, SAMPLE
    from kitlib.checkpoint import read_history
    from kitlib.training.job import TrainJob

    job = TrainJob(checkpoint=str(tiny_checkpoint), out_dir=str(tmp_path / "ckpt"), recipe="e5", lr=0.0,
                   train_csv=str(SAMPLE / "train.csv"), valid_csv=str(SAMPLE / "validation.csv"), epochs=2,
                   batch_size=8, max_len=32, train_limit=64, valid_limit=32, dropout=0.0, log_every=4)
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "xla_worker.py"), "train",
                           json.dumps(asdict(job)), "1"], cwd=ROOT, capture_output=True, text=True, timeout=540,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    history = read_history(job.out_dir)
    assert history["recipe"]["name"] == "e5" and history["mode"] == "xla-cpu"
    counts, steps = history["compile_counts"], history["steps_per_epoch"]
    assert steps == 8 and counts[2] == counts[steps - 1], counts  # no new graph once Adam's state exists
    assert counts[steps:] == [history["epochs"][0]["compile_count"]] * steps, counts  # epoch 2: none
    init, saved = load_file(str(tiny_checkpoint / "model.safetensors")), load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    word = next(k for k in init if k.endswith("word_embeddings.weight"))
    assert (saved[word] == init[word]).all()  # frozen
    moved = max((saved[k] - init[k]).abs().max().item() for k in init if k != word and init[k].is_floating_point())
    assert moved > 1e-3
