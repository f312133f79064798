"""Sharded inference of a :class:`kitlib.keras.sharded.ShardedClassifier`: rows on the mesh's batch axis, one
prediction per input row, written through the kit's shard writer and merged by the kit's merger (issue 40 item 3).

How a prediction goes::

    clf = load_adapter("out/fold0", (2, 4), batch=8, length=256)         # the mesh and layout training used
    res = predict_submission(clf, token_ids, padding_mask, ids, "out/pred", sample_submission="sample_submission.csv")
    # or, from the test CSV and an encoder (texts, length) -> (token_ids, padding_mask):
    res = predict_csv(clf, "test.csv", encode, "out/pred", sample_submission="sample_submission.csv")

1. **Checked first** (:func:`check_rows`): one id per row, ids unique and not blank, right padding, rows
   no longer than the plan's length, the width the precision rule gives (:func:`inference_width`); a refusal
   names the input, the reason and the fix before anything is predicted.
2. **Padded** (:func:`pad_rows`): the rows are padded to a multiple of the global batch (the plan's ``batch``:
   batch-axis chips x rows per chip) with copies of row 0 (a real row, so every padding row has a token);
   every step has one shape, so XLA compiles once.
3. **Predicted** (:func:`sharded_logits`): each global batch is laid out on the mesh with the distribution's
   data layout (rows split over ``"batch"``, whole rows per chip: ``jax.make_array_from_process_local_data``),
   the frozen weights stay in their ``"model"`` shards, and the float32 head gives the logits. The padding
   rows' logits are dropped; the probabilities are ``sigmoid`` of the float32 logits.
4. **Written and merged**: one shard (:func:`kitlib.outputs.shards.write_shard`: the JAX program is one process
   holding every chip; a multi-host run would write one per process), then
   :func:`kitlib.outputs.merge.merge_shards` checks every row is predicted exactly once and writes the
   submission (``id`` then the prediction column, in the sample submission's order, or the rows' order).

Precision: on a TPU the rule (:func:`kitlib.run.backends.precision.auto_precision`) gives ``bf16``, and the
classifier must hold its frozen weights at that width (a keras-hub backbone at ``bfloat16`` computes in
``bfloat16``); the head and the logits are float32 at any width. Off a TPU the rehearsal computes at the
width the classifier was planned and built at (:attr:`ShardedClassifier.width`), and says so.
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

SHARD_DIR = "shards"
SUBMISSION = "submission.csv"


@dataclass
class ShardedPrediction:
    """What :func:`predict_submission` did: the ``submission`` CSV, the ``shard`` it merged, the rows predicted
    and the ``padding`` rows added, the ``width`` computed at, ``seconds`` of prediction (compilation included),
    the ``merge`` result (:class:`kitlib.outputs.merge.MergeResult`) and the ``probabilities`` (float32 ``[N]``,
    in the input rows' order)."""

    submission: Path
    shard: Path
    rows: int
    padding: int
    width: str
    seconds: float
    merge: object
    probabilities: np.ndarray = field(repr=False)
    stats: dict = field(default_factory=dict)


def inference_width(accelerator: str, built_width: str) -> tuple[str, str]:
    """``(width, why)`` the prediction computes at: on a TPU the precision rule's (``bf16``), elsewhere ``built_width``.

    Args:
        accelerator: ``"tpu"``, ``"cuda"`` or ``"cpu"`` (:func:`kitlib.run.hardware.accelerator_kind` of a device).
        built_width: the classifier's width (``"fp32"``, ``"bf16"``, ``"fp16"``).

    Raises:
        ValueError: on a TPU, a classifier built at another width than the rule's (naming the fix).
    """
    from ..run.backends.precision import Hardware, auto_precision

    if accelerator != "tpu":
        return built_width, (f"{accelerator}: the width the classifier was planned and built at (a rehearsal; "
                             "on a TPU the precision rule gives bf16)")
    width, why = auto_precision(Hardware("tpu"))
    if built_width != width:
        raise ValueError(f"the classifier holds its frozen weights at {built_width}; on a TPU the precision rule "
                         f"gives {width} ({why}): build or load it at width={width!r} (the v5e-8 plan's width)")
    return width, why


def pad_rows(n: int, global_batch: int) -> int:
    """How many padding rows make ``n`` rows a multiple of ``global_batch`` (0 when it already is).

    Raises:
        ValueError: ``n < 1`` or ``global_batch < 1``.
    """
    if n < 1 or global_batch < 1:
        raise ValueError(f"pad_rows: {n} rows in global batches of {global_batch}: both must be >= 1")
    return -n % global_batch


def check_rows(ids, token_ids, padding_mask, length: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The rows as ``(ids, token_ids, padding_mask)``: ids as strings, the arrays int32 ``[N, L]``, all checked.

    Args:
        ids: ``[N]`` ids, exactly as the test CSV holds them. token_ids, padding_mask: ``[N, L]`` right-padded.
        length: the plan's tokens per row (``L`` must not exceed it).

    Raises:
        ValueError: ids and rows differ in number, an id is blank or repeated, ``L`` over ``length``, a row
            without a real token, or left padding (:meth:`kitlib.models.kinds.Decoder.check_tokens`).
    """
    from .sharded import _check_inputs

    ids = [str(i) for i in ids]
    tok, mask, _ = _check_inputs(token_ids, padding_mask)
    if len(ids) != len(tok):
        raise ValueError(f"{len(ids)} ids for {len(tok)} rows of token_ids: give one id per row, in the rows' order")
    blank = [i for i, x in enumerate(ids) if not x.strip()]
    if blank:
        raise ValueError(f"row {blank[0]} has a blank id: every row needs the id the submission lists it by")
    if len(set(ids)) != len(ids):
        seen: set = set()
        dup = next(x for x in ids if x in seen or seen.add(x))
        raise ValueError(f"id {dup!r} is repeated: each id must be one row (a submission has each id once)")
    if tok.shape[1] > length:
        raise ValueError(f"rows of {tok.shape[1]} tokens; the classifier was planned for {length}: cut the rows to "
                         f"{length} tokens, or load it with length={tok.shape[1]}")
    return ids, tok, mask


def _global_layout(clf, shape: tuple):
    """The distribution's data layout of one global batch (rows over ``"batch"``), or None on one device."""
    if clf.distribution is None:
        return None
    return clf.distribution.get_data_layout(shape).backend_layout


def sharded_logits(clf, token_ids: np.ndarray, padding_mask: np.ndarray) -> tuple[np.ndarray, dict]:
    """float32 ``[N]`` logits of rows already padded to a multiple of ``clf.plan.batch``, one global batch a step.

    Each batch is laid out rows-over-``"batch"`` (:func:`_global_layout`) before the model sees it. Returns the
    logits and facts: ``steps``, ``row_shard`` (the rows x tokens each chip holds of a batch, e.g. ``[4, 16]``
    for 8 rows on 2 batch-axis chips) and ``seconds``.

    Raises:
        ValueError: the rows are not a multiple of the global batch (pad them with :func:`pad_rows`).
    """
    import jax

    step, (n, length) = clf.plan.batch, token_ids.shape
    if n % step:
        raise ValueError(f"{n} rows are not a multiple of the global batch {step}: pad them first (pad_rows)")
    layout, out, t = _global_layout(clf, (step, length)), [], time.perf_counter()
    row_shard = [step, length]
    with clf.scope():
        for i in range(0, n, step):
            x = {"token_ids": token_ids[i:i + step], "padding_mask": padding_mask[i:i + step]}
            if layout is not None:
                x = {k: jax.make_array_from_process_local_data(layout, v) for k, v in x.items()}
                row_shard = list(x["token_ids"].sharding.shard_shape(x["token_ids"].shape))
            out.append(np.asarray(clf.model.predict_on_batch(x), dtype=np.float32)[:, 0])
    return np.concatenate(out), {"steps": n // step, "row_shard": row_shard, "seconds": time.perf_counter() - t}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """float32 ``sigmoid`` of float32 logits, computed in float64."""
    return (1.0 / (1.0 + np.exp(-z.astype(np.float64)))).astype(np.float32)


def _process() -> tuple[int, int]:
    """``(rank, world)`` of this JAX process; refuses a multi-host run (not done yet)."""
    import jax

    rank, world = jax.process_index(), jax.process_count()
    if world != 1:
        raise ValueError(f"JAX runs {world} processes: sharded predict writes one process's shard and predicts every "
                         "row there; multi-host prediction (each process its own rows) is not done yet")
    return rank, world


def _accelerator() -> str:
    """``"tpu"``, ``"cuda"`` or ``"cpu"``: the kind of the first device Keras's distribution lists."""
    import keras

    from ..run.hardware import accelerator_kind

    return accelerator_kind(keras.distribution.list_devices()[0])


def predict_submission(clf, token_ids, padding_mask, ids, out_dir: str | os.PathLike, *, column: str = "prediction",
                       sample_submission: str | os.PathLike | None = None, test: str | os.PathLike | None = None,
                       run_id: str | None = None, collapsed: str | None = None, id_col: str = "id", runs=(),
                       output_csv: str | os.PathLike | None = None,
                       log: Callable[[str], None] | None = print) -> ShardedPrediction:
    """Predict every row once on ``clf``'s mesh and merge the submission (module docstring, steps 1-4).

    Args:
        clf: a built or loaded :class:`kitlib.keras.sharded.ShardedClassifier` (its mesh, layout and plan).
        token_ids, padding_mask: int ``[N, L]``, right-padded, ``L <= clf.plan.length``. ids: ``[N]`` strings.
        out_dir: gets ``shards/shard-00000-of-00001.parquet`` and ``submission.csv``.
        column: the prediction column's name (a probability in [0, 1]); with a sample submission, its column.
        sample_submission: the order and ids the submission must have (:func:`kitlib.outputs.merge.merge_shards`).
        test: the test CSV, checked row by row against the ids (optional).
        run_id: the shard's run id (default: a fresh one). collapsed: the merger's ``collapsed`` policy.
        id_col: the id column of ``sample_submission``, ``test`` and the submission.
        runs: the training run ids the adapters came from (their history's ``run_id``), recorded beside the
            submission (:mod:`kitlib.outputs.provenance`), so a blend or cascade of it names them.
        output_csv: where the submission goes (default ``out_dir/submission.csv``); the shard stays in ``out_dir``.
        log: receives one line on the padding and width, and one on the result (None: silent).

    Returns:
        A :class:`ShardedPrediction`.

    Raises:
        ValueError: refused before any prediction (:func:`check_rows`, :func:`inference_width`, multi-host).
        kitlib.outputs.merge.MergeError: the merger's refusals (an id missing from the sample submission ...).
    """
    from ..outputs.merge import merge_shards
    from ..outputs.shards import clear_shards, write_shard

    width, why = inference_width(_accelerator(), clf.width)
    ids, tok, mask = check_rows(ids, token_ids, padding_mask, clf.plan.length)
    rank, world = _process()
    n, b = len(ids), clf.mesh_shape[0]
    pad = pad_rows(n, clf.plan.batch)
    if log is not None:
        log(f"sharded predict: {n} rows + {pad} padding rows (copies of row 0) = {(n + pad) // clf.plan.batch} global "
            f"batches of {clf.plan.batch} ({b} batch-axis chips x {clf.plan.batch // b} rows) x {tok.shape[1]} tokens "
            f"on mesh {clf.mesh_shape}; weights and compute at {width} ({why}); head and logits float32")
    z, stats = sharded_logits(clf, *(np.concatenate([a, np.repeat(a[:1], pad, axis=0)]) for a in (tok, mask)))
    probs = _sigmoid(z[:n])
    stats.update(rows=n, padding=pad, width=width, mesh=list(clf.mesh_shape), tokens=int(mask.sum()),
                 padded_tokens=int((n + pad) * tok.shape[1]))
    out_dir = Path(out_dir)
    clear_shards(out_dir / SHARD_DIR)
    run_id = run_id or f"sharded-predict-{uuid.uuid4().hex[:12]}"
    shard = write_shard(out_dir / SHARD_DIR, rank=rank, world_size=world, num_rows=n, rows=np.arange(n), ids=ids,
                        predictions={column: probs}, run_id=run_id, stats=stats)
    merged = merge_shards([out_dir / SHARD_DIR], Path(output_csv) if output_csv else out_dir / SUBMISSION, sample_submission=sample_submission, test=test,
                          run_id=run_id, world_size=world, writer="kitlib.keras.sharded_predict.predict_submission",
                          source=f"{clf.base.name or clf.base.family} LoRA on mesh {clf.mesh_shape}", collapsed=collapsed,
                          id_col=id_col, runs=list(runs))
    if log is not None:
        log(f"sharded predict: {merged.num_rows} rows written to {merged.output} in {stats['seconds']:.1f} s "
            f"(compilation included); each chip held {stats['row_shard']} rows x tokens of a batch")
        for note in merged.notes:
            log(f"  note: {note}")
    return ShardedPrediction(merged.output, shard, n, pad, width, stats["seconds"], merged, probs, stats)


def predict_csv(clf, test_csv: str | os.PathLike, encode: Callable, out_dir: str | os.PathLike, *,
                column: str = "prediction", sample_submission: str | os.PathLike | None = None,
                id_col: str = "id", text_col: str | None = None, **kw) -> ShardedPrediction:
    """:func:`predict_submission` of a test CSV read by the kit's reader (:func:`kitlib.data.read_csv_checked`).

    Args:
        encode: ``(texts: list[str], length: int) -> (token_ids, padding_mask)``, int ``[N, <= length]``,
            right-padded (the decoder's tokenizer; ``length`` is ``clf.plan.length``).
        id_col, text_col: the CSV's id and text columns (the reader's defaults: ``id``; ``content``,
            ``comment_text`` or ``text``). Other arguments: :func:`predict_submission`'s.

    Raises:
        FileNotFoundError, ValueError: the reader's refusals (file, column and row named), then
            :func:`predict_submission`'s.
    """
    from ..data import read_csv_checked

    df = read_csv_checked(test_csv, id_col=id_col, text_col=text_col)
    token_ids, padding_mask = encode(df["text"].tolist(), clf.plan.length)
    return predict_submission(clf, token_ids, padding_mask, df["id"].tolist(), out_dir, column=column,
                              sample_submission=sample_submission, test=test_csv, id_col=id_col, **kw)
