"""Memory a long loop has freed, given back to the system (glibc's ``malloc_trim``).

glibc's malloc keeps freed memory at the top of each heap (up to a threshold that rises to 64 MiB), so
a loop whose batches allocate and free large tensors of changing sizes grows the process by about 1 MiB
a batch with nothing alive (BENCHMARKS.md section 5). The kit cannot set ``MALLOC_TRIM_THRESHOLD_`` for a
process already running, so a loop calls :func:`give_back_freed` every :data:`EVERY` batches.

Where the C library has no ``malloc_trim`` (macOS, musl) nothing is done.
"""
from __future__ import annotations

import ctypes
import functools

EVERY = 8  # batches between two calls in a loop (kitlib.infer.predict_rows)


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def give_back_freed() -> bool:
    """Return the memory this process has freed to the system (``malloc_trim(0)``).

    Safe from any thread (glibc locks each heap). Nothing alive is touched.

    Returns:
        True when the C library has ``malloc_trim`` and it was called; False where it has none.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
