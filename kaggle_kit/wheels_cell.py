# Installs the wheels this kernel needs from its attached wheels data set, offline (the kernel runs
# with the internet off): `pip install --no-index --find-links <the data set's folder>`, before anything
# imports them. Each wheel is checked first: there, unchanged (sha256), and built for this Python;
# any that is not is refused, naming the wheel, this Python and the fix.
# This file is the staged notebook's wheels cell, after its parameters and before the vendored kitlib
# (kaggle_kit/wheels.py reads it as text and appends the call with the manifest); it is not imported by the kit.
def _install_wheels(manifest, pip_args=(), max_depth=4):
    """Find the data set ``manifest["dataset"]`` under the input folder (``$KAGGLE_INPUT_DIR``, else
    ``/kaggle/input``: the folder whose ``wheels-manifest.json`` names it), check each wheel of
    ``manifest["wheels"]`` (file, sha256, tags against this Python's) and install them with pip,
    without an index. ``pip_args``: more pip options (e.g. ``--target DIR``).

    Raises RuntimeError, before installing anything, naming each wheel that is missing, changed or
    built for another Python, and the fix; or when pip fails.
    """
    import hashlib
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    try:
        from packaging.tags import sys_tags
    except ImportError:  # pip's own copy
        from pip._vendor.packaging.tags import sys_tags

    dataset, fix = manifest["dataset"], manifest["fix"]
    root = Path(os.environ.get("KAGGLE_INPUT_DIR") or "/kaggle/input")
    found = None
    for depth in range(max_depth + 1):
        for p in sorted(root.glob("/".join(["*"] * depth + ["wheels-manifest.json"]))):
            try:
                if json.loads(p.read_text(encoding="utf-8")).get("dataset") == dataset:
                    found = found or p.parent
            except (OSError, ValueError, AttributeError):
                continue
    if found is None:
        raise RuntimeError(f"wheels: the data set {dataset} is not attached (no wheels-manifest.json naming it under "
                           f"{root}): add it to the kernel's dataset_sources, or {fix}")
    here = {str(t) for t in sys_tags()}
    python = f"Python {sys.version_info.major}.{sys.version_info.minor} (cp{sys.version_info.major}{sys.version_info.minor})"
    problems = []
    for w in manifest["wheels"]:
        path = found / w["file"]
        if not path.is_file():
            problems.append(f"{w['file']} ({w['name']} {w['version']}) is missing from {found}")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != w["sha256"]:
            problems.append(f"{w['file']} in {found} is not the wheel this kernel was staged with (sha256 differs)")
        elif not set(w["tags"]) & here:
            problems.append(f"{w['file']} is built for {', '.join(w['tags'])}, not for this {python}")
    if problems:
        raise RuntimeError("wheels: " + "; ".join(problems) + f". Nothing was installed. Fix: {fix} "
                           f"(the kernel's image runs {python}; kaggle_kit/images.py records Python "
                           f"{manifest['python']} for Kaggle's {manifest['image']} image)")
    specs = [f"{w['name']}=={w['version']}" for w in manifest["wheels"]]
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(found),
           "--disable-pip-version-check", "--no-input", *pip_args, *specs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"wheels: pip install from {found} failed ({' '.join(specs)}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    import importlib

    importlib.invalidate_caches()
    print(f"wheels: installed {', '.join(specs)} from {found} (data set {dataset}, offline)")
