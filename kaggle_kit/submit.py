"""Submit to a competition and read the score back, through the installed kagglesdk (:mod:`.sdk`).

The calls are the ones ``kaggle competitions submit`` makes (kaggle 2.2.5):

* a file: ``StartSubmissionUpload`` (file name, size, mtime) answers a blob token and an upload
  URL; the file is sent there by ``PUT`` (streamed from disk); ``CreateSubmission`` (the token,
  a description) answers the submission's ``ref``;
* a code competition: ``CreateCodeSubmission`` (kernel owner, slug, version, output file name),
  the version being the number ``kernels push`` printed;
* then ``GetSubmission(ref)`` is polled until the status leaves PENDING: COMPLETE carries the
  public (and, after the deadline, private) score; ERROR its reason.

Before anything is sent, the file is checked locally against the competition's sample submission
(:func:`precheck`, the merger's rules; ``--force`` skips it), and ``GetSubmissionLimits`` says how
many submissions are left today (UTC); none left is a refusal (Kaggle would answer HTTP 400 after
the upload).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .sdk import submission_limits


class SubmitError(RuntimeError):
    """A submission refused (no submissions left, HTTP error), failed in scoring (ERROR) or not scored in time."""


@dataclass(frozen=True)
class Score:
    """A scored submission: ``ref``, ``status`` (COMPLETE), ``public`` and ``private`` (str or None), ``file_name``."""

    ref: int
    status: str
    public: str | None
    private: str | None
    file_name: str


def _status(sub) -> str:
    return getattr(sub.status, "name", str(sub.status))


def remaining_today(api, competition: str) -> int:
    """Submissions left today (UTC) for the authenticated user's team (``GetSubmissionLimits``)."""
    with api.build_kaggle_client() as kaggle:
        return int(submission_limits(kaggle, competition).num_allowed_now)


def check_allowance(api, competition: str) -> int:
    """Refuse when no submission is left today; else return how many are left.

    Raises:
        SubmitError: none left ("0 of today's submissions left").
    """
    with api.build_kaggle_client() as kaggle:
        lim = submission_limits(kaggle, competition)
    if lim.num_allowed_now <= 0:
        cap = "the competition's total cap" if lim.limited_by_total else "the daily cap (resets at 00:00 UTC)"
        raise SubmitError(f"{competition}: no submissions left today (0 remaining; {lim.num_today} made today, "
                          f"{lim.num_total} in all; limited by {cap}): nothing was sent")
    return int(lim.num_allowed_now)


SAMPLE_SUBMISSION = "sample_submission.csv"  # the competition's file whose ids and columns a submission must have


def competition_sample(api, competition: str, dest: Path) -> Path:
    """The competition's ``sample_submission.csv``, downloaded into ``dest`` by the kaggle client
    (``KaggleApi.competition_download_file``: ``DownloadDataFile``; unzipped when Kaggle zips it).

    Raises:
        SubmitError: the download failed (the message says how to pass the file instead).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        api.competition_download_file(competition, SAMPLE_SUBMISSION, path=str(dest), force=True, quiet=True, unzip=True)
    except Exception as e:  # requests' HTTPError, a refused competition (rules not accepted), ...
        raise SubmitError(f"{competition}: could not download {SAMPLE_SUBMISSION} to check the file before submitting "
                          f"({type(e).__name__}: {e}): pass --sample-submission FILE, or --force to submit unchecked") from None
    path = dest / SAMPLE_SUBMISSION
    if not path.is_file():
        raise SubmitError(f"{competition}: the download wrote no {path}: pass --sample-submission FILE, or --force")
    return path


def precheck(path: Path, sample_submission: Path) -> str:
    """Check a submission locally before a submission is spent on it, by the merger's rules
    (:func:`kitlib.outputs.blend.check_submission`: the sample submission's ids, each once, its prediction
    columns, finite values in [0, 1]). Returns a one-line summary.

    Raises:
        SubmitError: the file breaks a rule (naming the file, the column and the ids); nothing is sent.
    """
    from kitlib.outputs.blend import BlendError, check_submission

    try:
        rows, columns, notes = check_submission(path, sample_submission)
    except BlendError as e:
        raise SubmitError(f"{e}. Refused before uploading (checked against {sample_submission}; nothing was sent, "
                          "no submission spent); --force submits it unchecked") from None
    return (f"{path}: {rows} rows, columns {', '.join(columns)}: the ids and columns of {sample_submission}, values in [0, 1]"
            + "".join(f"; note: {n}" for n in notes))


def submit_file(api, competition: str, path: Path, message: str) -> int:
    """Upload ``path`` and create a submission; returns its ``ref``.

    Raises:
        SubmitError: the file is missing or empty, the upload failed, or Kaggle refused it.
        requests.HTTPError: a call failed.
    """
    import requests
    from kagglesdk.competitions.types.competition_api_service import (
        ApiCreateSubmissionRequest,
        ApiStartSubmissionUploadRequest,
    )

    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        raise SubmitError(f"{path}: {'empty' if path.is_file() else 'no such file'}: nothing to submit")
    with api.build_kaggle_client() as kaggle:
        start = ApiStartSubmissionUploadRequest()
        start.competition_name = competition
        start.file_name = path.name
        start.content_length = path.stat().st_size
        start.last_modified_epoch_seconds = int(os.path.getmtime(path))
        upload = kaggle.competitions.competition_api_client.start_submission_upload(start)
        with open(path, "rb") as f:
            r = requests.put(upload.create_url, data=f, timeout=600)
        if r.status_code not in (200, 201):
            raise SubmitError(f"{path}: upload failed: HTTP {r.status_code}: {r.text[:200].strip()}")
        create = ApiCreateSubmissionRequest()
        create.competition_name = competition
        create.blob_file_tokens = upload.token
        create.submission_description = message
        resp = kaggle.competitions.competition_api_client.create_submission(create)
    if not resp.ref:
        raise SubmitError(f"{path}: Kaggle did not create a submission: {resp.message}")
    return int(resp.ref)


def submit_code(api, competition: str, kernel_id: str, version: int, file_name: str, message: str) -> int:
    """Submit a code competition's kernel version by its output ``file_name``; returns the ``ref``.

    Raises:
        SubmitError: ``kernel_id`` is not ``owner/slug``, or Kaggle created no submission.
        requests.HTTPError: the call failed.
    """
    from kagglesdk.competitions.types.competition_api_service import ApiCreateCodeSubmissionRequest

    owner, _, slug = kernel_id.partition("/")
    if not owner or not slug or "/" in slug:
        raise SubmitError(f"kernel {kernel_id!r}: write owner/slug (and the version with --version)")
    with api.build_kaggle_client() as kaggle:
        req = ApiCreateCodeSubmissionRequest()
        req.competition_name = competition
        req.kernel_owner, req.kernel_slug, req.kernel_version = owner, slug, int(version)
        req.file_name = file_name
        req.submission_description = message
        resp = kaggle.competitions.competition_api_client.create_code_submission(req)
    if not resp.ref:
        raise SubmitError(f"{kernel_id} version {version}: Kaggle did not create a submission: {resp.message}")
    return int(resp.ref)


def wait_scored(api, ref: int, *, timeout: float = 1800.0, poll: float = 10.0, say=print) -> Score:
    """Poll ``GetSubmission(ref)`` until COMPLETE (returned) or ERROR / ``timeout`` seconds (raised).

    Raises:
        SubmitError: ERROR (with Kaggle's reason) or still PENDING after ``timeout`` (the
            submission stays on Kaggle; ``submissions`` shows it later).
    """
    from kagglesdk.competitions.types.competition_api_service import ApiGetSubmissionRequest

    t0 = time.monotonic()
    last = None
    with api.build_kaggle_client() as kaggle:
        while True:
            req = ApiGetSubmissionRequest()
            req.ref = int(ref)
            sub = kaggle.competitions.competition_api_client.get_submission(req)
            status = _status(sub)
            if status != last:
                say(f"submission {ref}: {status} ({time.monotonic() - t0:.0f} s)")
                last = status
            if status == "COMPLETE":
                return Score(int(ref), status, sub.public_score or None, sub.private_score or None, sub.file_name)
            if status == "ERROR":
                raise SubmitError(f"submission {ref} ({sub.file_name}) ended ERROR: {sub.error_description or 'no reason given'}")
            if time.monotonic() - t0 + poll > timeout:
                raise SubmitError(f"submission {ref}: still {status} after {timeout:g} s (timeout); it stays on Kaggle: "
                                  "see `submissions` later")
            time.sleep(poll)


def description(message: str, path: Path, say=lambda line: print(f"note: {line}", flush=True)) -> str:
    """A submission's description: ``message``, then the training runs its predictions came from, as
    the file's writer record names them (``<file>.writer.json``, :func:`kitlib.outputs.provenance.recorded_runs`),
    e.g. ``"owner/infer v3 [runs 3f2a9c01be77]"`` (:func:`kitlib.training.runs.runs_tag`); ``submissions`` reads them back.
    A record that no longer describes the file (changed since) names no run; ``say`` is told why."""
    from kitlib.outputs.provenance import recorded_runs
    from kitlib.training.runs import runs_tag

    tag = runs_tag(recorded_runs(path, say=say))
    return f"{message} {tag}".strip() if tag and tag not in message else message


def run_lines(sub, roots) -> list[str]:
    """Lines naming the run(s) behind ``sub`` (its description's ``[runs ...]``), each looked up in the
    runs tables under ``roots`` (:func:`kitlib.training.runs.find_runs`); [] when the description names none."""
    from kitlib.training.runs import describe_run, find_runs, runs_in_description

    ids = runs_in_description(getattr(sub, "description", ""))
    found = find_runs(ids, roots)
    return [f"            run {r}: " + (f"{describe_run(found[r][1])} ({found[r][0]})" if r in found else
                                       "in no runs table here (download the training kernel's output: "
                                       "python -m kaggle_kit output OWNER/SLUG)") for r in ids]


def list_submissions(api, competition: str) -> list:
    """The user's submissions to ``competition``, newest first (``ListSubmissions``): ``ApiSubmission``
    objects (ref, file_name, date, description, status, public_score, private_score)."""
    from kagglesdk.competitions.types.competition_api_service import ApiListSubmissionsRequest

    with api.build_kaggle_client() as kaggle:
        req = ApiListSubmissionsRequest()
        req.competition_name = competition
        return list(kaggle.competitions.competition_api_client.list_submissions(req).submissions or [])


def format_submission(sub) -> str:
    """One line of the ``submissions`` listing."""
    date = sub.date.strftime("%Y-%m-%d %H:%M") if getattr(sub, "date", None) else "-"
    return (f"{sub.ref:>10}  {date}  {_status(sub):<8}  public {sub.public_score or '-':<8}  "
            f"private {sub.private_score or '-':<8}  {sub.file_name}  {sub.description or ''}")
