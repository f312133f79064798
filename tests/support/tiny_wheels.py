"""Tiny real wheels written by a test, and a pip that can reach no index (tests/test_wheels.py and
tests/test_wheels_offline.py: the wheels data set of internet-off kernels, kaggle_kit/wheels.py)."""
from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str, tag: str = "py3-none-any", requires=()) -> Path:
    """A minimal real wheel: package ``name`` (``VALUE = "<name> <version>"``) and its dist-info."""
    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"VALUE = {name + ' ' + version!r}\n",
             f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                      + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: {str(tag.endswith('any')).lower()}\nTag: {tag}\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist_info}/RECORD"] = "\n".join(record + [f"{dist_info}/RECORD,,"]) + "\n"
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    return path


def offline_env(**extra) -> dict:
    """A pip that can reach no index: no config file, --no-index by variable, an index on a closed port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_INDEX_URL="http://127.0.0.1:9/", PIP_RETRIES="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env
