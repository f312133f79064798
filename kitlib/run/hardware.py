"""What accelerators this host has, read without initialising any of them.

One probe for the torch runtime (:mod:`kitlib.run.runtime`) and the TensorFlow / Keras detectors
(:mod:`kitlib.keras.strategy`, :mod:`kitlib.keras.runtime`), so they never disagree about the
machine, and one vocabulary for what they find (:data:`ACCELERATOR_KINDS`).

Nothing here may initialise a device in the calling process:

* CUDA: ``torch.cuda.device_count()`` counts through NVML and leaves CUDA uninitialised; anything that
  initialises it (``is_available()``, ``get_device_name``, a tensor on ``cuda``) breaks every forked child
  ("Cannot re-initialize CUDA in forked subprocess"). Device names are read inside the replicas.
* TPU: environment variables and device files only (``torch_xla._internal.tpu`` counts chips from
  the same device files); touching the XLA device would make ``torch_xla.launch`` refuse to start.
"""
from __future__ import annotations

import glob
import importlib.util
import os

# The accelerator kinds, by the names the whole kit uses: the torch runtime's accelerators
# (kitlib.run.runtime.ACCELERATORS adds "auto" and the xla-cpu rehearsal modes) and the Keras runtime's
# (kitlib.keras.runtime.KerasRuntime.accelerator). TensorFlow says "GPU" and JAX "gpu" for what the
# kit calls "cuda": :func:`accelerator_kind` translates.
ACCELERATOR_KINDS = ("tpu", "cuda", "cpu")


def accelerator_kind(framework_name: str) -> str:
    """The kit's name (:data:`ACCELERATOR_KINDS`) for a framework's device type or platform.

    Args:
        framework_name: e.g. TF's ``"GPU"``, a JAX platform (``"gpu"``, ``"cuda"``, ``"tpu"``),
            a Keras device string (``"cuda:0"``), or a torch device type (``"cuda"``).

    Raises:
        ValueError: a device type the kit does not run on (e.g. ``"rocm"``, ``"mps"``).
    """
    name = framework_name.split(":")[0].strip().lower()
    kind = {"gpu": "cuda"}.get(name, name)
    if kind not in ACCELERATOR_KINDS:
        raise ValueError(f"device type {framework_name!r}: the kit runs on {', '.join(ACCELERATOR_KINDS)} only")
    return kind


# Variables that say "this host has a TPU": Kaggle's TPU v5e-8 image sets TPU_ACCELERATOR_TYPE and
# TPU_PROCESS_ADDRESSES=local; Cloud TPU VMs set TPU_NAME / TPU_ACCELERATOR_TYPE; Colab's old TPU
# Node runtime sets COLAB_TPU_ADDR.
TPU_ENV_VARS = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "COLAB_TPU_ADDR", "TPU_PROCESS_ADDRESSES")


def tpu_evidence() -> str | None:
    """Why this host looks like a TPU host (a variable or device files), or None.

    Returns:
        e.g. ``"TPU_ACCELERATOR_TYPE=v5litepod-8"``, ``"PJRT_DEVICE=TPU"`` or
        ``"TPU device files in /dev"``; None when there is no sign of a TPU.
    """
    for var in TPU_ENV_VARS:
        if os.environ.get(var):
            return f"{var}={os.environ[var]}"
    if os.environ.get("PJRT_DEVICE", "").upper() == "TPU":
        return "PJRT_DEVICE=TPU"
    if _tpu_device_files():
        return "TPU device files in /dev"
    return None


def _tpu_device_files() -> list[str]:
    return glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")


def tpu_chip_count() -> int | None:
    """TPU chips on this host (what ``torch_xla.launch`` starts one process each for), or None if unknown.

    Read from torch_xla's count when it has one (:func:`kitlib.compat.tpu_num_available_devices`;
    it counts the device files, nothing is initialised), else from the device files directly.
    """
    from .. import compat

    n = compat.tpu_num_available_devices()
    if n:
        return n
    n = len(_tpu_device_files())
    return n or None


def tpu_hosts() -> tuple[int, int]:
    """``(num_hosts, host)`` of the TPU slice this host belongs to: ``(1, 0)`` for one host.

    As torch_xla finds them (:func:`kitlib.compat.tpu_workers`):
    from ``TPU_WORKER_HOSTNAMES`` (comma-separated) and ``TPU_WORKER_ID`` (or ``CLOUD_TPU_TASK_ID``)
    when those are set (GKE sets them, with ``TPU_SKIP_MDS_QUERY``), else from the Cloud TPU VM's
    metadata server (``worker-network-endpoints``, and ``WORKER_ID`` in ``tpu-env``), which is
    where a TPU VM started with ``gcloud compute tpus tpu-vm`` keeps them. Reads no device.
    The metadata server is asked only on a Google Compute Engine VM (``/sys/class/dmi/id/product_name``
    says so, as google-auth checks), so elsewhere nothing goes to the network. Without torch_xla,
    or if the metadata cannot be read: one host.
    """
    names = [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    worker = os.environ.get("CLOUD_TPU_TASK_ID") or os.environ.get("TPU_WORKER_ID")
    if names:
        return len(names), int(worker or 0)
    if _on_google_compute_engine():
        from .. import compat

        found = compat.tpu_workers()
        if found:
            return found
    return 1, 0


def _on_google_compute_engine() -> bool:
    try:
        with open("/sys/class/dmi/id/product_name") as f:
            return f.read().strip().startswith("Google")
    except OSError:
        return False


def cuda_device_count() -> int:
    """CUDA GPUs visible to torch, counted without initialising CUDA (0 without torch or a driver).

    ``torch.cuda.device_count()`` asks NVML first (PyTorch >= 2.0) and so leaves CUDA
    uninitialised; without torch, the NVIDIA driver's ``/proc/driver/nvidia/gpus`` entries.
    """
    if importlib.util.find_spec("torch") is not None:
        import torch

        return int(torch.cuda.device_count())
    return gpu_count_from_driver()


def gpu_count_from_driver() -> int:
    """NVIDIA GPUs listed by the driver in ``/proc/driver/nvidia/gpus`` (no framework involved)."""
    p = "/proc/driver/nvidia/gpus"
    return len(os.listdir(p)) if os.path.isdir(p) else 0


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers narrow), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cpu_bf16_feature() -> str | None:
    """The CPU feature that computes bf16 natively: ``"AMX"``, ``"avx512_bf16"``, or None (AVX2 only, say).

    Read from torch's CPU probe (``torch._C._cpu._is_amx_tile_supported()`` and
    ``_is_avx512_bf16_supported()``, cpuinfo underneath: no device is touched), else from the
    ``flags`` line of ``/proc/cpuinfo`` (``amx_bf16``, ``avx512_bf16``). What the precision rule
    follows on the CPU (:mod:`kitlib.run.backends.precision`), with the instruction sets this process's
    torch will use (:func:`torch_cpu_capability`, :func:`onednn_isa_cap`): the flags say what the CPU
    has, not what a capped process runs.
    """
    try:
        import torch

        probe = torch._C._cpu
        if probe._is_amx_tile_supported():
            return "AMX"
        if probe._is_avx512_bf16_supported():
            return "avx512_bf16"
        return None
    except (ImportError, AttributeError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    return "AMX" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags else None


def torch_cpu_capability() -> str | None:
    """The instruction set torch's ATen kernels run in this process: ``torch.backends.cpu.get_cpu_capability()``
    (``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``, ...), which ``ATEN_CPU_CAPABILITY`` caps below what the
    CPU has (read once, when torch loads); None without torch or that call (torch < 2.1)."""
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability()).upper()
    except (ImportError, AttributeError):
        return None


ONEDNN_ISA_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")  # oneDNN's cap on its kernels' ISA (the second: its old name)


def onednn_isa_cap(environ=None) -> str | None:
    """The cap this process's environment puts on oneDNN's instruction set (``ONEDNN_MAX_CPU_ISA``, else
    ``DNNL_MAX_CPU_ISA``; oneDNN reads it once, at its first kernel), e.g. ``"AVX2"``; None when unset.
    oneDNN runs torch's bf16 matmuls on the CPU (``brg_matmul:avx512_core_bf16``, ``..._amx``)."""
    environ = os.environ if environ is None else environ
    for var in ONEDNN_ISA_VARS:
        if environ.get(var, "").strip():
            return environ[var].strip().upper()
    return None


def cuda_compute_capability() -> tuple[int, int] | None:
    """The smallest compute capability of the visible NVIDIA GPUs, e.g. ``(7, 5)`` for a T4, read through
    NVML (``libnvidia-ml.so.1``, ``nvmlDeviceGetCudaComputeCapability``), so CUDA is never initialised.

    ``CUDA_VISIBLE_DEVICES`` given as indices narrows the GPUs asked about (NVML itself ignores it).
    None when there is no driver or NVML cannot say.
    """
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
            return None
        indices = list(range(count.value))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
            indices = [int(v) for v in visible.split(",") if v.strip() and int(v) < count.value]
        caps = []
        for i in indices:
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if (nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) == 0 and
                    nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) == 0):
                caps.append((major.value, minor.value))
        return min(caps) if caps else None
    finally:
        nvml.nvmlShutdown()


def precision_hardware(kind: str):
    """What the precision rule reads for hardware ``kind`` (``"tpu"``, ``"cuda"``, ``"cpu"``): a
    :class:`kitlib.run.backends.precision.Hardware`, probed without touching any device."""
    from .backends.precision import Hardware

    if kind == "cpu":
        return Hardware("cpu", cpu_bf16=cpu_bf16_feature(), aten_isa=torch_cpu_capability(), onednn_isa=onednn_isa_cap())
    if kind == "cuda":
        return Hardware("cuda", cuda_capability=cuda_compute_capability())
    return Hardware(kind)
