"""Wheels as an attached data set, for kernels that run with the internet off.

A kernel with ``enable_internet: false`` cannot ``pip install`` from PyPI. What its notebook needs
that its Kaggle image lacks (:mod:`.images`) is built here into a folder of wheels, published as a
data set version (:mod:`.publish`), recorded in ``kernel-metadata.json`` (``wheels_sources``, one
entry per notebook) and attached; staging then puts a cell after the parameters, before the
vendored kitlib (:file:`wheels_cell.py`), that checks the wheels and installs them offline
(``pip install --no-index --find-links``) before anything imports them.

What a notebook needs (:func:`needs`), found by reading it, never by running it:

* the distributions its code cells and its vendored kitlib modules import at their top level
  (:data:`MODULE_DISTS` maps an import name to its distribution; the standard library, kitlib and
  imports guarded by ``except ImportError`` do not count);
* what its parameters call for (:data:`PARAMETER_NEEDS`: ``weights`` at 8/4 bits, or ``auto`` on a
  GPU, loads bitsandbytes; ``lora_r > 0`` trains LoRA adapters with peft).

A need is met by the image when the image ships the distribution and, where ``constraints.txt``
pins the version the kit is tested with, at the same major.minor; the image's frameworks
(:data:`FRAMEWORKS`) are never replaced. The rest is downloaded by pip itself (``pip download
--only-binary=:all: --no-deps`` for the image's Python and platform), at ``constraints.txt``'s
pin, and each wheel is checked: its tags fit the image's Python, and what it requires is in the
image or among the wheels. The folder holds the wheels and ``wheels-manifest.json`` (name,
version, file, sha256, tags of each wheel).
"""
from __future__ import annotations

import ast
import email
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable, NamedTuple

from packaging import tags as ptags
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from .images import Image

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"  # the versions the kit is tested with (name==version)
MANIFEST = "wheels-manifest.json"
WHEELS_TAG = "kitlib-wheels"  # the staged notebook's install cell
CELL_FILE = Path(__file__).with_name("wheels_cell.py")
MANIFEST_FORMAT = 1

# import name -> distribution, where they differ beyond case and "_" for "-"
MODULE_DISTS = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow", "IPython": "ipython",
                "google": "protobuf", "slugify": "python-slugify", "dateutil": "python-dateutil", "cv2": "opencv-python"}
# the image's frameworks: built for its CUDA or TPU, never replaced by a wheel from PyPI
FRAMEWORKS = frozenset({"torch", "torch-xla", "torchvision", "torchaudio", "jax", "jaxlib", "tensorflow",
                        "tensorflow-cpu", "keras", "libtpu"})


class ParameterNeed(NamedTuple):
    """A notebook parameter whose value calls for a distribution."""

    parameter: str
    needs: Callable[[object, str], bool]  # (value, accelerator) -> whether the distribution is needed
    dist: str
    why: str


PARAMETER_NEEDS = (
    ParameterNeed("weights", lambda v, acc: v in ("8bit", "4bit") or (v == "auto" and acc == "gpu"), "bitsandbytes",
                  "8/4-bit weights load through bitsandbytes (weights='auto' picks them on a GPU when the model does not fit)"),
    ParameterNeed("lora_r", lambda v, acc: isinstance(v, int) and not isinstance(v, bool) and v > 0, "peft",
                  "LoRA adapters (lora_r > 0) are peft's"),
)


class WheelsError(RuntimeError):
    """Wheels that could not be built, or do not fit the image (named, with the reason and the fix)."""


class Need(NamedTuple):
    """A distribution a notebook needs, and why (the import or parameter that calls for it)."""

    dist: str
    why: str


def _guarded(node: ast.Try) -> bool:
    """Whether a ``try`` block's imports are optional (a handler catches ImportError or ModuleNotFoundError)."""
    names = set()
    for h in node.handlers:
        for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]) if h.type is not None else []:
            names.add(getattr(t, "id", None))
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def top_imports(body: list) -> set[str]:
    """The top-level module names a module's (or cell's) statements import when it runs: not inside
    functions or classes, nor in a ``try`` guarded by ``except ImportError``, nor relative."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Try) and not _guarded(node):
            out |= top_imports(node.body + node.orelse + node.finalbody)
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            out |= top_imports(node.body + node.orelse)
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            out |= top_imports(node.body)
    return out


def dist_of(module: str) -> str | None:
    """The distribution that provides top-level import ``module``; None for the standard library and kitlib."""
    if module in sys.stdlib_module_names or module in ("kitlib", "__future__"):
        return None
    return canonicalize_name(MODULE_DISTS.get(module, module))


def needs(nb, vendored: dict[str, str], accelerator: str) -> list[Need]:
    """The distributions notebook ``nb`` needs to run (see the module docstring), sorted by name.

    Args:
        nb: the notebook, parameters injected (``-p`` values count).
        vendored: the kitlib files vendored into it (:func:`~.vendor.import_closure`).
        accelerator: ``gpu``, ``tpu`` or ``none`` (what ``weights='auto'`` may pick depends on it).
    """
    from .rules import notebook_parameter
    from .vendor import _parse

    found: dict[str, str] = {}
    sources = [("the notebook", c.source) for c in nb.cells if c.cell_type == "code"]
    sources += [(f"kitlib/{rel}", text) for rel, text in sorted(vendored.items())]
    for where, text in sources:
        tree = _parse(text)
        for module in sorted(top_imports(tree.body)) if tree is not None else ():
            dist = dist_of(module)
            if dist is not None and dist not in found:
                found[dist] = f"{where} imports {module}"
    for rule in PARAMETER_NEEDS:
        value = notebook_parameter(nb, rule.parameter)
        if rule.needs(value, accelerator) and rule.dist not in found:
            found[rule.dist] = f"{rule.parameter}={value!r}: {rule.why}"
    return [Need(d, found[d]) for d in sorted(found)]


def tested_pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    """``constraints.txt``'s pins, canonical name -> version (the versions the kit is tested with)."""
    pins = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        try:
            req = Requirement(line) if line else None
        except InvalidRequirement:
            continue
        spec = list(req.specifier) if req else []
        if len(spec) == 1 and spec[0].operator == "==":
            pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def missing(found: list[Need], image: Image, pins: dict[str, str]) -> dict[str, tuple[str | None, str]]:
    """The needs ``image`` does not meet: dist -> (the version to ship: the tested pin, or None for
    the newest; why). A framework of the image (:data:`FRAMEWORKS`) is never shipped."""
    out = {}
    for need in found:
        have, pin = image.version(need.dist), pins.get(need.dist)
        if have is None and need.dist not in FRAMEWORKS:
            out[need.dist] = (pin, f"{need.why}; Kaggle's {image.name} image lacks it")
        elif have and pin and need.dist not in FRAMEWORKS and Version(have).release[:2] != Version(pin).release[:2]:
            out[need.dist] = (pin, f"{need.why}; Kaggle's {image.name} image has {have}, the kit is tested with {pin}")
    return out


def image_tags(image: Image) -> set[str]:
    """Every wheel tag ``image``'s Python and platforms accept (``packaging.tags``, as pip computes them)."""
    version = tuple(int(x) for x in image.python.split("."))
    cp = ptags.cpython_tags(version, abis=[image.python_tag, "abi3", "none"], platforms=list(image.platforms))
    rest = ptags.compatible_tags(version, image.python_tag, platforms=list(image.platforms))
    return {str(t) for t in list(cp) + list(rest)}


def _download(spec: str, image: Image, dest: Path, find_links: Path | None) -> None:
    """``pip download`` one requirement's wheel for ``image`` into ``dest`` (no dependencies: they are checked after).

    Raises:
        WheelsError: pip found no wheel for the image's Python and platform, with pip's last lines.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:", "--no-deps",
           "--python-version", image.python, "--implementation", "cp", "--abi", image.python_tag, "--abi", "abi3",
           "--abi", "none", "-d", str(dest)]
    for p in image.platforms:
        cmd += ["--platform", p]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    r = subprocess.run(cmd + [spec], capture_output=True, text=True)
    if r.returncode != 0:
        tail = " | ".join(line.strip() for line in (r.stderr or r.stdout).strip().splitlines()[-3:])
        where = f"in {find_links}" if find_links is not None else "on the package index"
        raise WheelsError(f"{spec}: no wheel {where} for Kaggle's {image.name} image (Python {image.python}, "
                          f"{image.platforms[0]}): {tail}. Give a version that has one (--with NAME==VERSION), "
                          "or a --find-links folder holding it")


def wheel_record(path: Path, why: str) -> dict:
    """One manifest row: name, version, file, sha256, tags (sorted), why it is shipped."""
    name, version, _, tags = parse_wheel_filename(path.name)
    return {"name": str(name), "version": str(version), "file": path.name,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "tags": sorted(str(t) for t in tags), "why": why}


def requires(path: Path) -> list[Requirement]:
    """A wheel's ``Requires-Dist`` (its ``*.dist-info/METADATA``)."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = email.message_from_bytes(z.read(meta))
    return [Requirement(r) for r in msg.get_all("Requires-Dist") or []]


def fit_problems(rows: list[dict], folder: Path, image: Image) -> list[str]:
    """What in the built wheels does not fit ``image``: tags for another Python or platform, and
    requirements neither the image nor the wheels meet. [] when they fit."""
    accepted, problems = image_tags(image), []
    env = {"python_version": image.python, "python_full_version": image.python + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython", "extra": ""}
    shipped = {canonicalize_name(r["name"]): r["version"] for r in rows}
    for row in rows:
        if not set(row["tags"]) & accepted:
            problems.append(f"{row['file']}: built for {', '.join(row['tags'])}, not for Kaggle's {image.name} image "
                            f"(Python {image.python}, {image.platforms[0]}): give a version with a wheel for it")
        for req in requires(folder / row["file"]):
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = canonicalize_name(req.name)
            have = shipped.get(dep, image.version(dep))
            if have is None:
                problems.append(f"{row['file']} requires {req}, which Kaggle's {image.name} image lacks: add it (--with {dep})")
            elif have and not req.specifier.contains(have, prereleases=True):
                problems.append(f"{row['file']} requires {req}; Kaggle's {image.name} image has {dep} {have}: "
                                f"add a version that fits (--with '{req}')")
    return problems


def build(wanted: dict[str, tuple[str | None, str]], image: Image, folder: Path, dataset: str,
          find_links: Path | None = None) -> dict:
    """Download the wheels of ``wanted`` (:func:`missing`'s dist -> (version, why)) for ``image`` into
    ``folder`` (emptied first), check they fit (:func:`fit_problems`) and write the manifest.

    Returns:
        The manifest: ``{"format", "dataset", "image", "python", "wheels": [rows of wheel_record]}``.

    Raises:
        WheelsError: nothing to build, a wheel pip could not find, or wheels that do not fit, each named.
    """
    if not wanted:
        raise WheelsError(f"nothing to build: Kaggle's {image.name} image has every distribution the notebook needs")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in list(folder.glob("*.whl")) + [folder / MANIFEST]:
        old.unlink(missing_ok=True)
    rows = []
    for dist, (version, why) in sorted(wanted.items()):
        before = set(folder.glob("*.whl"))
        _download(f"{dist}=={version}" if version else dist, image, folder, find_links)
        rows += [wheel_record(p, why) for p in sorted(set(folder.glob("*.whl")) - before)]
    problems = fit_problems(rows, folder, image)
    if problems:
        raise WheelsError("the wheels do not fit the image: " + "; ".join(problems))
    manifest = {"format": MANIFEST_FORMAT, "dataset": dataset, "image": image.name, "python": image.python, "wheels": rows}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def fix_command(stem: str, dataset: str) -> str:
    """The command that builds and publishes notebook ``stem``'s wheels again (what a refusal says to run)."""
    return f"python -m kaggle_kit wheels {stem} --dataset {dataset}"


def cell_source(manifest: dict, stem: str) -> str:
    """The code of the staged notebook's install cell: :file:`wheels_cell.py` and one call with ``manifest``."""
    given = {k: manifest[k] for k in ("dataset", "image", "python")}
    wheels = [{k: w[k] for k in ("name", "version", "file", "sha256", "tags")} for w in manifest["wheels"]]
    spec = {**given, "fix": "rebuild and publish the wheels: " + fix_command(stem, manifest["dataset"]), "wheels": wheels}
    head = (f"# Wheels from the data set {manifest['dataset']}, installed offline by kaggle_kit "
            f"({', '.join(w['name'] + ' ' + w['version'] for w in wheels)}).\n"
            "# Generated: do not edit, re-stage (python -m kaggle_kit stage).\n")
    return (head + CELL_FILE.read_text(encoding="utf-8").rstrip("\n")
            + f"\n\n\n_install_wheels({json.dumps(spec, indent=1)})\ndel _install_wheels\n")  # strings and lists: JSON is Python


def add_cell(nb, manifest: dict, stem: str):
    """Insert the install cell (tagged :data:`WHEELS_TAG`) into ``nb`` (in place): just before the
    vendored kitlib cell, else where that cell would go (:func:`~.vendor.vendor_index`). An earlier
    one is replaced."""
    import nbformat

    from .rules import VENDOR_TAG
    from .vendor import vendor_index

    nb.cells = [c for c in nb.cells if WHEELS_TAG not in (c.get("metadata", {}).get("tags") or [])]
    at = next((i for i, c in enumerate(nb.cells) if VENDOR_TAG in (c.get("metadata", {}).get("tags") or [])),
              vendor_index(nb.cells))
    cell = nbformat.v4.new_code_cell(cell_source(manifest, stem), metadata={"tags": [WHEELS_TAG]})
    cell.id = WHEELS_TAG
    nb.cells.insert(at, cell)
    return nb


def record(metadata: Path, stem: str, manifest: dict) -> list[str]:
    """Write ``manifest`` into the project's ``kernel-metadata.json`` as ``wheels_sources[stem]``
    (staging attaches its data set and adds the install cell). Returns one line per change.

    Raises:
        WheelsError: ``stem`` has no entry in the file.
    """
    project = json.loads(Path(metadata).read_text(encoding="utf-8"))
    if stem not in project.get("notebooks", {}):
        raise WheelsError(f"{stem}: no entry in {metadata} (entries: {', '.join(project.get('notebooks', {}))})")
    table = project.setdefault("wheels_sources", {})
    if table.get(stem) == manifest:
        return []
    table[stem] = manifest
    Path(metadata).write_text(json.dumps(project, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return [f"wheels_sources.{stem} = {manifest['dataset']} ({', '.join(w['file'] for w in manifest['wheels'])}): "
            f"staging attaches it and installs them offline"]


def unmet(nb, vendored: dict[str, str], accelerator: str, manifest: dict | None, stem: str) -> list[str]:
    """What notebook ``nb`` needs that neither its image nor its wheels data set (``manifest``, None
    when it has none) provides: one line per distribution, naming why and the fix. [] when all is met,
    or when no image is recorded for ``accelerator``."""
    from .images import ACCELERATOR_IMAGE, image_for

    if accelerator not in ACCELERATOR_IMAGE:
        return []
    image = image_for(accelerator)
    shipped = {canonicalize_name(w["name"]) for w in (manifest or {}).get("wheels", [])}
    return [f"{dist}: {why}, and no wheels data set of this kernel ships it (the internet is off): build and attach "
            f"one: {fix_command(stem, (manifest or {}).get('dataset', 'OWNER/SLUG'))}"
            for dist, (_, why) in missing(needs(nb, vendored, accelerator), image, tested_pins()).items()
            if dist not in shipped]


def plan(notebook: str, metadata: Path, values: dict, extra: list[str]) -> tuple[Path, Image, dict]:
    """What ``kaggle_kit wheels NOTEBOOK`` builds: the notebook's ``.py``, its image, and the wheels
    wanted (:func:`missing`'s dist -> (version, why)) with ``-p`` ``values`` injected and each
    ``extra`` (``NAME`` or ``NAME==VERSION``, ``--with``) added.

    Raises:
        WheelsError: an ``extra`` that is not a requirement, or no image for the notebook's accelerator.
        MetadataError, ParameterError: as staging refuses the notebook or its parameters.
    """
    from .accelerators import notebook_accelerator
    from .images import image_for
    from .parameters import check_parameters, inject_parameters
    from .project import derive_metadata, load_project_metadata
    from .stage import notebook_paths, read_notebook
    from .vendor import import_closure, kitlib_files

    project = load_project_metadata(metadata)
    py = notebook_paths([notebook], Path(metadata).parent / "notebooks")[0]
    nb = read_notebook(py)
    nb = inject_parameters(nb, check_parameters(nb, values, where=py))
    _, acc = derive_metadata(project, py.stem, "owner", notebook_accelerator(nb))  # the owner only names the id, unused
    try:
        image = image_for(acc)
    except ValueError as e:
        raise WheelsError(f"{py}: {e}") from None
    vendored = import_closure([c.source for c in nb.cells if c.cell_type == "code"], kitlib_files())
    pins = tested_pins()
    wanted = missing(needs(nb, vendored, acc), image, pins)
    for item in extra:
        try:
            req = Requirement(item)
        except InvalidRequirement:
            raise WheelsError(f"--with {item!r}: write NAME or NAME==VERSION") from None
        exact = [s.version for s in req.specifier if s.operator == "=="]
        name = canonicalize_name(req.name)
        wanted[name] = (exact[0] if exact else pins.get(name), "asked for (--with)")
    return py, image, wanted
