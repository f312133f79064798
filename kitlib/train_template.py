"""The data-parallel training template: one ``_mp_fn`` per device, two ways to sync gradients.

Parent process (notebook)::

    rt = detect_runtime(num_devices, collectives=True)     # touches no device
    cfg = TrainConfig(checkpoint=..., train_csv=..., valid_csv=..., out_dir=...,
                      backend=rt.dist_backend, num_devices=rt.num_devices, pattern="optimizer_step")
    history = train(cfg, rt, start_method)                 # launch(_mp_fn, (cfg,), rt, ...), then read the history

Backends (``TrainConfig.backend``, from :attr:`kitlib.runtime.Runtime.dist_backend`):

* ``"xla"``: torch_xla replicas (TPU; one PJRT CPU device). Batches come through
  ``MpDeviceLoader``, every step runs inside ``torch_xla.step()``, and each process keeps its
  own persistent compilation cache (``<compile_cache_dir>/proc-<index>``).
* ``"nccl"``: one process per CUDA GPU over ``torch.distributed``.
* ``"gloo"``: N CPU processes over ``torch.distributed`` (torch_xla's CPU thread mode
  deadlocks on collectives in 2.9, so multi-replica CPU training uses real processes).

Patterns (``TrainConfig.pattern``):

* ``"optimizer_step"``: plain model; after ``backward()`` the gradients are all-reduced (mean
  over replicas) and the optimizer steps: ``xm.optimizer_step`` on XLA, the same thing by hand
  with ``torch.distributed.all_reduce`` elsewhere.
* ``"ddp"``: ``DistributedDataParallel(model, gradient_as_bucket_view=True)``, whose backward
  averages the gradients; on XLA over the ``xla`` process group (``init_method="xla://"``).

Shapes are fixed so XLA compiles one training graph: every training batch is ``[batch_size,
max_len]`` (``DistributedSampler(drop_last=True)`` + ``DataLoader(drop_last=True)``, padding to
``max_len``), and validation batches are the same shape (the last one filled up and the filler
dropped). With per-replica batch ``B`` and ``W`` replicas, step ``j`` of an epoch sees exactly
the rows that step ``j`` of a one-replica run with batch ``W * B`` sees, so both runs take the
same gradient (the mean over the global batch) up to float rounding.

Metrics are reduced across replicas: the epoch's training loss is the all-reduced mean of
every replica's step losses; validation ROC AUC is computed on the predictions of all replicas
gathered together, each validation row once (the sampler's padding duplicates are dropped).
Loss is logged and tqdm shown on the master (rank 0) only. The master alone writes
``out_dir``: ``save_pretrained`` of the model and the tokenizer (what
:func:`kitlib.model.load_classifier` and the inference template load), plus
``train_history.json`` and ``valid_predictions.csv``.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import compat
from .atomic import atomic_dir
from .data import plan_batches, read_csv_checked
from .model import load_classifier, probabilities

PATTERNS = ("optimizer_step", "ddp")
BACKENDS = ("xla", "nccl", "gloo")
HISTORY_FILE = "train_history.json"
VALID_PREDICTIONS_FILE = "valid_predictions.csv"


@dataclass(frozen=True)
class TrainConfig:
    """Everything a replica needs; picklable, so it travels to ``spawn``-ed processes.

    Attributes:
        checkpoint: local transformers folder to start from (model + tokenizer), e.g. from
            :func:`kitlib.model.resolve_checkpoint`.
        train_csv: training CSV (``id``, a text column, the label column).
        valid_csv: validation CSV, same columns; ROC AUC is reported on it after every epoch.
        out_dir: folder the master writes the trained checkpoint to (replaced atomically).
        backend: ``"xla"``, ``"nccl"`` or ``"gloo"`` (see the module docstring).
        num_devices: world size for nccl/gloo; XLA asks ``torch_xla.runtime``.
        pattern: ``"optimizer_step"`` or ``"ddp"``.
        epochs: passes over the training rows.
        batch_size: rows per step on each replica (global batch = batch_size x world size).
        max_len: tokens per row (longer texts truncated, shorter padded): the fixed sequence length.
        lr: AdamW learning rate (constant: a per-step schedule would feed XLA a new scalar).
        weight_decay: AdamW weight decay.
        label_col: the 0/1 (or [0, 1]) label column.
        text_col: text column; None picks ``content`` or ``comment_text``.
        train_limit, valid_limit: use only the first rows of each CSV (quick runs).
        seed: seeds the model head initialisation and the per-epoch shuffle (same on every replica).
        dropout: if set, the ``p`` of every dropout layer while training (0.0 makes a run
            deterministic, for comparisons); None keeps the checkpoint's.
        log_every: master logs the step loss every this many steps.
        compile_cache_dir: XLA only: root of the persistent compilation cache; process ``i``
            uses ``<root>/proc-<i>``. None: no persistent cache.
        rank_states_dir: if set, every replica saves its final ``state_dict`` (CPU tensors) to
            ``<dir>/rank-<r>.pt`` (to check that replicas hold identical parameters).
    """

    checkpoint: str
    train_csv: str
    valid_csv: str
    out_dir: str
    backend: str = "xla"
    num_devices: int = 1
    pattern: str = "optimizer_step"
    epochs: int = 1
    batch_size: int = 16
    max_len: int = 128
    lr: float = 2e-5
    weight_decay: float = 0.0
    label_col: str = "toxic"
    text_col: str | None = None
    train_limit: int | None = None
    valid_limit: int | None = None
    seed: int = 0
    dropout: float | None = None
    log_every: int = 10
    compile_cache_dir: str | None = None
    rank_states_dir: str | None = None

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, not {self.pattern!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {self.backend!r}")
        for name in ("num_devices", "epochs", "batch_size", "max_len", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")


def classification_loss(logits, labels):
    """Mean loss of a one- or two-logit classifier head.

    Args:
        logits: float tensor ``[batch, 1]`` (sigmoid head) or ``[batch, 2]`` (softmax head).
        labels: float32 tensor ``[batch]`` in [0, 1] (soft labels allowed).

    Returns:
        A float32 scalar tensor: binary cross-entropy with logits for one logit, cross-entropy
        against ``[1 - y, y]`` for two.

    Raises:
        ValueError: any other number of logits.
    """
    import torch
    import torch.nn.functional as F

    if logits.shape[-1] == 1:
        return F.binary_cross_entropy_with_logits(logits[:, 0].float(), labels)
    if logits.shape[-1] == 2:
        return F.cross_entropy(logits.float(), torch.stack([1 - labels, labels], dim=1))
    raise ValueError(f"expected 1 or 2 logits per row, got {logits.shape[-1]}")


def validation_rows(num_rows: int, world: int, rank: int, batch_size: int) -> np.ndarray:
    """Dataset rows replica ``rank`` predicts, in order, ``-1`` marking filler slots.

    ``DistributedSampler(shuffle=False, drop_last=False)`` (rank ``r`` takes rows ``r, r + W, ...``,
    padded by repeating the first rows), then filled up to a multiple of ``batch_size`` with ``-1``.
    Returns int64 ``[ceil(ceil(num_rows / world) / batch_size) * batch_size]``: the same length on
    every rank, so the predictions can be all-gathered.
    """
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(num_rows), num_replicas=world, rank=rank, shuffle=False, drop_last=False)
    rows = np.fromiter(iter(sampler), dtype=np.int64)
    return np.concatenate([p.rows for p in plan_batches(rows, batch_size, 0)])


def merge_gathered(probs: np.ndarray, num_rows: int, world: int, batch_size: int) -> np.ndarray:
    """Turn all-gathered validation predictions into one prediction per dataset row.

    Args:
        probs: float ``[world * n]``: every replica's predictions in rank order, each laid out
            as :func:`validation_rows` says.
        num_rows, world, batch_size: as given to :func:`validation_rows`.

    Returns:
        float32 ``[num_rows]``, row ``i`` the prediction for dataset row ``i`` (a row predicted
        twice, as sampler padding, is taken once).

    Raises:
        ValueError: the sizes disagree, or a row is missing.
    """
    rows = np.concatenate([validation_rows(num_rows, world, r, batch_size) for r in range(world)])
    if len(rows) != len(probs):
        raise ValueError(f"gathered {len(probs)} predictions, expected {len(rows)} ({world} replicas)")
    keep = rows >= 0
    uniq, first = np.unique(rows[keep], return_index=True)
    if len(uniq) != num_rows:
        raise ValueError(f"gathered predictions cover {len(uniq)} of {num_rows} validation rows")
    return probs[keep][first].astype(np.float32)


def roc_auc(labels: np.ndarray, probs: np.ndarray) -> float:
    """``sklearn.metrics.roc_auc_score`` of 0/1 ``labels`` [n] (rounded) and ``probs`` [n]; NaN if one class only."""
    from sklearn.metrics import roc_auc_score

    y = (np.asarray(labels) >= 0.5).astype(int)
    return float(roc_auc_score(y, probs)) if len(np.unique(y)) == 2 else float("nan")


def _tokenize(tokenizer, texts: list[str], max_len: int):
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def _replica(index: int, cfg: TrainConfig):
    """(device, rank, world) of this replica, with its process group (and XLA cache) set up."""
    import torch
    import torch.distributed as dist

    if cfg.backend == "xla":
        if cfg.compile_cache_dir:
            compat.xla_initialize_cache(str(Path(cfg.compile_cache_dir) / f"proc-{index}"))
        device, rank, world = compat.xla_device(), compat.xla_rank(), compat.xla_world_size()
        if cfg.pattern == "ddp":
            compat.xla_init_process_group()
        return device, rank, world
    rank, world = index, cfg.num_devices  # kitlib.runtime.launch has set this process's CPU threads
    device = torch.device("cuda", index) if cfg.backend == "nccl" else torch.device("cpu")
    dist.init_process_group(cfg.backend, init_method="env://", rank=rank, world_size=world)
    return device, rank, world


def _all_reduce_sum(t, cfg: TrainConfig):
    import torch.distributed as dist

    if cfg.backend == "xla":
        return compat.xla_all_reduce_sum(t)
    dist.all_reduce(t)
    return t


def _all_gather(t, cfg: TrainConfig, world: int):
    import torch
    import torch.distributed as dist

    if cfg.backend == "xla":
        return compat.xla_all_gather(t)
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    return torch.cat(parts)


def _barrier(cfg: TrainConfig, tag: str) -> None:
    import torch.distributed as dist

    if cfg.backend == "xla":
        compat.xla_rendezvous(tag)
    else:
        dist.barrier()


def average_gradients(model, world: int) -> None:
    """All-reduce every parameter gradient over the ``torch.distributed`` group and divide by ``world``.

    What ``xm.optimizer_step`` does before stepping, for nccl/gloo. Parameters without a
    gradient are skipped (every replica must have the same ones).
    """
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world)


def predict_valid(model, input_ids, attention_mask, rows: np.ndarray, cfg: TrainConfig, device):
    """Probabilities for the validation rows of one replica, left on the device.

    Args:
        input_ids, attention_mask: int64 CPU tensors ``[num_valid_rows, max_len]``.
        rows: from :func:`validation_rows` (``-1`` = filler, predicted on row 0 and dropped later).

    Returns:
        float32 tensor ``[len(rows)]`` on ``device``.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    idx = torch.from_numpy(np.maximum(rows, 0))
    loader = DataLoader(TensorDataset(input_ids[idx], attention_mask[idx]), batch_size=cfg.batch_size, shuffle=False)
    xla = cfg.backend == "xla"
    if xla:
        loader = compat.xla_device_loader(loader, device)
    out = []
    model.eval()
    with torch.no_grad():
        for ids, mask in loader:
            if not xla:
                ids, mask = ids.to(device), mask.to(device)
            out.append(probabilities(model(input_ids=ids, attention_mask=mask).logits))
    model.train()
    return torch.cat(out)


def _mp_fn(index: int, cfg: TrainConfig) -> None:
    """Per-device training: train, validate after every epoch, and (master) save the checkpoint.

    Args:
        index: the launcher's process index (on XLA the rank comes from
            ``torch_xla.runtime.global_ordinal()``).
        cfg: a :class:`TrainConfig`.

    Raises:
        ValueError: the training rows give no full global batch, or a CSV fails
            :func:`kitlib.data.read_csv_checked`.
    """
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from tqdm.auto import tqdm

    device, rank, world = _replica(index, cfg)
    xla, master = cfg.backend == "xla", rank == 0
    labels = (cfg.label_col,)
    train_df = read_csv_checked(cfg.train_csv, text_col=cfg.text_col, label_cols=labels, limit=cfg.train_limit)
    valid_df = read_csv_checked(cfg.valid_csv, text_col=cfg.text_col, label_cols=labels, limit=cfg.valid_limit)

    torch.manual_seed(cfg.seed)  # a freshly initialised head is then the same on every replica
    tokenizer, model = load_classifier(cfg.checkpoint, xla=xla)  # xla: one graph per shape (no mask skip)
    if cfg.dropout is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = cfg.dropout
    model.train().to(device)

    train_set = TensorDataset(
        *_tokenize(tokenizer, train_df["text"].tolist(), cfg.max_len),
        torch.tensor(train_df[cfg.label_col].to_numpy(np.float32)),
    )
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise ValueError(f"{len(train_df)} training rows give no full global batch of {cfg.batch_size} x {world}")
    valid_ids, valid_mask = _tokenize(tokenizer, valid_df["text"].tolist(), cfg.max_len)
    valid_rows = validation_rows(len(valid_df), world, rank, cfg.batch_size)
    valid_labels = valid_df[cfg.label_col].to_numpy(np.float32)

    net = model
    if cfg.pattern == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        device_ids = [device.index] if cfg.backend == "nccl" else None
        # broadcast_buffers=False: XLM-R's buffers (position / token type ids) are constants, the
        # same on every replica; broadcasting them would add a collective to every step.
        net = DDP(model, device_ids=device_ids, gradient_as_bucket_view=True, broadcast_buffers=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    step_context = compat.xla_step if xla else contextlib.nullcontext

    history = {"world_size": world, "backend": cfg.backend, "pattern": cfg.pattern, "config": asdict(cfg),
               "steps_per_epoch": len(loader), "global_batch": cfg.batch_size * world,
               "epochs": [], "step_loss": [], "compile_counts": [] if xla else None}

    def log_loss(step: int, loss) -> None:
        value = float(loss.item())
        history["step_loss"].append([step, value])
        tqdm.write(f"step {step}: loss {value:.4f}")

    global_step, done_loss = 0, 0.0
    # One running total for the whole run: a fresh zero tensor per epoch would be a new little
    # XLA graph at the next epoch's first step.
    loss_total = torch.zeros((), device=device)
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        batches = compat.xla_device_loader(loader, device) if xla else loader
        t0 = time.perf_counter()
        for ids, mask, y in tqdm(batches, total=len(loader), desc=f"epoch {epoch + 1} (rank 0)", disable=not master):
            with step_context():
                if not xla:
                    ids, mask, y = ids.to(device), mask.to(device), y.to(device)
                optimizer.zero_grad(set_to_none=True)
                loss = classification_loss(net(input_ids=ids, attention_mask=mask).logits, y)
                loss.backward()
                if cfg.pattern == "ddp":
                    optimizer.step()  # DDP's backward already averaged the gradients
                elif xla:
                    compat.xla_optimizer_step(optimizer)
                else:
                    average_gradients(model, world)
                    optimizer.step()
                loss_total += loss.detach()
                global_step += 1
                if master and global_step % cfg.log_every == 0:
                    if xla:
                        compat.xla_add_step_closure(log_loss, (global_step, loss))
                    else:
                        log_loss(global_step, loss)
            if xla and master:
                history["compile_counts"].append(compat.xla_compile_count())
        run_loss = _all_reduce_sum(loss_total.clone(), cfg).item()  # sum over replicas and steps so far
        train_loss, done_loss = (run_loss - done_loss) / (len(loader) * world), run_loss
        train_seconds = time.perf_counter() - t0

        t0 = time.perf_counter()
        gathered = _all_gather(predict_valid(model, valid_ids, valid_mask, valid_rows, cfg, device), cfg, world)
        probs = merge_gathered(gathered.cpu().numpy(), len(valid_df), world, cfg.batch_size)
        p = np.clip(probs, 1e-7, 1 - 1e-7)
        valid_loss = float(-np.mean(valid_labels * np.log(p) + (1 - valid_labels) * np.log(1 - p)))
        record = {"epoch": epoch + 1, "train_loss": train_loss, "valid_loss": valid_loss,
                  "valid_auc": roc_auc(valid_labels, probs), "train_seconds": train_seconds,
                  "valid_seconds": time.perf_counter() - t0, "steps": len(loader),
                  "compile_count": compat.xla_compile_count() if xla else None}
        history["epochs"].append(record)
        if master:
            tqdm.write(f"epoch {epoch + 1}: train loss {train_loss:.4f}, valid loss {valid_loss:.4f}, "
                       f"valid ROC AUC {record['valid_auc']:.4f}, {train_seconds:.1f} s training")

    if cfg.rank_states_dir:
        Path(cfg.rank_states_dir).mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        torch.save(state, Path(cfg.rank_states_dir) / f"rank-{rank}.pt")
    if master:
        save_checkpoint(model, tokenizer, cfg.out_dir, history, valid_df["id"].tolist(), probs, cfg.label_col)
    _barrier(cfg, "kitlib-train-saved")
    if dist.is_initialized():
        dist.destroy_process_group()


def save_checkpoint(model, tokenizer, out_dir: str | os.PathLike, history: dict, valid_ids: list[str],
                    valid_probs: np.ndarray, label_col: str) -> Path:
    """Write the trained checkpoint folder atomically (master only) and return its path.

    The folder holds ``save_pretrained`` of ``model`` (moved to CPU) and ``tokenizer``,
    ``train_history.json`` (``history``) and ``valid_predictions.csv`` (``id`` and ``label_col``:
    the in-memory model's last-epoch validation probabilities). It is built under a temporary
    name beside ``out_dir`` and renamed into place, replacing an older one.
    """
    import pandas as pd

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        model.to("cpu").save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / HISTORY_FILE).write_text(json.dumps(history, indent=1))
        pd.DataFrame({"id": valid_ids, label_col: valid_probs}).to_csv(tmp / VALID_PREDICTIONS_FILE, index=False)
    return out_dir


def read_history(out_dir: str | os.PathLike) -> dict:
    """The ``train_history.json`` of a trained checkpoint folder (see :func:`_mp_fn`).

    Keys: ``world_size``, ``backend``, ``pattern``, ``config``, ``steps_per_epoch``,
    ``global_batch``, ``epochs`` (one dict per epoch: ``train_loss``, ``valid_loss``,
    ``valid_auc``, ``train_seconds``, ``valid_seconds``, ``steps``, ``compile_count``),
    ``step_loss`` (``[step, loss]`` pairs logged by the master), ``compile_counts`` (XLA: the
    master's compile count after each step; None otherwise).

    Raises:
        FileNotFoundError: no history in ``out_dir`` (training did not finish).
    """
    p = Path(out_dir) / HISTORY_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no training history (did the training launch finish?)")
    return json.loads(p.read_text())


def train(cfg: TrainConfig, rt, start_method: str = "fork") -> dict:
    """Launch :func:`_mp_fn` on every device of ``rt`` and return the master's training history.

    Args:
        cfg: a :class:`TrainConfig` whose ``backend`` is ``rt.dist_backend`` (and
            ``num_devices`` is ``rt.num_devices`` for nccl/gloo).
        rt: from ``kitlib.runtime.detect_runtime(..., collectives=True)``.
        start_method: ``"fork"`` or ``"spawn"``.

    Raises:
        ValueError: ``cfg`` and ``rt`` disagree.
        RuntimeError, ValueError: from :func:`kitlib.runtime.launch`.
    """
    from .runtime import launch

    if cfg.backend != rt.dist_backend or (not rt.xla and cfg.num_devices != rt.num_devices):
        raise ValueError(
            f"TrainConfig(backend={cfg.backend!r}, num_devices={cfg.num_devices}) does not match "
            f"the runtime ({rt.dist_backend} x{rt.num_devices})"
        )
    launch(_mp_fn, (cfg,), rt, start_method)
    return read_history(cfg.out_dir)
