"""Run a test module's bodies in one child pytest process, and report each test in the parent.

TensorFlow and torch_xla must not share a process: with both loaded, the torch_xla and
kaggle-client tests abort the run ("lost sys.stderr", or "LLVM ERROR: inconsistency in registered
CommandLine options" when TensorFlow comes first). A test module that needs TensorFlow in-process
(for example to patch its resolvers) therefore keeps TensorFlow out of the parent:

    from support.child_process import in_child, run_in_child
    if in_child(__file__):
        tf = pytest.importorskip("tensorflow")
    ...
    run_in_child(globals(), __file__)   # last line of the module

In the child (the same module, collected by a child ``pytest`` with ``KIT_CHILD_MODULE`` naming
it) the tests run as written. In the parent every ``test_*`` function is replaced by a proxy with
the same name, marks and parameters, so node ids match; the first proxy to run starts the child
once for the module's selected tests and each proxy reports its own test's outcome, with the child's
traceback on failure. This file is also a pytest plugin (tests/conftest.py registers it with
``pytest_plugins``): in the child, named by ``KIT_CHILD_RESULTS``, it writes each test's outcome to
that JSON file; elsewhere it does nothing.
"""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_ENV = "KIT_CHILD_MODULE"
RESULTS_ENV = "KIT_CHILD_RESULTS"
CHILD_TIMEOUT_S = 900
_results: dict[str, dict[str, dict]] = {}  # module file -> node id -> {"outcome", "text"}


def in_child(module_file: str) -> bool:
    """True in the child process that runs ``module_file``'s test bodies."""
    return os.environ.get(MODULE_ENV) == str(Path(module_file).resolve())


def _run_child(module_file: Path, node_ids: list[str], tmp_dir: Path) -> dict[str, dict]:
    out = tmp_dir / "child-results.json"
    env = {
        **os.environ,
        MODULE_ENV: str(module_file),
        RESULTS_ENV: str(out),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "",
           "--rootdir", str(ROOT), *node_ids]
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the child pytest for {module_file.name} ran past {CHILD_TIMEOUT_S} s:\n{e.stdout or ''}", pytrace=False)
    if not out.is_file():
        pytest.fail(f"the child pytest for {module_file.name} wrote no results (exit {p.returncode}):\n"
                    f"{p.stdout[-4000:]}\n{p.stderr[-4000:]}", pytrace=False)
    return json.loads(out.read_text())


def _proxy(fn):
    """A parent-side stand-in for test function ``fn``: same name, marks and parametrized arguments."""
    marks = getattr(fn, "pytestmark", [])
    params = {n for m in marks if m.name == "parametrize" for n in
              ([a.strip() for a in m.args[0].split(",")] if isinstance(m.args[0], str) else m.args[0])}
    module_file = Path(inspect.getfile(fn)).resolve()

    def proxy(request, tmp_path_factory, **_):
        if str(module_file) not in _results:
            selected = [i.nodeid for i in request.session.items if Path(str(i.path)).resolve() == module_file]
            _results[str(module_file)] = _run_child(module_file, selected, tmp_path_factory.mktemp("child"))
        res = _results[str(module_file)].get(request.node.nodeid)
        if res is None:
            pytest.fail(f"the child pytest did not run {request.node.nodeid}", pytrace=False)
        if res["outcome"] == "skipped":
            pytest.skip(f"in the child process: {res['text']}")
        if res["outcome"] != "passed":
            pytest.fail(f"in the child process:\n{res['text']}", pytrace=False)

    proxy.__name__ = proxy.__qualname__ = fn.__name__
    proxy.__doc__ = fn.__doc__
    proxy.__module__ = fn.__module__
    proxy.pytestmark = marks
    kw = inspect.Parameter.POSITIONAL_OR_KEYWORD
    proxy.__signature__ = inspect.Signature(
        [inspect.Parameter(n, kw) for n in ("request", "tmp_path_factory", *sorted(params))]
    )
    return proxy


def run_in_child(namespace: dict, module_file: str) -> None:
    """In the parent, replace every ``test_*`` function of ``namespace`` by a proxy (see the module doc)."""
    if in_child(module_file):
        return
    for name, obj in list(namespace.items()):
        if name.startswith("test_") and inspect.isfunction(obj):
            namespace[name] = _proxy(obj)


# --- the plugin's hooks: they record outcomes only in the child (KIT_CHILD_RESULTS set) ---

_outcomes: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    """Keep each test's worst phase: a failed setup, call or teardown fails the test."""
    if not os.environ.get(RESULTS_ENV):
        return
    cur = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "text": ""})
    if report.failed:
        cur.update(outcome="failed", text=cur["text"] + f"[{report.when}] {report.longreprtext}\n")
    elif report.skipped and cur["outcome"] == "passed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        cur.update(outcome="skipped", text=reason)


def pytest_sessionfinish(session):
    out = os.environ.get(RESULTS_ENV)
    if out:
        Path(out).write_text(json.dumps(_outcomes, indent=1))


def run_jax_worker(worker: Path, out: Path, what: str) -> dict:
    """Run ``python <worker> <out>`` (a sharded-JAX worker script, :mod:`jax_mesh_worker` its start) in a fresh process
    that sets its own Keras backend and ``XLA_FLAGS``, and return its ``out/result.json``; fails the test with the
    worker's output tails when it exits non-zero (``what`` names it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    p = subprocess.run([sys.executable, str(worker), str(out)], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"{what} worker failed:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return json.loads((Path(out) / "result.json").read_text())
