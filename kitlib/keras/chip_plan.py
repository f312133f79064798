"""The memory plan per chip of a sharded LoRA run, worked out from the config before any weight loads, and its refusal.

The torch side's plan (:mod:`kitlib.models.memory`) counts one replica holding the whole model; here
each chip of a ``(batch, model)`` mesh (:mod:`kitlib.keras.mesh`) holds, in the same vocabulary and
figures (:data:`~kitlib.models.memory.WEIGHT_BYTES`, :data:`~kitlib.models.memory.TRAIN_BYTES_PER_PARAM`,
:data:`~kitlib.models.memory.DEVICES`):

* **frozen**: its shard of every frozen weight under the layout (:func:`kitlib.keras.mesh.place`), at
  the width's bytes per value; a weight the model axis cannot split counts whole;
* **LoRA state**: the LoRA matrices keras-hub's ``enable_lora(rank)`` adds (on the ``query`` and
  ``value`` kernels: ``A`` has the kernel's shape with its last axis replaced by the rank, ``B`` is
  ``(rank, last axis)``) and the head (``hidden + 1``), replicated on every chip, trained in float32:
  16 bytes each (weight, gradient, Adam's two moments);
* **activations** (an estimate): Korthikanti et al. 2022, eq. 2, per layer
  ``length * rows * hidden * (10 + 24 / t + 5 * heads * length / (hidden * t))`` bytes at 16 bits, with
  ``t`` the model-axis chips and ``rows`` the step's batch over the batch-axis chips (the torch side's
  eq. 1 is ``t = 1``); twice that at fp32.

:func:`plan_chips` makes the plan; :func:`check_fits` refuses one over the chip's memory with the
figure and the fix (more model-axis chips, a shorter length, a smaller batch); :meth:`ChipPlan.report`
prints the mesh, the largest tensors' layout and each chip's plan. :data:`PUBLISHED` holds real
decoders' sizes (no weights), and :func:`v5e8_table` says which fit a TPU v5e-8 at which mesh, batch
and length. Nothing here imports Keras or JAX.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..models.memory import DEVICES, GB, TRAIN_BYTES_PER_PARAM, WEIGHT_BYTES, Device
from .mesh import Placed, place, tensors

LORA_TARGETS = ("query", "value")  # keras-hub Backbone.default_lora_layer_names() for these families


def _size(n: float) -> str:
    """``n`` bytes in GB (``"3.69 GB"``), or in MB below 10 MB (``"0.019 MB"``: the CPU rehearsal's decoders)."""
    return f"{n / GB:.2f} GB" if n >= 1e7 else f"{n / 1e6:.3f} MB"


@dataclass(frozen=True)
class Chip:
    """An accelerator chip: its memory (a :class:`kitlib.models.memory.Device`), peak dense bf16 TFLOPS, HBM GB/s."""

    device: Device
    tflops: float
    gbps: float


V5E = Chip(DEVICES["TPU-v5e"], 197.0, 819.0)  # Cloud TPU v5e: 16 GB HBM2, 197 TFLOPS bf16, 819 GB/s per chip


@dataclass(frozen=True)
class Decoder:
    """A decoder to plan: a display ``name``, its :data:`kitlib.keras.mesh.FAMILIES` key and keras-hub backbone config."""

    name: str
    family: str
    config: dict


PUBLISHED = {
    "gemma2-2b": Decoder("Gemma 2 2B", "gemma", dict(
        vocabulary_size=256000, num_layers=26, num_query_heads=8, num_key_value_heads=4, hidden_dim=2304,
        intermediate_dim=18432, head_dim=256, use_post_ffw_norm=True, use_post_attention_norm=True)),
    "gemma2-9b": Decoder("Gemma 2 9B", "gemma", dict(
        vocabulary_size=256000, num_layers=42, num_query_heads=16, num_key_value_heads=8, hidden_dim=3584,
        intermediate_dim=28672, head_dim=256, use_post_ffw_norm=True, use_post_attention_norm=True)),
    "gemma3-12b": Decoder("Gemma 3 12B (text)", "gemma3", dict(
        vocabulary_size=262208, num_layers=48, num_query_heads=16, num_key_value_heads=8, hidden_dim=3840,
        intermediate_dim=15360, head_dim=256, use_post_ffw_norm=True, use_post_attention_norm=True)),
    "llama3-8b": Decoder("Llama 3 8B", "llama", dict(
        vocabulary_size=128256, num_layers=32, num_query_heads=32, num_key_value_heads=8, hidden_dim=4096,
        intermediate_dim=14336, tie_word_embeddings=False)),
    "qwen3-8b": Decoder("Qwen3-8B", "qwen3", dict(
        vocabulary_size=151936, num_layers=36, num_query_heads=32, num_key_value_heads=8, head_dim=128,
        hidden_dim=4096, intermediate_dim=12288, tie_word_embeddings=False)),
    "qwen3-14b": Decoder("Qwen3-14B", "qwen3", dict(
        vocabulary_size=151936, num_layers=40, num_query_heads=40, num_key_value_heads=8, head_dim=128,
        hidden_dim=5120, intermediate_dim=17408, tie_word_embeddings=False)),
}
"""Published sizes of real decoders as keras-hub backbone configs (their ``config.json`` converted as keras-hub's
converters do: ``GemmaBackbone``'s ``intermediate_dim`` is twice the checkpoint's ``intermediate_size``)."""


def lora_params(placed: list[Placed], rank: int, targets: tuple = LORA_TARGETS) -> int:
    """Parameters ``enable_lora(rank)`` adds on the kernels of layers named in ``targets`` (module docstring)."""
    n = 0
    for p in placed:
        parts = p.tensor.path.split("/")
        if parts[-1] == "kernel" and parts[-2] in targets:
            shape = p.tensor.shape
            n += rank * (p.tensor.size // shape[-1] + shape[-1])
    return n


@dataclass(frozen=True)
class ChipPlan:
    """Bytes each chip of a ``(batch, model)`` mesh needs, by part (module docstring); :attr:`total` their sum.

    All chips hold the same amounts (every split is even), so one set of figures stands for each chip.
    """

    decoder: Decoder
    mesh: tuple
    width: str
    batch: int
    length: int
    lora_rank: int
    chip: Chip
    frozen: float
    lora: float
    activations: float
    trainable: int
    placed: list = field(repr=False, compare=False, default_factory=list)

    @property
    def total(self) -> float:
        return self.frozen + self.lora + self.activations

    @property
    def fits(self) -> bool:
        return self.total <= self.chip.device.gb * GB

    def describe(self) -> str:
        """One line: the decoder, mesh, width, batch and length, the total per chip and its parts in GB."""
        return (f"{self.decoder.name} at {self.width}, mesh {self.mesh} (batch x model), batch {self.batch} x "
                f"length {self.length}: about {_size(self.total)} per chip (frozen {_size(self.frozen)}, "
                f"LoRA state {_size(self.lora)}, activations {_size(self.activations)}) of {self.chip.device.gb:g} GB")

    def report(self, top: int = 6) -> str:
        """The mesh, the ``top`` largest tensors' layout, the weights the model axis could not split, and one line
        per chip (what :func:`kitlib.keras.sharded.build_sharded` prints before building)."""
        from .mesh import describe_layout

        b, m = self.mesh
        lines = [f"mesh {self.mesh}: {b} x {m} = {b * m} chips ({self.chip.device.name}); rows split over 'batch', "
                 f"weights over 'model'", f"largest tensors (of {len(self.placed)}):",
                 describe_layout(self.placed, top, WEIGHT_BYTES[self.width])]
        whole = [p for p in self.placed if p.note]
        if whole:
            held = sum(p.shard_size for p in whole) * WEIGHT_BYTES[self.width]
            lines.append(f"  replicated though splittable: {len(whole)} tensors, {_size(held)} per chip, e.g. "
                         f"{whole[0].tensor.path}: {whole[0].note}")
        for i in range(b * m):
            lines.append(f"  chip {i} (batch {i // m}, model {i % m}): frozen {_size(self.frozen)} + LoRA state "
                         f"{_size(self.lora)} + activations {_size(self.activations)} = {_size(self.total)} "
                         f"of {self.chip.device.gb:g} GB")
        return "\n".join([self.describe(), *lines])


def activation_bytes(config: dict, *, rows: int, length: int, model_chips: int, width: str) -> float:
    """Korthikanti et al. 2022 eq. 2 (module docstring): stored activations per chip, in bytes, for ``rows`` rows."""
    h, a, layers = config["hidden_dim"], config["num_query_heads"], config["num_layers"]
    t = model_chips
    per_layer = length * rows * h * (10 + 24 / t + 5 * a * length / (h * t))
    return per_layer * layers * (4 if width == "fp32" else 2) / 2


def plan_chips(decoder: Decoder, mesh_shape: tuple, *, batch: int, length: int, width: str = "bf16",
               lora_rank: int = 16, chip: Chip = V5E) -> ChipPlan:
    """The plan per chip for LoRA training ``decoder`` on a ``(batch, model)`` mesh (nothing is built or loaded).

    Args:
        decoder: what to plan (:data:`PUBLISHED`, or a :class:`Decoder` of any config).
        mesh_shape: ``(batch chips, model chips)``.
        batch: rows per step over the whole mesh (split over the batch axis); length: tokens per row.
        width: the frozen weights' width, a :data:`kitlib.models.memory.WEIGHT_BYTES` key (``"bf16"``, ``"fp32"``).
        lora_rank: ``enable_lora``'s rank.
        chip: the chip (:data:`V5E`; for a CPU rehearsal, ``Chip(Device(...), 0, 0)``).

    Raises:
        ValueError: an unknown width, a mesh that is not two positive ints, or a batch the batch axis cannot split.
    """
    if width not in WEIGHT_BYTES or width in ("8bit", "4bit"):
        raise ValueError(f"width={width!r}: the sharded Keras side plans 'fp32', 'bf16' or 'fp16' weights")
    b, m = (int(x) for x in mesh_shape)
    if b < 1 or m < 1:
        raise ValueError(f"mesh_shape={mesh_shape!r}: give (batch, model), two positive ints")
    if batch < 1 or length < 1 or batch % b:
        raise ValueError(f"batch={batch}, length={length} on mesh {mesh_shape}: the batch must be >= 1 and divide "
                         f"by the {b} batch-axis chips (use {max(b, batch // b * b)}), the length >= 1")
    placed = place(tensors(decoder.family, decoder.config), m)
    frozen = sum(p.shard_size for p in placed) * WEIGHT_BYTES[width]
    trainable = lora_params(placed, lora_rank) + decoder.config["hidden_dim"] + 1
    acts = activation_bytes(decoder.config, rows=batch // b, length=length, model_chips=m, width=width)
    return ChipPlan(decoder, (b, m), width, batch, length, lora_rank, chip, frozen,
                    trainable * TRAIN_BYTES_PER_PARAM, acts, trainable, placed)


def _fixes(p: ChipPlan) -> list[str]:
    """What would fit instead: more model-axis chips on the same chips, a shorter length, a smaller batch."""
    b, m = p.mesh
    n, kw = b * m, dict(width=p.width, lora_rank=p.lora_rank, chip=p.chip)
    out = []
    for m2 in (d for d in range(m + 1, n + 1) if n % d == 0 and p.batch % (n // d) == 0):
        q = plan_chips(p.decoder, (n // m2, m2), batch=p.batch, length=p.length, **kw)
        if q.fits:
            out.append(f"more model-axis chips: mesh {q.mesh} needs about {_size(q.total)} per chip")
            break
    if p.frozen + p.lora > p.chip.device.gb * GB:
        return out + [f"the frozen share alone is {_size(p.frozen)} per chip: no length or batch fits on "
                      f"mesh {p.mesh}; shard over more model-axis chips or use a smaller model"]
    length = p.length // 2
    while length >= 1 and not plan_chips(p.decoder, p.mesh, batch=p.batch, length=length, **kw).fits:
        length //= 2
    if length >= 1:
        q = plan_chips(p.decoder, p.mesh, batch=p.batch, length=length, **kw)
        out.append(f"a shorter length: {length} needs about {_size(q.total)} per chip")
    batch = p.batch - b
    while batch >= b and not plan_chips(p.decoder, p.mesh, batch=batch, length=p.length, **kw).fits:
        batch -= b
    if batch >= b:
        q = plan_chips(p.decoder, p.mesh, batch=batch, length=p.length, **kw)
        out.append(f"a smaller batch: {batch} needs about {_size(q.total)} per chip")
    return out


def check_fits(p: ChipPlan) -> None:
    """Refuse a plan over the chip's memory, before any weight loads, with the figure and the fix.

    Raises:
        ValueError: e.g. "Qwen3-14B at bf16, mesh (8, 1) ...: about 34.36 GB per chip (frozen 29.54 GB, ...) of
            16 GB: it does not fit. Fix: more model-axis chips: mesh (2, 4) needs about 13.78 GB per chip; or ...".
    """
    if p.fits:
        return
    fixes = _fixes(p) or ["no mesh, length or batch fits these chips: use a smaller model or more chips"]
    raise ValueError(f"{p.describe()}: it does not fit. Fix: " + "; or ".join(fixes))


def step_flops(p: ChipPlan, train: bool = True) -> float:
    """The matmul FLOPs of one step of ``p.batch`` rows x ``p.length`` tokens over the whole mesh.

    Per token: ``2N`` forward through the ``N`` matmul weights (the block kernels; the embedding is a lookup, the
    one-logit head is left out), and for training ``2N`` more backward through the frozen weights (their input
    gradients; the LoRA matrices' own are negligible); attention's scores and values add
    ``4 * layers * length * heads * head_dim`` forward, twice that for training.
    """
    c = p.decoder.config
    d = c.get("head_dim") or c["hidden_dim"] // c["num_query_heads"]
    matmul = sum(x.tensor.size for x in p.placed if x.tensor.split is not None and "embeddings" not in x.tensor.path)
    per_token = 2 * matmul + 4 * c["num_layers"] * p.length * c["num_query_heads"] * d
    return p.batch * p.length * per_token * (2 if train else 1)


def step_floor_seconds(p: ChipPlan) -> float:
    """A lower bound on one training step's time: :func:`step_flops` at the chips' peak, or the frozen shard read
    twice at HBM speed, whichever is longer. 0.0 for a chip without figures."""
    if not p.chip.tflops or not p.chip.gbps:
        return 0.0
    b, m = p.mesh
    return max(step_flops(p) / (b * m * p.chip.tflops * 1e12), 2 * p.frozen / (p.chip.gbps * 1e9))


def v5e8_table(names: tuple = tuple(PUBLISHED), meshes: tuple = ((8, 1), (2, 4), (1, 8)), batches: tuple = (8, 16),
               lengths: tuple = (256, 512, 1024), lora_rank: int = 16) -> list[dict]:
    """Which :data:`PUBLISHED` decoders fit a TPU v5e-8 (8 chips of :data:`V5E`) at bf16, at which mesh, batch and length.

    Returns:
        One dict per combination: ``name``, ``mesh``, ``batch``, ``length``, ``gb`` (per chip), ``frozen_gb``,
        ``fits`` (bool), ``step_floor_s`` (:func:`step_floor_seconds`).
    """
    rows = []
    for key in names:
        for mesh in meshes:
            for batch in batches:
                for length in lengths:
                    p = plan_chips(PUBLISHED[key], mesh, batch=batch, length=length, lora_rank=lora_rank)
                    rows.append(dict(name=key, mesh=mesh, batch=batch, length=length, gb=round(p.total / GB, 2),
                                     frozen_gb=round(p.frozen / GB, 2), fits=p.fits,
                                     step_floor_s=round(step_floor_seconds(p), 3)))
    return rows
