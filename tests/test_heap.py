"""kitlib/run/heap.py: memory a loop freed goes back to the system (issue 27.12: the inference notebook's
process grew with the rows, by what glibc kept of each batch's freed temporaries)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

# In a fresh process: raise glibc's dynamic thresholds as a large tensor's free does, then free 64
# blocks of 1 MiB, each followed by a small block that stays (a batch's temporaries and the result
# kept from it): the holes cannot join the heap's top, so glibc keeps them.
RETAINED = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
from kitlib.run import heap
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) / 1024
big = libc.malloc(16 << 20); ctypes.memset(big, 1, 16 << 20); libc.free(big)  # under 32 MiB: raises the thresholds
blocks, kept = [], []
for _ in range(64):
    blocks.append(libc.malloc(1 << 20))
    ctypes.memset(blocks[-1], 1, 1 << 20)
    kept.append(libc.malloc(4096))
for b in blocks:
    libc.free(b)
before = rss()
given = heap.give_back_freed()
print(json.dumps({"before": before, "after": rss(), "given": given}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_memory_a_loop_freed_is_given_back():
    r = subprocess.run([sys.executable, "-c", RETAINED, str(ROOT)], capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(r.stdout)
    assert out["given"] is True
    assert out["before"] - out["after"] > 48, out  # most of the 64 MiB freed (but kept by glibc) went back
