"""The multicore inference template: one ``_mp_fn`` per device, each writing a prediction shard.

Parent process (notebook)::

    rt = detect_runtime(num_devices)                     # touches no device
    cfg = InferConfig(checkpoint=..., test_csv=..., shard_dir=..., ...)
    launch(_mp_fn, (cfg,), rt, start_method)             # one replica per device
    merge_shards([cfg.shard_dir], "submission.csv", sample_submission=..., test=cfg.test_csv)

Each replica reads the test CSV, takes its part with
``DistributedSampler(shuffle=False, drop_last=False)`` (which pads every rank to
``ceil(N / world_size)`` rows by repeating the first rows; the merger drops those duplicates),
runs fixed-shape batches ``[batch_size, max_len]`` through the model, and writes one shard
atomically (:mod:`kitlib.shards`). The replica keeps no module-level mutable state: on TPU
v2/v3 and on PJRT CPU, replicas are threads of one process.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import compat
from .data import PlannedBatches, choose_buckets, plan_batches, read_csv_checked, token_lengths
from .model import load_classifier, probabilities
from .shards import write_shard


@dataclass(frozen=True)
class InferConfig:
    """Everything a replica needs; picklable, so it travels to ``spawn``-ed processes.

    Attributes:
        checkpoint: local folder with the transformers checkpoint and tokenizer
            (from :func:`kitlib.model.resolve_checkpoint`).
        test_csv: the CSV to predict (``id`` plus a text column).
        shard_dir: folder the shards are written to.
        batch_size: rows per model call on each replica (global batch = batch_size x world size).
        max_len: tokens per row; longer texts are truncated, shorter ones padded.
        length_buckets: sequence lengths to pad to (from :func:`kitlib.data.choose_buckets`,
            computed once over the whole input so every replica has the same shapes); rows are
            sorted by length within each rank. Empty: every batch is ``max_len`` long.
        xla: replicas driven by torch_xla (TPU, PJRT CPU); False for plain CUDA.
        processes: one process per replica, ranked by the launcher's index (CUDA; PJRT CPU with
            ``Runtime.processes``); False: ranks come from ``torch_xla.runtime``.
        num_devices: world size when ``processes`` (or not ``xla``).
        prediction_column: name of the prediction column (Kaggle's ``toxic``).
        text_col: text column; None picks ``content`` or ``comment_text``.
        run_id: written into every shard so the merger can refuse shards of another run.
    """

    checkpoint: str
    test_csv: str
    shard_dir: str
    batch_size: int = 32
    max_len: int = 128
    length_buckets: tuple[int, ...] = ()
    xla: bool = True
    processes: bool = False
    num_devices: int = 1
    prediction_column: str = "toxic"
    text_col: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def length_buckets(checkpoint: str | Path, test_csv: str | Path, max_len: int, num_buckets: int, text_col: str | None = None) -> tuple[int, ...]:
    """The padded lengths every replica will use: token-length quantiles of the whole test set.

    Run in the parent, before launch (it tokenizes on the CPU and touches no device). Returns
    ``()`` for ``num_buckets <= 1`` (every batch ``max_len`` long); else at most ``num_buckets``
    lengths, the last one ``max_len`` (see :func:`kitlib.data.choose_buckets`).
    """
    if num_buckets <= 1:
        return ()
    from transformers import AutoTokenizer

    texts = read_csv_checked(test_csv, text_col=text_col)["text"].tolist()
    lengths = token_lengths(AutoTokenizer.from_pretrained(checkpoint), texts, max_len)
    return choose_buckets(lengths, max_len, num_buckets)


def _replica(index: int, cfg: InferConfig):
    """(device, rank, world_size) of this replica."""
    if cfg.xla and not cfg.processes:
        return compat.xla_device(), compat.xla_rank(), compat.xla_world_size()
    if cfg.xla:  # one PJRT CPU device in each of num_devices processes
        return compat.xla_device(), index, cfg.num_devices
    import torch

    return torch.device("cuda", index), index, cfg.num_devices


def predict_rows(model, tokenizer, texts: list[str], rows: np.ndarray, cfg: InferConfig, device, *, xla: bool, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Run the model over ``rows`` of ``texts`` in fixed-shape batches.

    Returns:
        ``(rows, probs)``: int64 ``[n]`` and float32 ``[n]`` for the real (non-filler) slots, in
        the order the batches ran.
    """
    import torch
    from torch.utils.data import DataLoader
    from tqdm.auto import tqdm

    lengths = None
    if cfg.length_buckets:  # only this rank's rows are tokenized; the rest stay 0
        lengths = np.zeros(len(texts), dtype=np.int64)
        lengths[rows] = token_lengths(tokenizer, [texts[r] for r in rows], cfg.max_len)
    plans = plan_batches(rows, cfg.batch_size, cfg.max_len, lengths, cfg.length_buckets)
    loader = DataLoader(PlannedBatches(texts, plans, tokenizer), batch_size=None, shuffle=False, num_workers=0)
    if xla:
        loader = compat.xla_device_loader(loader, device)
    out = []
    with torch.no_grad():
        for batch in tqdm(loader, total=len(plans), desc="predict (rank 0)", disable=not progress):
            if not xla:
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            out.append(probabilities(model(**batch).logits).cpu())
    probs = torch.cat(out).numpy() if out else np.zeros(0, np.float32)
    all_rows = np.concatenate([p.rows for p in plans]) if plans else np.zeros(0, np.int64)
    keep = all_rows >= 0
    return all_rows[keep], probs[keep]


def _mp_fn(index: int, cfg: InferConfig) -> None:
    """Per-device inference: predict this rank's rows and write its shard.

    Args:
        index: the launcher's process/thread index (on XLA the rank comes from
            ``torch_xla.runtime.global_ordinal()``).
        cfg: an :class:`InferConfig`.
    """
    from torch.utils.data import DistributedSampler

    device, rank, world = _replica(index, cfg)
    df = read_csv_checked(cfg.test_csv, text_col=cfg.text_col)
    sampler = DistributedSampler(range(len(df)), num_replicas=world, rank=rank, shuffle=False, drop_last=False)
    rows = np.fromiter(iter(sampler), dtype=np.int64)
    tokenizer, model = load_classifier(cfg.checkpoint, xla=cfg.xla)
    model.to(device)
    texts = df["text"].tolist()
    start = time.perf_counter()
    rows, probs = predict_rows(model, tokenizer, texts, rows, cfg, device, xla=cfg.xla, progress=rank == 0)
    stats = {"seconds": round(time.perf_counter() - start, 3), "batches": -(-len(rows) // cfg.batch_size)}
    if cfg.xla:
        stats["xla_compiles"] = compat.xla_compile_count()
    write_shard(
        Path(cfg.shard_dir),
        rank=rank,
        world_size=world,
        num_rows=len(df),
        rows=rows,
        ids=df["id"].to_numpy()[rows],
        predictions={cfg.prediction_column: probs},
        run_id=cfg.run_id,
        stats=stats,
    )
