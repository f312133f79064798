"""The Keras-level runtime: which backend, how many replicas, and the scope to build models in.

One entry point, :func:`keras_runtime`, gives a notebook the same things whatever the backend:

===========  ===================================================  ==============================
backend      distribution                                         ``scope()``
===========  ===================================================  ==============================
tensorflow   a ``tf.distribute`` strategy from                    ``strategy.scope()`` (a fresh
             :func:`kitlib.keras.strategy.detect_strategy`        one per call)
jax          ``keras.distribution.DataParallel(devices=           a no-op context; the
             list_devices())`` set globally before any model is   distribution is global
             built or loaded (only with 2 or more devices)
===========  ===================================================  ==============================

The backend comes from the ``backend`` argument, else ``KERAS_BACKEND``, else detection
(:func:`choose_backend`): a TPU that JAX sees and TensorFlow does not (Kaggle's TPU v5e-8 image
ships ``jax[tpu]`` and ``tensorflow-cpu``) means JAX; a TPU TensorFlow can use, GPUs or a plain
CPU mean TensorFlow (when installed). Keras reads ``KERAS_BACKEND`` once, at its first import,
and a process holds one backend: call :func:`keras_runtime` (or :func:`select_backend`) before
anything imports ``keras`` or ``keras_hub``.

The accelerator is named as everywhere in the kit (:data:`kitlib.run.hardware.ACCELERATOR_KINDS`:
``"tpu"``, ``"cuda"``, ``"cpu"``). Keras / keras-hub version drift lives in :mod:`kitlib.compat.keras`
(the keras-hub class names, the JAX trainer's state after a failed call).
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, ContextManager

from ..run.hardware import ACCELERATOR_KINDS, accelerator_kind
from . import strategy as tf_strategy
from .precision import mixed_precision_policy

BACKENDS = ("auto", "tensorflow", "jax")
XLA_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


# ----------------------------------------------------------------------------- backend choice

def _tf_sees_tpu() -> bool:
    """True when TensorFlow connects to and initialises the TPU (``tensorflow-cpu`` alone: False, untried)."""
    installed = tf_strategy.installed_tensorflow()
    if installed == "none" or (installed.startswith("tensorflow-cpu") and "," not in installed):
        return False
    try:
        import tensorflow as tf

        strat, _ = tf_strategy._try_tpu(tf, None)
    except Exception:  # noqa: BLE001 - any failure to reach the TPU from TF means "TF cannot use it"
        return False
    return strat is not None


def _jax_sees_tpu() -> bool:
    if importlib.util.find_spec("jax") is None:
        return False
    try:
        import jax

        return any(d.platform == "tpu" for d in jax.devices())
    except RuntimeError:  # no TPU backend could be initialised
        return False


def _gpu_count() -> int:
    """NVIDIA GPUs, counted without initialising any framework (:func:`kitlib.run.hardware.cuda_device_count`)."""
    from ..run.hardware import cuda_device_count

    return cuda_device_count()


@dataclass
class Probes:
    """How :func:`choose_backend` looks at the machine; tests replace these callables.

    Attributes:
        tpu_evidence: a TPU on this host, read without touching it -> description or None.
        tf_sees_tpu: TensorFlow can connect to and initialise the TPU.
        jax_sees_tpu: ``jax.devices()`` holds TPU devices.
        gpu_count: CUDA GPUs on the host.
        has_tf, has_jax: the package is importable.
    """

    tpu_evidence: Callable[[], str | None] = tf_strategy.tpu_evidence
    tf_sees_tpu: Callable[[], bool] = _tf_sees_tpu
    jax_sees_tpu: Callable[[], bool] = _jax_sees_tpu
    gpu_count: Callable[[], int] = _gpu_count
    has_tf: Callable[[], bool] = lambda: importlib.util.find_spec("tensorflow") is not None
    has_jax: Callable[[], bool] = lambda: importlib.util.find_spec("jax") is not None


@dataclass(frozen=True)
class BackendChoice:
    """``backend`` (``"tensorflow"`` or ``"jax"``) and the one-line ``reason`` it was picked."""

    backend: str
    reason: str


def choose_backend(requested: str = "auto", *, virtual_replicas: int = 0, probes: Probes | None = None) -> BackendChoice:
    """Decide the Keras backend (nothing is imported or set; see :func:`select_backend`).

    Order: ``requested`` when not ``"auto"``; else ``KERAS_BACKEND``; else virtual replicas
    (a CPU test hook) -> TensorFlow when installed; else a TPU: TensorFlow if it can use it, JAX
    if JAX sees it; else GPUs or CPU -> TensorFlow when installed, otherwise JAX.

    Raises:
        ValueError: ``requested`` or ``KERAS_BACKEND`` is not ``tensorflow``/``jax``.
        RuntimeError: a TPU is present and neither TensorFlow nor JAX can use it; or neither
            package is installed.
    """
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {requested!r}")
    if requested != "auto":
        return BackendChoice(requested, f"backend={requested!r} requested")
    env = os.environ.get("KERAS_BACKEND")
    if env:
        if env not in BACKENDS[1:]:
            raise ValueError(f"KERAS_BACKEND={env!r}: this kit runs on 'tensorflow' or 'jax'")
        return BackendChoice(env, f"KERAS_BACKEND={env}")
    pr = probes or Probes()
    has_tf, has_jax = pr.has_tf(), pr.has_jax()
    if not (has_tf or has_jax):
        raise RuntimeError("neither tensorflow nor jax is installed; Keras needs one of them")
    fallback = "tensorflow" if has_tf else "jax"
    if virtual_replicas:
        return BackendChoice(fallback, f"{virtual_replicas} virtual CPU replica(s) requested (test hook)")
    tpu = pr.tpu_evidence()
    if tpu:
        if has_tf and pr.tf_sees_tpu():
            return BackendChoice("tensorflow", f"TPU ({tpu}) usable by TensorFlow")
        if has_jax and pr.jax_sees_tpu():
            return BackendChoice(
                "jax", f"TPU ({tpu}) seen by JAX, not by TensorFlow (installed: {tf_strategy.installed_tensorflow()})"
            )
        raise RuntimeError(
            f"a TPU is present ({tpu}) but neither TensorFlow ({tf_strategy.installed_tensorflow()}) nor JAX "
            "can use it: on Kaggle use the TPU image's own jax[tpu]; elsewhere pip install 'jax[tpu]'"
        )
    gpus = pr.gpu_count()
    if gpus:
        return BackendChoice(fallback, f"{gpus} GPU(s), no TPU")
    return BackendChoice(fallback, "no TPU or GPU")


def select_backend(backend: str, *, virtual_replicas: int = 0) -> None:
    """Set ``KERAS_BACKEND`` (and, for JAX, the emulated CPU device count) before Keras is imported.

    Args:
        backend: ``"tensorflow"`` or ``"jax"``.
        virtual_replicas: N > 0 under JAX appends ``--xla_force_host_platform_device_count=N`` to
            ``XLA_FLAGS``, which JAX reads at import (XLA CPU client option). Under TensorFlow
            the CPU split happens later, in :func:`kitlib.keras.strategy.set_virtual_cpu_replicas`.

    Raises:
        RuntimeError: Keras is already imported with another backend, or JAX is already
            imported with a different device count (restart the kernel; select first).
    """
    if "keras" in sys.modules:
        import keras

        have = keras.backend.backend()
        if have != backend:
            raise RuntimeError(
                f"keras is already imported with the {have!r} backend; a process holds one backend. "
                f"Restart the kernel and select {backend!r} before importing keras or keras_hub."
            )
    os.environ["KERAS_BACKEND"] = backend
    if backend == "jax" and virtual_replicas:
        if "jax" in sys.modules:
            import jax

            if jax.device_count() != virtual_replicas:
                raise RuntimeError(
                    f"jax is already imported with {jax.device_count()} device(s); {XLA_DEVICE_COUNT_FLAG}="
                    f"{virtual_replicas} must be in XLA_FLAGS before jax is imported. Restart the kernel."
                )
        else:
            flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(XLA_DEVICE_COUNT_FLAG)]
            os.environ["XLA_FLAGS"] = " ".join([*flags, f"{XLA_DEVICE_COUNT_FLAG}={virtual_replicas}"])


# ----------------------------------------------------------------------------- the runtime

@dataclass(frozen=True)
class KerasRuntime:
    """What a Keras notebook needs, whatever the backend.

    Attributes:
        backend: ``"tensorflow"`` or ``"jax"``.
        accelerator: ``"tpu"``, ``"cuda"`` or ``"cpu"`` (:data:`kitlib.run.hardware.ACCELERATOR_KINDS`).
        num_replicas: data-parallel replicas (TF: ``num_replicas_in_sync``; JAX: devices).
        per_replica_batch: examples per replica per step.
        global_batch: ``per_replica_batch * num_replicas``: the batch size every pipeline uses.
            Under JAX each batch is split evenly across devices; an uneven one raises
            ``IndivisibleError``, so training drops the remainder and prediction pads.
        scope: call it for a context to build/compile/load models in (TF: ``strategy.scope()``;
            JAX: a no-op).
        jit_compile: what to pass to ``model.compile`` (False with TF virtual CPU replicas,
            where XLA compilation fails; else ``"auto"``).
        precision_policy: the Keras mixed-precision policy set, or None.
        reason: why this backend and distribution (one line).
        strategy: the ``tf.distribute.Strategy`` (TF only).
        distribution: the ``keras.distribution.DataParallel`` (JAX with 2+ devices only).
        virtual_replicas: N > 0 when the replicas are N emulated CPU devices (the test hook).
    """

    backend: str
    accelerator: str
    num_replicas: int
    per_replica_batch: int
    global_batch: int
    scope: Callable[[], ContextManager]
    jit_compile: Any
    precision_policy: str | None
    reason: str
    strategy: Any = None
    distribution: Any = None
    virtual_replicas: int = 0

    def __post_init__(self):
        if self.accelerator not in ACCELERATOR_KINDS:
            raise ValueError(f"accelerator {self.accelerator!r} is not one of {ACCELERATOR_KINDS}")

    def describe(self) -> str:
        """One line: backend, distribution, replicas, batch, reason."""
        how = type(self.strategy).__name__ if self.strategy is not None else (
            "DataParallel" if self.distribution is not None else "single device"
        )
        pol = f", policy {self.precision_policy}" if self.precision_policy else ""
        where = f"{self.accelerator}, virtual" if self.virtual_replicas else self.accelerator
        return (
            f"keras runtime: {self.backend} / {how} x{self.num_replicas} ({where}), global batch "
            f"{self.global_batch} = {self.per_replica_batch} x {self.num_replicas}{pol}: {self.reason}"
        )


def keras_runtime(backend: str = "auto", per_replica_batch: int = 16, *, mixed_precision: bool = False,
                  virtual_replicas: int = 0, probes: Probes | None = None, log: Callable[[str], None] | None = print) -> KerasRuntime:
    """Choose the backend, set it up for data parallelism, and say what was chosen.

    Args:
        backend: ``"auto"``, ``"tensorflow"`` or ``"jax"`` (see :func:`choose_backend`).
        per_replica_batch: examples per replica (per device) per step.
        mixed_precision: set the policy :func:`kitlib.keras.precision.mixed_precision_policy` gives.
        virtual_replicas: N > 0 emulates N CPU replicas (TF: logical CPUs under
            ``MirroredStrategy``; JAX: ``--xla_force_host_platform_device_count=N``). Tests only.
        probes: machine probes for :func:`choose_backend` (tests).
        log: receives :meth:`KerasRuntime.describe` (None: silent).

    Returns:
        A :class:`KerasRuntime`. Under JAX with 2 or more devices the global Keras distribution
        is set, so every model built or loaded afterwards is replicated across them.

    Raises:
        ValueError: bad backend name or batch size.
        RuntimeError: see :func:`select_backend`, :func:`choose_backend`; under JAX, fewer
            devices than ``virtual_replicas``.
        kitlib.keras.strategy.TPUUnusableError: TensorFlow was requested on a TPU it cannot use.
    """
    if per_replica_batch < 1:
        raise ValueError(f"per_replica_batch must be >= 1, not {per_replica_batch}")
    choice = choose_backend(backend, virtual_replicas=virtual_replicas, probes=probes)
    select_backend(choice.backend, virtual_replicas=virtual_replicas)
    build = _tf_runtime if choice.backend == "tensorflow" else _jax_runtime
    rt = build(choice.reason, per_replica_batch, mixed_precision, virtual_replicas)
    if log is not None:
        log(rt.describe())
    return rt


def _tf_runtime(why: str, per_replica_batch: int, mixed_precision: bool, virtual_replicas: int) -> KerasRuntime:
    """TensorFlow: the distribution strategy :func:`kitlib.keras.strategy.detect_strategy` finds
    (``why``: the reason the backend was chosen)."""
    info = tf_strategy.detect_strategy(
        per_replica_batch, mixed_precision=mixed_precision, virtual_cpu_replicas=virtual_replicas, log=None
    )
    return KerasRuntime(
        "tensorflow", info.accelerator, info.num_replicas, info.per_replica_batch, info.global_batch, info.scope,
        False if info.virtual_replicas else "auto", info.precision_policy,
        f"{why}; {info.reason}", strategy=info.strategy, virtual_replicas=info.virtual_replicas,
    )


def _jax_runtime(why: str, per_replica_batch: int, mixed_precision: bool, virtual_replicas: int) -> KerasRuntime:
    """JAX: every device (or the first ``virtual_replicas``), Keras's global ``DataParallel``
    distribution set when there are two or more, and the mixed precision policy when asked."""
    import keras

    devices = keras.distribution.list_devices()
    if virtual_replicas and len(devices) < virtual_replicas:
        raise RuntimeError(f"JAX sees {len(devices)} device(s), {virtual_replicas} asked for")
    if virtual_replicas:
        devices = devices[:virtual_replicas]
    accelerator = accelerator_kind(devices[0])  # "cpu:0", "tpu:0", "cuda:0" (Keras's device strings)
    dist = None
    if len(devices) > 1:
        dist = keras.distribution.DataParallel(devices=devices)
        keras.distribution.set_distribution(dist)
    policy = mixed_precision_policy(accelerator) if mixed_precision else None
    if policy:
        keras.mixed_precision.set_global_policy(policy)
    n = len(devices)
    return KerasRuntime(
        "jax", accelerator, n, per_replica_batch, per_replica_batch * n, contextlib.nullcontext, "auto", policy,
        f"{why}; {n} JAX {accelerator} device(s)", distribution=dist,
        virtual_replicas=virtual_replicas if accelerator == "cpu" else 0,
    )


class _CompileCounter(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)  # jax_log_compiles logs "Compiling ..." at WARNING
        self.messages: list[str] = []

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Compiling "):
            self.messages.append(msg)


@contextlib.contextmanager
def count_compiles(model=None):
    """Count compilations in the block.

    JAX: XLA compilations logged under ``jax_log_compiles`` (every ``jit`` trace that compiles,
    Keras's train/predict steps included). TF: traces of ``model``'s ``train_step`` /
    ``test_step`` / ``predict_step`` (each trace of a Keras ``tf.function`` is one graph
    compilation; under a strategy a trace calls the step once per replica, so calls are divided
    by ``num_replicas_in_sync``).

    Args:
        model: the Keras model to watch (needed under TF; ignored under JAX).

    Yields:
        A namespace whose ``count`` (int) is set at exit; ``messages`` holds JAX's log lines.
    """
    import keras

    ns = SimpleNamespace(count=0, messages=[])
    if keras.backend.backend() == "jax":
        counting = _jax_compiles(ns)
    elif model is None:
        raise ValueError("count_compiles needs the model under the TensorFlow backend")
    else:
        counting = _tf_step_traces(model, ns)
    with counting:
        yield ns


@contextlib.contextmanager
def _jax_compiles(ns: SimpleNamespace):
    """Count JAX's "Compiling ..." log lines (``jax_log_compiles``) into ``ns``, without printing them."""
    import jax

    handler = _CompileCounter()
    logger = logging.getLogger("jax")
    old_flag, old_propagate = jax.config.jax_log_compiles, logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # the log lines list every argument's shape: count them, don't print them
    jax.config.update("jax_log_compiles", True)
    try:
        yield
    finally:
        jax.config.update("jax_log_compiles", old_flag)
        logger.removeHandler(handler)
        logger.propagate = old_propagate
        ns.messages = handler.messages
        ns.count = len(handler.messages)


@contextlib.contextmanager
def _tf_step_traces(model, ns: SimpleNamespace):
    """Count the traces of ``model``'s train/test/predict steps into ``ns`` (per replica), the steps
    wrapped in the block and restored after it."""
    import tensorflow as tf

    calls = [0]
    names = ("train_step", "test_step", "predict_step")
    saved = {n: model.__dict__.get(n) for n in names}

    def wrap(fn):
        def step(*a, **kw):
            if not tf.executing_eagerly():
                calls[0] += 1
            return fn(*a, **kw)
        return step

    for n in names:
        setattr(model, n, wrap(getattr(model, n)))
    try:
        yield
    finally:
        for n, old in saved.items():
            if old is None:
                model.__dict__.pop(n, None)
            else:
                setattr(model, n, old)
        replicas = getattr(getattr(model, "distribute_strategy", None), "num_replicas_in_sync", 1) or 1
        ns.count = -(-calls[0] // replicas)
