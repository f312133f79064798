"""Kaggle kernels from the paired notebooks: stage, validate, push, wait, download, run as Kaggle would.

::

    python scripts/kernels.py stage     [NOTEBOOK ...] [--owner NAME] [--out build/kernels]
    python scripts/kernels.py validate  [NOTEBOOK ...] [--owner NAME]     # = push --dry-run
    python scripts/kernels.py push      [NOTEBOOK ...] [--dry-run] [--wait] [--timeout S] [--output DIR]
    python scripts/kernels.py status    OWNER/SLUG
    python scripts/kernels.py output    OWNER/SLUG [-o DIR]
    python scripts/kernels.py run-local NOTEBOOK [--root DIR] [--data data/jigsaw-sample] [-p NAME VALUE]

NOTEBOOK is ``notebooks/X.py``, ``notebooks/X.ipynb`` or ``X``; the default is every notebook
in the ``notebooks/`` folder next to ``--metadata`` (the repository's ``kernel-metadata.json``).

Exit status: 0 success; 1 the push, run or download failed (including a server-side
"Kernel push error", on which ``kaggle kernels push`` itself exits 0, and any output file that
could not be downloaded); 2 invalid metadata, a notebook pair out of sync, an unknown
``run-local`` parameter, or bad usage; 3 no Kaggle credentials (said before any work).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from .client import CredentialsError, kaggle_api, kaggle_username
from .local import ParameterError, run_local
from .project import entry_problems, load_project_metadata
from .remote import DownloadError, PushError, download, push, wait
from .rules import MetadataError
from .stage import notebook_paths, stage
from .vendor import KITLIB, vendored_files

ROOT = Path(__file__).resolve().parents[1]
PROJECT_METADATA = ROOT / "kernel-metadata.json"
BUILD = ROOT / "build" / "kernels"
SAMPLE_DATA = ROOT / "data" / "jigsaw-sample"


def _parse_value(v: str):
    try:
        return json.loads(v)
    except ValueError:
        return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/kernels.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def staging(sp):
        sp.add_argument("notebooks", nargs="*", help="notebooks/X.py, X.ipynb or X (default: every notebook)")
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
                    help="a parameter of the notebook's parameters cell (VALUE parsed as JSON when it can be)")
    sp.add_argument("--owner", default=None, help="kernel owner for the id (default: the Kaggle user, else 'local')")
    sp.add_argument("--metadata", type=Path, default=PROJECT_METADATA)
    sp.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    return p


def _error(lines) -> None:
    for line in ([lines] if isinstance(lines, str) else lines):
        print(line, file=sys.stderr)


def _run_local(a, api, owner, project, notebooks_dir) -> int:
    import papermill

    root = a.root or Path(tempfile.mkdtemp(prefix="kaggle-run-"))
    st = stage(notebook_paths([a.notebook], notebooks_dir)[0], root / "kernel", owner or "local", project, KITLIB, api)
    try:
        work = run_local(st, root, a.data, {k: _parse_value(v) for k, v in a.parameter}, a.timeout)
    except ParameterError as e:
        _error(f"error: {e}")
        return 2
    except papermill.PapermillExecutionError as e:
        _error(f"error: {st.source}: cell {e.exec_count} raised {e.ename}: {e.evalue} "
               f"(executed notebook: {root / '__notebook__.ipynb'})")
        return 1
    print(f"{st.source}: ran as Kaggle would in {root} (executed notebook {root / '__notebook__.ipynb'})")
    for f in sorted(work.rglob("*")):
        if f.is_file() and "kitlib" not in f.relative_to(work).parts:
            print(f"  output {f.relative_to(work)} ({f.stat().st_size} bytes)")
    return 0


def _download(kernel_id: str, api, dest: Path) -> bool:
    try:
        download(kernel_id, api, dest)
        return True
    except DownloadError as e:
        _error([f"error: {kernel_id}: {len(e.failed)} output file(s) not downloaded:"]
               + [f"  {name}: {why}" for name, why in e.failed.items()])
        return False


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status (0, 1, 2 or 3)."""
    import requests

    a = _parser().parse_args(argv)
    sending = a.cmd in ("status", "output") or (a.cmd == "push" and not a.dry_run)
    try:
        api = kaggle_api(require_credentials=sending)  # before any work: a clear message, exit 3
    except CredentialsError as e:
        _error(f"error: {e}")
        return 3
    try:
        if a.cmd == "status":
            resp = api.kernels_status(a.kernel)
            status = getattr(resp.status, "name", str(resp.status))
            print(f"{a.kernel}: {status}" + (f": {resp.failure_message}" if resp.failure_message else ""))
            return 0 if status != "ERROR" else 1
        if a.cmd == "output":
            return 0 if _download(a.kernel, api, a.dest / a.kernel.split("/")[-1]) else 1
        owner = getattr(a, "owner", None) or kaggle_username(api)
        project = load_project_metadata(a.metadata)
        notebooks_dir = a.metadata.parent / "notebooks"
        problems = entry_problems(project, notebooks_dir)
        if problems:
            _error([f"error: {a.metadata}: its notebooks table and {notebooks_dir} disagree:"] + [f"  {p}" for p in problems])
            return 2
        if a.cmd == "run-local":
            return _run_local(a, api, owner, project, notebooks_dir)
        staged, invalid = [], 0
        for py in notebook_paths(a.notebooks, notebooks_dir):
            try:
                st = stage(py, a.out, owner, project, KITLIB, api)
            except MetadataError as e:
                _error([f"error: {py}: invalid kernel:"] + [f"  {msg}" for msg in e.problems])
                invalid += 1
                continue
            staged.append(st)
            for w in st.warnings:
                _error(f"warning: {py}: {w}")
            cell = next(c for c in json.loads(st.notebook.read_text(encoding="ascii"))["cells"]
                        if c.get("id") == "kitlib-vendored")
            n = len(vendored_files("".join(cell["source"])))
            print(f"{py}: staged {st.folder} as {st.kernel_id} ({st.accelerator}, "
                  f"{st.metadata.get('machine_shape') or 'no accelerator'}; kitlib {n} modules vendored)")
        if invalid:
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
                        if a.output and not _download(st.kernel_id, api, a.output / st.folder.name):
                            failed += 1
            except (PushError, requests.RequestException) as e:
                _error(f"error: {e}")
                failed += 1
        return 1 if failed else 0
    except requests.RequestException as e:  # status/output calls, or the network
        _error(f"error: Kaggle API call failed: {type(e).__name__}: {e}")
        return 1
    except MetadataError as e:
        _error(f"error: {e}")
        return 2
    except FileNotFoundError as e:
        _error(f"error: {e}")
        return 2
