"""Kaggle kernels from the paired notebooks: stage, validate, push, wait, download, run as Kaggle would.

::

    python scripts/kernels.py stage     [NOTEBOOK ...] [--owner NAME] [--out build/kernels]
    python scripts/kernels.py validate  [NOTEBOOK ...] [--owner NAME]     # = push --dry-run
    python scripts/kernels.py push      [NOTEBOOK ...] [--dry-run] [--wait] [--timeout S] [--output DIR]
    python scripts/kernels.py status    OWNER/SLUG
    python scripts/kernels.py output    OWNER/SLUG [-o DIR]
    python scripts/kernels.py run-local NOTEBOOK [--root DIR] [--data data/jigsaw-sample] [-p NAME VALUE]

NOTEBOOK is ``notebooks/X.py``, ``notebooks/X.ipynb`` or ``X``; the default is every
``notebooks/*.py``. Each notebook becomes one kernel folder ``build/kernels/<slug>/`` holding

* ``<slug>.ipynb``: the notebook with ``kitlib`` vendored in: a first code cell (tagged
  ``kitlib-vendored``) writes kitlib's modules, embedded as strings and checked by sha256, into
  the kernel's working folder (``/kaggle/working/kitlib/`` on Kaggle) and puts that folder first on
  ``sys.path`` and ``PYTHONPATH``, so ``import kitlib`` works in the notebook and in ``fork`` and
  ``spawn`` children, which must import ``_mp_fn`` from a module;
* ``kernel-metadata.json``: derived from the repository's top-level ``kernel-metadata.json``
  (shared fields, plus a ``notebooks`` table: title, accelerator and overrides per notebook).

Exit status: 0 success; 1 the push, run or download failed (including a server-side
"Kernel push error", on which ``kaggle kernels push`` itself exits 0); 2 invalid metadata, a
notebook pair out of sync, or bad usage; 3 no Kaggle credentials (said before any work).

Credentials are the ``kaggle`` package's own lookup (``import kaggle`` authenticates): an access
token (``KAGGLE_API_TOKEN``, ``~/.kaggle/access_token``), else ``kaggle.json`` in
``KAGGLE_CONFIG_DIR``/``~/.kaggle``/``$XDG_CONFIG_HOME/kaggle`` overridden by
``KAGGLE_USERNAME``/``KAGGLE_KEY``, else ``kaggle auth login`` OAuth credentials.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
from slugify import slugify  # python-slugify: what kaggle's kernels_push compares the id with

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_pairs  # noqa: E402  (scripts/ is not a package)

ROOT = Path(__file__).resolve().parents[1]
PROJECT_METADATA = ROOT / "kernel-metadata.json"
KITLIB = ROOT / "kitlib"
BUILD = ROOT / "build" / "kernels"
SAMPLE_DATA = ROOT / "data" / "jigsaw-sample"
VENDOR_TAG = "kitlib-vendored"
VENDOR_MARKER = ".vendored-by-scripts-kernels"

# Accelerator -> (enable_tpu, enable_gpu, machine_shape). Kaggle's TPU sessions are TPU v5e-8
# (v3-8 retired) and its GPU sessions 2x T4 (P100 requests run on T4); the shape names are the
# ones `kaggle kernels push --accelerator` accepts (kaggle 2.2 CLI help: TpuV5E8, NvidiaTeslaT4).
ACCELERATORS = {
    "tpu": (True, False, "TpuV5E8"),
    "gpu": (False, True, "NvidiaTeslaT4"),
    "none": (False, False, None),
}
# kernel-metadata.json keys (Kaggle's kernel metadata reference, github.com/Kaggle/kaggle-api
# docs/kernels_metadata.md, as read by KaggleApi.kernels_push in kaggle 2.2.1).
KAGGLE_KEYS = {
    "id", "id_no", "title", "code_file", "language", "kernel_type", "is_private", "enable_gpu",
    "enable_tpu", "enable_internet", "dataset_sources", "competition_sources", "kernel_sources",
    "model_sources", "keywords", "machine_shape", "docker_image", "docker_image_pinning_type",
}
KEY_ORDER = ("id", "id_no", "title", "code_file", "language", "kernel_type", "is_private", "enable_gpu", "enable_tpu",
             "enable_internet", "machine_shape", "dataset_sources", "competition_sources", "kernel_sources",
             "model_sources", "keywords", "docker_image", "docker_image_pinning_type")
BOOL_KEYS = ("is_private", "enable_gpu", "enable_tpu", "enable_internet")
SOURCE_KEYS = ("dataset_sources", "competition_sources", "kernel_sources", "model_sources")
# How each source kind is written in a kaggle.com URL path ("code/owner/slug" -> "owner/slug").
SOURCE_PREFIXES = {
    "dataset_sources": ("datasets/",),
    "competition_sources": ("competitions/", "c/"),
    "kernel_sources": ("code/", "kernels/"),
    "model_sources": ("models/",),
}
TITLE_MIN, TITLE_MAX, SLUG_MIN = 5, 50, 5
_SLUG_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class MetadataError(ValueError):
    """Kernel metadata Kaggle would refuse or misread; ``problems`` each name the field."""

    def __init__(self, problems: list[str], where: str = "") -> None:
        self.problems = problems
        super().__init__((f"{where}: " if where else "") + "; ".join(problems))


class PushError(RuntimeError):
    """Kaggle refused a push, or a run failed or timed out."""


class CredentialsError(RuntimeError):
    """No Kaggle credentials were found by the kaggle package's own lookup."""


# --------------------------------------------------------------------------------------------
# the kaggle client
# --------------------------------------------------------------------------------------------
CREDENTIALS_HELP = (
    "no Kaggle credentials: the kaggle package found no access token (KAGGLE_API_TOKEN, "
    "~/.kaggle/access_token), no kaggle.json (in $KAGGLE_CONFIG_DIR, ~/.kaggle or "
    "$XDG_CONFIG_HOME/kaggle; or KAGGLE_USERNAME + KAGGLE_KEY) and no `kaggle auth login` "
    "credentials. Create a token at https://www.kaggle.com/settings/api (docs/kernels.md)."
)


def kaggle_api(require_credentials: bool = True):
    """The ``kaggle`` package's authenticated ``KaggleApi`` (``kaggle.api``).

    ``import kaggle`` authenticates at import time and, without credentials, prints help and
    calls ``exit(1)`` (kaggle/__init__.py, ``KaggleApi.authenticate``); that is caught here.

    Args:
        require_credentials: when False and no credentials exist, return an unauthenticated
            ``KaggleApi`` (good for its offline validators) instead of raising.

    Returns:
        ``kaggle.api.kaggle_api_extended.KaggleApi``.

    Raises:
        CredentialsError: no credentials (or an access token that could not be checked).
    """
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            import kaggle  # noqa: F401
        return sys.modules["kaggle"].api
    except SystemExit:
        problem = CREDENTIALS_HELP
    except Exception as e:  # e.g. an access token whose introspection cannot reach Kaggle
        problem = f"the kaggle client could not authenticate: {type(e).__name__}: {e}"
    if require_credentials:
        raise CredentialsError(problem)
    mod = sys.modules.get("kaggle.api.kaggle_api_extended")
    if mod is None:  # the import failed before the module loaded: a real installation problem
        raise CredentialsError(problem)
    return mod.KaggleApi()


def kaggle_username(api) -> str | None:
    """The user the kaggle client authenticated as (``KaggleApi.get_config_value("username")``)."""
    try:
        return api.get_config_value(api.CONFIG_NAME_USER) or None
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# metadata
# --------------------------------------------------------------------------------------------
def load_project_metadata(path: Path = PROJECT_METADATA) -> dict:
    """The top-level ``kernel-metadata.json``: shared Kaggle fields plus ``notebooks: {stem: entry}``.

    Raises:
        MetadataError: not a JSON object, or ``notebooks`` is not an object.
    """
    try:
        meta = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise MetadataError([f"{path}: cannot read: {e}"])
    if not isinstance(meta, dict) or not isinstance(meta.get("notebooks", {}), dict):
        raise MetadataError([f"{path}: must be a JSON object whose 'notebooks' is an object"])
    return meta


def notebook_accelerator(nb) -> str | None:
    """The accelerator a notebook declares in its own metadata (``kaggle: {accelerator: ...}``), or None."""
    acc = (nb.metadata.get("kaggle") or {}).get("accelerator")
    return str(acc).lower() if acc is not None else None


def normalise_source(kind: str, source) -> str:
    """One data source as Kaggle's API wants it, e.g. ``https://www.kaggle.com/code/me/k`` -> ``me/k``.

    Strips whitespace, a ``kaggle.com`` URL prefix, the kind's URL segment (``datasets/``,
    ``competitions/``/``c/``, ``code/``/``kernels/``, ``models/``) and slashes at either end.
    Non-strings are returned unchanged for :func:`validate_metadata` to refuse.
    """
    if not isinstance(source, str):
        return source
    s = source.strip()
    s = re.sub(r"^(https?://)?(www\.)?kaggle\.com/", "", s).strip("/")
    for prefix in SOURCE_PREFIXES[kind]:
        if s.startswith(prefix):
            s = s[len(prefix):]
            break
    return s


def normalise_metadata(meta: dict) -> dict:
    """A copy of ``meta`` with every source list normalised (:func:`normalise_source`) and de-duplicated."""
    out = copy.deepcopy(meta)
    for key in SOURCE_KEYS:
        if isinstance(out.get(key), list):
            seen: list = []
            for s in (normalise_source(key, s) for s in out[key]):
                if s not in seen:  # a list, not a set: non-strings stay for validate_metadata to name
                    seen.append(s)
            out[key] = seen
    return out


def derive_metadata(project: dict, stem: str, owner: str | None, nb_accelerator: str | None = None) -> tuple[dict, str]:
    """The Kaggle ``kernel-metadata.json`` of notebook ``stem``, and its accelerator.

    Shared fields come from ``project`` (the top-level file, ``notebooks`` removed), then the
    notebook's entry ``project["notebooks"][stem]`` overrides them; the entry's ``accelerator``
    (``tpu``/``gpu``/``none``) or the notebook's own ``kaggle.accelerator`` sets ``enable_tpu``,
    ``enable_gpu`` and ``machine_shape`` unless the entry sets them (then they are checked).
    ``id`` defaults to ``<owner>/<slugify(title)>``, ``code_file`` to ``<slug>.ipynb``.

    Raises:
        MetadataError: no entry or no accelerator for ``stem``, or the entry and the notebook
            declare different accelerators, or no owner is known for the id.
    """
    entries = project.get("notebooks", {})
    if stem not in entries:
        raise MetadataError([f"notebooks.{stem}: no entry in kernel-metadata.json (title, accelerator)"], stem)
    if not isinstance(entries[stem], dict):
        raise MetadataError([f"notebooks.{stem}: must be an object (title, accelerator, overrides)"], stem)
    entry = dict(entries[stem])
    acc = entry.pop("accelerator", None)
    acc = str(acc).lower() if acc is not None else None
    if acc and nb_accelerator and acc != nb_accelerator:
        raise MetadataError([f"accelerator: kernel-metadata.json says {acc!r}, the notebook's kaggle.accelerator says {nb_accelerator!r}"], stem)
    acc = acc or nb_accelerator
    if acc is None:
        raise MetadataError([f"accelerator: notebooks.{stem} declares none (tpu, gpu or none)"], stem)
    if acc not in ACCELERATORS:
        raise MetadataError([f"accelerator: {acc!r} is not one of {sorted(ACCELERATORS)}"], stem)
    meta = {k: v for k, v in project.items() if k != "notebooks"}
    tpu, gpu, shape = ACCELERATORS[acc]
    meta.update(enable_tpu=tpu, enable_gpu=gpu)
    if shape:
        meta["machine_shape"] = shape
    meta.update(entry)
    title = meta.get("title")
    if "id" not in meta and "id_no" not in meta:
        if not owner:
            raise MetadataError(["id: no owner for the kernel id: pass --owner or set up Kaggle credentials"], stem)
        meta["id"] = f"{owner}/{slugify(title) if isinstance(title, str) else stem}"
    slug = str(meta.get("id", "")).split("/")[-1]
    meta.setdefault("code_file", f"{slug or stem}.ipynb")
    meta.setdefault("language", "python")
    meta.setdefault("kernel_type", "notebook")
    order = {k: i for i, k in enumerate(KEY_ORDER)}
    meta = dict(sorted(meta.items(), key=lambda kv: order.get(kv[0], len(order))))
    return normalise_metadata(meta), acc


def validate_metadata(meta: dict, accelerator: str, folder: Path | None = None, api=None) -> None:
    """Refuse kernel metadata that Kaggle would refuse, misread or run on the wrong machine.

    Rules and where they come from:

    * every key is one Kaggle reads (others are silently ignored by ``kernels_push``: a typo
      would be lost);
    * ``id`` is ``owner/slug``, without a version; the slug has >= 5 characters and equals
      ``slugify(title)`` (``KaggleApi.kernels_push`` only warns on a mismatch; Kaggle then names
      the kernel after the title, so a later push with this id makes a second kernel);
    * ``title`` has 5 to 50 characters (client: >= 5; Kaggle's title limit: 50);
    * ``code_file`` exists in ``folder``, is an ``.ipynb`` with ``kernelspec`` python3 (Kaggle's
      papermill run fails with "No kernel name found in notebook" otherwise);
    * ``language`` is ``python`` and ``kernel_type`` ``notebook`` (what this kit stages);
    * the booleans are true/false or "true"/"false" (``KaggleApi.get_bool``);
    * ``enable_tpu``/``enable_gpu``/``machine_shape`` agree with the accelerator: tpu ->
      ``TpuV5E8``, gpu -> ``NvidiaTeslaT4``, none -> no accelerator and no shape;
    * sources are lists of strings, already normalised: datasets ``owner/slug[/version]``
      (``validate_dataset_string``), kernels ``owner/slug[/version]`` (``validate_kernel_string``;
      a version is an integer), models ``owner/model/framework/instance/version``
      (``validate_model_instance_version_string``), competitions a bare slug;
    * ``keywords`` is a list of strings; ``docker_image_pinning_type`` is ``original``/``latest``.

    Args:
        meta: the kernel metadata (as written to ``kernel-metadata.json``).
        accelerator: ``tpu``, ``gpu`` or ``none``.
        folder: the kernel folder (checks ``code_file``); None skips that check.
        api: a ``KaggleApi`` for its validators; None gets one (credentials not needed).

    Raises:
        MetadataError: listing every problem, each naming its field.
    """
    api = api or kaggle_api(require_credentials=False)
    problems: list[str] = []
    unknown = sorted(set(meta) - KAGGLE_KEYS)
    if unknown:
        problems.append(f"unknown field(s) {unknown}: Kaggle ignores them (typo?)")
    title = meta.get("title")
    if not isinstance(title, str) or not TITLE_MIN <= len(title) <= TITLE_MAX:
        problems.append(f"title: must be {TITLE_MIN} to {TITLE_MAX} characters, got {title!r}")
    kid = meta.get("id")
    if kid is None and meta.get("id_no") is None:
        problems.append("id: required (owner/slug)")
    elif kid is not None:
        parts = str(kid).split("/") if isinstance(kid, str) else []
        if len(parts) != 2 or not all(parts):
            problems.append(f"id: must be 'owner/slug' without a version, got {kid!r}")
        else:
            slug = parts[1]
            if len(slug) < SLUG_MIN:
                problems.append(f"id: slug {slug!r} is shorter than {SLUG_MIN} characters")
            if isinstance(title, str) and slug != slugify(title):
                problems.append(f"id: slug {slug!r} is not the slugified title {slugify(title)!r}")
    if meta.get("language") != "python":
        problems.append(f"language: must be 'python', got {meta.get('language')!r}")
    if meta.get("kernel_type") != "notebook":
        problems.append(f"kernel_type: must be 'notebook', got {meta.get('kernel_type')!r}")
    bools = {}
    for key in BOOL_KEYS:
        if key in meta:
            try:
                bools[key] = api.get_bool(meta, key, False)
            except (ValueError, TypeError):
                problems.append(f"{key}: must be true or false, got {meta[key]!r}")
    if accelerator not in ACCELERATORS:
        problems.append(f"accelerator: {accelerator!r} is not one of {sorted(ACCELERATORS)}")
    else:
        tpu, gpu, shape = ACCELERATORS[accelerator]
        for key, want in (("enable_tpu", tpu), ("enable_gpu", gpu)):
            if key in bools and bools[key] != want:
                problems.append(f"{key}: {meta[key]!r} disagrees with the notebook's accelerator {accelerator!r}")
            elif key not in meta and want:
                problems.append(f"{key}: missing; the notebook's accelerator is {accelerator!r}")
        if meta.get("machine_shape") != shape:
            problems.append(f"machine_shape: {meta.get('machine_shape')!r} disagrees with the notebook's accelerator "
                            f"{accelerator!r} (want {shape!r})")
    validators = {
        "dataset_sources": api.validate_dataset_string,
        "kernel_sources": api.validate_kernel_string,
        "model_sources": api.validate_model_instance_version_string,
        "competition_sources": None,
    }
    for key, check in validators.items():
        sources = meta.get(key, [])
        if not isinstance(sources, list):
            problems.append(f"{key}: must be a list, got {sources!r}")
            continue
        for s in sources:
            if not isinstance(s, str) or not s:
                problems.append(f"{key}: {s!r} is not a non-empty string")
                continue
            if s != normalise_source(key, s):
                problems.append(f"{key}: {s!r} is not normalised (want {normalise_source(key, s)!r})")
                continue
            parts = s.split("/")
            try:
                if check is not None:
                    check(s)
            except ValueError as e:
                problems.append(f"{key}: {s!r}: {e}")
                continue
            if key == "competition_sources":
                ok = len(parts) == 1 and re.fullmatch(r"[a-z0-9][a-z0-9-]*", s)
                why = "a competition slug (lowercase letters, digits, '-')"
            elif key == "model_sources":
                ok = all(_SLUG_PART.match(p) for p in parts)
                why = "owner/model/framework/instance/version"
            else:
                ok = len(parts) in (2, 3) and all(_SLUG_PART.match(p) for p in parts[:2]) and (len(parts) == 2 or parts[2].isdigit())
                why = "owner/slug or owner/slug/<integer version>"
            if not ok:
                problems.append(f"{key}: {s!r} is not {why}")
    kw = meta.get("keywords", [])
    if not isinstance(kw, list) or not all(isinstance(k, str) for k in kw):
        problems.append(f"keywords: must be a list of strings, got {kw!r}")
    pin = meta.get("docker_image_pinning_type")
    if pin is not None and pin not in api.valid_push_pinning_types:
        problems.append(f"docker_image_pinning_type: {pin!r} is not one of {api.valid_push_pinning_types}")
    code = meta.get("code_file")
    if not isinstance(code, str) or not code.endswith(".ipynb"):
        problems.append(f"code_file: must name the kernel's .ipynb, got {code!r}")
    elif folder is not None:
        path = Path(folder) / code
        if not path.is_file():
            problems.append(f"code_file: {path} does not exist")
        else:
            try:
                nb = json.loads(path.read_text(encoding="utf-8"))
                if nb.get("metadata", {}).get("kernelspec", {}).get("name") != "python3":
                    problems.append(f"code_file: {path} has no kernelspec 'python3' (Kaggle: 'No kernel name found in notebook')")
            except ValueError as e:
                problems.append(f"code_file: {path} is not notebook JSON: {e}")
    if problems:
        raise MetadataError(problems, str(meta.get("id") or meta.get("title") or ""))


# --------------------------------------------------------------------------------------------
# vendoring
# --------------------------------------------------------------------------------------------
def kitlib_files(kitlib_dir: Path = KITLIB) -> dict[str, str]:
    """kitlib's Python sources, ``relative path -> text``, sorted (``__pycache__`` left out)."""
    out = {}
    for p in sorted(kitlib_dir.rglob("*.py")):
        if "__pycache__" not in p.parts:
            out[p.relative_to(kitlib_dir).as_posix()] = p.read_text(encoding="utf-8")
    return out


VENDOR_CELL = '''\
# kitlib, vendored by scripts/kernels.py ({count} modules, sha256 {digest}). Do not edit: re-stage.
# Writes kitlib/ into the working folder (/kaggle/working on Kaggle) and puts that folder first on
# sys.path and PYTHONPATH, so `import kitlib` works here and in fork/spawn children (_mp_fn).
def _vendor_kitlib(files, digest):
    import hashlib, importlib, os, sys
    from pathlib import Path

    work = Path(os.environ.get("KAGGLE_WORKING_DIR") or "/kaggle/working")
    work = (work if work.is_dir() else Path.cwd()).resolve()
    pkg = work / "kitlib"
    if pkg.exists() and not (pkg / {marker!r}).exists():
        raise RuntimeError(f"{{pkg}} exists and was not written by this cell: not overwriting it")
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    (pkg / {marker!r}).write_text(digest + "\\n")
    got = hashlib.sha256("".join(k + "\\0" + (pkg / k).read_text(encoding="utf-8") for k in sorted(files)).encode()).hexdigest()
    if got != digest:
        raise RuntimeError(f"vendored kitlib does not match its sha256 ({{got}} != {{digest}})")
    if str(work) in sys.path:
        sys.path.remove(str(work))
    sys.path.insert(0, str(work))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(work)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(work)])
    for name in [m for m in sys.modules if m == "kitlib" or m.startswith("kitlib.")]:
        del sys.modules[name]  # a re-run must not keep an older copy
    importlib.invalidate_caches()
    print(f"kitlib: {{len(files)}} modules written to {{pkg}}")


_vendor_kitlib(
    {files},
    {digest!r},
)
del _vendor_kitlib
'''


def kitlib_digest(files: dict[str, str]) -> str:
    """sha256 over ``name \\0 text`` of every file, in name order (what the vendored cell checks)."""
    return hashlib.sha256("".join(k + "\0" + files[k] for k in sorted(files)).encode()).hexdigest()


def vendor_cell_source(files: dict[str, str]) -> str:
    """The code of the cell that writes ``files`` (kitlib's modules) into the kernel's working folder."""
    body = "{\n" + "".join(f"        {k!r}: {v!r},\n" for k, v in sorted(files.items())) + "    }"
    return VENDOR_CELL.format(count=len(files), digest=kitlib_digest(files), marker=VENDOR_MARKER, files=body)


def vendored_files(cell_source: str) -> dict[str, str]:
    """The ``{path: text}`` embedded in a vendored cell (parsed, not executed).

    Raises:
        ValueError: ``cell_source`` is not a vendored kitlib cell.
    """
    for node in ast.walk(ast.parse(cell_source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_vendor_kitlib" and node.args:
            return ast.literal_eval(node.args[0])
    raise ValueError("not a vendored kitlib cell")


def vendor_notebook(nb, files: dict[str, str]):
    """A copy of ``nb`` with the vendored-kitlib cell inserted before its first code cell.

    Outputs are cleared (Kaggle runs the notebook from scratch; ``kernels_push`` clears them too).
    An earlier vendored cell (tagged ``kitlib-vendored``) is replaced, not duplicated.
    """
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if VENDOR_TAG not in c.get("metadata", {}).get("tags", [])]
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    cell = nbformat.v4.new_code_cell(vendor_cell_source(files), metadata={"tags": [VENDOR_TAG]})
    cell.id = VENDOR_TAG
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)
    return nb


# --------------------------------------------------------------------------------------------
# staging
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Staged:
    """One staged kernel folder.

    Attributes:
        source: the repository notebook (``notebooks/X.py``).
        folder: ``build/kernels/<slug>/``.
        notebook: the staged ``.ipynb`` in ``folder``.
        metadata: the kernel's ``kernel-metadata.json`` content.
        accelerator: ``tpu``, ``gpu`` or ``none``.
    """

    source: Path
    folder: Path
    notebook: Path
    metadata: dict
    accelerator: str

    @property
    def kernel_id(self) -> str:
        return self.metadata["id"]


def notebook_paths(args: list[str] | None, notebooks_dir: Path = ROOT / "notebooks") -> list[Path]:
    """The ``.py`` side of each named notebook (``X``, ``X.py``, ``X.ipynb``); default every ``notebooks/*.py``.

    Raises:
        FileNotFoundError: a named notebook does not exist, or there are none.
    """
    pairs = check_pairs.pairs_for(args, notebooks_dir) if args else [check_pairs.Pair(p, p.with_suffix(".ipynb")) for p in sorted(map(check_pairs._display, notebooks_dir.glob("*.py")))]
    if not pairs:
        raise FileNotFoundError(f"no notebooks/*.py in {notebooks_dir}")
    return [p.py for p in pairs]


def read_notebook(py: Path):
    """The notebook of pair ``py``: its ``.ipynb`` (stable cell ids) when there is one, else the ``.py`` via jupytext.

    Raises:
        MetadataError: the pair disagrees or its ``.ipynb`` is not deterministic (run
            ``python scripts/check_pairs.py --sync``); or the ``.py`` is missing.
    """
    pair = check_pairs.Pair(py, py.with_suffix(".ipynb"))
    if not py.exists():
        raise MetadataError([f"{py}: missing"])
    if not pair.ipynb.exists():
        return jupytext.read(py)
    problems = check_pairs.check_pair(pair)
    if problems:
        raise MetadataError(problems + [f"run: python scripts/check_pairs.py --sync {py}"], str(py))
    return jupytext.read(pair.ipynb)


def stage(py: Path, out: Path = BUILD, owner: str | None = None, project: dict | None = None,
          kitlib_dir: Path = KITLIB, api=None) -> Staged:
    """Stage notebook ``py`` as a Kaggle kernel folder ``out/<slug>/`` and validate it.

    Returns:
        The :class:`Staged` kernel (folder written: ``<slug>.ipynb`` + ``kernel-metadata.json``).

    Raises:
        MetadataError: invalid metadata (:func:`validate_metadata`) or an out-of-sync pair.
    """
    project = project if project is not None else load_project_metadata()
    nb = read_notebook(py)
    meta, acc = derive_metadata(project, py.stem, owner, notebook_accelerator(nb))
    kernel = vendor_notebook(nb, kitlib_files(kitlib_dir))
    kernel.metadata.setdefault("kaggle", {})["accelerator"] = acc
    slug = str(meta.get("id", py.stem)).split("/")[-1] or py.stem
    folder = Path(out) / slug
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    code = folder / str(meta.get("code_file", f"{slug}.ipynb"))
    if code.parent == folder and code.suffix == ".ipynb":
        jupytext.write(kernel, code, fmt="ipynb")
    (folder / "kernel-metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    validate_metadata(meta, acc, folder, api)
    return Staged(py, folder, code, meta, acc)


# --------------------------------------------------------------------------------------------
# push, wait, download
# --------------------------------------------------------------------------------------------
def push(staged: Staged, api, *, retries: int = 10, retry_wait: float = 30.0, timeout: int | None = None):
    """Push a staged kernel with ``KaggleApi.kernels_push`` (a new version runs on Kaggle).

    HTTP 409 (an earlier version still running) is retried ``retries`` times, ``retry_wait``
    seconds apart. Kaggle answers some refusals with HTTP 200 and an ``error`` field, which the
    CLI prints as "Kernel push error: ..." and still exits 0 (``kernels_push_cli``); here that is
    a :class:`PushError`, as are sources the server calls invalid (``invalid*Sources``).

    Returns:
        ``ApiSaveKernelResponse`` (``url``, ``version_number``).

    Raises:
        PushError: refused, invalid sources, still 409 after the retries, or another HTTP error.
    """
    import requests

    for attempt in range(retries + 1):
        try:
            resp = api.kernels_push(str(staged.folder), timeout=str(timeout) if timeout else None)
            break
        except requests.HTTPError as e:
            code = e.response.status_code if e.response is not None else None
            if code == 409 and attempt < retries:
                print(f"{staged.kernel_id}: HTTP 409, an earlier version is still running; retry {attempt + 1}/{retries} in {retry_wait:g} s", flush=True)
                time.sleep(retry_wait)
                continue
            raise PushError(f"{staged.kernel_id}: push failed: HTTP {code}: {e}") from e
        except ValueError as e:  # kernels_push's own client-side checks
            raise PushError(f"{staged.kernel_id}: the kaggle client refused the folder: {e}") from e
    if resp is None:
        raise PushError(f"{staged.kernel_id}: Kernel push error: no response")
    if resp.error:
        raise PushError(f"{staged.kernel_id}: Kernel push error: {resp.error}")
    invalid = {k: getattr(resp, k, None) for k in ("invalid_dataset_sources", "invalid_competition_sources", "invalid_kernel_sources", "invalid_model_sources", "invalid_tags")}
    invalid = {k: v for k, v in invalid.items() if v}
    if invalid:
        raise PushError(f"{staged.kernel_id}: pushed (version {resp.version_number}) but Kaggle refused: {invalid}")
    return resp


TERMINAL = {"COMPLETE": True, "ERROR": False, "CANCEL_REQUESTED": False, "CANCEL_ACKNOWLEDGED": False}


def wait(kernel_id: str, api, *, timeout: float = 3600.0, poll: float = 30.0) -> str:
    """Poll ``KaggleApi.kernels_status`` until the run ends or ``timeout`` seconds pass.

    Statuses (kagglesdk ``KernelWorkerStatus``): QUEUED and RUNNING wait; COMPLETE returns;
    ERROR and CANCEL_* raise.

    Returns:
        ``"COMPLETE"``.

    Raises:
        PushError: the run ended in ERROR/CANCEL_* (with Kaggle's failure message), or timed out.
    """
    deadline = time.monotonic() + timeout
    last = None
    while True:
        resp = api.kernels_status(kernel_id)
        status = getattr(resp.status, "name", str(resp.status))
        if status != last:
            print(f"{kernel_id}: {status}", flush=True)
            last = status
        if status in TERMINAL:
            if TERMINAL[status]:
                return status
            msg = getattr(resp, "failure_message", "") or ""
            raise PushError(f"{kernel_id}: run ended {status}" + (f": {msg}" if msg else ""))
        if time.monotonic() + poll > deadline:
            raise PushError(f"{kernel_id}: still {status} after {timeout:g} s (timeout)")
        time.sleep(poll)


def download(kernel_id: str, api, dest: Path) -> list[str]:
    """Download the latest run's output files and log (``KaggleApi.kernels_output``) into ``dest``."""
    files, _ = api.kernels_output(kernel_id, str(dest), force=True, quiet=True)
    for f in files:
        print(f"downloaded {f}")
    return files


# --------------------------------------------------------------------------------------------
# run as Kaggle would
# --------------------------------------------------------------------------------------------
def kaggle_layout(root: Path, meta: dict, data_dir: Path = SAMPLE_DATA) -> tuple[Path, Path]:
    """Make ``root/input`` and ``root/working`` like ``/kaggle/input`` and ``/kaggle/working``.

    Each competition source is mounted (copied) at ``input/competitions/<slug>/`` (the newer
    Kaggle layout) from ``data_dir``. Returns ``(input, working)``; ``working`` starts empty.
    """
    inp, work = root / "input", root / "working"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    for comp in meta.get("competition_sources", []):
        dst = inp / "competitions" / comp
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir(parents=True)
        for f in sorted(Path(data_dir).glob("*.csv")):
            shutil.copy2(f, dst / f.name)
    inp.mkdir(parents=True, exist_ok=True)
    return inp, work


def run_local(staged: Staged, root: Path, data_dir: Path = SAMPLE_DATA, parameters: dict | None = None,
              timeout: int = 1800) -> Path:
    """Execute a staged kernel with papermill as Kaggle would, in ``root/{input,working}``.

    The kernel runs with cwd ``root/working``, ``KAGGLE_INPUT_DIR``/``KAGGLE_WORKING_DIR``
    pointing at the layout (``kitlib.paths`` honours them) and ``KAGGLE_KERNEL_RUN_TYPE=Batch``
    (set by Kaggle for committed runs). The executed notebook is ``root/__notebook__.ipynb``.

    Returns:
        The working folder (the kernel's output files).

    Raises:
        papermill.PapermillExecutionError: a cell failed.
    """
    import papermill

    inp, work = kaggle_layout(Path(root), staged.metadata, data_dir)
    env = {"KAGGLE_INPUT_DIR": str(inp.resolve()), "KAGGLE_WORKING_DIR": str(work.resolve()),
           "KAGGLE_KERNEL_RUN_TYPE": "Batch"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        papermill.execute_notebook(str(staged.notebook), str(Path(root) / "__notebook__.ipynb"),
                                   parameters=parameters or {}, cwd=str(work), kernel_name="python3",
                                   execution_timeout=timeout, progress_bar=False, log_output=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return work


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def _parse_value(v: str):
    try:
        return json.loads(v)
    except ValueError:
        return v


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status (0, 1, 2 or 3)."""
    import papermill
    import requests

    p = argparse.ArgumentParser(prog="scripts/kernels.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def staging(sp):
        sp.add_argument("notebooks", nargs="*", help="notebooks/X.py, X.ipynb or X (default: every notebooks/*.py)")
        sp.add_argument("--owner", help="kernel owner for the id (default: the Kaggle user of the credentials)")
        sp.add_argument("--out", type=Path, default=BUILD, help="where kernel folders go (default build/kernels)")
        sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA, help="the top-level kernel-metadata.json")

    staging(sub.add_parser("stage", help="stage kernel folders (vendored kitlib + kernel-metadata.json) and validate them"))
    staging(sub.add_parser("validate", help="= push --dry-run: stage and validate, send nothing"))
    sp = sub.add_parser("push", help="stage, validate and push; optionally wait for the run and download its output")
    staging(sp)
    sp.add_argument("--dry-run", action="store_true", help="stage and validate only; send nothing")
    sp.add_argument("--wait", action="store_true", help="wait for the run (QUEUED/RUNNING -> COMPLETE/ERROR)")
    sp.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the run (default 3600)")
    sp.add_argument("--poll", type=float, default=30, help="seconds between status calls (default 30)")
    sp.add_argument("--retries", type=int, default=10, help="retries while an earlier version runs (HTTP 409)")
    sp.add_argument("--retry-wait", type=float, default=30, help="seconds between 409 retries (default 30)")
    sp.add_argument("--session-timeout", type=int, help="Kaggle-side run time limit in seconds")
    sp.add_argument("--output", type=Path, help="with --wait: download output files and log here (per kernel folder)")
    sp = sub.add_parser("status", help="the latest run's status")
    sp.add_argument("kernel", help="owner/slug")
    sp = sub.add_parser("output", help="download the latest run's output files and log")
    sp.add_argument("kernel", help="owner/slug")
    sp.add_argument("-o", "--dest", type=Path, default=Path("outputs") / "kernels", help="folder (default outputs/kernels/<slug>)")
    sp = sub.add_parser("run-local", help="stage and execute one notebook with papermill in a /kaggle-like folder")
    sp.add_argument("notebook")
    sp.add_argument("--root", type=Path, help="folder for input/, working/, __notebook__.ipynb (default: a new temp folder)")
    sp.add_argument("--data", type=Path, default=SAMPLE_DATA, help="competition data to mount (default data/jigsaw-sample)")
    sp.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="papermill parameter (VALUE parsed as JSON when it can be)")
    sp.add_argument("--owner", default=None, help="kernel owner for the id (default: the Kaggle user, else 'local')")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)
    sp.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    a = p.parse_args(argv)

    sending = a.cmd in ("status", "output") or (a.cmd == "push" and not a.dry_run)
    try:
        api = kaggle_api(require_credentials=sending)  # before any work: a clear message, exit 3
    except CredentialsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    try:
        if a.cmd == "status":
            resp = api.kernels_status(a.kernel)
            status = getattr(resp.status, "name", str(resp.status))
            print(f"{a.kernel}: {status}" + (f": {resp.failure_message}" if resp.failure_message else ""))
            return 0 if status != "ERROR" else 1
        if a.cmd == "output":
            download(a.kernel, api, a.dest / a.kernel.split("/")[-1])
            return 0
        owner = getattr(a, "owner", None) or kaggle_username(api)
        project = load_project_metadata(a.metadata)
        if a.cmd == "run-local":
            root = a.root or Path(tempfile.mkdtemp(prefix="kaggle-run-"))
            st = stage(notebook_paths([a.notebook])[0], root / "kernel", owner or "local", project, api=api)
            try:
                work = run_local(st, root, a.data, {k: _parse_value(v) for k, v in a.parameter}, a.timeout)
            except papermill.PapermillExecutionError as e:
                print(f"error: {st.source}: cell {e.exec_count} raised {e.ename}: {e.evalue} "
                      f"(executed notebook: {root / '__notebook__.ipynb'})", file=sys.stderr)
                return 1
            print(f"{st.source}: ran as Kaggle would in {root} (executed notebook {root / '__notebook__.ipynb'})")
            for f in sorted(work.rglob("*")):
                if f.is_file() and "kitlib" not in f.relative_to(work).parts:
                    print(f"  output {f.relative_to(work)} ({f.stat().st_size} bytes)")
            return 0
        staged = []
        problems = 0
        for py in notebook_paths(a.notebooks):
            try:
                st = stage(py, a.out, owner, project, api=api)
            except MetadataError as e:
                print(f"error: {py}: invalid kernel:", file=sys.stderr)
                for msg in e.problems:
                    print(f"  {msg}", file=sys.stderr)
                problems += 1
                continue
            staged.append(st)
            n = len(vendored_files(next(c.source for c in jupytext.read(st.notebook).cells if c.get("id") == VENDOR_TAG)))
            print(f"{py}: staged {st.folder} as {st.kernel_id} ({st.accelerator}, "
                  f"{st.metadata.get('machine_shape') or 'no accelerator'}; kitlib {n} modules vendored)")
        if problems:
            return 2
        if a.cmd in ("stage", "validate") or a.dry_run:
            print(f"{len(staged)} kernel(s) valid" + ("; dry run: nothing sent" if a.cmd != "stage" else ""))
            return 0
        failed = 0
        for st in staged:
            try:
                resp = push(st, api, retries=a.retries, retry_wait=a.retry_wait, timeout=a.session_timeout)
                print(f"{st.kernel_id}: pushed version {resp.version_number}: {resp.url}", flush=True)
                if a.wait:
                    try:
                        wait(st.kernel_id, api, timeout=a.timeout, poll=a.poll)
                    finally:
                        if a.output:
                            download(st.kernel_id, api, a.output / st.folder.name)
            except (PushError, requests.RequestException) as e:
                print(f"error: {e}", file=sys.stderr)
                failed += 1
        return 1 if failed else 0
    except requests.RequestException as e:  # status/output calls, or the network
        print(f"error: Kaggle API call failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except MetadataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
