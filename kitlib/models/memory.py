"""A memory plan per device, worked out from the config before any replica starts, and its refusal.

:func:`plan` counts the model's parameters from its config on the meta device (accelerate's
``init_empty_weights``: no weight is read or allocated) and estimates, per replica:

* **weights** at the chosen width (:data:`WEIGHT_BYTES`): every ``Linear`` but the head at that
  width; embeddings, norms and the head at 16 bits for 8/4-bit weights (bitsandbytes keeps them
  so), else at the width;
* **trained state**, for the parameters the run trains (:attr:`Shape.trained`: those that require grad in
  the model a replica builds, counted on its skeleton by :func:`kitlib.training.plan.memory_plan`; a
  frozen LM head is not among them): adapters (and the kind's head) train in float32, 16 bytes each (the
  weight, its gradient, Adam's two moments); a full fine-tune adds the gradient and moments to the weight;
* **activations** (an estimate, :func:`_activations`: training without recomputation, inference one
  layer's worth);
* the runtime's own **overhead** (:attr:`Device.overhead_gb`: CUDA's context and allocator).

:func:`check_fits` refuses a plan that exceeds the device, with the figure and the fix;
:func:`check_width` refuses 8/4-bit weights off CUDA (bitsandbytes has no XLA backend; the kit plans them for CUDA).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .config import hf_config

GB = 1e9
WIDTHS = ("fp32", "bf16", "fp16", "8bit", "4bit")
# bytes per quantisable weight: 8-bit has one fp32 scale per row (about 1 byte); 4-bit NF4 one fp32
# absmax per 64 weights (0.5 + 4/64 bytes) before double quantisation
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "8bit": 1.0, "4bit": 0.5625}
QUANTIZED = ("8bit", "4bit")
TRAIN_BYTES_PER_PARAM = 16  # float32 weight + gradient + Adam's two moments


@dataclass(frozen=True)
class Device:
    """One device's usable memory: ``kind`` ``"cuda"``, ``"tpu"`` or ``"cpu"``, ``gb`` usable by one replica."""

    name: str
    kind: str
    gb: float
    overhead_gb: float = 0.0


DEVICES = {
    "T4": Device("a T4", "cuda", 15.0, 0.5),  # 16 GB card, about 15 GB usable
    "L4": Device("an L4", "cuda", 22.5, 0.5),
    "A100-40GB": Device("an A100 40GB", "cuda", 39.5, 0.5),
    "H100": Device("an H100", "cuda", 79.0, 0.5),
    "H200": Device("an H200", "cuda", 140.0, 0.5),
    "TPU-v5e": Device("a TPU v5e chip", "tpu", 16.0),
    "TPU-v3": Device("a TPU v3 core", "tpu", 16.0),
}
"""Known devices by name; others: ``Device(name, kind, gb)`` (e.g. the CPU's free memory)."""


USABLE = 0.94  # share of a device's total memory one replica may plan for (the rest: driver, fragmentation)


def device_for(kind: str, name: str = "", total_gb: float | None = None) -> Device:
    """The :class:`Device` a replica runs on: from its total memory when known, else :data:`DEVICES` by name.

    Args:
        kind: ``"cuda"``, ``"tpu"`` or ``"cpu"``.
        name: the device's name (NVML's ``"Tesla T4"``, ``"NVIDIA H200"``): a :data:`DEVICES` key in it
            (its part before ``-``) picks that row.
        total_gb: the device's total memory (NVML, or the CPU's available memory per replica): usable
            is :data:`USABLE` of it, with CUDA's 0.5 GB overhead.

    Raises:
        ValueError: neither ``total_gb`` nor a known name (naming the name and the fix).
    """
    if total_gb is not None:
        return Device(name or f"this {kind.upper()} device", kind, round(total_gb * USABLE, 1), 0.5 if kind == "cuda" else 0.0)
    for key in sorted(DEVICES, key=len, reverse=True):
        if DEVICES[key].kind == kind and key.split("-")[0] in name:
            return DEVICES[key]
    raise ValueError(f"device {name!r} ({kind}) is not in kitlib.models.memory.DEVICES ({', '.join(DEVICES)}); "
                     "pass its total memory: device_for(kind, name, total_gb=...)")


@dataclass(frozen=True)
class Shape:
    """What the plan needs of the model: parameter counts and sizes (from :func:`model_shape`); ``trained``:
    the parameters that require grad in the model the run builds (the module doc), None until counted."""

    name: str
    params: int           # all parameters
    linear_params: int    # in Linear layers other than the head (what 8/4-bit quantises)
    layers: int
    hidden: int
    heads: int
    intermediate: int
    trained: int | None = None


def model_shape(config, name: str | None = None, head: tuple = ("score", "classifier", "lm_head"), model=None) -> Shape:
    """Count a model's parameters on the meta device (nothing allocated): ``model`` (a skeleton, before adapters
    wrap it), else the one its ``PretrainedConfig`` makes: a causal-LM config its ``AutoModelForCausalLM``, any
    other its ``AutoModelForSequenceClassification``. :attr:`Shape.trained` is left None.
    """
    import torch

    if model is None:
        from accelerate import init_empty_weights
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        archs = getattr(config, "architectures", None) or []
        auto = AutoModelForCausalLM if any(a.endswith("ForCausalLM") for a in archs) else AutoModelForSequenceClassification
        with init_empty_weights():
            model = auto.from_config(config)
    linear = sum(m.weight.numel() for n, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and n.split(".")[-1] not in head)
    text = getattr(config, "text_config", None) or config
    return Shape(name or getattr(config, "name_or_path", "") or config.model_type,
                 sum(p.numel() for p in model.parameters()), linear,
                 text.num_hidden_layers, text.hidden_size, text.num_attention_heads, text.intermediate_size)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes one replica needs, by part (see the module docstring); :attr:`total` their sum."""

    shape: Shape
    width: str
    weights: float
    lora: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return self.weights + self.lora + self.activations + self.overhead

    def describe(self) -> str:
        """One line: the total and its parts in GB."""
        return (f"{self.shape.name} at {self.width}: about {self.total / GB:.1f} GB (weights {self.weights / GB:.2f}, "
                f"LoRA state {self.lora / GB:.2f}, activations {self.activations / GB:.2f}, overhead {self.overhead / GB:.2f})")


def _activations(s: Shape, batch: int, length: int, train: bool, width: str) -> float:
    """The activation estimate in bytes: training without recomputation keeps per layer ``batch * length *
    hidden * (34 + 5 * heads * length / hidden)`` bytes at 16 bits (Korthikanti et al. 2022, eq. 1), twice
    that at fp32; inference one layer's worth of values."""
    compute_bytes = 4 if width == "fp32" else 2
    if train:
        per_layer = batch * length * s.hidden * (34 + 5 * s.heads * length / s.hidden)
        return per_layer * s.layers * compute_bytes / 2
    return batch * length * (4 * s.hidden + 2 * s.intermediate + s.heads * length) * compute_bytes


def plan(shape: Shape, *, width: str, batch: int, length: int, train: bool, lora_r: int | None = None,
         device: Device | None = None) -> MemoryPlan:
    """The memory one replica needs.

    Args:
        shape: :func:`model_shape`'s counts.
        width: the weights' width, one of :data:`WIDTHS`.
        batch, length: rows per batch and tokens per row.
        train: training (the trained state, :attr:`Shape.trained`, and stored activations) or inference.
        lora_r: LoRA rank when training adapters (float32, beside the frozen weights); None: a full fine-tune.
        device: adds its overhead.

    Raises:
        ValueError: an unknown width; training with :attr:`Shape.trained` not counted.
    """
    if width not in WEIGHT_BYTES:
        raise ValueError(f"weights={width!r} is not one of {WIDTHS}")
    if train and shape.trained is None:
        raise ValueError(f"{shape.name}: a training plan charges state for the parameters the run trains; count them "
                         "on its model (Shape.trained, as kitlib.training.plan.memory_plan does)")
    other = shape.params - shape.linear_params
    other_bytes = 2.0 if width in QUANTIZED else WEIGHT_BYTES[width]
    weights = shape.linear_params * WEIGHT_BYTES[width] + other * other_bytes
    # adapters: the weight, its gradient and Adam's moments in float32; a full fine-tune: the weight is in `weights`
    lora = shape.trained * (TRAIN_BYTES_PER_PARAM - (0 if lora_r else WEIGHT_BYTES[width])) if train else 0.0
    overhead = (device.overhead_gb if device else 0.0) * GB
    return MemoryPlan(shape, width, weights, lora, _activations(shape, batch, length, train, width), overhead)


def check_width(width: str, device: Device) -> None:
    """Refuse 8/4-bit weights off CUDA.

    Raises:
        ValueError: naming the width, the device and what to use instead.
    """
    if width in QUANTIZED and device.kind != "cuda":
        other = "bf16 (the TPU's native width)" if device.kind == "tpu" else "fp32, or bf16 on a CPU with AMX"
        why = ("it has no TPU (XLA) backend" if device.kind == "tpu" else
               "its CPU backend, 0.47+, serves the kit's tests; the memory plan and the write-ups' figures are CUDA's")
        raise ValueError(f"weights={width!r} on {device.name}: 8-bit and 4-bit weights come from bitsandbytes, "
                         f"which the kit loads on CUDA only ({why}); use {other}, or a smaller model")


def check_kind_width(requested: str, kind, checkpoint) -> None:
    """The ``weights`` parameter for a model kind that plans no memory (encoders,
    :attr:`kitlib.models.kinds.Kind.plans_memory` False): they load as saved, so 8/4-bit weights are refused,
    in training and inference alike, before any replica starts. Nothing to check for a kind that plans its memory.

    Raises:
        ValueError: ``requested`` is ``"8bit"`` or ``"4bit"`` for such a kind (``checkpoint`` and its kind named, and the fix).
    """
    if not kind.plans_memory and requested in QUANTIZED:
        raise ValueError(f"weights={requested!r}: {checkpoint} is an {kind.name}, which loads as saved; "
                         "8-bit and 4-bit weights are for decoders (kitlib.models.memory); use weights='auto'")


def allowed_widths(device: Device) -> tuple:
    """The widths :func:`check_width` accepts on ``device``, widest first."""
    return tuple(w for w in WIDTHS if w not in QUANTIZED or device.kind == "cuda")


def check_fits(p: MemoryPlan, device: Device, *, batch: int, length: int, train: bool, lora_r: int | None = None) -> None:
    """Refuse a plan that does not fit ``device``, saying the figure and the fix.

    The fix is the widest narrower width that fits (8/4-bit only on CUDA), else a smaller batch.

    Raises:
        ValueError: e.g. "Qwen3-14B at fp16 needs about 29.9 GB; a T4 has 15 GB: weights='4bit' needs about 9.5 GB".
    """
    check_width(p.width, device)
    if p.total <= device.gb * GB:
        return
    msg = f"{p.shape.name} at {p.width} needs about {p.total / GB:.1f} GB; {device.name} has {device.gb:g} GB"
    widths = allowed_widths(device)
    for w in widths[widths.index(p.width) + 1:] if p.width in widths else ():
        q = plan(p.shape, width=w, batch=batch, length=length, train=train, lora_r=lora_r, device=device)
        if q.total <= device.gb * GB:
            raise ValueError(f"{msg}: weights={w!r} needs about {q.total / GB:.1f} GB ({q.describe()})")
    raise ValueError(f"{msg} ({p.describe()}), and no width it takes fits; use a smaller model, a smaller batch "
                     f"than {batch} or length than {length}, or a device with more memory")


def choose_width(shape: Shape, device: Device, *, preferred: str, batch: int, length: int, train: bool,
                 lora_r: int | None = None) -> MemoryPlan:
    """``weights="auto"``: the plan at ``preferred`` (the precision rule's bf16/fp16/fp32) if it fits,
    else at 8-bit, else 4-bit (CUDA only).

    Raises:
        ValueError: nothing fits (:func:`check_fits`'s message).
    """
    first = plan(shape, width=preferred, batch=batch, length=length, train=train, lora_r=lora_r, device=device)
    for w in (preferred, *(q for q in QUANTIZED if device.kind == "cuda")):
        p = plan(shape, width=w, batch=batch, length=length, train=train, lora_r=lora_r, device=device)
        if p.total <= device.gb * GB:
            return p
    check_fits(first, device, batch=batch, length=length, train=train, lora_r=lora_r)
    return first  # not reached: check_fits raised


def shape_of(path: str | os.PathLike) -> Shape:
    """:func:`model_shape` of a checkpoint folder's ``config.json`` (named by the folder)."""
    return model_shape(hf_config(path), name=os.path.basename(os.path.normpath(path)))


def available_gb() -> float | None:
    """This machine's available memory in GB (``/proc/meminfo`` ``MemAvailable``), or None where unreadable."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / GB
    except OSError:
        return None
    return None


def replica_devices(hardware: str, replicas: int | None) -> list[Device]:
    """One :class:`Device` per replica of a run on ``hardware`` (``Backend.hardware``: ``"cpu"``, ``"tpu"``, ``"cuda"``),
    found without touching a device.

    The CPU's replicas share its available memory (:func:`available_gb`) evenly; a TPU replica is a
    :data:`DEVICES` ``"TPU-v5e"`` chip (16 GB); a CUDA replica a T4, the smallest GPU Kaggle lends (a plan
    that does not fit one is refused on every GPU: pass ``weights`` by hand there).
    """
    n = max(1, replicas or 1)
    if hardware == "cpu":
        total = available_gb()
        return [device_for("cpu", "this CPU", total / n if total else 8.0)] * n
    return [DEVICES["TPU-v5e" if hardware == "tpu" else "T4"]] * n
