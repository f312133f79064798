"""Decoder inference: the kit's path against a plain transformers loop and against today's row-count split.

    .venv/bin/python benchmarks/decoder_inference.py --model tiny --rows 400
    .venv/bin/python benchmarks/decoder_inference.py --model smollm2 --rows 200 --cache-dir /tmp/smolcache

One run, same model (loaded once, before the replicas fork, its weights at the width ``predict`` loads it at:
the compute precision's, :func:`kitlib.infer.weights_for`), same rows (the sample's test.csv, cycled), same
precision (the precision rule's ``auto`` for this CPU), three ways:

* **plain**: one process with every thread; batches of 32 rows in file order, each padded to its
  longest row (``tokenizer(..., padding=True)``), ``sigmoid(model(...).logits)``;
* **row split (today)**: ``--world`` forked replicas, one thread each, rows split by count
  (``DistributedSampler``, as :func:`kitlib.infer._mp_fn` does), 32-row batches in their order
  padded to the longest;
* **kit**: ``--world`` forked replicas, rows sorted by length and split by tokens
  (:func:`kitlib.run.balance.split_by_tokens`), batches to a token budget
  (:func:`kitlib.run.balance.token_batches`), through the kinds API (``kind.encode``,
  ``kind.probabilities``).

Prints the wall time of each, the ratios, the padded tokens each computed (a noise-free figure of
the work), the token imbalance between replicas, the largest probability difference from the plain
loop, and the CPU's name. ``--model tiny``: a random 2-layer Llama (hidden 64) built from a config
with SmolLM2's tokenizer; ``smollm2``: SmolLM2-135M (:mod:`kitlib.models.smollm2`), as a
``decoder`` kind (a new ``score`` head: the timing is the model's).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLAIN_BATCH = 32


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and the cores this process may use."""
    try:
        name = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        name = "unknown CPU"
    return f"{name}, {len(os.sched_getaffinity(0))} cores"


def tiny_llama(folder: Path, tokenizer_from: Path) -> Path:
    """A random 2-layer Llama sequence classifier (hidden 64), saved with ``tokenizer_from``'s tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tokenizer_from)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=tok.pad_token_id, num_labels=1,
                      problem_type="multi_label_classification", id2label={0: "toxic"}, label2id={"toxic": 0})
    torch.manual_seed(0)
    LlamaForSequenceClassification(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def texts_of(rows: int) -> list[str]:
    """``rows`` texts of the sample's test.csv, cycled."""
    from kitlib.data import read_csv_strings

    content = read_csv_strings(ROOT / "data/jigsaw-sample/test.csv")["content"].tolist()
    return [content[i % len(content)] for i in range(rows)]


def run_batches(kind, model, tok, texts, batches, max_len, precision) -> tuple[np.ndarray, np.ndarray, int]:
    """Probabilities of ``batches`` (row-index arrays): ``(rows, probs, padded tokens)``."""
    import torch

    rows, probs, padded = [], [], 0
    with torch.no_grad(), precision.autocast():
        for b in batches:
            enc = kind.encode(tok, [texts[i] for i in b], max_len)
            padded += enc["input_ids"].numel()
            probs.append(kind.probabilities(model, enc["input_ids"], enc["attention_mask"]).float().numpy())
            rows.append(np.asarray(b))
    return (np.concatenate(rows) if rows else np.zeros(0, np.int64)), (np.concatenate(probs) if probs else np.zeros(0)), padded


def in_replicas(work, world: int) -> tuple[float, list]:
    """Run ``work(rank)`` in ``world`` forked processes (one thread each); ``(wall seconds, results)``."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue()

    def child(rank):
        import torch

        torch.set_num_threads(1)
        queue.put((rank, work(rank)))

    start = time.perf_counter()
    procs = [ctx.Process(target=child, args=(r,)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    return time.perf_counter() - start, [results[r] for r in range(world)]


def measure(args) -> None:
    """Load the model once, then time the three ways and print the figures."""
    import torch
    from torch.utils.data import DistributedSampler

    from kitlib.models.kinds import kind_for
    from kitlib.run.balance import split_by_tokens, token_batches, token_imbalance
    from kitlib.models.open import open_model
    from kitlib.run.backends.precision import resolve
    from kitlib.run.hardware import precision_hardware

    ckpt = checkpoint(args)
    kind = kind_for(ckpt, "decoder")
    tok = kind.load_tokenizer(ckpt)
    kind = kind.bind(tok)
    precision = resolve(args.precision, precision_hardware("cpu"), "cpu")
    model = open_model(ckpt, kind=kind, width=precision.name)  # the width predict() loads a decoder at (weights auto)
    kind.keep_head_float32(model)
    texts = texts_of(args.rows)
    lengths = np.array([len(x) for x in tok(texts, truncation=True, max_length=args.max_len)["input_ids"]])
    print(f"{cpu_name()}; torch {torch.__version__}; model {ckpt.name} "
          f"({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters), precision {precision.describe()}; "
          f"{args.rows} rows, tokens per row median {int(np.median(lengths))}, max {lengths.max()} (max_len {args.max_len}); "
          f"{args.world} replicas; token budget {args.budget}")

    def plain_batches(rows):
        return [rows[i:i + PLAIN_BATCH] for i in range(0, len(rows), PLAIN_BATCH)]

    def go(batches_of):
        return lambda rank: run_batches(kind, model, tok, texts, batches_of[rank], args.max_len, precision)

    torch.set_num_threads(args.world)
    run_batches(kind, model, tok, texts, plain_batches(np.arange(min(8, args.rows))), args.max_len, precision)  # warm-up
    t = time.perf_counter()
    _, plain_probs, plain_padded = run_batches(kind, model, tok, texts, plain_batches(np.arange(args.rows)),
                                               args.max_len, precision)
    plain = time.perf_counter() - t
    today_rows = [np.fromiter(DistributedSampler(range(args.rows), num_replicas=args.world, rank=r, shuffle=False),
                              dtype=np.int64) for r in range(args.world)]
    today, today_out = in_replicas(go([plain_batches(r) for r in today_rows]), args.world)
    kit_rows = split_by_tokens(lengths, args.world)
    kit, kit_out = in_replicas(go([token_batches(lengths, args.budget, rows=r) for r in kit_rows]), args.world)
    report(args, plain, plain_probs, plain_padded, today, today_out, today_rows, kit, kit_out, kit_rows, lengths, token_imbalance)


def report(args, plain, plain_probs, plain_padded, today, today_out, today_rows, kit, kit_out, kit_rows, lengths, imbalance):
    """Print the three times, the ratios, the padded tokens, the imbalance and the largest probability difference."""
    kit_probs = np.zeros(args.rows)
    for rows, probs, _ in kit_out:
        kit_probs[rows] = probs
    diff = float(np.abs(kit_probs - plain_probs).max())
    pads = {name: sum(o[2] for o in out) for name, out in (("today", today_out), ("kit", kit_out))}
    print(f"plain transformers loop (1 process, {args.world} threads, {PLAIN_BATCH}-row batches): {plain:.2f} s, "
          f"{plain_padded:,} padded tokens")
    print(f"row-count split today ({args.world} replicas x 1 thread, {PLAIN_BATCH}-row batches): {today:.2f} s, "
          f"{pads['today']:,} padded tokens, token imbalance {imbalance(lengths, today_rows):.3f}")
    print(f"kit (token-balanced split + token-budget batches): {kit:.2f} s, {pads['kit']:,} padded tokens, "
          f"token imbalance {imbalance(lengths, kit_rows):.4f}; real tokens {int(lengths.sum()):,}")
    print(f"ratios: kit / plain {kit / plain:.2f}x, kit / row-split {kit / today:.2f}x; padded tokens kit / plain "
          f"{pads['kit'] / plain_padded:.2f}; largest |p_kit - p_plain| {diff:.2e}")


def checkpoint(args) -> Path:
    """The model folder for ``--model``: SmolLM2-135M (converted once into ``--cache-dir``) or the tiny Llama."""
    from kitlib.models.smollm2 import smollm2_checkpoint
    from kitlib.paths import scratch_dir

    smol = smollm2_checkpoint(args.cache_dir or scratch_dir())
    if args.model == "smollm2":
        return smol
    return tiny_llama(Path(tempfile.mkdtemp()) / "tiny-llama", smol)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--world", type=int, default=2, help="replicas (one thread each)")
    parser.add_argument("--budget", type=int, default=32 * 128, help="padded tokens per kit batch")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--cache-dir", help="where SmolLM2-135M is converted (default: kitlib.paths.scratch_dir())")
    measure(parser.parse_args(argv))


if __name__ == "__main__":
    main()
