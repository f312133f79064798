"""Kaggle kernels from the paired notebooks: stage, push, run a chain, submit, read the score back.

::

    python scripts/kernels.py stage       [NOTEBOOK ...] [-p NAME=VALUE] [--owner NAME] [--out build/kernels]
    python scripts/kernels.py validate    [NOTEBOOK ...] [-p NAME=VALUE] [--owner NAME]   # = push --dry-run
    python scripts/kernels.py push        NOTEBOOK ... | --all  [-p NAME=VALUE] [--dry-run] [--wait] [--output DIR]
    python scripts/kernels.py run         CHAIN|NOTEBOOK ... [-p NAME=VALUE] [--submit] [-m MSG] [--output DIR]
                                          [--folds K | --seeds 0,1,2] [--max-concurrent N]
    python scripts/kernels.py submit      FILE | --kernel OWNER/SLUG [--version N] [-f submission.csv] [--code] [-m MSG]
    python scripts/kernels.py submissions [--competition SLUG]
    python scripts/kernels.py status      OWNER/SLUG [--version N]
    python scripts/kernels.py output      OWNER/SLUG [--version N] [-o DIR]
    python scripts/kernels.py run-local   NOTEBOOK [--root DIR] [-p NAME VALUE] [--input SLUG=DIR]
    python scripts/kernels.py publish     FOLDER|PACKAGED_NAME|OWNER/SLUG[/N] --dataset OWNER/SLUG [--attach NOTEBOOK]
    python scripts/kernels.py wheels      NOTEBOOK --dataset OWNER/SLUG [-p NAME=VALUE] [--with DIST[==V]] [--find-links DIR] [--dry-run]

(``python -m kaggle_kit`` is the same.) NOTEBOOK is ``notebooks/X.py``, ``notebooks/X.ipynb`` or
``X``; a CHAIN is a name in the ``chains`` table of ``kernel-metadata.json`` (docs/kernels.md).
``-p`` values are read as JSON when they parse (``32``, ``1e-5``, ``false``), checked against the
notebook's parameters cell (names and types) and injected as papermill would; with several
notebooks, each takes the names its parameters cell defines, and a name none defines is refused.
``-p MEMBER:NAME=VALUE`` aims a value at one notebook; in a chain (``run``), a name whose meaning
depends on the notebook's role (``model``, paths: :data:`~.parameters.ROLE_PARAMETERS`) is refused
unqualified when several members define it. ``run`` prints every member's effective parameters.

Exit status: 0 success; 1 the push, run, download or submission failed (including a server-side
"Kernel push error", on which ``kaggle kernels push`` itself exits 0; any output file that could
not be downloaded; a wait that timed out; a submission that ended ERROR, was not scored in time,
or was refused because none are left today); 2 invalid metadata, a notebook pair out of sync, a
bad ``-p``, or bad usage; 3 no Kaggle credentials (said before any work).
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from .client import CredentialsError, kaggle_api, kaggle_username
from .fanout import DEFAULT_CONCURRENT
from .local import MountError, run_local
from .parameters import ParameterError, effective_table, notebook_defaults, parse_assignments, parse_value, split_parameters
from .project import chain, check_order, entry_problems, load_project_metadata
from .remote import DEFAULT_WAIT_S, DownloadError, PushError, WaitTimeout, download, output_command, push, wait
from .rules import VENDOR_TAG, MetadataError
from .stage import notebook_paths, read_notebook, stage
from .submit import (SubmitError, check_allowance, competition_sample, description, format_submission, list_submissions, precheck, run_lines,
                     submit_code, submit_file, wait_scored)
from .vendor import KITLIB, vendored_files

ROOT = Path(__file__).resolve().parents[1]
PROJECT_METADATA = ROOT / "kernel-metadata.json"
BUILD = ROOT / "build" / "kernels"
OUTPUTS = ROOT / "outputs" / "kernels"
SAMPLE_DATA = ROOT / "data" / "jigsaw-sample"
SCORE_TIMEOUT_S = 1800  # Jigsaw Multilingual scores a 63,812-row file in about a minute; half an hour is generous


def _project_args(sp) -> None:
    """The options of every command that stages kernels: owner, build folder, metadata, ``-p``."""
    sp.add_argument("--owner", help="kernel owner for the ids (default: the Kaggle user of the credentials)")
    sp.add_argument("--out", type=Path, default=BUILD, help="where kernel folders go (default build/kernels)")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA, help="the top-level kernel-metadata.json")
    sp.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME=VALUE",
                    help="a parameter of the notebook's parameters cell, injected as papermill would")


def _waiting_args(sp) -> None:
    """The options of waiting for a pushed run: timeout, poll, 409 retries, Kaggle's session limit."""
    sp.add_argument("--timeout", type=float, default=DEFAULT_WAIT_S,
                    help=f"seconds to wait for each run (default {DEFAULT_WAIT_S:g}: Kaggle's 9-hour TPU session limit)")
    sp.add_argument("--poll", type=float, default=30, help="seconds between status calls (default 30)")
    sp.add_argument("--retries", type=int, default=10, help="retries while an earlier version runs (HTTP 409)")
    sp.add_argument("--retry-wait", type=float, default=30, help="seconds between 409 retries (default 30)")
    sp.add_argument("--session-timeout", type=int, help="Kaggle-side run time limit in seconds")


def _scoring_args(sp) -> None:
    """The options of a submission: competition, message, the score wait, the local check of the file."""
    sp.add_argument("--competition", help="competition slug (default: the project's competition_sources)")
    sp.add_argument("-m", "--message", default="", help="submission description")
    sp.add_argument("--score-timeout", type=float, default=SCORE_TIMEOUT_S, help=f"seconds to wait for the score (default {SCORE_TIMEOUT_S})")
    sp.add_argument("--score-poll", type=float, default=10, help="seconds between score checks (default 10)")
    sp.add_argument("--sample-submission", type=Path,
                    help="check the file against this (default: the competition's sample_submission.csv, downloaded)")
    sp.add_argument("--force", action="store_true", help="submit without the local check of the file")


def _stage_args(sp) -> None:
    """``stage`` and ``validate``: the notebooks (default every one) and the project options."""
    sp.add_argument("notebooks", nargs="*", help="notebooks/X.py, X.ipynb or X (default: every notebook)")
    _project_args(sp)


def _push_args(sp) -> None:
    """``push``: the notebooks or ``--all``, ``--dry-run``, and ``--wait`` with its download folder."""
    sp.add_argument("notebooks", nargs="*", help="notebooks/X.py, X.ipynb or X (or --all)")
    sp.add_argument("--all", action="store_true", help="push every notebook (each starts a Kaggle session)")
    _project_args(sp)
    sp.add_argument("--dry-run", action="store_true", help="stage and validate only; send nothing")
    sp.add_argument("--wait", action="store_true", help="wait for the run (QUEUED/RUNNING -> COMPLETE/ERROR)")
    _waiting_args(sp)
    sp.add_argument("--output", type=Path, help="with --wait: download output files and log here (per kernel folder)")


def _run_args(sp) -> None:
    """``run``: the chain or notebooks, a fan-out over folds or seeds, and the submission at the end."""
    sp.add_argument("targets", nargs="+", help="a chain of kernel-metadata.json's 'chains', or notebooks, run in order")
    _project_args(sp)
    _waiting_args(sp)
    sp.add_argument("--output", type=Path, default=OUTPUTS, help="output folder, one per kernel (default outputs/kernels)")
    sp.add_argument("--folds", type=int, default=0, metavar="K",
                    help="one training kernel per fold (-p fold=i folds=K), then the chain's next kernels on all of them")
    sp.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",") if x.strip()], metavar="S,S,...",
                    help="one training kernel per seed (-p seed=S), then the chain's next kernels on all of them")
    sp.add_argument("--max-concurrent", type=int, default=DEFAULT_CONCURRENT, metavar="N",
                    help=f"kernels of a fan-out running at once (default {DEFAULT_CONCURRENT}); the rest are queued")
    sp.add_argument("--submit", action="store_true", help="submit the last kernel's output file when it completes")
    sp.add_argument("-f", "--file", default="submission.csv", help="the output file to submit (default submission.csv)")
    sp.add_argument("--code", action="store_true", help="a code competition: submit the kernel version, not the file")
    _scoring_args(sp)


def _submit_args(sp) -> None:
    """``submit``: a local file, or a kernel version's output file."""
    sp.add_argument("file", nargs="?", type=Path, help="a local submission file")
    sp.add_argument("--kernel", help="owner/slug: submit this kernel's output file instead")
    sp.add_argument("--version", type=int, help="the kernel's version (the number push printed; default: the latest)")
    sp.add_argument("-f", "--file-name", default="submission.csv", help="with --kernel: its output file (default submission.csv)")
    sp.add_argument("--code", action="store_true", help="a code competition: Kaggle submits the kernel version itself")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)
    _scoring_args(sp)


def _publish_args(sp) -> None:
    """``publish``: what to publish, the data set, and the entries that attach it."""
    sp.add_argument("source", help="a checkpoint folder, a packaged name (multilingual-e5-small), or a training kernel "
                                   "owner/slug[/VERSION] (its output's artifacts/xlmr-toxic)")
    sp.add_argument("--dataset", required=True, help="the data set, owner/slug (created, private, when it does not exist)")
    sp.add_argument("-m", "--message", default="", help="the version notes")
    sp.add_argument("--attach", action="append", default=[], metavar="NOTEBOOK",
                    help="add the data set to this entry's dataset_sources in kernel-metadata.json (e.g. xla_multicore_inference)")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)


def _wheels_args(sp) -> None:
    """``wheels``: the notebook, its data set, what to add, where the wheels come from."""
    sp.add_argument("notebook", help="notebooks/X.py, X.ipynb or X")
    sp.add_argument("--dataset", required=True, help="the wheels data set, owner/slug (created, private, when it does not exist)")
    sp.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME=VALUE",
                    help="a parameter the kernel will run with (weights=4bit needs bitsandbytes)")
    sp.add_argument("--with", dest="extra", action="append", default=[], metavar="DIST[==VERSION]",
                    help="ship this distribution too (at this version)")
    sp.add_argument("--find-links", type=Path, help="take the wheels from this folder only (pip --no-index --find-links)")
    sp.add_argument("--out", type=Path, default=ROOT / "build" / "wheels", help="where the wheels folder is built (default build/wheels/<notebook>)")
    sp.add_argument("--dry-run", action="store_true", help="build and check the wheels only; publish and record nothing")
    sp.add_argument("-m", "--message", default="", help="the version notes")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)


def _submissions_args(sp) -> None:
    """``submissions``: the competition and where the runs a description names are looked up."""
    sp.add_argument("--competition")
    sp.add_argument("--runs-root", type=Path, default=OUTPUTS,
                    help="where to look up the runs a description names: runs.csv tables under this folder (the "
                         "kernels' downloaded outputs, default outputs/kernels) and under artifacts/")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)


def _status_args(sp) -> None:
    """``status``: one kernel, one version."""
    sp.add_argument("kernel", help="owner/slug")
    sp.add_argument("--version", type=int, help="one version (default: the latest run)")


def _output_args(sp) -> None:
    """``output``: one kernel version (as ``status``) and the folder its files go to."""
    _status_args(sp)
    sp.add_argument("-o", "--dest", type=Path, default=Path("outputs") / "kernels", help="folder (default outputs/kernels/<slug>)")


def _run_local_args(sp) -> None:
    """``run-local``: one notebook, its /kaggle-like folder, the data and inputs mounted, ``-p``."""
    sp.add_argument("notebook")
    sp.add_argument("--root", type=Path, help="folder holding <slug>/{input,working,tmp}, one per kernel (default: a new temp folder)")
    sp.add_argument("--data", type=Path, default=SAMPLE_DATA, help="competition data to mount (default data/jigsaw-sample)")
    sp.add_argument("-p", "--parameter", nargs="+", action="append", default=[], metavar="NAME VALUE",
                    help="a parameter of the notebook's parameters cell: NAME VALUE or NAME=VALUE")
    sp.add_argument("--input", action="append", default=[], metavar="SLUG=DIR",
                    help="mount DIR as input/SLUG/ (a kernel or data set source); kernel sources default to "
                         "earlier run-local outputs in --root")
    sp.add_argument("--owner", default=None, help="kernel owner for the id (default: the Kaggle user, else 'local')")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)
    sp.add_argument("--timeout", type=int, default=1800, help="seconds per cell")


def _error(lines) -> None:
    for line in ([lines] if isinstance(lines, str) else lines):
        print(line, file=sys.stderr, flush=True)


def _competition(a, project: dict | None = None) -> str:
    if a.competition:
        return a.competition
    project = project if project is not None else load_project_metadata(a.metadata)
    comps = project.get("competition_sources") or []
    if len(comps) != 1:
        raise MetadataError([f"competition_sources: {comps!r}: pass --competition SLUG"])
    return comps[0]


def _stage_all(a, api, owner, project, notebooks: list[Path], table: bool = False, units=None):
    """Stage each notebook, or each unit of a fan-out (:func:`~.fanout.plan`), with ``-p`` routed
    to its members (:func:`~.parameters.split_parameters`) and a unit's own fold or seed on top;
    with ``table`` (or any ``-p``), print every kernel's effective parameters.

    Returns:
        (staged, number invalid, the wave of each staged kernel).

    Raises:
        ParameterError: a ``-p`` that a fan-out sets itself (``fold``, ``folds``, ``seed``).
        MetadataError: two kernels that Kaggle would keep as one (:func:`~.project.check_distinct_kernels`).
    """
    from .fanout import Unit, resolve_sources
    from .project import check_distinct_kernels

    by_stem = {py.stem: py for py in notebooks}
    defaults = {stem: notebook_defaults(read_notebook(py)) for stem, py in by_stem.items()}
    per = split_parameters(a.parameter, defaults, chain=a.cmd == "run")
    units = units or [Unit(py.stem, py.stem, project, {}, i) for i, py in enumerate(notebooks)]
    staged, invalid, waves, labels = [], 0, [], []
    for unit in units:
        unit = resolve_sources(unit, owner)
        py = by_stem[unit.stem]
        clash = sorted(set(unit.extra) & set(per[unit.stem]))
        if clash:
            raise ParameterError(f"-p {', '.join(clash)}: set by the fan-out itself for each kernel ({unit.label}: "
                                 f"{', '.join(f'{k}={v}' for k, v in unit.extra.items())}); leave it out")
        try:
            st = stage(py, a.out, owner, unit.project, KITLIB, api, parameters={**per[unit.stem], **unit.extra})
        except MetadataError as e:
            _error([f"error: {py}: invalid kernel:"] + [f"  {msg}" for msg in e.problems])
            invalid += 1
            continue
        staged.append(st)
        waves.append(unit.wave)
        labels.append(unit.label)
        for w in st.warnings:
            _error(f"warning: {py}: {w}")
        for n in st.notes:
            _error(f"note: {py}: {n}")
        cell = next(c for c in json.loads(st.notebook.read_text(encoding="ascii"))["cells"] if c.get("id") == VENDOR_TAG)
        n, size = len(vendored_files("".join(cell["source"]))), len("".join(cell["source"]))
        given = ", ".join(f"{k}={v!r}" for k, v in st.parameters)
        print(f"{py}: staged {st.folder} as {st.kernel_id} ({st.accelerator}, "
              f"{st.metadata.get('machine_shape') or 'no accelerator'}; kitlib {n} modules vendored, {size / 1000:.0f} K characters"
              + (f"; parameters {given}" if given else "") + ")")
    check_distinct_kernels([(label, st.kernel_id) for label, st in zip(labels, staged)])
    if (table or a.parameter or len(units) > len(notebooks)) and staged:
        print(effective_table({label: (defaults[st.source.stem] or {}, dict(st.parameters))
                               for label, st in zip(labels, staged)}), flush=True)
    return staged, invalid, waves


def _run_local(a, api, owner, project, notebooks_dir) -> int:
    import papermill

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)  # papermill's cell output, as it runs
    root = a.root or Path(tempfile.mkdtemp(prefix="kaggle-run-"))
    values = {}
    for item in a.parameter:
        if len(item) == 1:
            values.update(parse_assignments(item))
        elif len(item) == 2:
            values[item[0]] = parse_value(item[1])
        else:
            _error(f"error: -p {' '.join(item)}: write -p NAME VALUE or -p NAME=VALUE")
            return 2
    inputs = {}
    for item in a.input:
        name, eq, folder = item.partition("=")
        if not eq:
            _error(f"error: --input {item!r}: write --input SLUG=DIR")
            return 2
        inputs[name] = Path(folder)
    py = notebook_paths([a.notebook], notebooks_dir)[0]
    try:
        st = stage(py, root / ".staged", owner or "local", project, KITLIB, api, parameters=values)
        work = run_local(st, root, a.data, {}, a.timeout, inputs=inputs)
    except (ParameterError, MountError) as e:
        _error(f"error: {e}")
        return 2
    except papermill.PapermillExecutionError as e:
        executed = root / st.folder.name / "__notebook__.ipynb"
        _error(f"error: {st.source}: cell {e.exec_count} raised {e.ename}: {e.evalue} (executed notebook: {executed})")
        return 1
    print(f"{st.source}: ran as Kaggle would in {work.parent} (executed notebook {work.parent / '__notebook__.ipynb'})")
    for f in sorted(work.rglob("*")):
        if f.is_file():
            print(f"  output {f.relative_to(work)} ({f.stat().st_size} bytes)")
    return 0


def _download(kernel_id: str, api, dest: Path, version: int | None = None) -> list[Path] | None:
    """Download one version's output into ``dest``; returns the files written (None when any failed)."""
    try:
        return download(kernel_id, api, dest, version=version)
    except DownloadError as e:
        _error([f"error: {kernel_id}: {len(e.failed)} output file(s) not downloaded:"]
               + [f"  {name}: {why}" for name, why in e.failed.items()])
        return None


def version_dir(root: Path, slug: str, version: int | None) -> Path:
    """Where one version's output goes: ``root/<slug>/v<N>/`` (``root/<slug>/latest/`` when the
    version is unknown), so files of different versions never mix."""
    return Path(root) / slug / (f"v{version}" if version else "latest")


def _listed(written: list[Path] | None, dest: Path, name: str, kernel_id: str, version) -> Path:
    """``dest/name`` when the version's output listing held ``name`` (it was just downloaded).

    Raises:
        SubmitError: the listing did not hold it: the file is never taken from an earlier run.
    """
    path = dest / name
    if written is None or path not in written:
        held = sorted(p.relative_to(dest).as_posix() for p in written or [] if p.suffix != ".log")
        raise SubmitError(f"{kernel_id} version {version}: its output listing holds no {name!r} (it holds: "
                          f"{', '.join(held) or 'nothing'}): nothing was submitted (a file of an earlier run is never "
                          "submitted). Pass -f NAME for another output file")
    return path


def _score(a, api, competition: str, ref: int) -> int:
    s = wait_scored(api, ref, timeout=a.score_timeout, poll=a.score_poll)
    print(f"{competition}: submission {s.ref} ({s.file_name}) scored: public {s.public or '-'}"
          + (f", private {s.private}" if s.private else ""), flush=True)
    return 0


def _push_wait_download(a, st, api, dest_root: Path) -> tuple[int | None, bool, Path, list[Path] | None]:
    """Push one staged kernel, wait, download its version's output into its own folder
    (:func:`version_dir`); returns (version, ok, that folder, the files written)."""
    resp = push(st, api, retries=a.retries, retry_wait=a.retry_wait, timeout=a.session_timeout)
    version = resp.version_number or None
    print(f"{st.kernel_id}: pushed version {resp.version_number}: {resp.url}", flush=True)
    dest = version_dir(dest_root, st.folder.name, version)
    if dest.exists():  # an earlier download of this very version: replaced whole, never mixed
        shutil.rmtree(dest)
    try:
        wait(st.kernel_id, api, timeout=a.timeout, poll=a.poll, version=version, dest=dest_root)
    except WaitTimeout as e:
        _error(f"error: {e}")
        return version, False, dest, None
    except PushError as e:  # ERROR / CANCEL: the version's log (and what it wrote) still comes back
        _error(f"error: {e}")
        _download(st.kernel_id, api, dest, version)
        return version, False, dest, None
    written = _download(st.kernel_id, api, dest, version)
    return version, written is not None, dest, written


def _push_wait(a, st, api) -> tuple[int | None, bool]:
    resp = push(st, api, retries=a.retries, retry_wait=a.retry_wait, timeout=a.session_timeout)
    print(f"{st.kernel_id}: pushed version {resp.version_number}: {resp.url}", flush=True)
    try:
        wait(st.kernel_id, api, timeout=a.timeout, poll=a.poll, version=resp.version_number or None)
    except PushError as e:
        _error(f"error: {e}")
        return resp.version_number, False
    return resp.version_number, True


def _run(a, api, project: dict, staged, waves=None) -> int:
    """Each staged kernel in order: push, wait, download its version; stop at the first failure.
    The kernels of one wave (a fan-out's folds or seeds) run at once, at most ``--max-concurrent``,
    the rest queued (:func:`~.fanout.run_wave`). Then, with --submit, the last kernel's output is
    submitted and its score read back."""
    import requests

    from .fanout import run_wave

    waves = waves or list(range(len(staged)))
    groups: list[list[int]] = []
    for i, w in enumerate(waves):
        if groups and waves[groups[-1][0]] == w:
            groups[-1].append(i)
        else:
            groups.append([i])
    version, dest, written = None, None, None
    for g in groups:
        wave = [staged[i] for i in g]
        try:
            if len(wave) == 1:
                version, ok, dest, written = _push_wait_download(a, wave[0], api, a.output)
            else:
                ok, done = run_wave(a, api, wave, a.output, download_one=_download, version_dir=version_dir)
        except (PushError, requests.RequestException) as e:
            _error(f"error: {e}")
            ok = False
        if not ok:
            rest = [s.kernel_id for s in staged[g[-1] + 1:]]
            if rest:
                _error(f"error: not pushed: {', '.join(rest)} (they read {', '.join(s.kernel_id for s in wave)}'s output)")
            return 1
    if not a.submit:
        return 0
    last = staged[-1]
    competition = _competition(a, project)
    path = _listed(written, dest, a.file, last.kernel_id, version)
    _precheck(a, api, competition, path)
    left = check_allowance(api, competition)
    print(f"{competition}: {left} submission(s) left today", flush=True)
    if a.code:
        ref = submit_code(api, competition, last.kernel_id, version, a.file, description(a.message or f"{last.kernel_id} v{version}", path))
    else:
        ref = submit_file(api, competition, path, description(a.message or f"{last.kernel_id} v{version}", path))
    print(f"{competition}: submitted as {ref}; waiting for the score", flush=True)
    return _score(a, api, competition, ref)


def _precheck(a, api, competition: str, path: Path) -> None:
    """The local check of a file before a submission is spent on it (:func:`~.submit.precheck`);
    ``--force`` skips it, ``--code`` too (Kaggle reruns the kernel on the hidden test set).

    Raises:
        SubmitError: the file breaks a rule, or the sample submission could not be had.
    """
    if a.force or a.code:
        if a.force:
            print(f"{path}: not checked (--force)", flush=True)
        return
    sample = a.sample_submission or competition_sample(api, competition, Path(tempfile.mkdtemp(prefix="kaggle-sample-")))
    print(precheck(path, sample), flush=True)


def _submit(a, api) -> int:
    competition = _competition(a)
    if (a.file is None) == (a.kernel is None):
        _error("error: submit: give a FILE, or --kernel OWNER/SLUG [--version N] [-f OUTPUT_FILE]")
        return 2
    if a.kernel and a.code and a.version is None:
        _error("error: submit --code: --version N is required (the number push printed)")
        return 2
    path = a.file
    if a.kernel:  # that version's output, downloaded into a folder of its own; the file must be in its listing
        dest = Path(tempfile.mkdtemp(prefix="kaggle-output-"))
        written = _download(a.kernel, api, dest, a.version)
        if written is None:
            return 1
        path = _listed(written, dest, a.file_name, a.kernel, a.version or "latest")
    _precheck(a, api, competition, path)
    left = check_allowance(api, competition)
    print(f"{competition}: {left} submission(s) left today", flush=True)
    if a.kernel and a.code:
        ref = submit_code(api, competition, a.kernel, a.version, a.file_name, description(a.message or f"{a.kernel} v{a.version}", path))
    else:
        ref = submit_file(api, competition, path, description(a.message or path.name, path))
    print(f"{competition}: submitted as {ref}; waiting for the score", flush=True)
    return _score(a, api, competition, ref)


def _project(a, api) -> tuple[str, dict, Path] | None:
    """The kernel owner, the project's metadata and its notebooks folder; None (said) when the
    metadata's notebooks table and that folder disagree."""
    owner = getattr(a, "owner", None) or kaggle_username(api)
    project = load_project_metadata(a.metadata)
    notebooks_dir = a.metadata.parent / "notebooks"
    problems = entry_problems(project, notebooks_dir)
    if problems:
        _error([f"error: {a.metadata}: its notebooks table and {notebooks_dir} disagree:"] + [f"  {p}" for p in problems])
        return None
    return owner, project, notebooks_dir


def _stage_named(a, api) -> list | None:
    """Stage the notebooks named on the command line (default: every one); None (said) when the
    project or any kernel is invalid."""
    found = _project(a, api)
    if found is None:
        return None
    owner, project, notebooks_dir = found
    staged, invalid, _ = _stage_all(a, api, owner, project, notebook_paths(a.notebooks or None, notebooks_dir))
    return None if invalid else staged


def _valid(a, staged) -> int:
    """Say how many kernels are valid (``stage``, ``validate``, ``push --dry-run``)."""
    print(f"{len(staged)} kernel(s) valid" + ("; dry run: nothing sent" if a.cmd != "stage" else ""))
    return 0


def _cmd_stage(a, api) -> int:
    """``stage`` and ``validate``: stage and validate the kernels, send nothing."""
    staged = _stage_named(a, api)
    return 2 if staged is None else _valid(a, staged)


def _push_one(a, st, api) -> bool:
    """Push one staged kernel (with ``--wait``, wait for it and download its output); False when it failed (said)."""
    import requests

    try:
        if a.wait:
            return _push_wait_download(a, st, api, a.output)[1] if a.output else _push_wait(a, st, api)[1]
        resp = push(st, api, retries=a.retries, retry_wait=a.retry_wait, timeout=a.session_timeout)
        print(f"{st.kernel_id}: pushed version {resp.version_number}: {resp.url}", flush=True)
        return True
    except (PushError, requests.RequestException) as e:
        _error(f"error: {e}")
        return False


def _cmd_push(a, api) -> int:
    """``push``: stage, validate and push each kernel (``--dry-run``: send nothing)."""
    staged = _stage_named(a, api)
    if staged is None:
        return 2
    if a.dry_run:
        return _valid(a, staged)
    failed = sum(not _push_one(a, st, api) for st in staged)
    return 1 if failed else 0


def _chain_units(a, project: dict, notebooks_dir: Path) -> tuple[list[Path], list | None]:
    """``run``'s targets as notebooks in chain order, and the fan-out's units with ``--folds`` or
    ``--seeds`` (:func:`~.fanout.plan`; None without)."""
    names = [n for t in a.targets for n in chain(project, Path(t).stem if t.endswith((".py", ".ipynb")) else t)]
    check_order(project, names, "run " + " ".join(a.targets))
    notebooks = notebook_paths(names, notebooks_dir)
    if not a.folds and a.seeds is None:
        return notebooks, None
    from .fanout import plan

    return notebooks, plan(project, names, folds=a.folds, seeds=a.seeds,
                           defaults={py.stem: notebook_defaults(read_notebook(py)) for py in notebooks})


def _cmd_run(a, api) -> int:
    """``run``: stage a chain (or its fan-out), then push, wait and download it kernel by kernel (:func:`_run`)."""
    found = _project(a, api)
    if found is None:
        return 2
    owner, project, notebooks_dir = found
    notebooks, units = _chain_units(a, project, notebooks_dir)
    staged, invalid, waves = _stage_all(a, api, owner, project, notebooks, table=True, units=units)
    if invalid:
        return 2
    return _run(a, api, project, staged, waves)


def _cmd_run_local(a, api) -> int:
    """``run-local``: one notebook executed in a /kaggle-like folder (:func:`_run_local`)."""
    found = _project(a, api)
    return 2 if found is None else _run_local(a, api, *found)


def _cmd_status(a, api) -> int:
    """``status``: print a run's status; 1 when it is ERROR."""
    from .sdk import kernel_status

    owner, slug, _ = api.parse_kernel_string(a.kernel)
    with api.build_kaggle_client() as kaggle:
        resp = kernel_status(kaggle, owner, slug, a.version)
    status = getattr(resp.status, "name", str(resp.status))
    print(f"{a.kernel}: {status}" + (f": {resp.failure_message}" if resp.failure_message else ""))
    return 0 if status != "ERROR" else 1


def _cmd_output(a, api) -> int:
    """``output``: download a run's output files and log into its version's folder (:func:`version_dir`)."""
    dest = version_dir(a.dest, a.kernel.split("/")[-1], a.version)
    return 0 if _download(a.kernel, api, dest, a.version) is not None else 1


def _cmd_submissions(a, api) -> int:
    """``submissions``: list the competition's submissions with their scores and the runs they came from."""
    competition = _competition(a)
    subs = list_submissions(api, competition)
    print(f"{competition}: {len(subs)} submission(s)")
    for s in subs:
        print(format_submission(s))
        for line in run_lines(s, [a.runs_root, ROOT / "artifacts"]):
            print(line)
    return 0


def _cmd_publish(a, api) -> int:
    """``publish``: a checkpoint as a new data set version, recorded in the entries that attach it."""
    from .publish import PublishError, publish, record

    try:
        done = publish(a.source, a.dataset, api, message=a.message)
    except PublishError as e:
        _error(f"error: {e}")
        return 1
    print(f"{a.dataset}: {'created' if done['created'] else 'new version'} from {done['folder']} "
          f"({len(done['files'])} files: {', '.join(done['files'])})", flush=True)
    for line in record(a.metadata, a.dataset, done["model"], a.attach):
        print(f"{a.metadata}: {line}", flush=True)
    if not a.attach and not done["model"]:
        print(f"attach it: python -m kaggle_kit publish ... --attach xla_multicore_inference, or add "
              f"\"dataset_sources\": [\"{a.dataset}\"] to that entry (model=\"auto\" finds it under /kaggle/input)")
    return 0


def _cmd_wheels(a, api) -> int:
    """``wheels``: build the wheels a notebook needs that its image lacks, publish them as a data set
    version and record them (``wheels_sources``): staging then attaches them and installs them offline."""
    from .publish import PublishError, check_dataset_id, publish_folder
    from .wheels import WheelsError, plan, record
    from .wheels import build as build_wheels

    try:
        check_dataset_id(a.dataset)
        py, image, wanted = plan(a.notebook, a.metadata, parse_assignments(a.parameter), a.extra)
        for dist, (version, why) in sorted(wanted.items()):
            print(f"{py.stem}: {dist}{'==' + version if version else ''}: {why}", flush=True)
        folder = a.out / py.stem
        manifest = build_wheels(wanted, image, folder, a.dataset, a.find_links)
    except (WheelsError, PublishError, ValueError) as e:
        _error(f"error: {e}")
        return 2
    print(f"{folder}: {', '.join(w['file'] for w in manifest['wheels'])} for Kaggle's {image.name} image "
          f"(Python {image.python})", flush=True)
    if a.dry_run:
        print("dry run: nothing published, nothing recorded")
        return 0
    try:
        done = publish_folder(folder, f"the wheels of {py.stem}", a.dataset, api,
                              message=a.message or f"kaggle_kit wheels {py.stem}")
    except PublishError as e:
        _error(f"error: {e}")
        return 1
    print(f"{a.dataset}: {'created' if done['created'] else 'new version'} ({len(done['files'])} files)", flush=True)
    for line in record(a.metadata, py.stem, manifest):
        print(f"{a.metadata}: {line}", flush=True)
    return 0


# The subcommands, in --help's order: name -> (help, add its arguments, run it: (args, api) -> exit status).
COMMANDS = {
    "stage": ("stage kernel folders (vendored kitlib + kernel-metadata.json) and validate them", _stage_args, _cmd_stage),
    "validate": ("= push --dry-run: stage and validate, send nothing", _stage_args, _cmd_stage),
    "push": ("stage, validate and push; optionally wait for the run and download its output", _push_args, _cmd_push),
    "run": ("push, wait, download, optionally submit: one notebook or a chain", _run_args, _cmd_run),
    "submit": ("submit a file, or a kernel's output, and wait for its score", _submit_args, _submit),
    "publish": ("publish a checkpoint as a new version of a Kaggle data set (kernels attach it by name)", _publish_args, _cmd_publish),
    "wheels": ("build the wheels a notebook needs that its Kaggle image lacks, publish them as a data set, attach them",
               _wheels_args, _cmd_wheels),
    "submissions": ("list what was submitted, with the scores and the run each came from", _submissions_args, _cmd_submissions),
    "status": ("a run's status", _status_args, _cmd_status),
    "output": ("download a run's output files and log", _output_args, _cmd_output),
    "run-local": ("stage and execute one notebook with papermill in a /kaggle-like folder", _run_local_args, _cmd_run_local),
}


def _parser() -> argparse.ArgumentParser:
    """The command line: one subparser per row of :data:`COMMANDS`."""
    p = argparse.ArgumentParser(prog="scripts/kernels.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, (what, add_arguments, _) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=what))
    return p


def _sends(a) -> bool:
    """Whether the command talks to Kaggle (so it needs credentials): all but stage, validate,
    run-local, ``push --dry-run`` and ``wheels --dry-run``."""
    return (a.cmd in ("status", "output", "run", "submit", "submissions", "publish")
            or (a.cmd in ("push", "wheels") and not a.dry_run))


def _guarded(command, a, api) -> int:
    """Run one command, its refusals turned into exit statuses: 1 a Kaggle call or a submission
    failed, 2 invalid metadata or parameters, or a missing file."""
    import requests

    try:
        return command(a, api)
    except requests.RequestException as e:  # status/output calls, or the network
        _error(f"error: Kaggle API call failed: {type(e).__name__}: {e}")
        return 1
    except SubmitError as e:
        _error(f"error: {e}")
        return 1
    except (MetadataError, ParameterError, FileNotFoundError) as e:
        _error(f"error: {e}")
        return 2


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status (0, 1, 2 or 3)."""
    a = _parser().parse_args(argv)
    if a.cmd == "push" and not a.notebooks and not a.all:
        _error("error: push: name the notebooks to push (each starts a Kaggle session; an inference kernel pushed "
               "before its training kernel has finished reads the old output), or pass --all; to run training then "
               "inference use: run CHAIN")
        return 2
    try:
        api = kaggle_api(require_credentials=_sends(a))  # before any work: a clear message, exit 3
    except CredentialsError as e:
        _error(f"error: {e}")
        return 3
    return _guarded(COMMANDS[a.cmd][2], a, api)


__all__ = ["main", "output_command"]
