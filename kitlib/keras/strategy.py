"""The TensorFlow strategy detector: which ``tf.distribute`` strategy to train with, found at run time.

``detect_strategy()`` tries, in order (TensorFlow guide "Use TPUs"; Kaggle "TPU" docs):

==========================  ============================================  ======================
found                       strategy                                      replicas
==========================  ============================================  ======================
TPU VM (Kaggle v5e, Colab)  ``TPUClusterResolver(tpu='local')`` ->        TPU cores (v5e-8: 8)
                            ``TPUStrategy``
TPU Node (old Colab)        ``TPUClusterResolver()`` -> ``TPUStrategy``   TPU cores
2 or more GPUs (2x T4)      ``MirroredStrategy``                          GPUs
1 GPU, or CPU               the default strategy                          1
N virtual CPU replicas      ``MirroredStrategy`` over N logical CPUs      N (tests only)
==========================  ============================================  ======================

A resolver without a TPU raises ``ValueError``; TPU initialisation can raise
``tf.errors.NotFoundError``: both mean "try the next one". Where a TPU is evidently present
(``TPU_*`` variables, ``/dev/accel*``) but TensorFlow cannot use it, as on Kaggle's TPU image,
which ships ``tensorflow-cpu``, the detector raises :class:`TPUUnusableError` (or warns, if asked)
instead of silently training on the CPU: use the JAX backend there (:mod:`kitlib.keras.runtime`).

TensorFlow is imported inside the functions, never at ``import kitlib``.
"""
from __future__ import annotations

import importlib.metadata
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

# One probe of the machine for torch and TensorFlow alike (kitlib.run.hardware): TPU variables and /dev files.
from ..run.hardware import TPU_ENV_VARS, tpu_evidence  # noqa: E402,F401  (tests replace strategy.tpu_evidence)
from .precision import mixed_precision_policy


class TPUUnusableError(RuntimeError):
    """A TPU is present but TensorFlow cannot use it (e.g. ``tensorflow-cpu`` on Kaggle's TPU image)."""


@dataclass(frozen=True)
class StrategyInfo:
    """What :func:`detect_strategy` found.

    Attributes:
        strategy: the ``tf.distribute.Strategy``; build and compile models inside ``strategy.scope()``.
        accelerator: ``"tpu"``, ``"cuda"`` or ``"cpu"`` (:data:`kitlib.run.hardware.ACCELERATOR_KINDS`).
        num_replicas: ``strategy.num_replicas_in_sync``.
        per_replica_batch: examples per replica per step.
        global_batch: examples per step, ``per_replica_batch * num_replicas`` (the batch size the
            ``tf.data`` pipeline is batched with; ``MirroredStrategy``/``TPUStrategy`` split it).
        precision_policy: the Keras mixed-precision policy set (``"mixed_bfloat16"``,
            ``"mixed_float16"``), or None when left alone.
        reason: one line saying what was found.
        virtual_replicas: N > 0 when the replicas are N logical CPUs (the test hook), else 0.
    """

    strategy: Any
    accelerator: str
    num_replicas: int
    per_replica_batch: int
    global_batch: int
    precision_policy: str | None
    reason: str
    virtual_replicas: int = 0

    def scope(self):
        """A fresh ``strategy.scope()`` context (a factory: the default strategy's scope is single-use)."""
        return self.strategy.scope()

    def describe(self) -> str:
        """One line: ``strategy: TPUStrategy x8 (tpu), global batch 128 = 16 x 8, ...: reason``."""
        pol = f", policy {self.precision_policy}" if self.precision_policy else ""
        where = f"{self.accelerator}, virtual" if self.virtual_replicas else self.accelerator
        return (
            f"strategy: {type(self.strategy).__name__} x{self.num_replicas} ({where}), global batch "
            f"{self.global_batch} = {self.per_replica_batch} x {self.num_replicas}{pol}: {self.reason}"
        )


def installed_tensorflow() -> str:
    """Which TensorFlow distributions are installed, e.g. ``"tensorflow-cpu 2.20.0"`` (or ``"none"``)."""
    found = []
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-nightly"):
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(found) or "none"


def set_virtual_cpu_replicas(n: int) -> None:
    """Split the host CPU into ``n`` logical devices, for ``MirroredStrategy`` tests without GPUs.

    Must run before TensorFlow initialises its runtime (before any op, strategy or model).
    ``jit_compile=True`` does not work with these logical devices (measured on TF 2.21).

    Raises:
        ValueError: ``n < 1``.
        RuntimeError: TensorFlow is already initialised with a different CPU split (restart the
            kernel, or set ``virtual_replicas`` in the first cell).
    """
    if n < 1:
        raise ValueError(f"virtual CPU replicas must be >= 1, not {n}")
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
    except RuntimeError as e:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == n:
            return
        raise RuntimeError(
            f"cannot split the CPU into {n} virtual replicas: TensorFlow is already initialised with "
            f"{have} logical CPU(s) ({e}). Set virtual replicas before anything runs a TF op; restart the kernel."
        ) from None


def _default_resolvers(tf) -> list[tuple[str, Callable[[], Any]]]:
    cr = tf.distribute.cluster_resolver
    return [
        ("TPUClusterResolver(tpu='local')", lambda: cr.TPUClusterResolver(tpu="local")),
        ("TPUClusterResolver()", lambda: cr.TPUClusterResolver()),
    ]


def _try_tpu(tf, tpu_address: str | None) -> tuple[Any, str] | tuple[None, list[str]]:
    """(TPUStrategy, how) on success, else (None, [why each try failed])."""
    if tpu_address is not None:
        tries = [(f"TPUClusterResolver(tpu={tpu_address!r})", lambda: tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address))]
    else:
        tries = _default_resolvers(tf)
    errors = []
    for name, make in tries:
        try:
            resolver = make()
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            return tf.distribute.TPUStrategy(resolver), name
        except (ValueError, tf.errors.NotFoundError) as e:
            errors.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return None, errors


def _find_strategy(virtual_cpu_replicas: int, try_tpu: bool, tpu_address: str | None,
                   on_unusable_tpu: str) -> tuple[Any, str, str]:
    """The strategy in the module docstring's order (virtual CPUs, TPU, several GPUs, the default),
    as ``(strategy, accelerator, reason)``."""
    import tensorflow as tf

    if virtual_cpu_replicas:
        set_virtual_cpu_replicas(virtual_cpu_replicas)
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][:virtual_cpu_replicas]
        return (tf.distribute.MirroredStrategy(devices=devices), "cpu",
                f"{virtual_cpu_replicas} virtual CPU replica(s) (test hook)")
    if try_tpu:
        strategy, how = _try_tpu(tf, tpu_address)
        if strategy is not None:
            return strategy, "tpu", f"TPU found by {how}"
        _unusable_tpu(how, on_unusable_tpu)
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= 2:
        return tf.distribute.MirroredStrategy(), "cuda", f"{len(gpus)} GPUs"
    return tf.distribute.get_strategy(), "cuda" if gpus else "cpu", "1 GPU" if gpus else "no TPU or GPU"


def _unusable_tpu(errors: list[str], on_unusable_tpu: str) -> None:
    """When a TPU is present though no resolver worked: raise :class:`TPUUnusableError`, or with
    ``on_unusable_tpu="warn"`` warn and print the message in a banner."""
    evidence = tpu_evidence()
    if not evidence:
        return
    msg = (
        f"A TPU is present ({evidence}) but TensorFlow cannot use it "
        f"(installed: {installed_tensorflow()}; {'; '.join(errors)}). Kaggle's TPU image ships "
        "tensorflow-cpu: train with the JAX backend instead (notebook parameter backend='jax' "
        "or 'auto', or KERAS_BACKEND=jax; see kitlib.keras.runtime). Do not pip install the "
        "full tensorflow wheel over the image's tensorflow-cpu."
    )
    if on_unusable_tpu == "raise":
        raise TPUUnusableError(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=4)  # detect_strategy's caller
    print("!" * 80 + "\n" + msg + "\n" + "!" * 80, file=sys.stderr)


def _split_batch(global_batch: int, n: int, reason: str) -> int:
    """The per-replica batch of ``global_batch`` over ``n`` replicas; refuses one that does not divide."""
    if global_batch % n:
        lo, hi = (global_batch // n) * n, -(-global_batch // n) * n
        raise ValueError(
            f"global batch {global_batch} does not divide by {n} replicas ({reason}); "
            f"use {lo or n} or {hi}, or give per_replica_batch instead"
        )
    return global_batch // n


def detect_strategy(per_replica_batch: int = 16, *, global_batch: int | None = None, mixed_precision: bool = False,
                    virtual_cpu_replicas: int = 0, tpu_address: str | None = None, try_tpu: bool = True,
                    on_unusable_tpu: str = "raise", log: Callable[[str], None] | None = print) -> StrategyInfo:
    """Pick the ``tf.distribute`` strategy for this machine (see the module docstring for the order).

    Args:
        per_replica_batch: examples per replica per step (ignored when ``global_batch`` is given).
        global_batch: examples per step instead; must divide evenly by the replica count.
        mixed_precision: set the Keras policy :func:`kitlib.keras.precision.mixed_precision_policy`
            gives the accelerator found (CPU runs stay float32).
        virtual_cpu_replicas: N > 0 splits the CPU into N logical devices under
            ``MirroredStrategy`` (a test hook; must run before TF initialises; skips TPU and GPU).
        tpu_address: a specific TPU name/address instead of trying ``'local'`` then the default.
        try_tpu: False skips the TPU resolvers.
        on_unusable_tpu: ``"raise"`` (default) or ``"warn"`` when a TPU is present but no resolver
            works: see :class:`TPUUnusableError`.
        log: called with :meth:`StrategyInfo.describe`'s line (None: silent).

    Returns:
        A :class:`StrategyInfo`.

    Raises:
        ValueError: a batch size < 1, ``global_batch`` not a multiple of the replica count (the
            strategy splits each batch evenly across replicas), or a bad ``on_unusable_tpu``.
        TPUUnusableError: a TPU is present, TensorFlow cannot use it, and ``on_unusable_tpu="raise"``.
        RuntimeError: ``virtual_cpu_replicas`` set after TF initialised.
    """
    if on_unusable_tpu not in ("raise", "warn"):
        raise ValueError(f"on_unusable_tpu must be 'raise' or 'warn', not {on_unusable_tpu!r}")
    if global_batch is None and per_replica_batch < 1:
        raise ValueError(f"per_replica_batch must be >= 1, not {per_replica_batch}")
    if global_batch is not None and global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, not {global_batch}")
    strategy, accelerator, reason = _find_strategy(virtual_cpu_replicas, try_tpu, tpu_address, on_unusable_tpu)
    n = int(strategy.num_replicas_in_sync)
    if global_batch is not None:
        per_replica_batch = _split_batch(global_batch, n, reason)
    policy = mixed_precision_policy(accelerator) if mixed_precision else None
    if policy:
        import keras

        keras.mixed_precision.set_global_policy(policy)
    info = StrategyInfo(strategy, accelerator, n, per_replica_batch, per_replica_batch * n, policy, reason,
                        virtual_cpu_replicas)
    if log is not None:
        log(info.describe())
    return info
