"""The TF strategy detector against mocked TPU resolvers and device lists (no TPU or GPU needed).

The resolvers, TPU initialisation, strategies and GPU list are replaced on the real ``tensorflow``
module; the default strategy is TF's real one. Virtual CPU replicas need a fresh process and are
exercised by tests/test_keras_backends.py.

TensorFlow never enters the pytest process that runs the torch_xla tests (together they abort):
the test bodies run in one child pytest process (tests/support/child_process.py), each reported here.
"""
from __future__ import annotations

import sys
import types

import pytest

from support.child_process import in_child, run_in_child
from kitlib.keras import strategy as st

tf = pytest.importorskip("tensorflow") if in_child(__file__) else None


class FakeStrategy:
    def __init__(self, n, name):
        self.num_replicas_in_sync = n
        self.name = name


class FakeTPUStrategy(FakeStrategy):
    pass


class FakeMirroredStrategy(FakeStrategy):
    pass


def _not_found():
    return tf.errors.NotFoundError(None, None, "TPU system not found")


@pytest.fixture
def machine(monkeypatch):
    """A configurable fake machine: which resolvers work, TPU init, GPUs, TPU evidence."""
    m = type("Machine", (), {})()
    m.working = set()  # resolver tpu args that find a TPU: "local", None (default resolver)
    m.init_error = None  # exception class name raised by initialize_tpu_system
    m.gpus = 0
    m.evidence = None
    m.calls = []
    m.policy = []

    class Resolver:
        def __init__(self, tpu=None):
            m.calls.append(tpu)
            if tpu not in m.working:
                raise ValueError("Please provide a TPU Name to connect to.")
            self.tpu = tpu

    def initialize(resolver):
        if m.init_error == "NotFoundError":
            raise _not_found()

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", Resolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: None)
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", initialize)
    monkeypatch.setattr(tf.distribute, "TPUStrategy", lambda r: FakeTPUStrategy(8, f"tpu={r.tpu}"))
    monkeypatch.setattr(tf.distribute, "MirroredStrategy", lambda devices=None: FakeMirroredStrategy(m.gpus, "mirrored"))
    real_list = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: [f"/physical_device:GPU:{i}" for i in range(m.gpus)] if kind == "GPU" else real_list(kind),
    )
    monkeypatch.setattr(st, "tpu_evidence", lambda: m.evidence)
    # a stand-in keras: the detector only sets the policy; the real one would pick a backend in this process
    fake_keras = types.SimpleNamespace(mixed_precision=types.SimpleNamespace(set_global_policy=m.policy.append))
    monkeypatch.setitem(sys.modules, "keras", fake_keras)
    return m


def detect(**kw):
    lines = []
    info = st.detect_strategy(log=lines.append, **kw)
    assert len(lines) == 1 and "\n" not in lines[0]
    return info, lines[0]


def test_no_tpu_no_gpu_gives_the_default_strategy(machine):
    info, line = detect(per_replica_batch=16)
    assert info.strategy is tf.distribute.get_strategy()
    assert (info.accelerator, info.num_replicas, info.global_batch) == ("cpu", 1, 16)
    assert machine.calls == ["local", None]  # both resolvers tried, in that order
    assert "no TPU or GPU" in line and "x1" in line


def test_tpu_vm_found_by_local_resolver(machine):
    machine.working = {"local"}
    info, line = detect(per_replica_batch=16, mixed_precision=True)
    assert isinstance(info.strategy, FakeTPUStrategy) and info.strategy.name == "tpu=local"
    assert (info.accelerator, info.num_replicas, info.per_replica_batch, info.global_batch) == ("tpu", 8, 16, 128)
    assert machine.calls == ["local"]
    assert info.precision_policy == "mixed_bfloat16" and machine.policy == ["mixed_bfloat16"]
    assert "tpu='local'" in line and "128 = 16 x 8" in line


def test_tpu_node_found_by_default_resolver_only(machine):
    machine.working = {None}
    info, _ = detect(per_replica_batch=4)
    assert isinstance(info.strategy, FakeTPUStrategy) and info.strategy.name == "tpu=None"
    assert (info.num_replicas, info.global_batch) == (8, 32)
    assert machine.calls == ["local", None]


def test_tpu_init_not_found_without_tpu_evidence_falls_back(machine):
    machine.working = {"local", None}
    machine.init_error = "NotFoundError"
    info, _ = detect(per_replica_batch=8)
    assert (info.accelerator, info.num_replicas, info.global_batch) == ("cpu", 1, 8)


def test_tpu_present_but_unusable_by_tf_is_loud(machine):
    machine.working = {"local", None}
    machine.init_error = "NotFoundError"
    machine.evidence = "TPU_ACCELERATOR_TYPE=v5litepod-8"
    with pytest.raises(st.TPUUnusableError) as e:
        detect(per_replica_batch=8)
    msg = str(e.value)
    assert "v5litepod-8" in msg and "JAX" in msg and "tensorflow-cpu" in msg and "NotFoundError" in msg
    with pytest.warns(RuntimeWarning, match="TensorFlow cannot use it"):
        info, _ = detect(per_replica_batch=8, on_unusable_tpu="warn")
    assert info.accelerator == "cpu"


@pytest.mark.parametrize(
    "gpus, kind, cls, replicas, policy",
    [(0, "cpu", None, 1, None), (1, "cuda", None, 1, "mixed_float16"), (2, "cuda", FakeMirroredStrategy, 2, "mixed_float16")],
)
def test_gpu_counts(machine, gpus, kind, cls, replicas, policy):
    machine.gpus = gpus
    info, line = detect(per_replica_batch=16, mixed_precision=True)
    assert info.accelerator == kind
    if cls is None:
        assert info.strategy is tf.distribute.get_strategy()
    else:
        assert isinstance(info.strategy, cls)
    assert (info.num_replicas, info.global_batch) == (replicas, 16 * replicas)
    assert info.precision_policy == policy
    assert machine.policy == ([policy] if policy else [])
    assert f"x{replicas}" in line


def test_global_batch_must_divide_by_replicas(machine):
    machine.gpus = 2
    with pytest.raises(ValueError, match=r"global batch 33 does not divide by 2 replicas.*use 32 or 34"):
        detect(global_batch=33)
    info, _ = detect(global_batch=32)
    assert (info.num_replicas, info.per_replica_batch, info.global_batch) == (2, 16, 32)


def test_scope_is_a_factory(machine):
    info, _ = detect(per_replica_batch=2)
    for _ in range(2):  # the default strategy's scope object can be entered only once: a fresh one each time
        with info.scope():
            pass


def test_bad_arguments(machine):
    with pytest.raises(ValueError):
        detect(per_replica_batch=0)
    with pytest.raises(ValueError):
        detect(on_unusable_tpu="ignore")


# tpu_evidence itself (shared with the torch runtime) is tested in tests/test_hardware.py.


run_in_child(globals(), __file__)  # the parent keeps proxies; the bodies run in the child
