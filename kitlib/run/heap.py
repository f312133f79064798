"""Memory a long loop has freed, given back to the system (glibc's ``malloc_trim``).

glibc's malloc keeps memory that was freed at the top of each of its heaps instead of returning
it, up to a threshold that rises with the largest block freed (to 64 MiB), in one heap per thread
that allocated. A loop whose batches allocate and free large tensors of changing sizes (rows sorted
by length, so every batch a little longer) and keep a small result from each therefore grows the
process by about 1 MiB a batch, with nothing alive: the inference notebook's process grew from
1,254 MiB at 1k rows to 1,980 MiB at 32k (tiny model, max_len 128, one CPU replica in the
notebook's process; ``benchmarks/run.py memory``; BENCHMARKS.md section 5). ``MALLOC_TRIM_THRESHOLD_=0``
in the environment ended the growth, which says where it was; the kit cannot set that for a
notebook's process that is already running, so a loop calls :func:`give_back_freed` every
:data:`EVERY` batches (about 10 ms each time here, against 50-300 ms a batch).

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
