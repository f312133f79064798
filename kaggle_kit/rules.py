"""The rules a kernel's ``kernel-metadata.json`` must pass before anything is sent: :data:`RULES`.

Each row names the field(s), what is required, where the rule comes from, and the function that
checks it; :func:`validate_metadata` runs every row and reports every problem, each message
starting with its field. The keys are Kaggle's kernel metadata keys (github.com/Kaggle/kaggle-api
``docs/kernels_metadata.md``, as read by ``KaggleApi.kernels_push`` in kaggle 2.2.5).
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

from slugify import slugify  # python-slugify: what kaggle's kernels_push compares the id with

from .accelerators import ACCELERATORS
from .offline import internet_needs

VENDOR_TAG = "kitlib-vendored"  # the tag of the staged notebook's vendored-kitlib cell (vendor.py)

KEY_ORDER = ("id", "id_no", "title", "code_file", "language", "kernel_type", "is_private", "enable_gpu", "enable_tpu",
             "enable_internet", "machine_shape", "dataset_sources", "competition_sources", "kernel_sources",
             "model_sources", "keywords", "docker_image", "docker_image_pinning_type")
KAGGLE_KEYS = frozenset(KEY_ORDER)
# (default when absent: KaggleApi.kernels_push)
BOOL_KEYS = {"is_private": True, "enable_gpu": False, "enable_tpu": False, "enable_internet": True}
TITLE_MIN, TITLE_MAX, SLUG_MIN = 5, 50, 5


class SourceKind(NamedTuple):
    """One kind of data source: how kaggle.com URLs write it, the client's validator, the form."""

    url_prefixes: tuple[str, ...]  # "code/owner/slug" -> "owner/slug"
    validator: str | None          # KaggleApi method that checks it client-side
    pattern: re.Pattern
    form: str


_PART = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
SOURCE_KINDS = {
    "dataset_sources": SourceKind(("datasets/",), "validate_dataset_string",
                                  re.compile(rf"{_PART}/{_PART}(/\d+)?"), "owner/slug or owner/slug/<integer version>"),
    "competition_sources": SourceKind(("competitions/", "c/"), None,
                                      re.compile(r"[a-z0-9][a-z0-9-]*"), "a competition slug (lowercase letters, digits, '-')"),
    "kernel_sources": SourceKind(("code/", "kernels/"), "validate_kernel_string",
                                 re.compile(rf"{_PART}/{_PART}(/\d+)?"), "owner/slug or owner/slug/<integer version>"),
    "model_sources": SourceKind(("models/",), "validate_model_instance_version_string",
                                re.compile(rf"{_PART}(/{_PART}){{3}}/\d+"), "owner/model/framework/instance/<integer version>"),
}


class MetadataError(ValueError):
    """Kernel metadata Kaggle would refuse or misread; ``problems`` each name the field."""

    def __init__(self, problems: list[str], where: str = "") -> None:
        self.problems = problems
        super().__init__((f"{where}: " if where else "") + "; ".join(problems))


def normalise_source(kind: str, source) -> str:
    """One data source as Kaggle's API wants it, e.g. ``https://www.kaggle.com/code/me/k`` -> ``me/k``.

    Strips whitespace, a ``kaggle.com`` URL prefix, the kind's URL segment (``datasets/``,
    ``competitions/``/``c/``, ``code/``/``kernels/``, ``models/``) and slashes at either end.
    Non-strings are returned unchanged for :func:`validate_metadata` to refuse.
    """
    if not isinstance(source, str):
        return source
    s = re.sub(r"^(https?://)?(www\.)?kaggle\.com/", "", source.strip()).strip("/")
    for prefix in SOURCE_KINDS[kind].url_prefixes:
        if s.startswith(prefix):
            return s[len(prefix):]
    return s


def normalise_metadata(meta: dict) -> dict:
    """A copy of ``meta`` with every source list normalised (:func:`normalise_source`) and de-duplicated."""
    out = copy.deepcopy(meta)
    for key in SOURCE_KINDS:
        if isinstance(out.get(key), list):
            seen: list = []
            for s in (normalise_source(key, s) for s in out[key]):
                if s not in seen:  # a list, not a set: non-strings stay for validate_metadata to name
                    seen.append(s)
            out[key] = seen
    return out


@dataclass
class Checked:
    """What one validation run looks at (handed to every rule)."""

    meta: dict
    accelerator: str
    folder: Path | None
    api: object
    notebook: object = None  # the nbformat notebook, for the enable_internet rule
    attached_packaged: tuple = ()  # packaged model names whose published dataset is attached (project packaged_sources)
    warnings: list[str] = field(default_factory=list)

    def flag(self, key: str):
        """``meta[key]`` read as ``KaggleApi.get_bool`` reads it (its default when absent); None when unreadable."""
        try:
            return self.api.get_bool(self.meta, key, BOOL_KEYS[key])
        except (ValueError, TypeError):
            return None


# --- one function per rule ------------------------------------------------------------------
def _known_keys(c: Checked) -> list[str]:
    unknown = sorted(set(c.meta) - KAGGLE_KEYS)
    return [f"unknown field(s) {unknown}: Kaggle ignores them (typo?)"] if unknown else []


def _title(c: Checked) -> list[str]:
    t = c.meta.get("title")
    ok = isinstance(t, str) and TITLE_MIN <= len(t) <= TITLE_MAX
    return [] if ok else [f"title: must be {TITLE_MIN} to {TITLE_MAX} characters, got {t!r}"]


def _id(c: Checked) -> list[str]:
    kid, title = c.meta.get("id"), c.meta.get("title")
    if kid is None:
        return ["id: required (owner/slug)"] if c.meta.get("id_no") is None else []
    parts = kid.split("/") if isinstance(kid, str) else []
    if len(parts) != 2 or not all(parts):
        return [f"id: must be 'owner/slug' without a version, got {kid!r}"]
    slug, out = parts[1], []
    if len(slug) < SLUG_MIN:
        out.append(f"id: slug {slug!r} is shorter than {SLUG_MIN} characters")
    if isinstance(title, str) and slug != slugify(title):
        out.append(f"id: slug {slug!r} is not the slugified title {slugify(title)!r}")
    return out


def _is(key: str, want: str) -> Callable[[Checked], list[str]]:
    def rule(c: Checked) -> list[str]:
        return [] if c.meta.get(key) == want else [f"{key}: must be {want!r}, got {c.meta.get(key)!r}"]
    return rule


def _bools(c: Checked) -> list[str]:
    return [f"{k}: must be true or false, got {c.meta[k]!r}" for k in BOOL_KEYS if k in c.meta and c.flag(k) is None]


def _accelerator(c: Checked) -> list[str]:
    row = ACCELERATORS.get(c.accelerator)
    if row is None:
        return [f"accelerator: {c.accelerator!r} is not one of {sorted(ACCELERATORS)}"]
    if row.refused:
        return [f"accelerator: {c.accelerator!r} ({row.machine_shape}) is refused: {row.refused}"]
    out = []
    for key, want in (("enable_tpu", row.enable_tpu), ("enable_gpu", row.enable_gpu)):
        have = c.flag(key)
        if key in c.meta and have is not None and have != want:
            out.append(f"{key}: {c.meta[key]!r} disagrees with the notebook's accelerator {c.accelerator!r}")
        elif key not in c.meta and want:
            out.append(f"{key}: missing; the notebook's accelerator is {c.accelerator!r}")
    if c.meta.get("machine_shape") != row.machine_shape:
        out.append(f"machine_shape: {c.meta.get('machine_shape')!r} disagrees with the notebook's accelerator "
                   f"{c.accelerator!r} (want {row.machine_shape!r})")
    return out


def _docker_image(c: Checked) -> list[str]:
    image = c.meta.get("docker_image")
    if image and getattr(ACCELERATORS.get(c.accelerator), "kind", None) == "tpu":
        return [f"docker_image: pinned to {image!r} together with the TPU accelerator (enable_tpu, machine_shape "
                f"{c.meta.get('machine_shape')!r}): Kaggle then runs the pinned image, a CPU/GPU image without "
                "torch_xla. Remove docker_image (kernels pull writes it) and let Kaggle pick its TPU image"]
    return []


def _pinning(c: Checked) -> list[str]:
    pin = c.meta.get("docker_image_pinning_type")
    ok = pin is None or pin in c.api.valid_push_pinning_types
    return [] if ok else [f"docker_image_pinning_type: {pin!r} is not one of {c.api.valid_push_pinning_types}"]


def _sources(c: Checked) -> list[str]:
    out = []
    for key, kind in SOURCE_KINDS.items():
        sources = c.meta.get(key, [])
        if not isinstance(sources, list):
            out.append(f"{key}: must be a list, got {sources!r}")
            continue
        for s in sources:
            if not isinstance(s, str) or not s:
                out.append(f"{key}: {s!r} is not a non-empty string")
            elif s != normalise_source(key, s):
                out.append(f"{key}: {s!r} is not normalised (want {normalise_source(key, s)!r})")
            elif not kind.pattern.fullmatch(s):
                out.append(f"{key}: {s!r} is not {kind.form}")
            elif kind.validator:
                try:
                    getattr(c.api, kind.validator)(s)
                except ValueError as e:
                    out.append(f"{key}: {s!r}: {e}")
    return out


def _keywords(c: Checked) -> list[str]:
    kw = c.meta.get("keywords", [])
    ok = isinstance(kw, list) and all(isinstance(k, str) for k in kw)
    return [] if ok else [f"keywords: must be a list of strings, got {kw!r}"]


def _code_file(c: Checked) -> list[str]:
    code = c.meta.get("code_file")
    if not isinstance(code, str) or not code.endswith(".ipynb") or Path(code).name != code:
        return [f"code_file: must name the kernel's .ipynb in its folder, got {code!r}"]
    if c.folder is None:
        return []
    path = Path(c.folder) / code
    if not path.is_file():
        return [f"code_file: {path} does not exist"]
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        return [f"code_file: {path} is not notebook JSON: {e}"]
    if nb.get("metadata", {}).get("kernelspec", {}).get("name") != "python3":
        return [f"code_file: {path} has no kernelspec 'python3' (Kaggle: 'No kernel name found in notebook')"]
    return []


def _internet(c: Checked) -> list[str]:
    if c.flag("enable_internet") is not False:
        return []
    nb = c.notebook
    if nb is None and c.folder is not None and isinstance(c.meta.get("code_file"), str):
        import nbformat

        path = Path(c.folder) / c.meta["code_file"]
        if path.is_file():
            nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
            nb.cells = [x for x in nb.cells if VENDOR_TAG not in (x.get("metadata", {}).get("tags") or [])]
    if nb is None:
        return []
    out = []
    for need in internet_needs(nb, skip_tag=VENDOR_TAG, attached_packaged=c.attached_packaged):
        msg = f"enable_internet: false, but notebook cell {need.cell} {need.what}"
        if need.sure:
            out.append(msg + "; or set enable_internet: true")
        else:
            c.warnings.append(msg)
    return out


def notebook_parameter(nb, name: str):
    """The value of parameter ``name`` the notebook runs with: the injected cell's (``-p``), else the
    ``parameters`` cell's literal; None when neither assigns a literal."""
    from kitlib.params import parameter_defaults

    from .offline import PARAMETER_TAGS

    value = None
    for tag in PARAMETER_TAGS:
        for cell in nb.cells:
            if cell.cell_type == "code" and tag in (cell.get("metadata", {}).get("tags") or []):
                try:
                    value = parameter_defaults(cell.source).get(name, value)
                except SyntaxError:
                    pass
    return value


# the kitlib calls a notebook resolves its `model` parameter with -> the purpose when the call names none
# (kitlib.infer.resolve_members passes its keywords on to kitlib.models.model.resolve_checkpoint;
# kitlib.keras.sharded_run.resolve_base resolves the decoder the sharded notebook trains LoRA on; the training
# notebooks' kitlib.training.job.job_from_params(globals(), ...) resolves it with purpose="training")
MODEL_RESOLVERS = {"resolve_checkpoint": "inference", "resolve_members": "inference", "resolve_base": "training",
                   "job_from_params": "training"}


def model_purpose(nb) -> str | None:
    """What the notebook resolves its ``model`` for: the ``purpose=`` literal of its call of one of
    :data:`MODEL_RESOLVERS` on ``model`` (another parameter resolved so, the inference notebook's ``base_model``,
    is not what it predicts with) (``"training"``; when the call names none, the resolver's default in the table:
    kitlib.models.model's ``"inference"``, the sharded decoder's and the training job builder's ``"training"``); None
    when the notebook calls none."""
    import ast

    found = None
    for cell in nb.cells:
        if cell.cell_type != "code" or VENDOR_TAG in (cell.get("metadata", {}).get("tags") or []):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in MODEL_RESOLVERS
                    and getattr(node.args[0] if node.args else None, "id", "model") == "model"):  # (not base_model's)
                kw = {k.arg: k.value for k in node.keywords}
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                found = kw["purpose"].value if isinstance(kw.get("purpose"), ast.Constant) else MODEL_RESOLVERS[name]
    return found


def _auto_model(c: Checked) -> list[str]:
    """``model="auto"`` that will surely find nothing on Kaggle (kitlib.models.model.resolve_checkpoint
    refuses "auto" on the competition data when no checkpoint is attached)."""
    nb = c.notebook
    if nb is None or notebook_parameter(nb, "model") != "auto":
        return []
    purpose = model_purpose(nb)
    has = {k: bool(c.meta.get(k)) for k in ("model_sources", "dataset_sources", "kernel_sources")}
    if purpose == "training" and not has["model_sources"] and not has["dataset_sources"] and c.flag("enable_internet") is False:
        return ["model_sources: the notebook trains with model='auto', which needs a pretrained checkpoint attached "
                "(none in model_sources or dataset_sources, and enable_internet is false): on Kaggle it would refuse "
                "after the session started. Attach one (e.g. \"model_sources\": [\"<owner>/xlm-roberta/transformers/"
                "base/1\"], or a decoder to shard), or pass -p model=tiny-random for a smoke run"]
    if purpose == "inference" and not has["kernel_sources"] and not has["dataset_sources"]:
        return ["kernel_sources: the notebook predicts with model='auto', which loads a trained checkpoint from an "
                "attached training kernel or data set, and none is attached: on Kaggle it would refuse after the session "
                "started. Add \"uses\": [\"<training notebook>\"] to its entry (kernel_sources filled in from the "
                "owner), run the chain (kernels.py run CHAIN), or pass -p model=tiny-random for a smoke run"]
    return []


def _accelerator_parameter(c: Checked) -> list[str]:
    """The notebook's effective ``accelerator`` parameter (``-p`` included) must be one the kernel's
    machine has: ``auto`` always; else one of the accelerator's runtimes (:data:`~.accelerators.ACCELERATORS`)."""
    nb = c.notebook
    value = notebook_parameter(nb, "accelerator") if nb is not None else None
    row = ACCELERATORS.get(c.accelerator)
    if not isinstance(value, str) or value == "auto" or row is None or value in row.runtimes:
        return []
    fits = sorted(k for k, r in ACCELERATORS.items() if value in r.runtimes)
    return [f"accelerator: the notebook runs with accelerator={value!r}, but the kernel's machine is {c.accelerator!r} "
            f"(runtimes {', '.join(row.runtimes) or 'none'}): pass -p accelerator=auto"
            + (f", or give the entry accelerator {' or '.join(map(repr, fits))}" if fits else "")]


def _gguf_model(c: Checked) -> list[str]:
    """The notebook's effective ``model`` parameter must not be a ``.gguf`` file: a kernel's vendored kit has no GGUF
    converter (``kaggle_kit.vendor.NOT_VENDORED``; :func:`kitlib.models.packaged.from_gguf` would refuse on Kaggle)."""
    nb = c.notebook
    value = notebook_parameter(nb, "model") if nb is not None else None
    if not isinstance(value, str) or not value.lower().endswith(".gguf"):
        return []
    return [f"model: the notebook opens the GGUF file {value!r}, which a kernel cannot convert (kitlib/models/gguf_convert.py "
            "is not vendored): convert it here (kitlib.models.packaged.from_gguf(file, folder)), publish the folder "
            "(python -m kaggle_kit publish FOLDER --dataset OWNER/SLUG) and pass -p model=/kaggle/input/SLUG"]


class Rule(NamedTuple):
    fields: str
    requirement: str
    source: str
    check: Callable[[Checked], list[str]]


RULES: tuple[Rule, ...] = (
    Rule("(every key)", "one Kaggle reads", "kernels_push ignores others: a typo would be lost", _known_keys),
    Rule("title", f"{TITLE_MIN} to {TITLE_MAX} characters", "kernels_push (>= 5); Kaggle's title limit (50)", _title),
    Rule("id", f"owner/slug, no version; slug >= {SLUG_MIN} characters, = slugify(title)",
         "kernels_push only warns on a mismatch; Kaggle then names the kernel after the title (a second kernel)", _id),
    Rule("language", "python", "what this kit stages", _is("language", "python")),
    Rule("kernel_type", "notebook", "what this kit stages", _is("kernel_type", "notebook")),
    Rule("is_private, enable_*", "true/false or \"true\"/\"false\"", "KaggleApi.get_bool", _bools),
    Rule("enable_tpu, enable_gpu, machine_shape", "agree with the accelerator (accelerators.ACCELERATORS)",
         "Kaggle's machine shapes (kaggle-cli docs/kernels.md); P100: kaggle-cli #1156", _accelerator),
    Rule("docker_image", "absent with a TPU", "a pinned image (kernels pull writes one) runs without torch_xla", _docker_image),
    Rule("docker_image_pinning_type", "original or latest", "KaggleApi.valid_push_pinning_types", _pinning),
    Rule("*_sources", "lists of normalised strings of the kind's form (SOURCE_KINDS)",
         "KaggleApi.validate_*_string; Kaggle's URL forms", _sources),
    Rule("keywords", "a list of strings", "kernels_push sends them as category ids", _keywords),
    Rule("code_file", "the staged .ipynb, kernelspec python3",
         "kernels_push parses it as JSON; Kaggle's papermill run needs the kernel name", _code_file),
    Rule("enable_internet", "false: the notebook installs and downloads nothing (offline.py)",
         "Kaggle runs the kernel without network access", _internet),
    Rule("model_sources, dataset_sources, kernel_sources", "what model=\"auto\" loads is attached",
         "kitlib.models.model.resolve_checkpoint refuses 'auto' on the competition data", _auto_model),
    Rule("model (the notebook parameter)", "not a .gguf file", "kitlib.models.packaged.from_gguf: a kernel has no GGUF "
         "converter (kaggle_kit.vendor.NOT_VENDORED)", _gguf_model),
    Rule("accelerator (the notebook parameter)", "auto, or a runtime of the kernel's machine (ACCELERATORS.runtimes)",
         "kitlib.run.runtime.detect_runtime refuses an accelerator it does not find", _accelerator_parameter),
)


def validate_metadata(meta: dict, accelerator: str, folder: Path | None = None, api=None, notebook=None,
                      attached_packaged: tuple = ()) -> list[str]:
    """Refuse kernel metadata that Kaggle would refuse, misread or run on the wrong machine (:data:`RULES`).

    Args:
        meta: the kernel metadata (as written to ``kernel-metadata.json``).
        accelerator: ``tpu``, ``gpu`` or ``none``.
        folder: the kernel folder (checks ``code_file``); None skips that check.
        api: a ``KaggleApi`` for its validators; None gets one (credentials not needed).
        notebook: the notebook (``nbformat``) for the ``enable_internet`` rule; None reads
            ``folder/code_file`` (without the vendored cell), or skips the rule without a folder.

    Returns:
        Warnings (each naming its field and cell): what may need the internet with it off.

    Raises:
        MetadataError: listing every problem, each naming its field.
    """
    if api is None:
        from .client import kaggle_api

        api = kaggle_api(require_credentials=False)
    c = Checked(meta, accelerator, Path(folder) if folder is not None else None, api, notebook, tuple(attached_packaged))
    problems = [p for rule in RULES for p in rule.check(c)]
    if problems:
        raise MetadataError(problems, str(meta.get("id") or meta.get("title") or ""))
    return c.warnings
