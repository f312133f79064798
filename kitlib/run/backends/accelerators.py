"""Where a replica computes: one small class per device type (Lightning's accelerators are the model).

Each is asked, never branched on: the device of replica ``index``, how batches reach it (a loader,
``to_device``), what a training step is on it, its compile counts and compilation cache, its name,
the variables a launch needs for it and what must not have happened in the calling process.

:class:`Cpu` (``cpu``), :class:`Cuda` (``cuda``) and :class:`Xla` (``xla``: fixed shapes); what precision
``"auto"`` is on each is :mod:`kitlib.run.backends.precision`'s rule.

Nothing here imports torch or torch_xla at module import; every torch_xla name goes through
:mod:`kitlib.compat`.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Callable

from ... import compat
from . import precision as prec


class Cpu:
    """Eager torch on the CPU."""

    device_type = "cpu"
    kind = "cpu"  # the hardware: kitlib.run.hardware.ACCELERATOR_KINDS
    precision_of = "cpu"
    static_shapes = False

    def env(self, rt) -> dict[str, str | None]:
        """Variables a launch needs for this device (a string sets one, None removes it)."""
        return {}

    def check_parent(self, rt) -> None:
        """Raise RuntimeError if the calling process can no longer start replicas on this device."""

    def device(self, index: int):
        """The ``torch.device`` of the replica with launcher index ``index`` (called inside it)."""
        import torch

        return torch.device("cpu")

    def loader(self, loader, device):
        return loader

    def to_device(self, batch, device):
        if isinstance(batch, dict):
            return {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        if isinstance(batch, (list, tuple)):
            return type(batch)(v.to(device, non_blocking=True) for v in batch)
        return batch.to(device, non_blocking=True)

    def step(self):
        """Context around one training step: nothing on an eager device."""
        return contextlib.nullcontext()

    def after_step(self, fn: Callable, args: tuple) -> None:
        fn(*args)  # results can be read at once

    def compile_count(self) -> int | None:
        return None  # nothing is compiled

    def use_compile_cache(self, root: str, local_rank: int) -> None:
        """Nothing to cache on an eager device."""

    def device_name(self, device) -> str:
        return str(device)

    def ddp_device_ids(self, device):
        return None

    def rng_state(self, device):
        """The state of the random numbers dropout draws on ``device`` (the CPU's: torch's CPU generator)."""
        import torch

        return torch.get_rng_state()

    def set_rng_state(self, state, device) -> None:
        import torch

        torch.set_rng_state(state)


class Cuda(Cpu):
    """Eager torch on one GPU per replica. The calling process never initialises CUDA
    (``torch.cuda.set_device`` runs in the replica), so forked replicas can use it."""

    device_type = "cuda"
    kind = "cuda"
    precision_of = "cuda"

    def device(self, index: int):
        import torch

        torch.cuda.set_device(index)  # in the replica: the parent never initialises CUDA
        return torch.device("cuda", index)

    def device_name(self, device) -> str:
        import torch

        return torch.cuda.get_device_name(device)

    def ddp_device_ids(self, device):
        return [device.index]

    def rng_state(self, device):
        import torch

        return torch.cuda.get_rng_state(device)

    def set_rng_state(self, state, device) -> None:
        import torch

        torch.cuda.set_rng_state(state, device)


class Xla:
    """torch_xla: a TPU chip, or a PJRT CPU device (the TPU rehearsal).

    Batches arrive on the device through ``MpDeviceLoader``; each training step is a
    ``torch_xla.step()``. The launch sets ``PJRT_DEVICE`` and removes the variables that change
    precision behind the kit's back (:func:`kitlib.run.backends.precision.precision_env_overrides`); on
    PJRT CPU also ``CPU_NUM_DEVICES``: every replica of the process (thread replicas), or 1 (one
    process per device).

    Args:
        pjrt_device: ``"TPU"`` or ``"CPU"``.
        devices_per_process: on PJRT CPU, ``"replicas"`` (the host's replicas are devices of one
            process) or ``"one"``.
    """

    device_type = "xla"
    precision_of = "tpu"  # on PJRT CPU too: a rehearsal runs its target's precision
    static_shapes = True

    def __init__(self, pjrt_device: str = "TPU", devices_per_process: str = "replicas"):
        self.pjrt_device, self.devices_per_process = pjrt_device, devices_per_process
        self.kind = "tpu" if pjrt_device == "TPU" else "cpu"

    def env(self, rt) -> dict[str, str | None]:
        env = {"PJRT_DEVICE": self.pjrt_device, **prec.precision_env_overrides()}
        if self.pjrt_device == "CPU":
            env["CPU_NUM_DEVICES"] = str(rt.num_replicas) if self.devices_per_process == "replicas" else "1"
        return env

    def check_parent(self, rt) -> None:
        if "tensorflow" in sys.modules and "torch_xla" not in sys.modules:
            raise RuntimeError(
                "TensorFlow is imported in this process and torch_xla is not: importing torch_xla now "
                "aborts the process ('LLVM ERROR: inconsistency in registered CommandLine options'). "
                "Restart the kernel and import torch_xla (or run this launch) before TensorFlow."
            )
        why = compat.xla_runtime_touched()
        if why:
            raise RuntimeError(
                f"cannot launch replicas: {why}. Restart the kernel and call kitlib launch before "
                "anything touches the XLA device (torch_xla.device(), xm.xla_device(), .to(device), "
                "torch_xla.runtime.world_size())."
            )

    def device(self, index: int):
        return compat.xla_device()

    def loader(self, loader, device):
        return compat.xla_device_loader(loader, device)

    def to_device(self, batch, device):
        return batch  # MpDeviceLoader's batches are on the device already

    def step(self):
        return compat.xla_step()

    def after_step(self, fn: Callable, args: tuple) -> None:
        compat.xla_add_step_closure(fn, args)

    def compile_count(self) -> int:
        return compat.xla_compile_count()

    def use_compile_cache(self, root: str, local_rank: int) -> None:
        compat.xla_initialize_cache(str(Path(root) / f"proc-{local_rank}"))

    def device_name(self, device) -> str:
        return str(device)

    def ddp_device_ids(self, device):
        return None

    def rng_state(self, device):
        return compat.xla_rng_state(device)

    def set_rng_state(self, state, device) -> None:
        compat.xla_set_rng_state(state, device)
