"""int8 CPU inference (``precision="int8"``): the model's linear layers as dynamic int8.

What changes: every ``nn.Linear`` of the model's body (attention query, key, value and output,
the feed-forward pair, a pooler if there is one) gets int8 weights, and its input is quantized to
int8 per batch at run time (torch's dynamic quantization, the fbgemm / x86 kernels;
:func:`kitlib.compat.quantize_dynamic_int8`). Embeddings, LayerNorms, attention scores and softmax
stay float32, and so does the classifier head (:data:`HEAD`), so logits are float32 as for every
other precision.

Where it runs: inference on an eager CPU replica only. The precision rule
(:mod:`kitlib.backends.precision`) refuses it on XLA devices (TPU, PJRT CPU) and on CUDA, which
have no kernels for these modules, and for training: int8 weights have no gradient.

Is it worth it: it depends on the CPU. The int8 kernels gain most with AVX-512 VNNI (or AMX); on
an AVX2-only CPU (the 2-core AMD EPYC these figures come from) they are barely faster than float32,
and the predictions move by about 1e-2. BENCHMARKS.md section 4 has the figures measured here;
measure on your own CPU before choosing it.
"""
from __future__ import annotations

from . import compat

HEAD = "classifier"  # the module every kitlib classifier keeps its head in (kitlib.model); left float32


def int8_linear_names(model) -> set[str]:
    """Names of the ``nn.Linear`` modules :func:`quantize_int8` converts: all but the :data:`HEAD`'s."""
    import torch

    return {name for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and name != HEAD and not name.startswith(HEAD + ".")}


def quantize_int8(model):
    """Convert ``model``'s body linear layers to dynamic int8, in place, for CPU inference.

    Args:
        model: a float32 classifier in eval mode on the CPU (:func:`kitlib.model.load_model`).

    Returns:
        The same model object, its body ``nn.Linear`` modules replaced by
        ``torch.ao.nn.quantized.dynamic.Linear``; ``forward`` takes and returns what it did
        (float32 logits ``[batch, num_labels]``).

    Raises:
        ValueError: the model has no linear layer outside its head (nothing to quantize).
    """
    names = int8_linear_names(model)
    if not names:
        raise ValueError(f"precision='int8': {type(model).__name__} has no nn.Linear outside its head "
                         f"({HEAD!r}) to quantize; use precision='fp32'")
    return compat.quantize_dynamic_int8(model, names)


def for_precision(model, precision: str):
    """``model`` as the resolved ``precision`` runs it: :func:`quantize_int8` for ``"int8"``, else unchanged
    (float precisions run through ``torch.autocast`` instead)."""
    return quantize_int8(model) if precision == "int8" else model
