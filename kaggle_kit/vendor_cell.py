# Writes the kitlib modules above into a folder outside the kernel's output (Kaggle saves all of
# /kaggle/working as the output) and puts that folder first on sys.path and PYTHONPATH, so
# `import kitlib` works here and in fork/spawn children (_mp_fn). The folder is
# kitlib.paths.scratch_dir()'s: $KAGGLE_TMP_DIR, else <tmp>/kaggle-kit.
# This file is the staged notebook's vendored cell, after its parameters (kaggle_kit/vendor.py reads it
# as text and appends the call with the modules); it is not imported by the kit.
def _vendor_kitlib(payload, digest, marker=".vendored-by-kaggle-kit"):
    """Write the modules of ``payload`` (base85 of bz2 of JSON {relative path: text}) under
    ``<scratch dir>/vendored/kitlib``, check them against ``digest`` (sha256 over
    ``path \\0 text`` in path order) and make ``import kitlib`` find them.

    Raises RuntimeError when that ``kitlib/`` exists and was not written by this cell (no
    ``marker`` file), or when what was written does not match ``digest``.
    """
    import base64
    import bz2
    import hashlib
    import importlib
    import json
    import os
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    files = json.loads(bz2.decompress(base64.b85decode("".join(payload.split()))).decode())
    scratch = Path(os.environ.get("KAGGLE_TMP_DIR") or Path(tempfile.gettempdir()) / "kaggle-kit")
    work = (scratch / "vendored").resolve()
    pkg = work / "kitlib"
    if pkg.exists() and not (pkg / marker).exists():
        raise RuntimeError(f"{pkg} exists and was not written by this cell: not overwriting it")
    if pkg.exists():
        shutil.rmtree(pkg)  # a re-run must not keep modules of an older staging
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    (pkg / marker).write_text(digest + "\n")
    text = "".join(k + "\0" + (pkg / k).read_text(encoding="utf-8") for k in sorted(files))
    got = hashlib.sha256(text.encode()).hexdigest()
    if got != digest:
        raise RuntimeError(f"vendored kitlib does not match its sha256 ({got} != {digest})")
    if str(work) in sys.path:
        sys.path.remove(str(work))
    sys.path.insert(0, str(work))
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(work)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(work)] + others)
    for name in [m for m in sys.modules if m == "kitlib" or m.startswith("kitlib.")]:
        del sys.modules[name]  # a re-run must not keep an older copy
    importlib.invalidate_caches()
    print(f"kitlib: {len(files)} modules written to {pkg}")
