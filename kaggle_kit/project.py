"""The repository's top-level ``kernel-metadata.json``: shared Kaggle fields plus one entry per notebook.

::

    {"enable_internet": false, "competition_sources": [...], ...,
     "notebooks": {"xla_multicore_inference": {"title": "...", "accelerator": "tpu"}, ...}}

Entry ``X`` is notebook ``notebooks/X.py`` (with its pair ``X.ipynb``), in the ``notebooks/``
folder next to the file. Every entry must name an existing notebook and every notebook must have
an entry (:func:`entry_problems`); an entry's fields override the shared ones
(:func:`derive_metadata`).
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path

from slugify import slugify

from .accelerators import ACCELERATORS, accelerator_name
from .rules import KEY_ORDER, MetadataError, normalise_metadata


# Keys of the top-level file that are this kit's, not Kaggle's: the per-notebook table and the chains.
# packaged_sources: packaged model name -> the data set it was published as (kaggle_kit publish).
# wheels_sources: notebook name -> the manifest of its wheels data set (kaggle_kit wheels; kaggle_kit/wheels.py).
PROJECT_KEYS = ("notebooks", "chains", "packaged_sources", "wheels_sources")


def kernel_id(project: dict, stem: str, owner: str) -> str:
    """The id notebook ``stem`` is pushed as: its entry's ``id``, else ``<owner>/<slugify(title)>``."""
    entry = project.get("notebooks", {}).get(stem) or {}
    return entry.get("id") or f"{owner}/{slugify(entry.get('title') or stem)}"


def check_distinct_kernels(kernels: list[tuple[str, str]]) -> None:
    """Refuse a run (or push) in which two kernels would be one kernel on Kaggle, before anything is sent.

    Kaggle keeps a kernel by ``owner/slug``, the slug holding lower-case letters, digits and hyphens
    only (``slugify``): titles that differ in a sign or punctuation alone (``--seeds=-1,1``: ``... seed -1``
    and ``... seed 1``) are the same kernel, and the second push would be a new version of the first.

    Args:
        kernels: ``(label, kernel id)`` of each kernel about to be pushed, as staged.

    Raises:
        MetadataError: naming both kernels, the id they share and the fix.
    """
    seen: dict[str, str] = {}
    problems = []
    for label, kid in kernels:
        owner, _, slug = kid.partition("/")
        key = f"{owner.lower()}/{slugify(slug)}"
        if key in seen:
            problems.append(f"{seen[key]!r} and {label!r} would both be pushed as the kernel {key} (Kaggle's slug "
                            "keeps letters, digits and hyphens only), the second overwriting the first: give them "
                            "titles (or ids) that differ in letters or digits; for --seeds, seeds that differ "
                            "other than by their sign (e.g. --seeds 0,1)")
        else:
            seen[key] = label
    if problems:
        raise MetadataError(problems)


def used_kernels(project: dict, stem: str, owner: str) -> list[str]:
    """``kernel_sources`` for the entry's ``uses`` (notebook names whose output this one reads),
    each ``<owner>/<slug>`` with the same owner as this kernel (so ``--owner`` is followed).

    Raises:
        MetadataError: ``uses`` is not a list of notebook names with entries.
    """
    uses = (project.get("notebooks", {}).get(stem) or {}).get("uses", [])
    entries = project.get("notebooks", {})
    if not isinstance(uses, list) or not all(isinstance(u, str) and u in entries and u != stem for u in uses):
        raise MetadataError([f"notebooks.{stem}.uses: must list other notebooks of the table (whose output this one "
                             f"reads), got {uses!r}{_closest(str(uses[0]), entries) if isinstance(uses, list) and uses else ''}"], stem)
    return [kernel_id(project, u, owner) for u in uses]


def chain(project: dict, name: str) -> list[str]:
    """The notebooks to run for ``name``, in order: the chain ``project["chains"][name]``, or the
    notebook ``name`` alone. In a chain, a notebook whose entry ``uses`` an earlier one reads that
    one's output (``kernel_sources``, :func:`used_kernels`).

    Raises:
        MetadataError: no such chain or notebook, or a chain naming a notebook without an entry.
    """
    chains = project.get("chains") or {}
    entries = project.get("notebooks", {})
    if name in chains:
        order = chains[name]
        bad = [n for n in order if n not in entries] if isinstance(order, list) else [order]
        if bad or not order:
            raise MetadataError([f"chains.{name}: must list notebooks of the table in run order, got {order!r}"])
        check_order(project, list(order), f"chains.{name}")
        return list(order)
    if name in entries:
        return [name]
    raise MetadataError([f"no chain or notebook {name!r}{_closest(name, list(chains) + list(entries))} "
                         f"(chains: {', '.join(chains) or 'none'})"])


def check_order(project: dict, order: list[str], where: str = "run") -> None:
    """Refuse a run order that is not a valid order of the ``uses`` dependency graph.

    The graph: each entry's ``uses`` (the notebooks whose output it reads, as ``kernel_sources``).
    Checked before anything is pushed: no notebook twice; every member that uses another member
    runs after it (else it would read that kernel's previous output); and no cycle among the
    entries' ``uses`` (then no order exists). A member may use a notebook outside the run: it
    reads that kernel's output already on Kaggle.

    Raises:
        MetadataError: naming both notebooks (or the cycle) and the fix.
    """
    import graphlib

    entries = project.get("notebooks", {})
    seen, problems = set(), []
    for n in order:
        if n in seen:
            problems.append(f"{where}: {n} is listed twice: each notebook runs once in a chain")
        seen.add(n)
    graph = {n: [u for u in (e.get("uses") or []) if isinstance(u, str)] for n, e in entries.items() if isinstance(e, dict)}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        cycle = e.args[1]
        problems.append(f"notebooks.*.uses: {', '.join(cycle[:-1])} use each other in a cycle ({' -> '.join(cycle)}), "
                        "so none of them can run first: remove one of those uses")
    position = {n: i for i, n in enumerate(order)}
    for n in order:
        for u in graph.get(n, []):
            if u in position and position[u] > position[n]:
                problems.append(f"{where}: {n} runs before {u}, but notebooks.{n}.uses {u} (it would read {u}'s "
                                f"previous output): list {u} before {n}")
    if problems:
        raise MetadataError(problems)


def load_project_metadata(path: Path) -> dict:
    """The top-level ``kernel-metadata.json`` (read as UTF-8 whatever the locale).

    Raises:
        MetadataError: unreadable, not a JSON object, or ``notebooks`` is not an object.
    """
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise MetadataError([f"{path}: cannot read: {e}"])
    if not isinstance(meta, dict) or not isinstance(meta.get("notebooks", {}), dict):
        raise MetadataError([f"{path}: must be a JSON object whose 'notebooks' is an object"])
    return meta


def _closest(name: str, names) -> str:
    near = difflib.get_close_matches(name, sorted(names), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def entry_problems(project: dict, notebooks_dir: Path, only: str | None = None) -> list[str]:
    """Entries without a notebook, notebooks without an entry, and ``code_file`` fields that name
    another file than the entry's own notebook; [] when the table and the folder agree.

    ``code_file`` is what Kaggle runs: staging writes the entry's own notebook under it, so it may
    only be the entry's ``X.ipynb`` (or be left out: staging names the file ``<slug>.ipynb``).

    Args:
        project: the top-level metadata (:func:`load_project_metadata`).
        notebooks_dir: the folder holding the notebook pairs.
        only: check this entry alone (not the notebooks without entries).
    """
    entries = project.get("notebooks", {})
    stems = {p.stem for p in Path(notebooks_dir).glob("*.py")} | {p.stem for p in Path(notebooks_dir).glob("*.ipynb")}
    problems = []
    if "code_file" in project:
        problems.append(f"code_file: {project['code_file']!r} is shared by every notebook; each kernel runs its own "
                        "notebook: remove it")
    for stem, entry in entries.items():
        if only is not None and stem != only:
            continue
        if stem not in stems:
            problems.append(f"notebooks.{stem}: no notebook {Path(notebooks_dir) / stem}.py{_closest(stem, stems)}: "
                            "rename the entry or remove it")
            continue
        if not isinstance(entry, dict):
            problems.append(f"notebooks.{stem}: must be an object (title, accelerator, overrides)")
            continue
        code = entry.get("code_file")
        if code is not None and code != f"{stem}.ipynb":
            other = Path(str(code)).stem
            why = (f"is notebook {other}'s file" if other in stems and other != stem
                   else f"names no notebook in {notebooks_dir}")
            problems.append(f"notebooks.{stem}.code_file: {code!r} {why}; this entry pushes {stem}.ipynb: "
                            "remove code_file (staging names the file)")
    for stem in sorted(stems - set(entries)) if only is None else ():
        problems.append(f"{Path(notebooks_dir) / stem}.py: no entry in kernel-metadata.json 'notebooks' "
                        f"(add \"{stem}\": {{\"title\": ..., \"accelerator\": \"tpu\"|\"gpu\"|\"none\"}})")
    return problems


def derive_metadata(project: dict, stem: str, owner: str | None, nb_accelerator: str | None = None) -> tuple[dict, str]:
    """The Kaggle ``kernel-metadata.json`` of notebook ``stem``, and its accelerator.

    Shared fields come from ``project`` (the top-level file, ``notebooks`` removed), then the
    notebook's entry ``project["notebooks"][stem]`` overrides them; the entry's ``accelerator``
    or the notebook's own ``kaggle.accelerator`` (any spelling in
    :data:`~kaggle_kit.accelerators.ACCELERATORS`, e.g. Kaggle's ``tpuV5e8``) sets
    ``enable_tpu``, ``enable_gpu`` and ``machine_shape`` unless the entry sets them (then they are
    checked). ``id`` defaults to ``<owner>/<slugify(title)>``, ``code_file`` to ``<slug>.ipynb``.

    Returns:
        (metadata, accelerator), the accelerator as ``tpu``, ``gpu`` or ``none``.

    Raises:
        MetadataError: no entry or no accelerator for ``stem``, an accelerator of no known name,
            the entry and the notebook declare different accelerators, or no owner is known.
    """
    entries = project.get("notebooks", {})
    if stem not in entries:
        raise MetadataError([f"notebooks.{stem}: no entry in kernel-metadata.json (title, accelerator)"], stem)
    if not isinstance(entries[stem], dict):
        raise MetadataError([f"notebooks.{stem}: must be an object (title, accelerator, overrides)"], stem)
    entry = dict(entries[stem])
    declared = {"kernel-metadata.json": entry.pop("accelerator", None), "the notebook's kaggle.accelerator": nb_accelerator}
    names = {}
    for where, raw in declared.items():
        if raw is not None:
            names[where] = accelerator_name(raw)
            if names[where] is None:
                raise MetadataError([f"accelerator: {where} says {raw!r}, which is none of {sorted(ACCELERATORS)} "
                                     "(nor Kaggle's names for them)"], stem)
    if len(set(names.values())) > 1:
        raise MetadataError(["accelerator: " + ", ".join(f"{w} says {declared[w]!r}" for w in names)], stem)
    if not names:
        raise MetadataError([f"accelerator: notebooks.{stem} declares none (tpu, gpu or none)"], stem)
    acc = next(iter(names.values()))
    row = ACCELERATORS[acc]
    uses = entry.pop("uses", [])
    meta = {k: v for k, v in project.items() if k not in PROJECT_KEYS}
    meta.update(enable_tpu=row.enable_tpu, enable_gpu=row.enable_gpu)
    if row.machine_shape:
        meta["machine_shape"] = row.machine_shape
    meta.update(entry)
    title = meta.get("title")
    if "id" not in meta and "id_no" not in meta:
        if not owner:
            raise MetadataError(["id: no owner for the kernel id: pass --owner or set up Kaggle credentials"], stem)
        meta["id"] = f"{owner}/{slugify(title) if isinstance(title, str) else stem}"
    slug = str(meta.get("id", "")).split("/")[-1]
    if uses:
        meta["kernel_sources"] = list(meta.get("kernel_sources") or []) + used_kernels(project, stem, str(meta.get("id", "")).split("/")[0])
    meta.setdefault("code_file", f"{slug or stem}.ipynb")
    meta.setdefault("language", "python")
    meta.setdefault("kernel_type", "notebook")
    order = {k: i for i, k in enumerate(KEY_ORDER)}
    meta = dict(sorted(meta.items(), key=lambda kv: order.get(kv[0], len(order))))
    return normalise_metadata(meta), acc
