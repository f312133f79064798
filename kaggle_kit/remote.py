"""Push a staged kernel, wait for its run, download what the run wrote: Kaggle's API through the ``kaggle`` client."""
from __future__ import annotations

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


def list_outputs(kernel_id: str, api, max_pages: int = 1000) -> tuple[list[tuple[str, str]], str]:
    """Every output file of the latest run, following ``nextPageToken`` through every page.

    ``KaggleApi.kernels_output`` (kaggle 2.2.1) reads only the first page of
    ``ListKernelSessionOutput`` (Kaggle pages it, 500 files a page); this asks for each page in
    turn with the client's own request type.

    Returns:
        ([(file name, download url), ...], the run's log).

    Raises:
        PushError: a page token repeats, or more than ``max_pages`` pages.
        requests.HTTPError: the listing failed.
    """
    from kagglesdk.kernels.types.kernels_api_service import ApiListKernelSessionOutputRequest

    owner, slug, _ = api.parse_kernel_string(kernel_id)
    files: list[tuple[str, str]] = []
    log, token, seen = "", "", set()
    with api.build_kaggle_client() as kaggle:
        for _ in range(max_pages):
            request = ApiListKernelSessionOutputRequest()
            request.user_name, request.kernel_slug = owner, slug
            if token:
                request.page_token = token
            resp = kaggle.kernels.kernels_api_client.list_kernel_session_output(request)
            files += [(f.file_name, f.url) for f in resp.files or []]
            log = log or resp.log or ""
            token = resp.next_page_token or ""
            if not token:
                return files, log
            if token in seen:
                raise PushError(f"{kernel_id}: the output listing repeats page token {token!r}")
            seen.add(token)
    raise PushError(f"{kernel_id}: the output listing has more than {max_pages} pages")


def _write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (:func:`kitlib.atomic.atomic_write`: never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def download(kernel_id: str, api, dest: Path, timeout: float = 300.0) -> list[Path]:
    """Download every output file of the latest run, and its log (``<slug>.log``), into ``dest``.

    Every page of the listing is read (:func:`list_outputs`). A file is written only when its
    download answers HTTP 200, through a temporary file, so an error body never lands on disk
    and never replaces an earlier good copy. Each file's size is printed; an empty file is
    written and warned about. A name that would leave ``dest`` (absolute, ``..``) is refused.

    Returns:
        The paths written.

    Raises:
        DownloadError: after trying every file, when any failed (the others are written).
        requests.HTTPError: the listing failed.
    """
    import requests

    dest = Path(dest)
    files, log = list_outputs(kernel_id, api)
    written, failed = [], {}
    for name, url in files:
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            failed[name] = "refused: the name leaves the output folder"
            continue
        try:
            r = requests.get(url, timeout=timeout)
        except requests.RequestException as e:
            failed[name] = f"{type(e).__name__}: {e}"
            continue
        if r.status_code != 200:
            failed[name] = f"HTTP {r.status_code}: {r.text[:200].strip()}"
            continue
        path = dest.joinpath(*rel.parts)
        _write_atomic(path, r.content)
        written.append(path)
        print(f"downloaded {path} ({len(r.content)} bytes)", flush=True)
        if not r.content:
            print(f"warning: {kernel_id}: output {name} is empty (0 bytes)", file=sys.stderr, flush=True)
    if log:
        path = dest / f"{api.parse_kernel_string(kernel_id)[1]}.log"
        _write_atomic(path, log.encode("utf-8"))
        written.append(path)
        print(f"downloaded {path} ({path.stat().st_size} bytes, the run's log)", flush=True)
    if not files:
        print(f"{kernel_id}: the run listed no output files", flush=True)
    if failed:
        raise DownloadError(kernel_id, failed)
    return written
