"""Fixed-shape input pipelines for the Keras notebook, padded prediction and the submission file.

Every batch has the shape ``[global_batch, sequence_length]``:

* training/validation during ``fit`` drop the remainder (``drop_remainder=True``): under JAX a
  batch must split evenly across devices (``IndivisibleError`` otherwise), and under TF/XLA a
  ragged last batch is one more compiled shape;
* prediction pads the input with empty texts up to a multiple of the global batch, predicts,
  and slices the first ``n`` rows: exactly one output row per input row, in input order, with
  one compiled shape.

The pipeline is ``tf.data`` under the TensorFlow backend (text tokenized once, by the
preprocessor's TF path, :func:`tokenize_tf`, or by a Hugging Face tokenizer,
:class:`kitlib.keras.pretrained.HFPreprocessor`; then sliced, shuffled and batched) and ``grain``
under JAX (the preprocessor runs its pure-Python path per batch, so no TensorFlow is needed).
Both yield ``({"token_ids": int32 [B, L], "padding_mask": int32 [B, L]}, labels float32 [B])``
(plus per-row weights float32 [B] when ``sample_weight`` is given):
the boolean ``padding_mask`` keras-hub makes is cast to int32, because boolean inputs fail under
``MirroredStrategy`` (measured on TF 2.21).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from ..storage import normalise

PAD_TEXT = ""  # filler rows: tokenized to "<s></s>", a real two-token sequence (no fully masked row)


def _backend() -> str:
    import keras

    return keras.backend.backend()


def _to_int32(x: dict):
    return {k: v.astype(np.int32) if hasattr(v, "astype") else v for k, v in x.items()}


def make_dataset(texts: Sequence[str], labels: Sequence[float] | np.ndarray | None, preprocessor, global_batch: int, *,
                 shuffle: bool = False, seed: int = 0, drop_remainder: bool = True,
                 sample_weight: Sequence[float] | np.ndarray | None = None):
    """A batched, preprocessed dataset for ``model.fit``/``evaluate``/``predict``.

    Args:
        texts: ``[N]`` strings.
        labels: ``[N]`` floats in [0, 1], or None (prediction input).
        preprocessor: a keras-hub ``XLMRobertaTextClassifierPreprocessor`` (its
            ``sequence_length`` fixes ``L``).
        global_batch: rows per batch (per-replica batch x replicas).
        shuffle: shuffle rows (TF: reshuffled every epoch; grain: one fixed permutation per ``seed``).
        seed: the shuffle seed.
        drop_remainder: drop the last partial batch (must be True for training under JAX).
        sample_weight: ``[N]`` per-row loss weights (e.g. ``pos_weight`` on the positive rows,
            :func:`row_weights`), or None.

    Returns:
        ``tf.data.Dataset`` (TF backend) or ``grain.MapDataset`` (JAX backend) of ``(x, y)``,
        ``(x, y, w)`` with ``sample_weight``, or ``x`` when ``labels`` is None; ``x`` as in the
        module docstring.

    Raises:
        ValueError: ``texts`` and ``labels`` (or ``sample_weight``) differ in length, weights
            without labels, or ``drop_remainder`` leaves no batch.
        ImportError: JAX backend without grain.
    """
    texts = [str(t) for t in texts]
    n = len(texts)
    targets = _targets(n, labels, sample_weight)
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, not {global_batch}")
    if drop_remainder and n < global_batch:
        raise ValueError(f"{n} rows make no full batch of {global_batch}; lower the batch size or use more rows")
    build = _tf_dataset if _backend() == "tensorflow" else _grain_dataset
    return build(texts, targets, preprocessor, global_batch, shuffle=shuffle, seed=seed, drop_remainder=drop_remainder)


def _targets(n: int, labels, sample_weight) -> tuple[np.ndarray, ...] | None:
    """``(labels,)``, ``(labels, weights)`` as float32 arrays, or None without labels; refuses a
    length other than ``n``, or weights without labels."""
    if labels is not None:
        labels = np.asarray(labels, dtype=np.float32)
        if len(labels) != n:
            raise ValueError(f"{n} texts but {len(labels)} labels")
    if sample_weight is not None:
        if labels is None:
            raise ValueError("sample_weight given without labels")
        sample_weight = np.asarray(sample_weight, dtype=np.float32)
        if len(sample_weight) != n:
            raise ValueError(f"{n} texts but {len(sample_weight)} sample weights")
    return None if labels is None else (labels,) if sample_weight is None else (labels, sample_weight)


def _tf_dataset(texts: list[str], targets, preprocessor, global_batch: int, *, shuffle: bool, seed: int,
                drop_remainder: bool):
    """:func:`make_dataset` on the TF backend: every row tokenized once, a ``tf.data.Dataset``."""
    import tensorflow as tf

    enc = tokenize_tf(texts, preprocessor) if _is_keras_layer(preprocessor) else _to_int32(dict(preprocessor(texts)))
    ds = tf.data.Dataset.from_tensor_slices(enc if targets is None else (enc, *targets))
    if shuffle:
        ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(global_batch, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def _grain_dataset(texts: list[str], targets, preprocessor, global_batch: int, *, shuffle: bool, seed: int,
                   drop_remainder: bool):
    """:func:`make_dataset` on the JAX backend: a ``grain.MapDataset`` of row indices, batched,
    then mapped to tokens (keras-hub: per batch; a Hugging Face tokenizer: all rows at once, here)."""
    text_arr = np.asarray(texts, dtype=object)
    # A Hugging Face tokenizer tokenizes everything once, here: its Rust object is not safe to call
    # from grain's reader threads at once ("Already borrowed"); keras-hub's preprocessor runs per batch.
    pre_tokenized = None if _is_keras_layer(preprocessor) else _to_int32(dict(preprocessor(texts)))

    def prep_rows(idx):
        idx = np.asarray(idx)
        if pre_tokenized is None:
            out = _to_int32(dict(preprocessor(list(text_arr[idx]))))
        else:
            out = {k: v[idx] for k, v in pre_tokenized.items()}
        return out if targets is None else (out, *(t[idx] for t in targets))

    try:
        import grain
    except ImportError:
        raise ImportError(
            "the JAX input pipeline needs grain (pip install grain; Kaggle's TPU image: check `pip show grain`), "
            "or run the notebook with backend='tensorflow'"
        ) from None
    # Build the preprocessor's layers here, in one thread: Keras builds a layer on its first call,
    # and grain's reader threads calling an unbuilt preprocessor at once race in that build
    # ("You cannot add new elements of state ... to a layer that is already built").
    if pre_tokenized is None:
        preprocessor(texts[:1])
    ds = grain.MapDataset.range(len(texts))
    if shuffle:
        ds = ds.shuffle(seed=seed)
    return ds.batch(global_batch, drop_remainder=drop_remainder).map(prep_rows)


def _is_keras_layer(preprocessor) -> bool:
    import keras

    return isinstance(preprocessor, keras.layers.Layer)


def row_weights(labels, pos_weight: float) -> np.ndarray:
    """float32 ``[N]``: ``pos_weight`` for rows labelled >= 0.5, 1 for the others (Keras's ``sample_weight``).

    Keras averages the weighted binary cross-entropy over the batch's rows (``sum(w * loss) / B``),
    which is torch's ``BCEWithLogitsLoss(pos_weight=pos_weight)`` on the same batch.
    """
    y = np.asarray(labels, dtype=np.float32)
    return np.where(y >= 0.5, np.float32(pos_weight), np.float32(1.0)).astype(np.float32)


def tokenize_tf(texts: Sequence[str], preprocessor, chunk: int = 1024) -> dict[str, np.ndarray]:
    """Run the preprocessor's TF path over ``texts`` once, in a single-device ``tf.data`` pass.

    Returns:
        ``{"token_ids", "padding_mask"}``: int32 ``[N, L]`` numpy arrays, in input order.

    Tokenizing once up front means the distributed pipeline only slices int32 tensors and no
    epoch pays for tokenization again (memory: ``2 x 4 x N x L`` bytes, about 230 MB for the
    competition's 223,549 training rows at ``L=128``).
    """
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices([str(t) for t in texts]).batch(chunk)
    ds = ds.map(lambda x: {k: tf.cast(v, tf.int32) for k, v in preprocessor(x).items()}, num_parallel_calls=tf.data.AUTOTUNE)
    parts = list(ds.as_numpy_iterator())
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def pad_to_multiple(texts: Sequence[str], multiple: int) -> tuple[list[str], int]:
    """``texts`` plus :data:`PAD_TEXT` filler up to a multiple of ``multiple``, and the real count.

    Returns:
        ``(padded, n)``: ``len(padded) = ceil(n / multiple) * multiple`` and ``padded[:n] == texts``.

    Raises:
        ValueError: no texts, or ``multiple < 1``.
    """
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, not {multiple}")
    texts = [str(t) for t in texts]
    n = len(texts)
    if n == 0:
        raise ValueError("nothing to predict: 0 rows")
    return texts + [PAD_TEXT] * (-n % multiple), n


def predict_probabilities(model, texts: Sequence[str], preprocessor, global_batch: int, *, checkpoint=None) -> np.ndarray:
    """Class-1 probability for every text, exactly one per input row, in input order.

    The input is padded to a multiple of ``global_batch`` (:func:`pad_to_multiple`), so every
    batch has one shape (one compilation) and splits evenly across JAX devices; the filler
    rows' outputs are dropped.

    Args:
        model: a compiled classifier whose output is ``[B, 1]`` sigmoid probabilities (or
            ``[B, 2]`` softmax: column 1 is taken).
        texts: ``[N]`` strings, N >= 1.
        preprocessor: as in :func:`make_dataset`.
        global_batch: the runtime's global batch.
        checkpoint: named in the error if a failed JAX predict leaves the weights detached.

    Returns:
        float32 ``[N]`` in [0, 1].

    Raises:
        ValueError: no texts; the model gives another output width or row count, or
            probabilities narrower than float32 (a bfloat16/float16 output layer).
    """
    from ..compat.keras import keras_guarded

    padded, n = pad_to_multiple(texts, global_batch)
    ds = make_dataset(padded, None, preprocessor, global_batch, drop_remainder=True)
    raw = np.asarray(keras_guarded(model, "predict", ds, verbose=0, checkpoint=checkpoint))
    if raw.dtype.itemsize < 4:  # bfloat16 / float16: 8 or 11 significant bits, ties in the ranking
        raise ValueError(
            f"the model returns {raw.dtype} probabilities (too coarse: ROC AUC sees ties); build it with "
            "kitlib.keras.model.build_classifier, whose output layer is float32 under any dtype policy"
        )
    out = raw.astype(np.float32)
    if out.shape[0] != len(padded):
        raise ValueError(f"model returned {out.shape[0]} rows for {len(padded)} padded inputs")
    if out.ndim == 2 and out.shape[1] == 2:
        out = out[:, 1]
    elif out.ndim == 2 and out.shape[1] == 1:
        out = out[:, 0]
    elif out.ndim != 1:
        raise ValueError(f"expected [B, 1] or [B, 2] outputs, got {out.shape}")
    return out[:n]


def write_submission(
    ids: Sequence[str],
    probabilities: np.ndarray,
    output: str | os.PathLike,
    *,
    sample_submission: str | os.PathLike | None,
    test: str | os.PathLike | None,
    column: str = "toxic",
    source: str = "",
) -> "kitlib.outputs.merge.MergeResult":  # noqa: F821
    """Write ``id,<column>`` rows with the main job's rules (one world-size-1 shard through :mod:`kitlib.outputs.merge`).

    The predictions become a kit shard (row index, exact id strings) and are merged exactly as
    the multi-device inference job's shards are: rows in ``sample_submission`` order, every one
    of its ids predicted and no other, ids checked row by row against ``test``; written
    atomically, and nothing is written on any error.

    Args:
        ids: ``[N]`` ids exactly as read from the test CSV, in its order.
        probabilities: float ``[N]``.
        output: the submission CSV.
        sample_submission, test: Kaggle's ``sample_submission.csv`` and ``test.csv`` (either may be None).
        column: the prediction column name.
        source: what predicted (e.g. ``"model artifacts/keras-xlmr/model.keras"``), recorded beside
            ``output``; replacing another writer's submission is said (:mod:`kitlib.outputs.provenance`).

    Raises:
        ValueError: ``ids`` and ``probabilities`` differ in length, or ``probabilities`` is not ``[N]``.
        kitlib.outputs.merge.MergeError: a probability is NaN or infinite (the message names the ids);
            an id is missing, extra, blank or out of order against the reference files (the
            message names the file). Nothing is written then, and an existing ``output`` is
            left as it was.
    """
    from ..outputs import provenance
    from ..outputs.merge import MergeError, merge_shards
    from ..outputs.shards import write_shard

    probabilities = np.asarray(probabilities, dtype=np.float32)
    ids = [str(i) for i in ids]
    if probabilities.ndim != 1:
        raise ValueError(f"probabilities must be [N], got shape {probabilities.shape}")
    if len(ids) != len(probabilities):
        raise ValueError(f"{len(ids)} ids but {len(probabilities)} predictions")
    bad = np.flatnonzero(~np.isfinite(probabilities))
    if len(bad):
        shown = ", ".join(repr(ids[i]) for i in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise MergeError(
            f"{len(bad)} non-finite {column!r} probabilit(ies) (nan or inf) for id(s) {shown}; nothing written to "
            f"{output}. A NaN is what float16/bfloat16 inference gives when a logit overflows: predict with the "
            "float32 head of kitlib.keras.model.build_classifier, or in float32"
        )
    output = Path(normalise(output))
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".keras-shard-", dir=output.parent) as tmp:
        write_shard(
            tmp, rank=0, world_size=1, num_rows=len(ids), rows=np.arange(len(ids)), ids=ids,
            predictions={column: probabilities}, run_id="keras",
        )
        return merge_shards([tmp], output, sample_submission=sample_submission, test=test,
                            writer=provenance.KERAS, source=source)
