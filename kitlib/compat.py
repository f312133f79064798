"""Version drift, handled in one place.

torch_xla moved its API several times: ``xm.xrt_world_size``/``xm.get_ordinal`` were removed in
2.8 (use ``torch_xla.runtime.world_size``/``global_ordinal``); ``torch_xla.device()``,
``torch_xla.sync()``, ``torch_xla.step()`` and ``torch_xla.launch()`` replaced
``xm.xla_device()``, ``xm.mark_step()`` and ``xmp.spawn()``. Kaggle's TPU image has 2.8, this
kit is tested on 2.9. Everything else in ``kitlib`` calls these wrappers, never the moving names.

torch_xla is imported lazily: the CUDA and CPU-only paths never need it.
"""
from __future__ import annotations

import contextlib
import importlib.util
from typing import Callable


def has_torch_xla() -> bool:
    """True when the ``torch_xla`` package is installed (it is not imported)."""
    return importlib.util.find_spec("torch_xla") is not None


def xla_device():
    """The XLA device of the calling replica (``torch_xla.device()``; ``xm.xla_device()`` before 2.5)."""
    import torch_xla

    if hasattr(torch_xla, "device"):
        return torch_xla.device()
    import torch_xla.core.xla_model as xm

    return xm.xla_device()


def xla_world_size() -> int:
    """Number of replicas (``torch_xla.runtime.world_size``; ``xm.xrt_world_size`` was removed in 2.8)."""
    import torch_xla.runtime as xr

    return xr.world_size()


def xla_rank() -> int:
    """This replica's global ordinal (``torch_xla.runtime.global_ordinal``; ``xm.get_ordinal`` was removed in 2.8)."""
    import torch_xla.runtime as xr

    return xr.global_ordinal()


def xla_sync() -> None:
    """Cut the lazy graph and run it (``torch_xla.sync()``; ``xm.mark_step()`` before 2.5)."""
    import torch_xla

    if hasattr(torch_xla, "sync"):
        torch_xla.sync()
    else:
        import torch_xla.core.xla_model as xm

        xm.mark_step()


def xla_step():
    """Context manager around one training step (``torch_xla.step()``), syncing at exit."""
    import torch_xla

    if hasattr(torch_xla, "step"):
        return torch_xla.step()

    @contextlib.contextmanager
    def _step():
        yield
        xla_sync()

    return _step()


def xla_runtime_touched() -> str | None:
    """Why the XLA runtime can no longer be launched from this process, or None if it can.

    ``torch_xla.launch`` refuses a parent whose runtime is initialised ("Runtime is already
    initialized"), and ``torch_xla.runtime.world_size()`` caches its answer in a module global
    that a forked child inherits: a parent that asked for it would make every replica believe
    the world size is 1.
    """
    if not has_torch_xla():
        return None
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_runtime_is_initialized():
        return "the XLA runtime is already initialised in this process (torch_xla.device() or a tensor was moved to XLA)"
    if getattr(xr, "_WORLD_SIZE", None) is not None:
        return "torch_xla.runtime.world_size() was called in this process and has cached its answer"
    return None


def xla_launch(fn: Callable, args: tuple, start_method: str) -> None:
    """Run ``fn(index, *args)`` once per XLA device (``torch_xla.launch``; ``xmp.spawn`` before 2.5)."""
    import torch_xla

    if hasattr(torch_xla, "launch"):
        torch_xla.launch(fn, args=args, start_method=start_method)
    else:
        import torch_xla.distributed.xla_multiprocessing as xmp

        xmp.spawn(fn, args=args, nprocs=None, start_method=start_method)


def xla_metric(name: str):
    """``torch_xla.debug.metrics.metric_data(name)`` as (count, total, samples), or None if unseen."""
    import torch_xla.debug.metrics as met

    return met.metric_data(name)


def xla_device_loader(loader, device):
    """``torch_xla.distributed.parallel_loader.MpDeviceLoader`` over a host DataLoader."""
    import torch_xla.distributed.parallel_loader as pl

    return pl.MpDeviceLoader(loader, device)
