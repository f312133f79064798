"""Opening a model: one entry, :func:`open_model`: a checkpoint folder (or adapters on a base) and a width in, a model out.

Training (:func:`kitlib.training.loop._load_model`), predict (:func:`kitlib.infer.load_for_inference`), the hand-off
(:func:`kitlib.training.handoff.reload`) and so the test-time kernel call it, and nothing else opens a model
(``tests/test_layers.py`` counts one loader). It asks :data:`DISPATCHERS` in order, as peft's ``tuners/lora``
dispatch picks a layer, and the first whose ``matches`` holds ``open``\\ s the model; the plain one is last:

======================  =====================================  ================================================
dispatcher              matches                                opens
======================  =====================================  ================================================
``GgufSource``          a GGUF file as the model or base       it converted once (``packaged.from_gguf``), asked again
``QuantizedAdapters``   adapters on a base, 8/4-bit weights    the base quantized on ``device``, the adapters on
                                                               top (never merged: rounding would change them)
``Adapters``            adapters on a base                     the base at ``width``, the adapters on top or merged
``Quantized``           8/4-bit weights                        bitsandbytes quantizes as it loads, on ``device``
``Plain``               anything                               ``kind.load`` at ``width``'s dtype, on the CPU
======================  =====================================  ================================================

A quantized model is on ``device`` (it cannot be moved after); any other is on the CPU, for the caller to move.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

QUANTIZED = ("8bit", "4bit")


@dataclass(frozen=True)
class Request:
    """What :func:`open_model` was asked (its arguments, the adapters' base and width resolved)."""

    folder: str | os.PathLike
    kind: object
    width: str | None = None
    device: object = None
    compute: str = "fp32"
    base: str | os.PathLike | None = None
    merge: bool = False
    trainable: bool = False
    xla: bool = False
    head_for_training: bool = False
    dtype: object = None

    @property
    def quantized(self) -> bool:
        return self.width in QUANTIZED

    def load_dtype(self):
        from .weights import load_dtype

        return self.dtype if self.dtype is not None else load_dtype(self.width)


def _quantized(r: Request, folder):
    """``folder`` loaded by ``r.kind`` with bitsandbytes' ``r.width`` weights on ``r.device`` (what it leaves unquantized
    at ``r.compute``'s 16-bit width), made ready for adapters (peft's ``prepare_model_for_kbit_training``: those
    parameters float32, every weight frozen). Training and inference load a quantized base here alone."""
    from peft import prepare_model_for_kbit_training

    from .weights import load_dtype, quantization_config

    model = r.kind.load(folder, dtype=load_dtype(r.compute), head_for_training=r.head_for_training, device=r.device,
                        quantization=quantization_config(r.width, r.compute))
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _adapted(r: Request, loaded, merge: bool):
    """The adapters and head of ``r.folder`` on ``loaded`` (peft ``PeftModel``), merged into it when ``merge``."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(loaded, str(r.folder), is_trainable=r.trainable and not merge)
    return model.merge_and_unload().eval() if merge else model.eval() if not r.trainable else model


class GgufSource:
    @staticmethod
    def matches(r: Request) -> bool:
        from .packaged import gguf_source

        return gguf_source(r.folder) is not None or (r.base is not None and gguf_source(r.base) is not None)

    @staticmethod
    def open(r: Request):
        from ..paths import scratch_dir
        from .packaged import from_gguf, gguf_source

        found = {"folder": gguf_source(r.folder), "base": r.base is not None and gguf_source(r.base) or None}
        return _open(replace(r, **{k: from_gguf(g, scratch_dir()) for k, g in found.items() if g is not None}))


class QuantizedAdapters:
    @staticmethod
    def matches(r: Request) -> bool:
        return r.base is not None and r.quantized

    @staticmethod
    def open(r: Request):
        return _adapted(r, _quantized(r, r.base), merge=False)


class Adapters:
    @staticmethod
    def matches(r: Request) -> bool:
        return r.base is not None

    @staticmethod
    def open(r: Request):
        return _adapted(r, r.kind.load(r.base, dtype=r.load_dtype(), xla=r.xla), merge=r.merge)


class Quantized:
    @staticmethod
    def matches(r: Request) -> bool:
        return r.quantized

    @staticmethod
    def open(r: Request):
        return _quantized(r, r.folder)


class Plain:
    @staticmethod
    def matches(r: Request) -> bool:
        return True

    @staticmethod
    def open(r: Request):
        return r.kind.load(r.folder, dtype=r.load_dtype(), xla=r.xla, head_for_training=r.head_for_training)


DISPATCHERS = (GgufSource, QuantizedAdapters, Adapters, Quantized, Plain)  # tried in order; the plain one last


def open_model(folder: str | os.PathLike, *, kind, width: str | None = None, device=None, precision=None,
               base: str | os.PathLike | None = None, merge: bool = False, trainable: bool = False, xla: bool = False,
               head_for_training: bool = False, dtype=None):
    """The model of ``folder`` as ``kind`` builds it, its weights at ``width``, by the first of :data:`DISPATCHERS` that matches.

    Args:
        folder: a checkpoint folder, an adapter checkpoint (:func:`kitlib.models.adapters.is_adapter`), or a GGUF
            source (:func:`kitlib.models.packaged.gguf_source`), converted once into :func:`kitlib.paths.scratch_dir`.
        kind: its :class:`kitlib.models.kinds.Kind`.
        width: ``"fp32"``, ``"bf16"``, ``"fp16"``, ``"8bit"``, ``"4bit"`` (:mod:`kitlib.models.weights`); None: as
            saved, or for adapters the width their record says they trained on.
        device, precision: where and at what compute precision (a ``Precision`` or its name) 8/4-bit weights load.
        base: the base the adapters of ``folder`` load onto; None: the one their record names (checked by content).
        merge: fold the adapters into the base (peft ``merge_and_unload``); never at 8/4 bits.
        trainable: the adapters and head require grad (resuming training); ignored when merging.
        xla, head_for_training, dtype: as :meth:`kitlib.models.kinds.Kind.load` (``dtype`` wins over ``width``'s).

    Raises:
        ValueError: ``base`` is not the model the adapters were trained on (:func:`kitlib.models.adapters.check_base`).
        FileNotFoundError: the adapters' base is not here.
        ModuleNotFoundError: a GGUF source in a kernel (:func:`kitlib.models.packaged.from_gguf`).
    """
    compute = getattr(precision, "name", precision) or "fp32"
    return _open(Request(folder, kind, width, device, compute, base, merge, trainable, xla, head_for_training, dtype))


def _open(r: Request):
    """``r`` opened by the first of :data:`DISPATCHERS` that matches, its adapters' base known and checked (a GGUF
    source's once converted)."""
    if not GgufSource.matches(r):
        r = _with_base(r)
    return next(d for d in DISPATCHERS if d.matches(r)).open(r)


def _with_base(r: Request) -> Request:
    """``r`` with an adapter folder's base (else the record's; checked by content) and width (else the record's)."""
    from . import adapters

    if r.base is None and not adapters.is_adapter(r.folder):
        return r
    if r.base is None:
        r = replace(r, base=adapters.base_of(r.folder))  # the record's, checked there
    else:
        adapters.check_base(r.folder, r.base)
    return replace(r, width=r.width or adapters.read_record(r.folder).get("weights"))
