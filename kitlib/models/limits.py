"""What a model can take: its limits, found from the model itself and checked before any replica starts.

Past its limits a model does not fail cleanly: eager torch raises ``IndexError`` inside a replica after
tokenization, and XLA clamps the index and predicts from the wrong row without a word. So every limit is
checked here, in the calling process, by :func:`preflight` (before tokenizing or launching), and nothing
of it is a list of family names:

* **positions**: a *probe*, a copy of the model built from its own ``config.json`` with tiny widths
  (:data:`PROBE_SIZES`; the class :func:`kitlib.models.model.load_model` loads, its position and vocabulary
  tables as they are), runs forward on the CPU, where every index is checked: the usable tokens per row
  are the longest input, up to ``max_position_embeddings``, that it takes (RoBERTa-likes come out at
  ``max_position_embeddings - padding_idx - 1``, BERT at all of them). A model the probe cannot build or run
  gets the conservative limit, ``max_position_embeddings - (pad_token_id + 1)``, said in the refusal;
* **vocabulary**: every id the run can produce (``len(tokenizer)``, the tokenizer's largest id, the
  tokenized set's largest: :func:`check_token_ids`) is below the input embedding's rows. The kit passes no
  ``token_type_ids``, so a model whose token-type table cannot take type 0 is refused, its tables named;
* **attention on the chosen device**: the probe is built with the attention the replicas will ask for
  (on XLA :func:`kitlib.compat.xla_attention_implementation`), so a model without it is refused here;
* **the prediction column**: :func:`kitlib.models.model.prediction_column` (the head's own label map).
"""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import hf_config

# The widths a probe is built with (set where the config has the field); tables (vocabulary,
# positions, token types) keep the model's own sizes.
PROBE_SIZES = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
               "embedding_size": 16, "entity_emb_size": 16, "pooler_hidden_size": 16,
               "num_key_value_heads": 1}  # (decoders' grouped-query attention: SmolLM2's 3 would not divide 2 heads)


@dataclass(frozen=True)
class ModelLimits:
    """What one model can take on one device (:func:`model_limits`).

    Attributes:
        positions: tokens per row it reads correctly (None: no position limit it declares).
        rows: rows of its input embedding: token ids must be in ``[0, rows)`` (None: unknown, the
            probe could not be built and the config names no ``vocab_size``).
        attention: the attention implementation probed (None: transformers' default, eager devices).
        how: ``"probe"``, or why the conservative limit applies.
    """

    positions: int | None
    rows: int | None
    attention: str | None
    how: str


class UnsupportedAttention(ValueError):
    """The model cannot run with the attention the chosen device needs (MPNet on XLA: no SDPA)."""


def _attention_for(device: str, model_type: str | None = None) -> str | None:
    """The ``attn_implementation`` the replicas load with on ``device`` (``"xla"``, ``"cuda"``, ``"cpu"``):
    on XLA the model type's own (:data:`kitlib.models.kinds.XLA_ATTENTION`: Gemma2/3 ``"eager"``), else the
    kit's SDPA-based one; transformers' default (None) elsewhere."""
    if device == "xla":
        from ..compat import xla_attention_implementation
        from .kinds import XLA_ATTENTION

        return XLA_ATTENTION.get(model_type) or xla_attention_implementation()
    return None


def _probe(checkpoint: str, attention: str | None, head_for_training: bool, label: str):
    """The model of ``checkpoint`` as :func:`kitlib.models.model.load_model` builds it, at :data:`PROBE_SIZES`,
    randomly initialised on the CPU (the global RNG untouched)."""
    import torch

    from .model import _classifier

    cls, kwargs = _classifier(checkpoint, head_for_training, label=label)
    config = hf_config(checkpoint, **kwargs)
    for key, value in PROBE_SIZES.items():
        if getattr(config, key, None) is not None:
            setattr(config, key, value)
    extra = {} if attention is None else {"attn_implementation": attention}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        build = cls.from_config if hasattr(cls, "from_config") else cls._from_config
        return build(config, **extra).eval()


def _fails(model, length: int, token: int) -> str | None:
    """Why a forward pass of ``[1, length]`` ids (all ``token``, no padding) fails on the CPU, where every
    index is checked (an index past a table; a buffer shorter than the input), or None when it runs."""
    import torch

    ids = torch.full((1, length), token, dtype=torch.long)
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    except (IndexError, RuntimeError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return None


def _takes(model, length: int, token: int) -> bool:
    return _fails(model, length, token) is None


def _conservative(config, why: str) -> ModelLimits:
    n = getattr(config, "max_position_embeddings", None)
    pad = getattr(config, "pad_token_id", None)
    positions = None if not n else int(n) - ((1 if pad is None else int(pad)) + 1)
    rows = getattr(config, "vocab_size", None)
    return ModelLimits(positions, None if rows is None else int(rows), None,
                       f"conservative: {why}; max_position_embeddings less padding_idx + 1, as RoBERTa-likes number positions")


@contextlib.contextmanager
def _one_thread():
    """torch on one thread inside (the previous count after): a probe must not start the OpenMP pool
    of the calling process, or replicas forked from it later hang at their first parallel op (GNU
    libgomp is not fork-safe: :mod:`kitlib.run.backends.launchers`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=32)
def _limits(checkpoint: str, stamp: float, device: str, head_for_training: bool, label: str) -> ModelLimits:
    with _one_thread():
        return _probed_limits(checkpoint, device, head_for_training, label)


def _probed_limits(checkpoint: str, device: str, head_for_training: bool, label: str) -> ModelLimits:
    """:class:`ModelLimits` from a probe (module docstring); the conservative limit when it cannot run."""
    attention = _attention_for(device, getattr(hf_config(checkpoint), "model_type", None))
    try:
        probe = _probe(checkpoint, attention, head_for_training, label)
    except Exception as e:  # noqa: BLE001 - decided below: the attention, or a model the probe cannot build
        if attention is not None:
            try:
                _probe(checkpoint, None, head_for_training, label)
            except Exception:  # noqa: BLE001 - the model cannot be built at all: the conservative limit
                pass
            else:
                raise UnsupportedAttention(
                    f"{checkpoint}: its model cannot run with the attention the XLA path needs (transformers: "
                    f"{str(e).split('. ')[0][:300]}); it needs {attention!r}, PyTorch SDPA with one graph per shape "
                    "(kitlib.compat.xla_attention_implementation). Run it on an eager device (accelerator='cpu' or "
                    "'cuda'), or choose a model whose transformers class supports SDPA") from e
        first = str(e).splitlines()[0][:200] if str(e) else ""
        return _conservative(hf_config(checkpoint), f"the probe could not be built ({type(e).__name__}: {first})")
    rows = int(probe.get_input_embeddings().weight.shape[0])
    pad = getattr(probe.config, "pad_token_id", None)
    token = next(t for t in (5, 4, 3, 2, 1, 0) if t != pad and t < rows)
    n = getattr(probe.config, "max_position_embeddings", None)
    if not n:
        return ModelLimits(None, rows, attention, "probe")
    n = int(n)
    low = min(2, n)
    try:
        broken = _fails(probe, low, token)
    except Exception as e:  # noqa: BLE001 - e.g. X-MOD without a default language: the replicas will say
        return _conservative(probe.config, f"the probe did not run at {low} tokens "
                                           f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})")
    if broken:  # an index past a table at the shortest row: its token types, a position table of one slot
        import torch

        tables = ", ".join(f"{name} {m.weight.shape[0]} rows" for name, m in probe.named_modules()
                           if isinstance(m, torch.nn.Embedding))
        raise ValueError(f"{checkpoint}: its model indexes past one of its own tables even at {low} tokens per row "
                         f"({broken}; a forward of a tiny copy on the CPU, token type ids 0 as the kit passes none; "
                         f"its tables: {tables}): it cannot predict correctly anywhere (XLA would clamp the index). "
                         "Check its config.json (vocab_size, max_position_embeddings, type_vocab_size) against its weights")
    if _takes(probe, n, token):
        return ModelLimits(n, rows, attention, "probe")
    high = n  # low runs, high does not: the longest that runs lies between
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if _takes(probe, mid, token) else (low, mid)
    return ModelLimits(low, rows, attention, "probe")


def model_limits(checkpoint: str | os.PathLike, device: str = "cpu", *, head_for_training: bool = False,
                 label: str = "toxic") -> ModelLimits:
    """The limits of the model in ``checkpoint`` on ``device`` (module docstring: how each is found).

    Args:
        checkpoint: a local transformers folder (``config.json``; no weight is read).
        device: the torch device type the replicas compute on: ``"xla"``, ``"cuda"`` or ``"cpu"``
            (``Runtime.backend.device``).
        head_for_training, label: as :func:`kitlib.models.model.load_model` will load it.

    Raises:
        UnsupportedAttention: the model cannot run with the attention ``device`` needs (MPNet on XLA).
    """
    config = Path(checkpoint) / "config.json"
    stamp = config.stat().st_mtime if config.is_file() else 0.0
    return _limits(str(checkpoint), stamp, device, head_for_training, label)


def check_max_len(checkpoint: str | os.PathLike, max_len: int, limits: ModelLimits | None = None) -> None:
    """Refuse a ``max_len`` above the tokens per row the model reads correctly (:attr:`ModelLimits.positions`).

    Raises:
        ValueError: naming ``max_len``, the limit, how it was found, and the fix.
    """
    limits = limits or model_limits(checkpoint)
    if limits.positions is not None and max_len > limits.positions:
        raise ValueError(
            f"max_len={max_len} is more than {checkpoint} can read: its position table holds {limits.positions} tokens "
            f"per row. Set max_len <= {limits.positions} (the limit is {_how(limits)}).")


def _how(limits: ModelLimits) -> str:
    return "what a probe forward of the model on the CPU takes" if limits.how == "probe" else limits.how


def tokenizer_ids(tokenizer) -> int:
    """How many token ids ``tokenizer`` can produce: ``len(tokenizer)`` (vocabulary and added tokens),
    or its largest id + 1 when its ids have gaps."""
    vocab = tokenizer.get_vocab()
    return max(len(tokenizer), (max(vocab.values()) + 1) if vocab else 0)


def check_token_ids(checkpoint: str | os.PathLike, limits: ModelLimits, *, tokenizer=None, ids: np.ndarray | None = None,
                    source: str | os.PathLike | None = None) -> None:
    """Refuse token ids at or past the model's embedding rows, before any replica sees one.

    Args:
        tokenizer: checked by :func:`tokenizer_ids` (every id it can produce).
        ids: int ``[n]``, a tokenized set (e.g. ``kitlib.data.Tokens.ids``), read from ``source``.

    Raises:
        ValueError: naming both numbers (the ids, the rows) and the fix.
    """
    fix = ("Give the model the tokenizer it was trained with, or resize its embedding to the tokenizer "
           "(model.resize_token_embeddings(len(tokenizer)), then train and save it)")
    why = "on XLA they would be clamped to the last row and predict garbage without an error; on the CPU a replica fails"
    if limits.rows is None:
        return
    if tokenizer is not None and (n := tokenizer_ids(tokenizer)) > limits.rows:
        raise ValueError(
            f"{checkpoint}: its tokenizer produces {n} token ids (len(tokenizer)={len(tokenizer)}) but the model's "
            f"input embedding has {limits.rows} rows: ids {limits.rows}..{n - 1} have no row ({why}). {fix}.")
    if ids is not None and len(ids) and (top := int(np.max(ids))) >= limits.rows:
        raise ValueError(
            f"{source}: tokenized, it holds token id {top}, but the model of {checkpoint} has {limits.rows} embedding rows "
            f"(ids 0..{limits.rows - 1}; {why}). {fix}.")


@dataclass(frozen=True)
class Preflight:
    """What :func:`preflight` found: the limits, the tokenizer it loaded, and the prediction column.

    Attributes:
        limits: :class:`ModelLimits` of the model on the run's device.
        tokenizer: the checkpoint's tokenizer (``AutoTokenizer``), loaded once for the run.
        column: which logit column is P(``target``) (:func:`kitlib.models.model.prediction_column`); None
            when no head was read (``read_head=False``).
        note: why that column, when it is a convention rather than the head's own label map; else None.
    """

    limits: ModelLimits
    tokenizer: object
    column: int | None
    note: str | None

    def check_tokens(self, checkpoint: str | os.PathLike, ids: np.ndarray, source: str | os.PathLike) -> None:
        """:func:`check_token_ids` of a tokenized set ``ids`` read from ``source``."""
        check_token_ids(checkpoint, self.limits, ids=ids, source=source)


def preflight(checkpoint: str | os.PathLike, *, max_len: int, device: str, target: str,
              head_for_training: bool = False, tokenizer=None, read_head: bool = True) -> Preflight:
    """Everything about the model a run needs, checked in the calling process before tokenizing or launching.

    In order: the attention ``device`` needs, ``max_len`` against the usable positions
    (:func:`check_max_len`), which head column is P(``target``) (:func:`kitlib.models.model.prediction_column`,
    whose note is printed), and every id the tokenizer can produce against the embedding rows
    (:func:`check_token_ids`); after tokenizing, :meth:`Preflight.check_tokens` checks the set itself.

    Args:
        checkpoint: the local folder the replicas will load.
        max_len: tokens per row of the run.
        device: ``Runtime.backend.device`` (``"xla"``, ``"cuda"``, ``"cpu"``).
        target: the column predicted: ``InferJob.prediction_column``, ``TrainJob.label_col``.
        head_for_training: as training loads it (a pretrained body gets the kit's one-logit head).
        tokenizer: the checkpoint's tokenizer when already loaded; None loads it (``AutoTokenizer``).
        read_head: find the head's column of ``target``; False for a kind without a classifier head
            (:attr:`kitlib.models.kinds.Kind.head` empty), whose column is then None.

    Raises:
        UnsupportedAttention: the model cannot run with ``device``'s attention (MPNet on XLA).
        ValueError: ``max_len`` above the usable positions; a head whose labels do not name
            ``target``; token ids past the embedding rows. Each names the numbers and the fix.
    """
    from .model import _classifier, prediction_column

    limits = model_limits(checkpoint, device, head_for_training=head_for_training, label=target)
    if limits.how != "probe":
        print(f"note: {checkpoint}: {limits.how}: at most {limits.positions} tokens per row")
    check_max_len(checkpoint, max_len, limits)
    column, note = None, None
    if read_head:  # (the answer-token form has no classifier head: its answer tokens are the prediction)
        _, kwargs = _classifier(checkpoint, head_for_training, label=target)
        column, note = prediction_column(hf_config(checkpoint, **kwargs), target, checkpoint)
    if note:
        print(f"note: {note}")
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    check_token_ids(checkpoint, limits, tokenizer=tokenizer)
    return Preflight(limits, tokenizer, column, note)
