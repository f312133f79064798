"""Fan a chain out over folds or seeds: one training kernel per fold (or seed), then the kernels
that read them, each reading every one (issue 26).

``run xlmr --folds 3`` turns the chain's member that defines the fold parameters
(:data:`FOLD_PARAMETERS`: ``fold``, ``folds`` in the training notebook) into three kernels, the
member for fold ``i`` staged with ``-p fold=i folds=3`` and titled ``<title> fold i`` (so its
slug, its kernel and its output are its own); ``--seeds 0,1,2`` does the same over ``seed``
(:data:`SEED_PARAMETER`). A later member that ``uses`` the fanned one reads all of them: its
``kernel_sources`` list every fold's kernel, and the inference notebook's ``model="auto"`` finds
every kit-trained checkpoint attached under ``/kaggle/input`` and blends their predictions
(``blend``: ``"mean"`` or ``"rank"``).

The fanned kernels run at once up to ``max_concurrent`` (Kaggle runs a few batch sessions of an
account at a time and refuses a push beyond them: "Maximum batch GPU session count of 2
reached"); the rest wait in a queue and are pushed as running ones finish. A push Kaggle refuses
for that reason goes back to the queue.
"""
from __future__ import annotations

import copy
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .rules import MetadataError

FOLD_PARAMETERS = ("fold", "folds")  # the training notebook's: folds = K splits the rows in K folds, fold = i trains one
SEED_PARAMETER = "seed"
DEFAULT_CONCURRENT = 2  # batch sessions at once: what Kaggle allowed a free account's GPU/TPU kernels (see the module docstring)
# Kaggle's answer to a push beyond the account's concurrent sessions (SaveKernel's error)
SESSION_LIMIT = re.compile(r"maximum batch \w+ session count", re.I)


@dataclass(frozen=True)
class Unit:
    """One kernel of a run: notebook ``stem`` staged as ``label`` with ``extra`` parameters (the
    fold's or seed's), from ``project`` (the entry's title and ``uses`` rewritten for a fan-out).
    ``wave`` groups the units that run at once (one fanned member's folds share one)."""

    label: str
    stem: str
    project: dict
    extra: dict = field(default_factory=dict)
    wave: int = 0


def plan(project: dict, names: list[str], *, folds: int = 0, seeds: list[int] | None = None,
         defaults: dict[str, dict | None]) -> list[Unit]:
    """The kernels of a run, in order: each member once, or a fanned member once per fold / seed.

    Args:
        project: the top-level metadata (``kernel-metadata.json``).
        names: the members in run order (checked by :func:`~.project.check_order`).
        folds: K >= 2 to fan out over folds (0: no fold fan-out).
        seeds: the seeds to fan out over (None: none).
        defaults: member -> its parameters cell's defaults (which members can be fanned).

    Returns:
        The units; without ``folds``/``seeds``, one per member with ``project`` unchanged.

    Raises:
        MetadataError: both or a bad ``folds``/``seeds``; no member of the chain defines the
            parameters; a fanned title that would be too long.
    """
    if not folds and seeds is None:
        return [Unit(n, n, project, {}, i) for i, n in enumerate(names)]
    _check_fan_out(folds, seeds)
    wanted = FOLD_PARAMETERS if folds else (SEED_PARAMETER,)
    fanned = [n for n in names if all(w in (defaults.get(n) or {}) for w in wanted)]
    if not fanned:
        raise MetadataError([f"--{'folds' if folds else 'seeds'}: no notebook of {', '.join(names)} defines "
                             f"{' and '.join(wanted)} in its parameters cell"])
    variants = ([(f"fold {i}", {"fold": i, "folds": folds}) for i in range(folds)] if folds else
                [(f"seed {s}", {SEED_PARAMETER: s}) for s in seeds])
    units, kernel_ids = [], {}
    for wave, n in enumerate(names):
        if n in fanned:
            units += _fanned_units(project, n, variants, wave)
            kernel_ids[n] = [u for u in units if u.stem == n]
        else:
            units.append(Unit(n, n, _reading_fanned(project, n, kernel_ids), {}, wave))
    return units


def _check_fan_out(folds: int, seeds: list[int] | None) -> None:
    """Refuse both ``--folds`` and ``--seeds``, repeated or no seeds, and fewer than 2 folds."""
    if folds and seeds is not None:
        raise MetadataError(["--folds and --seeds: give one (a run fans out over folds or over seeds)"])
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        raise MetadataError([f"--seeds {','.join(map(str, seeds))}: give distinct integers, e.g. --seeds 0,1,2"])
    if folds and folds < 2:
        raise MetadataError([f"--folds {folds}: K folds need K >= 2"])


def _fanned_units(project: dict, n: str, variants: list[tuple[str, dict]], wave: int) -> list[Unit]:
    """Member ``n`` once per fold or seed (``variants``: suffix, parameters), all in one wave, each
    with its own title (and id, when the entry names one)."""
    units = []
    for suffix, extra in variants:
        proj = copy.deepcopy(project)
        e = proj["notebooks"][n]
        title = f"{e.get('title') or n} {suffix}"
        if len(title) > 50:
            raise MetadataError([f"notebooks.{n}.title: {title!r} (the title with the {suffix.split()[0]}) is over "
                                 "Kaggle's 50 characters: shorten the title"])
        e["title"] = title
        if e.get("id"):  # an explicit id: each fold its own kernel too
            e["id"] = f"{e['id']}-{suffix.replace(' ', '-')}"
        units.append(Unit(f"{n} {suffix}", n, proj, extra, wave))
    return units


def _reading_fanned(project: dict, n: str, kernel_ids: dict[str, list[Unit]]) -> dict:
    """``project`` with member ``n``'s ``uses`` of fanned members moved to ``fanned_uses`` (every
    fold's or seed's unit; :func:`resolve_sources` makes them kernel sources); as it is when none."""
    entry = project.get("notebooks", {}).get(n) or {}
    uses = [u for u in (entry.get("uses") or []) if u in kernel_ids]
    if not uses:
        return project
    proj = copy.deepcopy(project)
    e = proj["notebooks"][n]
    e["uses"] = [u for u in e.get("uses") or [] if u not in kernel_ids]
    if not e["uses"]:
        del e["uses"]
    e["fanned_uses"] = [(u.project, u.stem) for used in uses for u in kernel_ids[used]]
    return proj


def resolve_sources(unit: Unit, owner: str | None) -> Unit:
    """``unit`` with the fanned ``uses`` turned into ``kernel_sources`` (every fold's kernel id, the
    same owner as the kernel, as ``uses`` does)."""
    from .project import kernel_id

    e = unit.project.get("notebooks", {}).get(unit.stem) or {}
    fanned = e.get("fanned_uses")
    if not fanned:
        return unit
    proj = copy.deepcopy(unit.project)
    e = proj["notebooks"][unit.stem]
    del e["fanned_uses"]
    own = (e.get("id") or "").split("/")[0] or owner
    e["kernel_sources"] = list(e.get("kernel_sources") or []) + [kernel_id(p, stem, own) for p, stem in fanned]
    return Unit(unit.label, unit.stem, proj, unit.extra, unit.wave)


def _say(line: str, err: bool = False) -> None:
    print(line, file=sys.stderr if err else sys.stdout, flush=True)


def run_wave(a, api, staged: list, dest_root: Path, *, download_one, version_dir) -> tuple[bool, dict]:
    """Push and wait for ``staged`` kernels at once, at most ``a.max_concurrent`` running, the rest
    queued; download each version's output into its own folder as it completes.

    Args:
        a: the command line (``max_concurrent``, ``poll``, ``timeout``, ``retries``, ``retry_wait``,
            ``session_timeout``).
        download_one: ``(kernel_id, api, dest, version) -> written files or None``.
        version_dir: ``(root, slug, version) -> folder``.

    Returns:
        (all completed and downloaded, ``{kernel_id: (version, folder, written)}``). On the first
        failure nothing more is pushed; kernels already running go on on Kaggle (named).
    """
    queue, running, done = list(staged), {}, {}
    t0 = time.monotonic()
    while queue or running:
        error = (_push_queued(a, api, queue, running)
                 or _poll_running(api, running, done, dest_root, t0, download_one=download_one, version_dir=version_dir))
        if error:
            return _fail(error, queue, running, done, dest_root)
        if not queue and not running:
            break
        if time.monotonic() - t0 + a.poll > a.timeout:
            return _fail(f"{len(running)} kernel(s) still running and {len(queue)} queued after {a.timeout:g} s (timeout); "
                         "nothing of theirs was downloaded", queue, running, done, dest_root)
        time.sleep(a.poll)
    return True, done


def _push_queued(a, api, queue: list, running: dict) -> str | None:
    """Push queued kernels while fewer than ``a.max_concurrent`` run (``running``: kernel id ->
    (staged, version, last status)); Kaggle's session limit leaves the rest queued. Returns the
    error of a failed push, else None."""
    from .remote import PushError, push

    while queue and len(running) < a.max_concurrent:
        st = queue[0]
        try:
            resp = push(st, api, retries=a.retries, retry_wait=a.retry_wait, timeout=a.session_timeout)
        except PushError as e:
            if SESSION_LIMIT.search(str(e)):
                _say(f"{st.kernel_id}: queued: Kaggle runs no more of this account's sessions at once "
                     f"({len(running)} of this run's running); pushed when one ends")
                break
            return str(e)
        queue.pop(0)
        version = resp.version_number or None
        running[st.kernel_id] = (st, version, "")
        _say(f"{st.kernel_id}: pushed version {resp.version_number}: {resp.url}"
             + (f" ({len(queue)} queued)" if queue else ""))
    return None


def _poll_running(api, running: dict, done: dict, dest_root: Path, t0: float, *, download_one, version_dir) -> str | None:
    """One status call per running kernel (a change is said); a finished one leaves ``running``,
    its output downloaded into its version's folder and recorded in ``done``. Returns the error
    of a run that ended badly or whose output could not be downloaded, else None."""
    from .remote import TERMINAL
    from .sdk import kernel_status

    for kid, (st, version, last) in list(running.items()):
        owner, slug, _ = api.parse_kernel_string(kid)
        with api.build_kaggle_client() as kaggle:
            resp = kernel_status(kaggle, owner, slug, version)
        status = getattr(resp.status, "name", str(resp.status))
        if status != last:
            _say(f"{kid} version {version}: {status} ({time.monotonic() - t0:.0f} s elapsed)")
            running[kid] = (st, version, status)
        if status not in TERMINAL:
            continue
        del running[kid]
        dest = version_dir(dest_root, st.folder.name, version)
        if dest.exists():
            shutil.rmtree(dest)
        written = download_one(kid, api, dest, version)
        if not TERMINAL[status]:
            msg = getattr(resp, "failure_message", "") or ""
            return f"{kid} version {version}: run ended {status}" + (f": {msg}" if msg else "")
        if written is None:
            return f"{kid} version {version}: its output could not be downloaded"
        done[kid] = (version, dest, written)
    return None


def _fail(msg: str, queue: list, running: dict, done: dict, dest_root: Path) -> tuple[bool, dict]:
    """Say the error, the kernels still running on Kaggle (how to fetch their output) and those not
    pushed; returns :func:`run_wave`'s failure."""
    from .remote import output_command

    _say(f"error: {msg}", err=True)
    if running:
        _say("error: still running on Kaggle (their output later: "
             + "; ".join(output_command(k, v, dest_root) for k, (_, v, _s) in running.items()) + ")", err=True)
    if queue:
        _say(f"error: not pushed: {', '.join(s.kernel_id for s in queue)}", err=True)
    return False, done
