"""The weights' width: what ``weights=`` means on the devices found, and the dtype or quantization a model loads at.

**The weights' width** (decoders; :func:`resolve_weights`, the ``weights`` parameter, one of
:data:`WEIGHTS`) follows the compute precision and the device's memory (:mod:`kitlib.models.memory`'s plan,
and the compute precision is :mod:`kitlib.run.backends.precision`'s):

=======================  =================================================================================
``weights=``             what one replica holds
=======================  =================================================================================
``"auto"``               the compute precision's width where the plan fits the device, else ``8bit``, else
                         ``4bit`` (CUDA only); nothing fits: refused with the figure and the fix. Every
                         replica takes the narrowest width any device needs.
``"fp32"/"bf16"/"fp16"`` as asked, when it fits (refused with the figure and the width that would fit)
``"8bit"/"4bit"``        bitsandbytes (LLM.int8, NF4), CUDA only (refused on TPU and CPU, saying why);
                         training them needs LoRA
=======================  =================================================================================

An encoder (a kind that plans no memory) loads as saved (:func:`kitlib.models.memory.check_kind_width`).
Training (:func:`kitlib.training.plan.memory_plan`) and inference (:func:`kitlib.infer.weights_for`) ask the
same rule; each device's plan is printed (:meth:`WeightsChoice.lines`) and the replicas load at the width
(:func:`load_dtype`, :func:`quantization_config`).

Moved here from :mod:`kitlib.run.backends.precision` (issue 41): the rule reads the model's memory plan, so it
lives with the models, and ``run/`` imports nothing of ``models/``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..run.backends.precision import Precision


WEIGHTS = ("auto", "fp32", "bf16", "fp16", "8bit", "4bit")  # the weights parameter (module doc, its table)


@dataclass(frozen=True)
class WeightsChoice:
    """The weights' width for a run, and the memory plan of each device at it (:func:`resolve_weights`).

    Attributes:
        width: ``"fp32"``, ``"bf16"``, ``"fp16"``, ``"8bit"`` or ``"4bit"``.
        requested: what was asked for (``"auto"`` or the width).
        reason: why (the rule's words, for ``"auto"``).
        plans: ``(device, MemoryPlan)`` per replica (:mod:`kitlib.models.memory`).
    """

    width: str
    requested: str
    reason: str
    plans: tuple = ()

    @property
    def quantized(self) -> bool:
        """Whether bitsandbytes holds the weights (8 or 4 bits)."""
        return self.width in ("8bit", "4bit")

    def lines(self) -> list[str]:
        """One line per device: ``memory plan, replica 0 on a T4 (15 GB usable): Qwen3-14B at 4bit: about ...``."""
        return [f"memory plan, replica {i} on {d.name} ({d.gb:g} GB usable): {p.describe()}"
                for i, (d, p) in enumerate(self.plans)]


def _auto_width(precision: Precision, shape, devices, **plan_kw) -> tuple[str, str]:
    """``(width, why)`` for ``weights="auto"``: the narrowest :func:`kitlib.models.memory.choose_width` of the devices."""
    from . import memory

    widths = [memory.choose_width(shape, d, preferred=precision.name, **plan_kw).width for d in devices]
    width = max(widths, key=memory.WIDTHS.index)  # WIDTHS runs widest first
    if width == precision.name:
        return width, f"the compute precision's width ({precision.name}) fits every device"
    worst = devices[widths.index(width)]
    return width, f"{shape.name} at {precision.name} does not fit {worst.name} ({worst.gb:g} GB); {width} does"


def resolve_weights(requested: str, precision: Precision, shape, devices, *, batch: int, length: int, train: bool,
                    lora_r: int | None = None, say=print) -> WeightsChoice:
    """The weights' width for ``requested`` (the module's weights table), checked against every device.

    Args:
        requested: one of :data:`WEIGHTS`.
        precision: the resolved compute precision (:func:`kitlib.run.backends.precision.resolve`): ``"auto"`` starts from its width.
        shape: the model's :class:`kitlib.models.memory.Shape` (:func:`kitlib.models.memory.shape_of`).
        devices: one :class:`kitlib.models.memory.Device` per replica (e.g. ``[DEVICES["T4"]] * 2``).
        batch, length, train, lora_r: what each replica runs (:func:`kitlib.models.memory.plan`).
        say: where the plan's lines go (one per device); None: not printed.

    Returns:
        :class:`WeightsChoice`.

    Raises:
        ValueError: an unknown ``requested``; 8/4-bit off CUDA (naming why); a plan that does not fit
            a device (the figure and the fix, e.g. "weights='4bit' needs about 9.6 GB").
    """
    from . import memory

    if requested not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, not {requested!r}")
    if not devices:
        raise ValueError("resolve_weights: no device given; pass one kitlib.models.memory.Device per replica")
    plan_kw = dict(batch=batch, length=length, train=train, lora_r=lora_r)
    if requested == "auto":
        width, why = _auto_width(precision, shape, devices, **plan_kw)
    else:
        width, why = requested, "asked for"
    plans = tuple((d, memory.plan(shape, width=width, device=d, **plan_kw)) for d in devices)
    for d, p in plans:
        memory.check_fits(p, d, **plan_kw)
    choice = WeightsChoice(width, requested, why, plans)
    for line in choice.lines() if say else ():
        say(line)
    return choice


def load_dtype(width: str | None):
    """The torch dtype a model's weights are loaded at for the weights' ``width``: ``torch.bfloat16`` /
    ``torch.float16`` for ``"bf16"`` / ``"fp16"``; None (as saved, or bitsandbytes' own for ``"8bit"`` /
    ``"4bit"``: :func:`quantization_config`) for the others and for None."""
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(width)


def quantization_config(width: str | None, compute: str = "fp32"):
    """transformers' ``BitsAndBytesConfig`` for 8/4-bit weights (LLM.int8; NF4 with double quantisation, computing
    at ``compute``), to pass as ``from_pretrained(quantization_config=...)``; None for 16/32-bit weights.

    Args:
        width: the weights' width (:attr:`WeightsChoice.width`, or an adapter record's ``weights``); None: not quantized.
        compute: the compute precision's name (``"bf16"``, ``"fp16"``, ``"fp32"``: :attr:`Precision.name`).

    Raises:
        ModuleNotFoundError: bitsandbytes is not installed (naming the install command).
    """
    import importlib.util

    if width not in ("8bit", "4bit"):
        return None
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModuleNotFoundError(f"weights={width!r} needs bitsandbytes, which is not installed: "
                                  "pip install bitsandbytes (CUDA only), or weights='auto' on a device the model fits")
    import torch
    from transformers import BitsAndBytesConfig

    if width == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype={"bf16": torch.bfloat16, "fp16": torch.float16}.get(compute, torch.float32))
