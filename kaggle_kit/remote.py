"""Push a staged kernel, wait for its run, download what the run wrote: Kaggle's API through the ``kaggle`` client.

Waiting and downloading address one version (the number the push answered; :mod:`.sdk` sends
``versionLabel``), so a run that is still going never hands over the previous version's files.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path, PurePosixPath

from kitlib.atomic import atomic_write

from .stage import Staged


class PushError(RuntimeError):
    """Kaggle refused a push, or a run failed or timed out."""


class DownloadError(RuntimeError):
    """Some output files could not be downloaded; ``failed`` maps each file name to the reason."""

    def __init__(self, kernel_id: str, failed: dict[str, str]) -> None:
        self.failed = failed
        super().__init__(f"{kernel_id}: {len(failed)} output file(s) not downloaded: "
                         + "; ".join(f"{k}: {v}" for k, v in failed.items()))


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
        except (ValueError, UnicodeError) as e:  # kernels_push's own client-side checks
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
# Kaggle's longest session (TPU: 9 hours; GPU and CPU: 12): a run cannot outlast it, so waiting longer is pointless.
# keyed by the accelerator's kind (accelerators.Accelerator.kind)
SESSION_LIMIT_S = {"tpu": 9 * 3600, "gpu": 12 * 3600, "none": 12 * 3600}
DEFAULT_WAIT_S = SESSION_LIMIT_S["tpu"]
HEARTBEAT_S = 300.0  # a status line at least this often while waiting


class WaitTimeout(PushError):
    """The wait ended before the run did; the run goes on on Kaggle (``command`` fetches its output later)."""

    def __init__(self, message: str, command: str) -> None:
        self.command = command
        super().__init__(message)


def _elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s"


def log_text(log: str) -> str:
    """Kaggle's run log as text: the listing gives it as JSON (``[{"stream_name", "time", "data"}, ...]``);
    the ``data`` parts are joined. Text that is not that JSON is returned as it is."""
    try:
        entries = json.loads(log)
    except ValueError:
        return log
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return log
    return "".join(str(e.get("data", "")) for e in entries)


def output_command(kernel_id: str, version: int | None, dest: Path) -> str:
    """The command that downloads ``kernel_id``'s output (of ``version``) into ``dest`` later."""
    v = f" --version {version}" if version else ""
    return f"python scripts/kernels.py output {kernel_id}{v} -o {dest}"


def wait(kernel_id: str, api, *, timeout: float = DEFAULT_WAIT_S, poll: float = 30.0, version: int | None = None,
         dest: Path | None = None, tail: int = 5) -> str:
    """Poll the run's status until it ends or ``timeout`` seconds pass, saying how it goes.

    Statuses (kagglesdk ``KernelWorkerStatus``): QUEUED and RUNNING wait; COMPLETE returns;
    ERROR and CANCEL_* raise. Each change of status, and a line at least every
    :data:`HEARTBEAT_S` seconds, is printed with the time elapsed; while RUNNING, new lines of the
    run's log (its last ``tail`` lines; what the version's output listing holds so far) are printed.

    Args:
        version: the version pushed (None: the latest run).
        dest: where the output would go (named in the timeout's command).

    Returns:
        ``"COMPLETE"``.

    Raises:
        PushError: the run ended in ERROR/CANCEL_* (with Kaggle's failure message).
        WaitTimeout: ``timeout`` passed; the run goes on, the message gives the command that
            downloads its output later.
    """
    from .sdk import kernel_status

    owner, slug, _ = api.parse_kernel_string(kernel_id)
    t0 = time.monotonic()
    last, last_line, seen = None, 0.0, 0
    label = f"{kernel_id}" + (f" version {version}" if version else "")
    while True:
        with api.build_kaggle_client() as kaggle:
            resp = kernel_status(kaggle, owner, slug, version)
        status = getattr(resp.status, "name", str(resp.status))
        now = time.monotonic() - t0
        if status != last or now - last_line >= HEARTBEAT_S:
            print(f"{label}: {status} ({_elapsed(now)} elapsed)", flush=True)
            last, last_line = status, now
        if status == "RUNNING" and tail:
            try:
                _, log = list_outputs(kernel_id, api, version=version, page_size=1)
            except Exception:  # the log is a courtesy: a failed read never stops the wait
                log = ""
            lines = log_text(log).splitlines()
            for line in lines[max(seen, len(lines) - tail):]:
                print(f"  | {line}", flush=True)
            seen = max(seen, len(lines))
        if status in TERMINAL:
            if TERMINAL[status]:
                return status
            msg = getattr(resp, "failure_message", "") or ""
            raise PushError(f"{label}: run ended {status}" + (f": {msg}" if msg else ""))
        if time.monotonic() - t0 + poll > timeout:
            cmd = output_command(kernel_id, version, dest or Path("outputs") / "kernels")
            raise WaitTimeout(f"{label}: still {status} after {timeout:g} s (timeout). The run goes on on Kaggle; "
                              f"nothing was downloaded. When it has finished, fetch its output with:\n  {cmd}", cmd)
        time.sleep(poll)


def list_outputs(kernel_id: str, api, max_pages: int = 1000, version: int | None = None,
                 page_size: int | None = None) -> tuple[list[tuple[str, str]], str]:
    """Every output file of the latest run, following ``nextPageToken`` through every page.

    ``KaggleApi.kernels_output`` (kaggle 2.2.1 and 2.2.5) reads only the first page of
    ``ListKernelSessionOutput`` (Kaggle pages it, 500 files a page); this asks for each page in
    turn with the client's own request type.

    With ``version``, that version's output (``versionLabel``, :mod:`.sdk`); without, the
    latest run's (on Kaggle, while a new version runs: the previous one's).

    Returns:
        ([(file name, download url), ...], the run's log as Kaggle gives it).

    Raises:
        PushError: a page token repeats, or more than ``max_pages`` pages.
        requests.HTTPError: the listing failed.
    """
    from .sdk import OutputRequest as ApiListKernelSessionOutputRequest

    owner, slug, _ = api.parse_kernel_string(kernel_id)
    files: list[tuple[str, str]] = []
    log, token, seen = "", "", set()
    with api.build_kaggle_client() as kaggle:
        for _ in range(max_pages):
            request = ApiListKernelSessionOutputRequest()
            request.user_name, request.kernel_slug = owner, slug
            if version is not None:
                request.version_label = str(version)
            if page_size:
                request.page_size = page_size
            if token:
                request.page_token = token
            resp = kaggle.kernels.kernels_api_client.list_kernel_session_output(request)
            files += [(f.file_name, f.url) for f in resp.files or []]
            log = log or resp.log or ""
            token = resp.next_page_token or ""
            if not token or page_size:
                return files, log
            if token in seen:
                raise PushError(f"{kernel_id}: the output listing repeats page token {token!r}")
            seen.add(token)
    raise PushError(f"{kernel_id}: the output listing has more than {max_pages} pages")


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (:func:`kitlib.atomic.atomic_write`: never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


class _HTTPStatus(Exception):
    def __init__(self, status: int, text: str) -> None:
        self.status, self.text = status, text


def _stream_to(path: Path, url: str, timeout: float, chunk: int = 1 << 20) -> int:
    """Stream ``url`` into ``path`` (atomically, through a temporary file beside it), with a progress
    bar on stderr for files over a chunk; returns the bytes written. Only an HTTP 200 writes anything.

    Raises:
        _HTTPStatus: the answer was not 200 (nothing written).
        requests.RequestException: the download failed (nothing written).
    """
    import requests
    from tqdm.auto import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    with requests.get(url, timeout=timeout, stream=True) as r:
        if r.status_code != 200:
            raise _HTTPStatus(r.status_code, r.text[:200].strip())
        total = int(r.headers.get("Content-Length") or 0) or None
        written = 0

        def write(tmp: str) -> None:
            nonlocal written
            with open(tmp, "wb") as f, tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=path.name,
                                           file=sys.stderr, disable=not total or total <= chunk, leave=False) as bar:
                for block in r.iter_content(chunk_size=chunk):
                    f.write(block)
                    written += len(block)
                    bar.update(len(block))

        atomic_write(path, write)
    return written


def download(kernel_id: str, api, dest: Path, timeout: float = 300.0, version: int | None = None) -> list[Path]:
    """Download every output file of the run (of ``version``, else the latest), and its log as
    text (``<slug>.log``), into ``dest``.

    Every page of the listing is read (:func:`list_outputs`). Each file streams to disk (never
    held whole in memory; a progress bar for large ones) and is written only when its download
    answers HTTP 200, through a temporary file, so an error body never lands on disk and never
    replaces an earlier good copy. Each file's size is printed; an empty file is written and
    warned about. A name that would leave ``dest`` (absolute, ``..``) is refused.

    Returns:
        The paths written.

    Raises:
        DownloadError: after trying every file, when any failed (the others are written).
        requests.HTTPError: the listing failed.
    """
    import requests

    dest = Path(dest)
    files, log = list_outputs(kernel_id, api, version=version)
    written, failed = [], {}
    for name, url in files:
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            failed[name] = "refused: the name leaves the output folder"
            continue
        path = dest.joinpath(*rel.parts)
        try:
            size = _stream_to(path, url, timeout)
        except _HTTPStatus as e:
            failed[name] = f"HTTP {e.status}: {e.text}"
            continue
        except requests.RequestException as e:
            failed[name] = f"{type(e).__name__}: {e}"
            continue
        written.append(path)
        print(f"downloaded {path} ({size} bytes)", flush=True)
        if not size:
            print(f"warning: {kernel_id}: output {name} is empty (0 bytes)", file=sys.stderr, flush=True)
    if log:
        path = dest / f"{api.parse_kernel_string(kernel_id)[1]}.log"
        _write_atomic(path, log_text(log).encode("utf-8"))
        written.append(path)
        print(f"downloaded {path} ({path.stat().st_size} bytes, the run's log as text)", flush=True)
    if not files:
        print(f"{kernel_id}: the run listed no output files", flush=True)
    if failed:
        raise DownloadError(kernel_id, failed)
    return written
