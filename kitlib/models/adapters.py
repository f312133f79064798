"""LoRA adapters on a base model, through peft: wrap, save (adapters + head only), load on the base, refuse another base.

A fold's output is then megabytes, not the base model: :func:`save_adapter` writes peft's
``adapter_config.json`` + ``adapter_model.safetensors`` (the LoRA matrices and the trained head,
peft's ``modules_to_save``) and :data:`RECORD_FILE`, which names the base (its folder and its content:
:func:`kitlib.models.identity.identity`) and the kind. :func:`kitlib.models.open.open_model` loads the base once and
the adapters on top (or merged into its weights), after checking that it is the same model (:func:`check_base`).

What trains (:func:`wrap`): the LoRA matrices of :attr:`LoraSpec.target_modules` (peft's
``"all-linear"``: every ``Linear`` but the output embedding) and the kind's head
(:attr:`kitlib.models.kinds.Kind.head`: ``score`` of a decoder, ``classifier`` of an encoder; the
answer-token form trains adapters only); every other weight is frozen.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from . import identity
from .config import RECORD_FILE, read_config, read_record  # noqa: F401  (the one reader; adapters.read_record)

ADAPTER_CONFIG = "adapter_config.json"  # peft's; its presence makes a folder an adapter checkpoint


@dataclass(frozen=True)
class LoraSpec:
    """LoRA's settings (peft ``LoraConfig``): rank ``r``, ``alpha`` (scale alpha / r), ``dropout``,
    ``target_modules`` (``"all-linear"``, or module names such as ``("q_proj", "v_proj")``)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple = "all-linear"

    def __post_init__(self):
        if self.r < 1 or self.alpha <= 0 or not 0 <= self.dropout < 1:
            raise ValueError(f"LoraSpec(r={self.r}, alpha={self.alpha}, dropout={self.dropout}): need r >= 1, "
                             "alpha > 0 and 0 <= dropout < 1")


def is_adapter(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an adapter checkpoint (peft's ``adapter_config.json`` inside)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def wrap(model, kind, spec: LoraSpec = LoraSpec()):
    """``model`` as a peft ``PeftModel`` whose only trainable parameters are the adapters and ``kind.head``.

    Args:
        model: a transformers model as ``kind.load`` gives it.
        kind: its :class:`kitlib.models.kinds.Kind` (which head trains).
        spec: the LoRA settings.

    Returns:
        The wrapped model (same forward; ``model.print_trainable_parameters()`` says how many train).
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=spec.target_modules if isinstance(spec.target_modules, str) else list(spec.target_modules),
                        exclude_modules=list(kind.head) or None, modules_to_save=list(kind.head) or None)
    return get_peft_model(model, config)


def trainable_names(model) -> list[str]:
    """Names of the parameters that require grad (``[str]``)."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def save_adapter(model, out_dir: str | os.PathLike, *, base: str | os.PathLike, kind, spec: LoraSpec) -> Path:
    """Write only the adapters and the head of the wrapped ``model`` to ``out_dir``, with the base's record.

    Written atomically (:func:`kitlib.atomic.atomic_dir`): peft's ``adapter_config.json`` and
    ``adapter_model.safetensors``, and :data:`RECORD_FILE` (``base``: the folder, ``base_identity``: what it
    holds, :func:`kitlib.models.identity.identity`; ``kind``, ``label``, ``lora``).

    Returns:
        ``out_dir``.
    """
    from ..atomic import atomic_dir

    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        write_adapter(model, tmp, base=base, kind=kind, spec=spec)
    return out_dir


def write_adapter(model, folder: str | os.PathLike, *, base: str | os.PathLike, kind, spec: LoraSpec) -> None:
    """Write the adapters and head of the wrapped ``model`` and :data:`RECORD_FILE` into ``folder`` (no
    atomicity: :func:`save_adapter`, or a caller's own :func:`kitlib.atomic.atomic_dir`).

    Only the trained tensors are copied to the CPU (peft keeps those of its state dict), so a
    model on an accelerator saves without a CPU copy of its base.
    """
    state = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
    model.save_pretrained(folder, state_dict=state)
    (Path(folder) / RECORD_FILE).write_text(json.dumps({
        "base": str(Path(base).resolve()), "base_identity": identity.identity(base),
        "kind": kind.name, "label": kind.label, "lora": asdict(spec), "weights": quantized_width(model),
    }, indent=1))


def quantized_width(model) -> str | None:
    """``"8bit"`` or ``"4bit"`` when bitsandbytes holds ``model``'s (or a ``PeftModel``'s base's) weights, else None.

    Recorded with the adapters (:data:`RECORD_FILE` ``weights``): they were trained on the quantized base, so
    inference loads the base the same way (:func:`kitlib.models.open.open_model`), never merged into it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "4bit" if getattr(base, "is_loaded_in_4bit", False) else "8bit" if getattr(base, "is_loaded_in_8bit", False) else None


def loaded_width(model) -> str:
    """The width ``model``'s weights are held at: :func:`quantized_width`'s, else its first ``Linear`` weight's dtype
    (``"fp32"``, ``"bf16"``, ``"fp16"``); an inference replica records it with its shard (``weights``)."""
    import torch

    quantized = quantized_width(model)
    if quantized:
        return quantized
    dtype = next((m.weight.dtype for name, m in model.named_modules()  # the base's, not a LoRA matrix (float32)
                  if isinstance(m, torch.nn.Linear) and "lora_" not in name), torch.float32)
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")


def base_of(adapter_dir: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """The base folder the adapters of ``adapter_dir`` load onto: ``base``, else the one their record names.

    Checked in the calling process, before any replica starts (:func:`check_base`).

    Raises:
        FileNotFoundError: that folder is not here, naming it and the fix (pass the base's folder).
        ValueError: it is not the base the adapters were trained on (:func:`check_base`).
    """
    recorded = read_record(adapter_dir)["base"]
    folder = Path(base or recorded)
    if not read_config(folder, missing={}):
        raise FileNotFoundError(f"{adapter_dir}: its adapters load onto the base model {recorded}, but "
                                f"{folder} holds no checkpoint (no config.json); pass the base's folder "
                                "(InferJob.base, the notebook's base_model parameter)")
    check_base(adapter_dir, folder)
    return folder


def check_base(adapter_dir: str | os.PathLike, base: str | os.PathLike) -> None:
    """Refuse a base other than the model the adapters were trained on, by content (:mod:`kitlib.models.identity`):
    the same weights whose ``config.json`` another transformers version wrote are the same base; another
    fine-tune of the same shape is not.

    Raises:
        ValueError: ``base`` holds another model; names both folders and what differs (config values, tensors).
    """
    record = read_record(adapter_dir)
    if "base_identity" not in record:  # a record of kit versions before issue 39: names and sizes only
        return _check_legacy(adapter_dir, base, record)
    differ = identity.differences(record["base_identity"], identity.identity(base))
    if differ:
        raise ValueError(f"{adapter_dir}: these adapters were trained on the base {record['base']}, not on {base}, which "
                         f"holds another model ({'; '.join(differ)}); give the base they were trained on (base_model=...)")


def _check_legacy(adapter_dir, base, record: dict) -> None:
    """A ``base_fingerprint`` record (config.json bytes, weight files' names and sizes). Delete when no adapter
    checkpoint of a kit before issue 39 is in use (they predate December 2026)."""
    import hashlib

    h = hashlib.sha256((Path(base) / "config.json").read_bytes())
    for f in sorted(Path(base).iterdir()):
        if f.is_file() and f.name.endswith(identity.WEIGHT_SUFFIXES):
            h.update(f"{f.name}:{f.stat().st_size}\n".encode())
    if h.hexdigest() != record["base_fingerprint"]:
        raise ValueError(f"{adapter_dir}: these adapters were trained on the base {record['base']}, not on {base}: its "
                         "config.json or weight files differ from the record (an older kit's, which holds no content); "
                         "give the base they were trained on, or train the adapters again")


def folder_bytes(path: str | os.PathLike) -> int:
    """Total size in bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
