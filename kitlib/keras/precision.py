"""The Keras mixed-precision rule: which global dtype policy each accelerator trains under.

================  ===================  ==================================================
accelerator       policy               why (Keras "Mixed precision" guide)
================  ===================  ==================================================
``"tpu"``         ``mixed_bfloat16``   bfloat16 is the TPU's native matrix type
``"cuda"``        ``mixed_float16``    float16 runs on the T4's tensor cores; Keras's
                                       optimizer wraps itself in a ``LossScaleOptimizer``
                                       under this policy, so small gradients survive
``"cpu"``         none (float32)       a CPU gains nothing from either
================  ===================  ==================================================

The classifier's output layer stays float32 under any policy
(:func:`kitlib.keras.model.build_classifier`), so predicted probabilities are never rounded
to 8 significant bits.
"""
from __future__ import annotations

from ..run.hardware import ACCELERATOR_KINDS

POLICIES = {"tpu": "mixed_bfloat16", "cuda": "mixed_float16", "cpu": None}


def mixed_precision_policy(accelerator: str) -> str | None:
    """The policy :data:`POLICIES` gives ``accelerator`` (``"tpu"``, ``"cuda"``, ``"cpu"``), or None for float32.

    Raises:
        ValueError: ``accelerator`` is not one of :data:`kitlib.run.hardware.ACCELERATOR_KINDS`.
    """
    if accelerator not in ACCELERATOR_KINDS:
        raise ValueError(f"accelerator {accelerator!r} is not one of {ACCELERATOR_KINDS}")
    return POLICIES[accelerator]
