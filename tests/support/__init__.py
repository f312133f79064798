"""What the tests use that is not a test: helpers, the child-process plugin, subprocess workers.

* :mod:`.child_process`: run a test module's bodies in a child pytest (TensorFlow kept out of the
  parent); also the pytest plugin tests/conftest.py registers.
* ``keras_worker.py``, ``multihost_worker.py``, ``xla_worker.py``: scripts that the tests start as
  subprocesses (``python tests/support/X_worker.py ...``), each documented in its own docstring.

Test modules import from here as ``support.X`` (pytest puts tests/ on ``sys.path``, as the folder of
tests/conftest.py). Nothing here is collected as tests (no ``test_*`` files).
"""
