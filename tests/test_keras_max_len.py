"""The Keras classifier refuses a max_len beyond its position table (XLM-R: 512), before training.

Keras runs in a child process: TensorFlow/JAX never share the pytest process with torch_xla.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT, SAMPLE


def test_max_len_beyond_the_position_table_is_refused(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from kitlib.keras.runtime import select_backend
        select_backend("jax")
        from kitlib.keras.model import KerasModelConfig, build_classifier
        for n in (512, 600):
            try:
                build_classifier(KerasModelConfig(max_len=n), data_dir={str(SAMPLE)!r}, cache_dir={str(ROOT / ".cache")!r})
                print(n, "BUILT")
            except ValueError as e:
                print(n, "REFUSED", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "512 BUILT" in r.stdout
    assert ("600 REFUSED max_len=600 is more than the model can read: its position table holds 512 tokens per row. "
            "Set max_len <= 512.") in r.stdout
