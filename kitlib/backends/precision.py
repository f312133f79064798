"""The precision rule: what ``precision="auto"`` means, and how each precision runs (one home).

==============  ===========================================  =====================================
hardware        ``"auto"`` is                                 why
==============  ===========================================  =====================================
TPU             ``bf16`` autocast                             the MXUs compute bf16 natively
CUDA            ``fp16`` autocast, with ``torch.amp.GradScaler``  T4 tensor cores have fp16, not bf16
                when training
CPU (eager or   ``fp32``                                      no speed to gain; exact
PJRT CPU)
==============  ===========================================  =====================================

An explicit ``"fp32"``, ``"bf16"`` or ``"fp16"`` is taken as asked, with two rules:

* ``fp16`` training always runs through a ``torch.amp.GradScaler`` on the replica's device (the loss
  is scaled before ``backward`` so small fp16 gradients do not flush to zero, and a step whose
  gradients overflowed is skipped), as torch's AMP recipe and nanoGPT's ``train.py`` do. On the
  CPU too (``GradScaler("cpu")``), which is how the tests exercise it.
* ``fp16`` training on an XLA device is refused: ``torch.amp.GradScaler`` does not run there; use
  ``bf16`` (which needs no scaler) or ``fp32``.

Whatever the compute precision, the classifier head and the loss run in float32
(:func:`kitlib.model.keep_head_float32`), so probabilities come from float32 logits; inference
checks that at run time (:func:`check_float32_logits`).

torch_xla also changes precision behind the program's back when ``XLA_USE_BF16``,
``XLA_DOWNCAST_BF16`` or ``XLA_USE_FP16`` is set (old Kaggle TPU notebooks set the first): every
float32 tensor is then stored as bf16 (or fp16) while still calling itself float32, so the
float32 head silently gives bf16 logits (measured: 1 distinct prediction in 200). The XLA
backends remove these variables for the launch, with a note (:func:`precision_env_overrides`).
"""
from __future__ import annotations

import contextlib
import os

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# hardware -> what "auto" is (the table above); any other hardware: fp32
AUTO = {"tpu": "bf16", "cuda": "fp16"}
PRECISION_ENV_VARS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_USE_FP16")


def check(requested: str, what: str = "precision") -> None:
    """Raise ValueError unless ``requested`` is one of :data:`PRECISIONS` (the message names ``what``)."""
    if requested not in PRECISIONS:
        raise ValueError(f"{what} must be one of {', '.join(PRECISIONS)}, not {requested!r}")


def resolve(requested: str, hardware: str) -> str:
    """The compute precision for ``requested`` on ``hardware`` (``"tpu"``, ``"cuda"`` or ``"cpu"``).

    ``"auto"`` follows :data:`AUTO` (the module's table); anything else is returned as asked.

    Raises:
        ValueError: ``requested`` is not one of :data:`PRECISIONS`.
    """
    check(requested)
    return AUTO.get(hardware, "fp32") if requested == "auto" else requested


def check_training(requested: str, hardware: str, device_type: str) -> None:
    """Refuse a training precision that cannot run (see the module doc): fp16 on an XLA device.

    Raises:
        ValueError: naming the precision and what to use instead.
    """
    if resolve(requested, hardware) == "fp16" and device_type == "xla":
        raise ValueError(f"precision={requested!r} trains in fp16, which needs torch.amp.GradScaler, and that does "
                         "not run on XLA devices; use precision='bf16' (no scaler needed) or 'fp32'")


def autocast(device_type: str, precision: str):
    """``torch.autocast(device_type, dtype)`` for a resolved ``precision`` (a null context for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision])


def grad_scaler(device_type: str, precision: str):
    """``torch.amp.GradScaler(device_type)`` for a resolved ``fp16``; None for any other precision."""
    if precision != "fp16":
        return None
    import torch

    return torch.amp.GradScaler(device_type)


def precision_env_overrides(environ=None) -> dict[str, None]:
    """The precision-changing variables set in ``environ`` (default ``os.environ``), each mapped to None
    (removed for the launch), printing one note per variable saying so and what to use instead."""
    environ = os.environ if environ is None else environ
    found = {v: environ[v] for v in PRECISION_ENV_VARS if environ.get(v, "") not in ("", "0")}
    for var, value in found.items():
        print(f"note: {var}={value} is set; it makes torch_xla store float32 tensors in lower precision behind the "
              "kit's back (the float32 classifier head would give rounded logits). It is unset for this launch; "
              "choose the compute precision with precision='bf16' instead (kitlib.backends.precision).", flush=True)
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
                           "in float32 with kitlib.model.keep_head_float32(model)")
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
