"""Version drift, handled in one place: this package. The torch side here; the Keras side in
:mod:`kitlib.compat.keras` (its own module, so the torch kernels that vendor this one do not carry it).

torch_xla moved its API several times: ``xm.xrt_world_size``/``xm.get_ordinal`` were removed in
2.8 (use ``torch_xla.runtime.world_size``/``global_ordinal``); ``torch_xla.device()``,
``torch_xla.sync()``, ``torch_xla.step()`` and ``torch_xla.launch()`` replaced
``xm.xla_device()``, ``xm.mark_step()`` and ``xmp.spawn()``. Kaggle's TPU image has 2.8, this
kit is tested on 2.9. Everything else in ``kitlib`` calls these wrappers, never the moving names.

torch_xla is imported lazily: the CUDA and CPU-only paths never need it.

Every branch for an older or newer release says when it can be deleted. Private names (``_XLAC``,
``torch_xla._internal``, ``xm._run_step_closures``, ``ProcessGroupXla``'s methods, torch's
``multi_threaded_pg``) are touched only here and in the thread backend that wraps them
(:mod:`kitlib.run.backends.xla_threads`); :data:`XLA_API` lists every one, and
:func:`missing_xla_api` is the drift check both tested environments run.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from typing import Callable


def has_torch_xla() -> bool:
    """True when the ``torch_xla`` package is installed (it is not imported)."""
    return importlib.util.find_spec("torch_xla") is not None


def keep_accelerate_off_xla() -> None:
    """Stop accelerate from importing torch_xla behind the kit's back: ``USE_TORCH_XLA=0`` unless set.

    accelerate 1.x imports torch_xla when it is itself imported, whenever torch_xla is installed
    (``USE_TORCH_XLA``, default on), and transformers imports accelerate with every model: torch_xla would
    load in the parent before its replicas fork, or before the kit has set ``PJRT_DEVICE``. The kit drives
    torch_xla itself (:func:`import_torch_xla`). Called by :func:`kitlib.run.runtime.detect_runtime`, before
    any model is loaded. A value the user set is kept.
    Delete when accelerate imports torch_xla only when it is asked for an XLA device.
    """
    os.environ.setdefault("USE_TORCH_XLA", "0")


def keep_hub_kernels_off() -> None:
    """Keep transformers from swapping layers for Hugging Face Hub kernels: ``USE_HUB_KERNELS=NO`` unless set.

    transformers 5.25 turns hub kernels on by default: every ``model.train()`` / ``model.eval()`` then calls
    ``kernels.kernelize``, which raises "Unsupported device type 'xla'" on XLA and elsewhere fetches kernels
    from the Hub. Called by every model loader just before ``from_pretrained``. A value the user set is kept.
    Delete when transformers' hub kernels are off by default again or support XLA devices.
    """
    os.environ.setdefault("USE_HUB_KERNELS", "NO")


def import_torch_xla():
    """Import ``torch_xla`` without the warnings that say nothing to a kit user.

    "`tensorflow` can conflict with `torch-xla`" (whenever the full wheel is installed) and "Defaulting to
    PJRT_DEVICE=CPU": the kit chooses the device itself and refuses the import order that breaks, so both
    are filtered here, for this import only.
    """
    import logging
    import warnings

    class _NoDefaulting(logging.Filter):
        def filter(self, record):
            return "Defaulting to PJRT_DEVICE" not in record.getMessage()

    root = logging.getLogger()
    quiet = _NoDefaulting()
    root.addFilter(quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*tensorflow.* can conflict with .*torch-xla")
            import torch_xla
            import torch_xla.runtime  # noqa: F401
    finally:
        root.removeFilter(quiet)
    return torch_xla


def xla_device():
    """The XLA device of the calling replica (``torch_xla.device()``, torch_xla >= 2.5)."""
    return import_torch_xla().device()


def xla_world_size() -> int:
    """Number of replicas (``torch_xla.runtime.world_size``; ``xm.xrt_world_size`` was removed in 2.8)."""
    import torch_xla.runtime as xr

    return xr.world_size()


def xla_rank() -> int:
    """This replica's global ordinal (``torch_xla.runtime.global_ordinal``; ``xm.get_ordinal`` was removed in 2.8)."""
    import torch_xla.runtime as xr

    return xr.global_ordinal()


def xla_sync() -> None:
    """Cut the lazy graph and run it (``torch_xla.sync()``, torch_xla >= 2.5)."""
    import torch_xla

    torch_xla.sync()


def xla_step():
    """Context manager around one training step (``torch_xla.step()``, torch_xla >= 2.5), syncing at exit."""
    import torch_xla

    return torch_xla.step()


def xla_submit(tensors=None) -> None:
    """Cut the pending graph and launch it without waiting and without running step closures.

    ``tensors`` None: every live tensor of the calling replica's device (the step marker
    ``torch_xla.sync()`` sets); a list of XLA tensors: only the graph those need
    (``_xla_sync_multi``, what reading one of them would launch). Follow with
    :func:`xla_finish_sync`. Used by :mod:`kitlib.run.backends.xla_threads` to launch graphs in rank
    order on PJRT CPU thread replicas.
    """
    import torch_xla

    if tensors is None:
        torch_xla._XLAC._xla_step_marker(torch_xla._XLAC._xla_get_default_device(), [], wait=False)
    else:
        torch_xla._XLAC._xla_sync_multi(list(tensors), devices=[], wait=False)


def xla_finish_sync() -> None:
    """What ``torch_xla.sync()`` does after launching the graph: run the step closures
    (``xm.add_step_closure``) and drop the all-reduce token, so the next graph starts a new chain."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    devctx = xm._run_step_closures()
    torch_xla._XLAC._set_all_reduce_token(devctx.device, None)


def xla_runtime_touched() -> str | None:
    """Why the XLA runtime can no longer be launched from this process, or None if it can.

    ``torch_xla.launch`` refuses a parent whose runtime is initialised ("Runtime is already
    initialized"), and ``torch_xla.runtime.world_size()`` caches its answer in a module global
    that a forked child inherits: a parent that asked for it would make every replica believe
    the world size is 1.
    """
    import sys

    if "torch_xla" not in sys.modules:  # never imported here: nothing can have touched it
        return None
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_runtime_is_initialized():
        return "the XLA runtime is already initialised in this process (torch_xla.device() or a tensor was moved to XLA)"
    if getattr(xr, "_WORLD_SIZE", None) is not None:
        return "torch_xla.runtime.world_size() was called in this process and has cached its answer"
    return None


def xla_launch(fn: Callable, args: tuple, start_method: str) -> None:
    """Run ``fn(index, *args)`` once per XLA device (``torch_xla.launch``, torch_xla >= 2.5)."""
    import_torch_xla().launch(fn, args=args, start_method=start_method)


def xla_compile_count() -> int:
    """Graphs XLA compiled so far in this process (``metric_data('CompileTime')[0]``; 0 if none).

    PJRT CPU and TPU v2/v3 replicas are threads of one process, so on those the count is the
    process's, shared by its replicas.
    """
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def xla_device_loader(loader, device):
    """``torch_xla.distributed.parallel_loader.MpDeviceLoader`` over a host DataLoader."""
    import torch_xla.distributed.parallel_loader as pl

    return pl.MpDeviceLoader(loader, device)


# --- gradient sync, collectives, RNG, compilation cache (used by kitlib.run.backends: collectives, accelerators, xla_threads) ---


def xla_initialize_cache(path: str) -> None:
    """Use ``path`` as this process's persistent XLA compilation cache (``torch_xla.runtime.initialize_cache``).

    Call at the start of the replica function, before any XLA computation; give every process
    its own folder (processes must not share a writable cache).
    """
    import torch_xla.runtime as xr

    xr.initialize_cache(path, readonly=False)


def xla_optimizer_step(optimizer) -> None:
    """All-reduce (mean) the gradients across replicas, then ``optimizer.step()`` (``xm.optimizer_step``)."""
    import torch_xla.core.xla_model as xm

    xm.optimizer_step(optimizer)


def xla_all_reduce_sum(tensor):
    """Sum of ``tensor`` over all replicas, as a new XLA tensor of the same shape (``xm.all_reduce``)."""
    import torch_xla.core.xla_model as xm

    return xm.all_reduce(xm.REDUCE_SUM, tensor)


def xla_all_gather(tensor, pin_layout: bool = True):
    """Concatenation of every replica's ``tensor`` along dim 0, in rank order (``xm.all_gather``).

    ``pin_layout=True`` (torch_xla's default) builds it as an all-reduce of the tensor padded to
    its rank's slot, so each rank's graph differs; ``False`` is XLA's all-gather, one graph for
    all ranks (what thread replicas need: they share compiled graphs).
    """
    import torch_xla.core.xla_model as xm

    return xm.all_gather(tensor, dim=0, pin_layout=pin_layout)


def xla_rendezvous(tag: str) -> None:
    """Wait until every replica reaches the rendezvous ``tag`` (``xm.rendezvous``)."""
    import torch_xla.core.xla_model as xm

    xm.rendezvous(tag)


def xla_rng_state(device) -> int:
    """The XLA device's random seed state (``xm.get_rng_state``: dropout draws from it)."""
    import torch_xla.core.xla_model as xm

    return int(xm.get_rng_state(device))


def xla_set_rng_state(state: int, device) -> None:
    """Set the XLA device's random seed state (``xm.set_rng_state``)."""
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(int(state), device)


def xla_add_step_closure(fn: Callable, args: tuple) -> None:
    """Run ``fn(*args)`` after the current step's graph has executed (``xm.add_step_closure``)."""
    import torch_xla.core.xla_model as xm

    xm.add_step_closure(fn, args=args)


def xla_init_process_group() -> None:
    """``torch.distributed.init_process_group("xla", init_method="xla://")`` (registers the backend first).

    Thread replicas (``xla-cpu``) first make ``torch.distributed`` per thread:
    :mod:`kitlib.run.backends.xla_threads`.
    """
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)

    dist.init_process_group("xla", init_method="xla://")


def xla_process_group_class():
    """torch_xla's ``ProcessGroupXla`` (``torch_xla.distributed.xla_backend``), whose collectives the
    thread backend wraps (:mod:`kitlib.run.backends.xla_threads`)."""
    from torch_xla.distributed.xla_backend import ProcessGroupXla

    return ProcessGroupXla


def torch_threaded_process_groups():
    """torch's private ``torch.testing._internal.distributed.multi_threaded_pg`` (per-thread worlds;
    what torch_xla's ``pjrt_backend`` uses for TPU v2/v3 thread replicas). Delete with
    :mod:`kitlib.run.backends.xla_threads`."""
    from torch.testing._internal.distributed import multi_threaded_pg

    return multi_threaded_pg


# --- TPU hosts and chips, read without touching a device (used by kitlib.run.hardware) ---


def tpu_num_available_devices() -> int | None:
    """TPU chips on this host as torch_xla counts them (``torch_xla._internal.tpu.num_available_devices``,
    from the device files; nothing initialised), or None without torch_xla or that private function.

    Delete the fallback (the caller's /dev count) when torch_xla makes a public chip count.
    """
    if not has_torch_xla():
        return None
    try:
        from torch_xla._internal import tpu

        return int(tpu.num_available_devices())
    except Exception:  # noqa: BLE001 - private API, moved between versions
        return None


def tpu_workers() -> tuple[int, int] | None:
    """``(num_hosts, host)`` as torch_xla finds them (``torch_xla._internal.tpu.num_tpu_workers`` /
    ``worker_id``: the Cloud TPU VM metadata), or None without torch_xla, its private functions, or
    a metadata server. Delete when torch_xla makes a public host count."""
    if not has_torch_xla():
        return None
    try:
        from torch_xla._internal import tpu

        hosts = int(tpu.num_tpu_workers())
        return hosts, int(tpu.worker_id()) if hosts > 1 else 0
    except Exception:  # noqa: BLE001 - no metadata server (not a Cloud TPU VM), or the private API moved
        return None


XLA_ATTENTION = "kitlib_xla_sdpa"


def xla_attention_implementation() -> str:
    """Register (idempotently) and return a transformers attention implementation for XLA.

    transformers 5 skips the attention mask when every token of a batch is real
    (``masking_utils._ignore_bidirectional_mask_sdpa``), which under XLA traces a second graph. This registers
    PyTorch SDPA with that skip turned off, so every batch of one shape runs one graph; query and key are
    cast to the value's dtype first (bf16 autocast leaves a decoder's rotary outputs float32).
    Pass the returned name as ``attn_implementation=`` to ``from_pretrained``.
    """
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def mask_without_skip(*args, **kwargs):
        kwargs["allow_is_bidirectional_skip"] = False
        kwargs["allow_is_causal_skip"] = False
        return sdpa_mask(*args, **kwargs)

    def sdpa_one_dtype(module, query, key, value, *args, **kwargs):
        return sdpa_attention_forward(module, query.to(value.dtype), key.to(value.dtype), value, *args, **kwargs)

    AttentionInterface.register(XLA_ATTENTION, sdpa_one_dtype)
    AttentionMaskInterface.register(XLA_ATTENTION, mask_without_skip)
    return XLA_ATTENTION


# --- versions: what the kit was tested with, and what this environment has ---

# Tested releases, as (oldest, newest) "major.minor", both inclusive (patch releases assumed alike), in
# the two CPU environments (`make test`, `make test-kaggle-image`). Keys are distribution names, as pip spells them.
TESTED: dict[str, tuple[str, str]] = {
    "python": ("3.11", "3.12"),
    "torch": ("2.8", "2.9"),
    "torch-xla": ("2.8", "2.9"),
    "transformers": ("5.24", "5.25"),  # 5.25: with keep_hub_kernels_off
    "keras": ("3.15", "3.15"),
    "keras-hub": ("0.32", "0.32"),
    "jax": ("0.7", "0.12"),  # 0.7: the TPU image's 0.7.2, in the twin
    "tensorflow": ("2.21", "2.21"),
    "tensorflow-cpu": ("2.20", "2.21"),
}

# What each notebook reports (the distributions it imports).
TORCH_PACKAGES = ("python", "torch", "torch-xla", "transformers")
KERAS_PACKAGES = ("python", "keras", "keras-hub", "jax", "tensorflow", "tensorflow-cpu")


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (pip's name, e.g. ``"torch-xla"``), or None.

    Read from the package metadata, so nothing is imported (importing TensorFlow before torch_xla
    aborts). ``"python"`` gives the interpreter's version.
    """
    import importlib.metadata
    import platform

    if dist == "python":
        return platform.python_version()
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``"2.9.0+cpu"``, ``"0.12.0.1"`` or ``"5.0.0rc1"``."""
    import re

    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        raise ValueError(f"cannot read a major.minor version from {version!r}")
    return int(m.group(1)), int(m.group(2))


def version_warnings(versions: dict[str, str]) -> list[str]:
    """One line per version outside :data:`TESTED`, plus one if both TensorFlow wheels are installed.

    ``versions`` maps distribution names to version strings; names without a TESTED entry are not
    checked. The ``tensorflow`` and ``tensorflow-cpu`` wheels write the same ``tensorflow/`` folder:
    with both installed ``import tensorflow`` can fail (stale files of the other).
    """
    lines = []
    for dist, version in versions.items():
        if dist not in TESTED:
            continue
        lo, hi = TESTED[dist]
        if not _major_minor(lo) <= _major_minor(version) <= _major_minor(hi):
            tested = lo if lo == hi else f"{lo} to {hi}"
            lines.append(f"warning: {dist} {version} is outside what the kit was tested with ({tested}); "
                         f"if something fails here, try a tested version")
    if versions.get("tensorflow") and versions.get("tensorflow-cpu"):
        lines.append(f"warning: tensorflow {versions['tensorflow']} and tensorflow-cpu {versions['tensorflow-cpu']} "
                     f"are both installed and share files; `import tensorflow` may fail (use the JAX backend)")
    return lines


def version_report(packages: tuple[str, ...] = TORCH_PACKAGES + KERAS_PACKAGES[1:]) -> str:
    """One line of the versions found, then one warning line per problem (see :func:`version_warnings`).

    Example: ``"versions: python 3.12.1, torch 2.8.0, torch-xla 2.8.0, transformers 5.24.0"``.
    Distributions that are not installed are left out. Nothing is imported.
    """
    found = {d: v for d in dict.fromkeys(packages) if (v := installed_version(d)) is not None}
    head = "versions: " + (", ".join(f"{d} {v}" for d, v in found.items()) or "none of " + ", ".join(packages))
    return "\n".join([head, *version_warnings(found)])


# Every torch_xla name the kit touches (through the wrappers above), by module, private ones
# included (a dotted name is an attribute of an attribute), and torch's private one the thread
# backend uses. Checked in both tested environments (torch_xla 2.8 and 2.9) by
# tests/test_versions.py; a release that drops one needs a new branch in its wrapper.
XLA_API: dict[str, tuple[str, ...]] = {
    "torch_xla": ("device", "sync", "step", "launch",
                  "_XLAC._xla_runtime_is_initialized", "_XLAC._xla_step_marker", "_XLAC._xla_get_default_device",
                  "_XLAC._xla_sync_multi", "_XLAC._set_all_reduce_token"),
    "torch_xla.runtime": ("world_size", "global_ordinal", "initialize_cache", "_WORLD_SIZE"),
    "torch_xla.core.xla_model": ("optimizer_step", "all_reduce", "all_gather", "rendezvous", "add_step_closure",
                                 "REDUCE_SUM", "_run_step_closures"),
    "torch_xla.distributed.parallel_loader": ("MpDeviceLoader",),
    "torch_xla.distributed.xla_backend": ("ProcessGroupXla", "ProcessGroupXla.broadcast", "ProcessGroupXla.allgather",
                                          "ProcessGroupXla.allgather_coalesced", "ProcessGroupXla._allgather_base"),
    "torch_xla.debug.metrics": ("metric_data",),
    "torch_xla._internal.tpu": ("num_available_devices", "num_tpu_workers", "worker_id"),
    "torch.testing._internal.distributed.multi_threaded_pg": ("_install_threaded_pg", "ThreadLocalWorld"),
}


def missing_xla_api() -> list[str]:
    """Names of :data:`XLA_API` that the installed torch_xla lacks, as ``"module.name"`` (empty: all there).

    Imports torch_xla (import it before TensorFlow in a process that has both).
    """
    import importlib

    absent = object()
    missing = []
    for module, names in XLA_API.items():
        try:
            m = importlib.import_module(module)
        except ImportError:
            missing.append(module)
            continue
        for name in names:
            obj = m
            for part in name.split("."):
                obj = getattr(obj, part, absent)
            if obj is absent:
                missing.append(f"{module}.{name}")
    return missing
