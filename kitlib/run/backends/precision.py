"""The precision rule: what ``precision="auto"`` means on the hardware found, and how each precision runs (one home).

``"auto"`` follows the hardware, read without touching any device (:mod:`kitlib.run.hardware`), one row
of :data:`AUTO_RULES` each (the figures: BENCHMARKS.md section 4):

=======================  ================  =============================================================
hardware                 ``"auto"`` is     why
=======================  ================  =============================================================
TPU                      ``bf16``          the MXUs compute bf16 natively
CUDA, compute            ``bf16``          bf16 tensor cores (A100, L4, H100): no scaler needed
capability >= 8.0
CUDA below 8.0           ``fp16`` with a   T4 (7.5) and P100 (6.0) have fp16, not bf16; training scales
                         ``GradScaler``    the loss (torch's AMP recipe)
CPU with AMX or          ``bf16``          about 0.3-0.5x fp32's CPU time, same held-out AUC
avx512_bf16
CPU without either, or   ``fp32``          bf16 is 4-6x slower than fp32 there (issue 33)
a process whose torch
runs below AVX-512
=======================  ================  =============================================================

On the CPU the rule reads what this process's torch will run (:attr:`Hardware.aten_isa`,
:attr:`Hardware.onednn_isa`): ATen's capability must be AVX-512 and oneDNN's must reach
``AVX512_CORE_BF16``; a capped process gets ``fp32`` with the cap named. A CPU shared with other jobs
is a case the rule cannot see; set ``precision="fp32"`` there.

A rehearsal runs its target's precision: ``xla-cpu`` and ``xla-cpu-processes``'s ``"auto"`` is the TPU's
``bf16`` (:attr:`kitlib.run.backends.base.Backend.precision_of`). There is no ``"int8"`` (:data:`REMOVED`).

An explicit ``"fp32"``, ``"bf16"`` or ``"fp16"`` is taken as asked, with two rules: ``fp16`` training always
runs through a ``torch.amp.GradScaler`` on the replica's device (the CPU's too), and ``fp16`` training on an
XLA device is refused (no ``GradScaler`` there; use ``bf16`` or ``fp32``).

Whatever the compute precision, the classifier head and the loss run in float32
(:func:`kitlib.models.model.keep_head_float32`); inference checks the logits (:func:`check_float32_logits`).

A resolved precision is one :class:`Precision` object (as Lightning's precision plugins are): its
autocast, its scaler, the head's dtype, and how far a correct reload may predict from the in-memory model
(:attr:`Precision.reload_tolerance`, :mod:`kitlib.training.handoff`).

The weights' width (decoders: ``weights=``) is :mod:`kitlib.models.weights`'s rule, which reads the
resolved :class:`Precision`; this module knows nothing of models (run/ imports no models/).

``XLA_USE_BF16``, ``XLA_DOWNCAST_BF16`` and ``XLA_USE_FP16`` make torch_xla store float32 tensors as bf16
(or fp16), so the float32 head gives bf16 logits: the XLA backends remove them for the launch, with a note
(:func:`precision_env_overrides`).
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# precisions the kit had and removed -> why, for the refusal
REMOVED = {"int8": "int8 was removed (issue 28): torch.ao's dynamic int8 is deprecated and moved the held-out ROC AUC "
                   "by -0.013, and no maintained runtime measured passed the rule (BENCHMARKS.md section 4); use "
                   "'auto' (bf16 on a CPU with AMX or avx512_bf16) or 'fp32'"}
PRECISION_ENV_VARS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16")

# How far a correct reload may predict from the in-memory model on the same rows, by compute precision
# (largest |difference| of probabilities): bf16/fp16 reloads run other kernels, so rounding lands
# differently (measured up to 0.024; issue 28; at bf16 0.035 on a Xeon with AVX-512 bf16, then 0.0505 on an AMD
# EPYC with avx512_bf16 on a tiny random Llama's LoRA reload, tests/test_decoder_runs.py, which 0.05 refused as
# not the trained model). A folder that is not the trained model differs by tenths.
RELOAD_TOLERANCE = {"fp32": 1e-4, "fp16": 0.02, "bf16": 0.08}
# ... and by the width of the weights, where larger (:func:`reload_tolerance`): at 8 bits bitsandbytes' LLM.int8
# computes the activation columns that hold an outlier (|x| > llm_int8_threshold, 6.0) in 16 bits, chosen per
# batch, so a row's prediction depends on the rows batched with it: up to 0.069 between the kept epoch's
# predictions and predict()'s on a tiny random Llama at fp32 (AMD EPYC, bitsandbytes 0.50 CPU). NF4 (4 bits)
# dequantizes the weights and multiplies as its precision does: no allowance.
WIDTH_RELOAD_TOLERANCE = {"8bit": 0.1}


def reload_tolerance(precision: str, width: str | None = None) -> float:
    """How far a correct reload at compute ``precision`` (``"fp32"``, ``"bf16"``, ``"fp16"``) with weights at ``width``
    (``"8bit"``, ``"4bit"``, a 16/32-bit width, or None: as saved) may predict from the in-memory model: the larger of
    :data:`RELOAD_TOLERANCE`'s and :data:`WIDTH_RELOAD_TOLERANCE`'s."""
    return max(RELOAD_TOLERANCE[precision], WIDTH_RELOAD_TOLERANCE.get(width, 0.0))


@dataclass(frozen=True)
class Hardware:
    """What the precision rule reads of the hardware (:func:`kitlib.run.hardware.precision_hardware`).

    Attributes:
        kind: ``"tpu"``, ``"cuda"`` or ``"cpu"``.
        cpu_bf16: the CPU feature that computes bf16 (``"AMX"`` or ``"avx512_bf16"``), or None.
        cuda_capability: the smallest compute capability of the visible GPUs, e.g. ``(7, 5)``; None off CUDA
            or when NVML cannot say.
        aten_isa: the instruction set torch's ATen kernels run in this process (``"AVX512"``, ``"AVX2"``;
            ``ATEN_CPU_CAPABILITY`` caps it); None when torch cannot say.
        onednn_isa: the cap ``ONEDNN_MAX_CPU_ISA`` (or ``DNNL_MAX_CPU_ISA``) puts on oneDNN, e.g. ``"AVX2"``; None when unset.
    """

    kind: str
    cpu_bf16: str | None = None
    cuda_capability: tuple[int, int] | None = None
    aten_isa: str | None = None
    onednn_isa: str | None = None


def auto_precision(hw: Hardware) -> tuple[str, str]:
    """``(precision, why)`` that ``"auto"`` is on ``hw``: the table of the module doc, one row each."""
    if hw.kind == "tpu":
        return "bf16", "TPU: bf16 is native"
    if hw.kind == "cuda":
        cc = hw.cuda_capability
        if cc is not None and cc >= (8, 0):
            return "bf16", f"CUDA compute capability {cc[0]}.{cc[1]} >= 8.0: bf16 is native"
        shown = "unknown" if cc is None else f"{cc[0]}.{cc[1]}"
        return "fp16", f"CUDA compute capability {shown} < 8.0 (T4, P100): fp16, with a GradScaler when training"
    if hw.cpu_bf16:
        capped = cpu_isa_cap(hw)
        if capped:
            return "fp32", (f"CPU with {hw.cpu_bf16}, but {capped}: bf16 would run without it, about 4x slower "
                            "than fp32 (BENCHMARKS.md section 4)")
        return "bf16", f"CPU with {hw.cpu_bf16}: bf16 is faster than fp32 (BENCHMARKS.md section 4)"
    return "fp32", "CPU without AMX or avx512_bf16: bf16 would be about 6x slower than fp32"


# oneDNN's ISA names (its ONEDNN_MAX_CPU_ISA values) below the first with bf16 arithmetic, AVX512_CORE_BF16
# (oneDNN's docs, "CPU Dispatcher Control"): capped to one of these, bf16 matmuls are emulated
ONEDNN_BELOW_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")


def cpu_isa_cap(hw: Hardware) -> str | None:
    """Why this process's torch would not compute bf16 natively on a CPU that can (its cap, named), or None.

    ATen's kernels must run AVX-512 (``torch.backends.cpu.get_cpu_capability()``; ``ATEN_CPU_CAPABILITY``
    caps it) and oneDNN's must reach ``AVX512_CORE_BF16`` (``ONEDNN_MAX_CPU_ISA``); an unknown value
    (None) is not a cap.
    """
    if hw.aten_isa is not None and not hw.aten_isa.startswith("AVX512"):
        return (f"torch's ATen kernels run {hw.aten_isa} in this process (torch.backends.cpu.get_cpu_capability(); "
                "ATEN_CPU_CAPABILITY caps it)")
    if hw.onednn_isa in ONEDNN_BELOW_BF16:
        return f"oneDNN is capped to {hw.onednn_isa} in this process (ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA)"
    return None


def check(requested: str, what: str = "precision") -> None:
    """Raise ValueError unless ``requested`` is one of :data:`PRECISIONS` (the message names ``what``)."""
    if requested in REMOVED:
        raise ValueError(f"{what}={requested!r}: {REMOVED[requested]}")
    if requested not in PRECISIONS:
        raise ValueError(f"{what} must be one of {', '.join(PRECISIONS)}, not {requested!r}")


@dataclass(frozen=True)
class Precision:
    """One resolved compute precision on one device type (what a replica holds).

    Attributes:
        name: ``"fp32"``, ``"bf16"`` or ``"fp16"``.
        device_type: the torch device type autocast runs on (``"cpu"``, ``"cuda"``, ``"xla"``).
        requested: what was asked for (``"auto"`` or the name itself).
        reason: why, for ``"auto"`` (the table row), else ``"asked for"``.
    """

    name: str
    device_type: str
    requested: str = ""
    reason: str = ""

    head_dtype = "float32"  # the classifier head and the loss, whatever the compute precision

    def __str__(self) -> str:
        return self.name

    def autocast(self):
        """``torch.autocast(device_type, dtype)`` for bf16/fp16; a null context for fp32."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        import torch

        return torch.autocast(self.device_type, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[self.name])

    def grad_scaler(self):
        """A new ``torch.amp.GradScaler(device_type)`` for fp16 training; None for any other precision."""
        if self.name != "fp16":
            return None
        import torch

        return torch.amp.GradScaler(self.device_type)

    @property
    def reload_tolerance(self) -> float:
        """How far a correct reload of weights as saved may predict from the in-memory model (:func:`reload_tolerance`)."""
        return reload_tolerance(self.name)

    def on(self, device_type: str) -> "Precision":
        """The same precision, run on ``device_type`` (the hand-off reloads on the CPU what trained on XLA)."""
        return Precision(self.name, device_type, self.requested, self.reason)

    def describe(self) -> str:
        """E.g. ``"bf16 (auto: CPU with AMX: ...)"`` or ``"fp32 (asked for)"``."""
        return f"{self.name} ({'auto: ' + self.reason if self.requested == 'auto' else 'asked for'})"


def resolve(requested: str, hw: Hardware, device_type: str) -> Precision:
    """The :class:`Precision` for ``requested`` on ``hw``, computing on ``device_type``.

    ``"auto"`` follows :func:`auto_precision` (the module's table); anything else is taken as asked.

    Raises:
        ValueError: ``requested`` is not one of :data:`PRECISIONS`.
    """
    check(requested)
    if requested == "auto":
        name, why = auto_precision(hw)
        return Precision(name, device_type, "auto", why)
    return Precision(requested, device_type, requested, "asked for")


def named(name: str, device_type: str = "cpu") -> Precision:
    """The :class:`Precision` of a concrete ``name`` (e.g. a history's ``"bf16"``) on ``device_type``.

    Raises:
        ValueError: ``name`` is ``"auto"`` or not one of :data:`PRECISIONS`.
    """
    check(name)
    if name == "auto":
        raise ValueError("named() takes a resolved precision, not 'auto' (use resolve())")
    return Precision(name, device_type, name, "as recorded")


def check_training(p: Precision) -> None:
    """Refuse a training precision that cannot run (see the module doc): fp16 on an XLA device.

    Raises:
        ValueError: naming the precision and what to use instead.
    """
    if p.name == "fp16" and p.device_type == "xla":
        raise ValueError(f"precision={p.requested!r} trains in fp16, which needs torch.amp.GradScaler, and that does "
                         "not run on XLA devices; use precision='bf16' (no scaler needed) or 'fp32'")


def check_inference(requested: str, device_type: str) -> None:
    """Refuse an inference precision that cannot run on ``device_type`` (every one of
    :data:`PRECISIONS` runs on every device type; a removed or unknown one is refused by :func:`check`).

    Raises:
        ValueError: naming the parameter, the value and what to use instead.
    """
    check(requested)


def precision_env_overrides(environ=None) -> dict[str, None]:
    """The precision-changing variables set in ``environ`` (default ``os.environ``), each mapped to None
    (removed for the launch), printing one note per variable saying so and what to use instead."""
    environ = os.environ if environ is None else environ
    found = {v: environ[v] for v in PRECISION_ENV_VARS if environ.get(v, "") not in ("", "0")}
    for var, value in found.items():
        print(f"note: {var}={value} is set; it makes torch_xla store float32 tensors in lower precision behind the "
              "kit's back (the float32 classifier head would give rounded logits). It is unset for this launch; "
              "choose the compute precision with precision='bf16' instead (kitlib.run.backends.precision).", flush=True)
    return dict.fromkeys(found)


def check_float32_logits(logits, where: str) -> None:
    """Refuse logits that are not float32 in dtype or in resolution (the float32-head promise, checked).

    Args:
        logits: float tensor ``[rows, num_labels]`` on the CPU, as the model returned them.
        where: what produced them, for the message (e.g. ``"replica rank 1"``).

    A float32 head gives logits that are almost never exactly representable in bf16 or fp16 (a
    chance of about 2^-16 each); logits whose values mostly are were rounded somewhere (an
    ``XLA_USE_BF16``-style variable in the replica's environment, or a head left in autocast).
    Checked once there are at least 16 finite non-zero values.

    Raises:
        RuntimeError: naming the dtype or the share of rounded values, and the likely causes.
    """
    import torch

    if logits.dtype != torch.float32:
        raise RuntimeError(f"{where}: the classifier head returned {logits.dtype} logits, not float32; keep the head "
                           "in float32 with kitlib.models.model.keep_head_float32(model)")
    v = logits.detach().flatten()
    v = v[torch.isfinite(v) & (v != 0)]
    if v.numel() < 16:
        return
    for low in (torch.bfloat16, torch.float16):
        same = (v.to(low).float() == v).float().mean().item()
        if same > 0.5:
            raise RuntimeError(
                f"{where}: {same:.0%} of {v.numel()} float32 logits are exactly {low} values: they were computed or "
                f"stored in {low} (is one of {', '.join(PRECISION_ENV_VARS)} set in the replicas' environment, or is "
                "the head under autocast?). Predictions at that resolution tie; nothing was written.")
