"""Where each weight of a sharded decoder goes: the device mesh, the layout per decoder family, ``ModelParallel``.

The mesh is 2-D, ``("batch", "model")`` (:func:`device_mesh`): rows of a step are split over the
``batch`` axis (data parallel: every chip of a column holds the same weights), and each frozen
weight matrix is split over the ``model`` axis (tensor parallel, Megatron's split):

=====================  ===================================  ================================
weight                 keras-hub shape                      split on ``model``
=====================  ===================================  ================================
token embedding        ``(vocab, hidden)``                  the vocabulary
reverse embedding      ``(hidden, vocab)`` (untied only)    the vocabulary
query / key / value    Gemma ``(heads, hidden, head_dim)``  the heads
                       Llama, Qwen ``(hidden, heads, hd)``
attention output       ``(heads, head_dim, hidden)``        the heads
MLP gate and up        ``(hidden, intermediate)``           the intermediate width
MLP down               ``(intermediate, hidden)``           the intermediate width
norms                  ``(hidden,)``, ``(head_dim,)``       none (replicated)
=====================  ===================================  ================================

A weight whose split axis does not divide by the model axis (e.g. 4 key/value heads on 8 chips) is
replicated, and the plan says so (:class:`Placed`); JAX refuses an uneven shard.

Why the kit's own table rather than keras-hub's ``get_layout_map``: Gemma 3 and Qwen3 have none
(keras-hub 0.32); Llama's and Qwen2's copy Gemma's ``(model, batch, None)`` onto kernels whose
first axis is ``hidden``, not the heads, so they split the hidden width on ``model`` and the heads on
``batch``; and all of them also split weights over the ``batch`` axis (FSDP), which makes a
``(8, 1)`` mesh hold an eighth of the weights instead of being data parallel. Here the batch axis
never splits a weight, so the plan per chip (:mod:`kitlib.keras.chip_plan`) reads one rule.

The table is per family (:data:`FAMILIES`), computed from the backbone's config alone, before any
weight exists: :func:`tensors` lists every frozen weight's keras-hub path and shape (checked against
the built backbone by :func:`check_tensors`), :func:`place` decides each one's layout, and
:func:`model_parallel` turns the placement into keras's ``LayoutMap`` (exact paths) and
``ModelParallel``, to be set before the model is built. Keras is imported inside the functions only.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

AXES = ("batch", "model")


@dataclass(frozen=True)
class Tensor:
    """One frozen weight: keras-hub ``path``, ``shape``, and ``split`` (the axis split on ``model``, None: replicated)."""

    path: str
    shape: tuple
    split: int | None

    @property
    def size(self) -> int:
        """Elements in the whole tensor."""
        return math.prod(int(d) for d in self.shape)


@dataclass(frozen=True)
class Family:
    """A decoder family: the keras-hub backbone class, its config's defaults the table reads, and its weights."""

    name: str
    backbone: str  # keras_hub.models.<backbone>
    defaults: dict
    layer_weights: Callable[[dict], list]  # config -> [(name, shape, split)] of one block
    block: str  # the block's path prefix, "decoder_block" or "transformer_layer"
    final_norm: str


def _gemma_block(c: dict, *, halve: bool, qk_norm: bool) -> list:
    h, n, k, d = c["hidden_dim"], c["num_query_heads"], c["num_key_value_heads"], c["head_dim"]
    i = c["intermediate_dim"] // 2 if halve else c["intermediate_dim"]  # GemmaBackbone halves it; Gemma3 does not
    out = [("pre_attention_norm/scale", (h,), None)]
    if c.get("use_post_attention_norm"):
        out.append(("post_attention_norm/scale", (h,), None))
    out += [("attention/query/kernel", (n, h, d), 0), ("attention/key/kernel", (k, h, d), 0),
            ("attention/value/kernel", (k, h, d), 0)]
    if qk_norm:
        out += [("attention/query_norm/scale", (d,), None), ("attention/key_norm/scale", (d,), None)]
    out += [("attention/attention_output/kernel", (n, d, h), 0), ("pre_ffw_norm/scale", (h,), None)]
    if c.get("use_post_ffw_norm"):
        out.append(("post_ffw_norm/scale", (h,), None))
    return out + [("ffw_gating/kernel", (h, i), 1), ("ffw_gating_2/kernel", (h, i), 1), ("ffw_linear/kernel", (i, h), 0)]


def _llama_block(c: dict, *, qk_norm: bool) -> list:
    h, n, k, i = c["hidden_dim"], c["num_query_heads"], c["num_key_value_heads"], c["intermediate_dim"]
    d = c.get("head_dim") or h // n
    a = "self_attention/"
    out = [(a + "query/kernel", (h, n, d), 1)]
    if qk_norm:
        out.append((a + "query_dense_layernorm/scale", (d,), None))
    out.append((a + "key/kernel", (h, k, d), 1))
    if qk_norm:
        out.append((a + "key_dense_layernorm/scale", (d,), None))
    return out + [(a + "value/kernel", (h, k, d), 1), (a + "attention_output/kernel", (n, d, h), 0),
                  ("self_attention_layernorm/scale", (h,), None), ("feedforward_intermediate_dense/kernel", (h, i), 1),
                  ("feedforward_gate_dense/kernel", (h, i), 1), ("feedforward_output_dense/kernel", (i, h), 0),
                  ("feedforward_layernorm/scale", (h,), None)]


FAMILIES = {
    "gemma": Family("gemma", "GemmaBackbone", {"use_post_attention_norm": False, "use_post_ffw_norm": False},
                    lambda c: _gemma_block(c, halve=True, qk_norm=False), "decoder_block", "final_normalization"),
    "gemma3": Family("gemma3", "Gemma3Backbone", {"use_query_key_norm": True},
                     lambda c: _gemma_block(c, halve=False, qk_norm=c["use_query_key_norm"]), "decoder_block",
                     "final_normalization"),
    "llama": Family("llama", "LlamaBackbone", {"tie_word_embeddings": False},
                    lambda c: _llama_block(c, qk_norm=False), "transformer_layer", "sequence_output_layernorm"),
    "qwen3": Family("qwen3", "Qwen3Backbone", {"tie_word_embeddings": True},
                    lambda c: _llama_block(c, qk_norm=True), "transformer_layer", "sequence_output_layernorm"),
}
"""The supported decoder families by name: ``gemma`` (Gemma 1 and 2: ``GemmaBackbone``; Gemma 2 sets the
post-norms, soft caps and sliding window), ``gemma3`` (text-only ``Gemma3Backbone``), ``llama`` (Llama 2/3,
``LlamaBackbone``) and ``qwen3`` (``Qwen3Backbone``)."""


def family(name: str) -> Family:
    """The :class:`Family` called ``name``.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name not in FAMILIES:
        raise ValueError(f"decoder family {name!r} has no layout in kitlib.keras.mesh.FAMILIES "
                         f"({', '.join(FAMILIES)}); add its weight table there")
    return FAMILIES[name]


def tensors(family_name: str, config: dict) -> list[Tensor]:
    """Every frozen weight of the backbone ``config`` builds, computed from the config alone (nothing built).

    Args:
        family_name: a :data:`FAMILIES` key.
        config: the keras-hub backbone's constructor arguments (``vocabulary_size``, ``num_layers``,
            ``num_query_heads``, ``num_key_value_heads``, ``hidden_dim``, ``intermediate_dim``, ``head_dim`` ...).

    Returns:
        :class:`Tensor` s in keras-hub's paths, the embedding first.

    Raises:
        ValueError: an unknown family; KeyError: a config without a size the family needs.
    """
    fam = family(family_name)
    c = {**fam.defaults, **config}
    v, h = c["vocabulary_size"], c["hidden_dim"]
    out = [Tensor("token_embedding/embeddings", (v, h), 0)]
    if c.get("tie_word_embeddings") is False:
        out.append(Tensor("token_embedding/reverse_embeddings", (h, v), 1))
    block = fam.layer_weights(c)
    for i in range(c["num_layers"]):
        out += [Tensor(f"{fam.block}_{i}/{name}", tuple(shape), split) for name, shape, split in block]
    return out + [Tensor(f"{fam.final_norm}/scale", (h,), None)]


@dataclass(frozen=True)
class Placed:
    """A :class:`Tensor` placed on a mesh: ``spec`` (one entry per axis: ``"model"`` or None), the
    ``shard`` shape each chip holds, and ``note`` (why a splittable weight is replicated, else "")."""

    tensor: Tensor
    spec: tuple
    shard: tuple
    note: str = ""

    @property
    def shard_size(self) -> int:
        """Elements each chip holds."""
        return math.prod(int(d) for d in self.shard)


def place(items: list[Tensor], model_chips: int) -> list[Placed]:
    """Each tensor's layout on a mesh with ``model_chips`` chips on its ``model`` axis (module docstring).

    A tensor is split on its :attr:`Tensor.split` axis when that axis divides by ``model_chips``, else
    replicated with a note; the batch axis never splits a weight.

    Raises:
        ValueError: ``model_chips < 1``.
    """
    if model_chips < 1:
        raise ValueError(f"model_chips must be >= 1, not {model_chips}")
    out = []
    for t in items:
        spec, shard, note = [None] * len(t.shape), list(t.shape), ""
        if t.split is not None and model_chips > 1:
            if t.shape[t.split] % model_chips == 0:
                spec[t.split], shard[t.split] = "model", t.shape[t.split] // model_chips
            else:
                note = f"axis {t.split} ({t.shape[t.split]}) does not divide by {model_chips} model chips: replicated"
        out.append(Placed(t, tuple(spec), tuple(shard), note))
    return out


def check_mesh_shape(mesh_shape: tuple, devices: int) -> tuple:
    """``mesh_shape`` as ``(batch, model)`` ints, checked against the ``devices`` there are.

    Raises:
        ValueError: not two positive ints, or their product is not ``devices`` (naming the shapes that fit).
    """
    shape = tuple(int(x) for x in mesh_shape)
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"mesh_shape={mesh_shape!r}: give (batch, model), two positive ints")
    if shape[0] * shape[1] != devices:
        fits = [(devices // m, m) for m in range(1, devices + 1) if devices % m == 0]
        raise ValueError(f"mesh_shape={shape} covers {shape[0] * shape[1]} chips, and there are {devices}: "
                         f"use one of {fits}")
    return shape


def device_mesh(mesh_shape: tuple, devices: list | None = None):
    """A ``keras.distribution.DeviceMesh`` of ``mesh_shape`` = ``(batch, model)`` over ``devices`` (default: every
    device ``keras.distribution.list_devices()`` gives), axes :data:`AXES`.

    Raises:
        ValueError: see :func:`check_mesh_shape`.
    """
    import keras

    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    shape = check_mesh_shape(mesh_shape, len(devices))
    return keras.distribution.DeviceMesh(shape=shape, axis_names=AXES, devices=devices)


def model_parallel(mesh, placed: list[Placed]):
    """``keras.distribution.ModelParallel`` over ``mesh`` with a ``LayoutMap`` of every placed tensor's exact path.

    Paths not in the map (LoRA matrices, the head) are replicated: keras's default. Set it (``with
    dist.scope():``) before the backbone is built, so each weight is created in its shards.
    """
    import keras

    layout_map = keras.distribution.LayoutMap(mesh)
    for p in placed:
        layout_map[p.tensor.path] = p.spec
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def check_tensors(backbone, family_name: str, config: dict) -> None:
    """Refuse a built backbone whose weights are not :func:`tensors`' table (keras-hub changed a path or shape).

    Raises:
        RuntimeError: naming the first paths that differ, and that the table in kitlib.keras.mesh needs updating.
    """
    want = {t.path: tuple(t.shape) for t in tensors(family_name, config)}
    have = {v.path: tuple(v.shape) for v in backbone.weights if "lora_kernel" not in v.path}
    if want != have:
        extra = sorted(set(have.items()) - set(want.items()))[:3]
        missing = sorted(set(want.items()) - set(have.items()))[:3]
        raise RuntimeError(f"the {family_name} backbone's weights are not kitlib.keras.mesh's table (the plan and "
                           f"layout would be wrong): built but not in the table {extra}; in the table but not "
                           f"built {missing}. Update the family's weight table for this keras-hub version.")


def describe_layout(placed: list[Placed], top: int = 6, bytes_per_value: float = 2.0) -> str:
    """The ``top`` largest tensors (by whole size; one per weight of a block) and where they go, one line each, e.g.
    ``token_embedding/embeddings (151936, 5120) -> ('model', None): (18992, 5120) per chip, 194.5 MB``."""
    seen, rows = set(), []
    for p in sorted(placed, key=lambda p: -p.tensor.size):  # one row per weight of a block, not per layer
        key = re.sub(r"_\d+/", "_*/", p.tensor.path)
        if key not in seen:
            seen.add(key)
            rows.append(p)
    rows = rows[:top]
    return "\n".join(f"  {p.tensor.path} {p.tensor.shape} -> {p.spec}: {p.shard} per chip, "
                     f"{p.shard_size * bytes_per_value / 1e6:.1f} MB" + (f" ({p.note})" if p.note else "") for p in rows)
