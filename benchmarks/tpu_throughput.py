"""Sharded LoRA throughput on a JAX mesh (issue 40 item 7): tokens/s, achieved TFLOP/s and the share of the chips' peak.

On a TPU (``kitlib.run.hardware.tpu_evidence``): a real decoder's shape (:data:`kitlib.keras.chip_plan.PUBLISHED`,
default Qwen3-14B) with its layers cut to ``--layers`` (default 8; 0: all of them), random bf16 weights, LoRA
rank 16, on ``--mesh`` (default 1x8) with ``--batch`` rows of ``--length`` tokens: the plan is printed and
checked, then a few train steps (:func:`kitlib.keras.sharded.train_steps`) and predict steps
(:func:`kitlib.keras.sharded_predict.sharded_logits`) are timed after one untimed step each (compilation).
Achieved FLOP/s is :func:`kitlib.keras.chip_plan.step_flops` per measured second; the share is that over
``chips x 197 TFLOP/s`` (:data:`kitlib.keras.chip_plan.V5E`).

Anywhere else: the same code on 8 virtual JAX CPU devices and a tiny Qwen3 shape (``--layers`` ignored), at
fp32; the CPU has no peak figure, so no share is given: the figures test the script, not a chip. Beside each
run it prints the planned v5e-8 figures of the full published shape (:func:`kitlib.keras.chip_plan.v5e8_table`:
the step floor at peak, and the tokens/s that floor allows), labelled as planned.

    python benchmarks/tpu_throughput.py [--model qwen3-14b] [--layers 8] [--mesh 1x8] [--batch 8] [--length 256]
                                        [--steps 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kitlib.run.hardware import tpu_evidence  # noqa: E402

TINY = dict(vocabulary_size=1024, num_layers=2, num_query_heads=8, num_key_value_heads=4, hidden_dim=256,
            intermediate_dim=512, head_dim=32)  # the CPU rehearsal's shape: 2.4 M parameters


def parse(argv=None) -> argparse.Namespace:
    """The command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3-14b", help="a kitlib.keras.chip_plan.PUBLISHED key")
    p.add_argument("--layers", type=int, default=8, help="layers kept on a TPU (0: all)")
    p.add_argument("--mesh", default=None, help="BxM (default 1x8 on a TPU, 2x4 on the CPU)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=None, help="tokens per row (default 256 on a TPU, 64 on the CPU)")
    p.add_argument("--steps", type=int, default=5, help="timed train steps (predict: as many batches)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    a = p.parse_args(argv)
    a.tpu = tpu_evidence()
    a.mesh = tuple(int(x) for x in (a.mesh or ("1x8" if a.tpu else "2x4")).split("x"))
    a.length = a.length or (256 if a.tpu else 64)
    return a


def select(a) -> None:
    """Set the JAX backend before Keras loads: the TPU's chips, or 8 virtual CPU devices."""
    from kitlib.keras.runtime import select_backend

    select_backend("jax", virtual_replicas=0 if a.tpu else 8)


def base_of(a):
    """The :class:`kitlib.keras.sharded.Base` to time: the published shape cut to ``a.layers`` (TPU), or :data:`TINY`."""
    from kitlib.keras.chip_plan import PUBLISHED
    from kitlib.keras.sharded import Base

    dec = PUBLISHED[a.model]
    if not a.tpu:
        return Base("qwen3", dict(TINY), seed=0, name="tiny qwen3 (CPU rehearsal)")
    config = dict(dec.config, num_layers=a.layers or dec.config["num_layers"])
    return Base(dec.family, config, seed=0, name=f"{dec.name}, {config['num_layers']} of {dec.config['num_layers']} layers")


def rows(a, vocab: int, seed: int = 0):
    """``batch`` full rows of random token ids (mask all 1: every token computed), and 0/1 labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (a.batch, a.length)).astype(np.int32)
    return ids, np.ones_like(ids), rng.integers(0, 2, a.batch).astype(np.float32)


def timed(fn, steps: int) -> tuple[float, float]:
    """``(first call's seconds, median of the next steps' seconds)``: compilation, then steady steps."""
    t = time.perf_counter()
    fn(0)
    first, each = time.perf_counter() - t, []
    for i in range(steps):
        t = time.perf_counter()
        fn(i + 1)
        each.append(time.perf_counter() - t)
    return first, statistics.median(each)


def planned(a, base=None) -> dict:
    """The planned v5e-8 figures (bf16, rank 16) at this mesh, batch and length: of the full published shape, and
    (``base`` given) of the shape measured: GB per chip, the step floor at peak, the tokens/s that floor allows."""
    from kitlib.keras.chip_plan import PUBLISHED, V5E, Decoder, plan_chips, step_floor_seconds, step_flops
    from kitlib.models.memory import GB

    p = plan_chips(PUBLISHED[a.model], a.mesh, batch=a.batch, length=a.length)
    floor, chips = step_floor_seconds(p), a.mesh[0] * a.mesh[1]
    predict = max(step_flops(p, train=False) / (chips * V5E.tflops * 1e12), p.frozen / (V5E.gbps * 1e9))  # read once
    out = dict(model=a.model, mesh=list(a.mesh), batch=a.batch, length=a.length, gb_per_chip=round(p.total / GB, 2),
               fits=p.fits, step_floor_s=round(floor, 4), tokens_per_s_at_peak=round(a.batch * a.length / floor),
               predict_floor_s=round(predict, 4), predict_tokens_per_s_at_peak=round(a.batch * a.length / predict))
    if base is not None:
        q = plan_chips(Decoder(base.name, base.family, base.config), a.mesh, batch=a.batch, length=a.length)
        out["measured_shape_step_floor_s"] = round(step_floor_seconds(q), 6)
        out["measured_shape_tokens_per_s_at_peak"] = round(a.batch * a.length / step_floor_seconds(q))
    return out


def measure(a, clf) -> dict:
    """Time ``a.steps`` train steps and ``a.steps`` predict batches on ``clf`` (each after one untimed call)."""
    from kitlib.keras.chip_plan import step_flops
    from kitlib.keras.sharded import train_steps
    from kitlib.keras.sharded_predict import sharded_logits

    vocab = clf.base.config["vocabulary_size"]
    batches = [rows(a, vocab, seed) for seed in range(a.steps + 1)]
    losses: list = []
    train_first, train_s = timed(lambda i: losses.extend(train_steps(clf, [batches[i]])), a.steps)
    predict_first, predict_s = timed(lambda i: sharded_logits(clf, *batches[i][:2]), a.steps)
    chips, tokens = a.mesh[0] * a.mesh[1], a.batch * a.length
    peak = clf.plan.chip.tflops * 1e12 * chips  # 0 off a TPU
    out = {"backend_devices": chips, "width": clf.width, "losses_finite": all(x == x for x in losses)}
    for name, first, s, flops in (("train", train_first, train_s, step_flops(clf.plan)),
                                  ("predict", predict_first, predict_s, step_flops(clf.plan, train=False))):
        out[name] = dict(first_call_s=round(first, 2), step_s=round(s, 4), tokens_per_s=round(tokens / s),
                         tflops=round(flops / s / 1e12, 4), share_of_peak=round(flops / s / peak, 4) if peak else None)
    return out


def say(a, base, clf, got: dict, plan: dict) -> None:
    """Print the run's figures and the planned v5e-8 figures beside them."""
    where = (f"TPU ({a.tpu}): {base.name}, random weights" if a.tpu else
             "CPU REHEARSAL: no TPU here; 8 virtual JAX CPU devices share this machine's cores, and the shape is a "
             f"tiny Qwen3 ({TINY['num_layers']} layers, hidden {TINY['hidden_dim']}); these figures test the script, "
             "they measure no chip")
    print(where)
    print(f"mesh {a.mesh}, batch {a.batch} x length {a.length}, weights at {clf.width}, LoRA rank {clf.rank}")
    for name in ("train", "predict"):
        r = got[name]
        share = (f"{r['share_of_peak']:.1%} of {a.mesh[0] * a.mesh[1]} x {clf.plan.chip.tflops:g} TFLOP/s bf16 peak"
                 if r["share_of_peak"] is not None else "no peak figure for this device: share not given")
        print(f"{name}: first call (compile) {r['first_call_s']} s; step {r['step_s']} s; {r['tokens_per_s']:,} tokens/s; "
              f"{r['tflops']} TFLOP/s achieved; {share}")
    print(f"PLANNED (not measured) v5e-8, {plan['model']} full shape at bf16 on mesh {tuple(plan['mesh'])}, batch "
          f"{plan['batch']} x {plan['length']}: {plan['gb_per_chip']} GB per chip (fits: {plan['fits']}); step floor "
          f"{plan['step_floor_s']} s at peak, so at most {plan['tokens_per_s_at_peak']:,} tokens/s training, "
          f"{plan['predict_tokens_per_s_at_peak']:,} predicting (floor {plan['predict_floor_s']} s); the shape measured "
          f"here, on a v5e-8: step floor {plan['measured_shape_step_floor_s']} s, at most "
          f"{plan['measured_shape_tokens_per_s_at_peak']:,} tokens/s")


def main(argv=None) -> dict:
    """Parse, select the backend, build (plan printed and checked), measure, print; returns the figures."""
    a = parse(argv)
    select(a)
    from kitlib.keras.sharded import build_sharded

    base = base_of(a)
    clf = build_sharded(base, a.mesh, batch=a.batch, length=a.length, lora_rank=16,
                        width="bf16" if a.tpu else "fp32", log=print)
    got = measure(a, clf)
    plan = planned(a, base)
    say(a, base, clf, got, plan)
    result = dict(device="tpu" if a.tpu else "cpu (8 virtual devices)", base=base.name, config=base.config,
                  measured=got, planned_v5e8=plan)
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
