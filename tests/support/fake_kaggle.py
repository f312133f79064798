"""A fake Kaggle API server on 127.0.0.1, for testing ``kaggle_kit`` (``scripts/kernels.py``) with the real ``kaggle`` client.

The ``kaggle`` package (2.2.5, kagglesdk 0.1.38) sends every call as ``POST
{base}/api/v1/<service>/<Method>`` with a camelCase JSON body (``kagglesdk/kaggle_http_client.py``);
with ``KAGGLE_API_ENVIRONMENT=LOCALHOST`` the base is ``http://localhost`` (port 80,
``kagglesdk/kaggle_env.py``). Rather than bind port 80, point ``HTTP_PROXY`` at this server: the
client's ``requests`` session honours proxy variables (``merge_environment_settings``), so the
fake can listen on any free port and receives absolute-URI requests. Served:

* ``kernels.KernelsApiService/SaveKernel``: answers ``{ref, url, versionNumber, error}``; can answer
  HTTP 409 (a version still running) a given number of times first, or carry an ``error``.
* ``kernels.KernelsApiService/GetKernelSessionStatus``: walks through a list of statuses
  (e.g. QUEUED, RUNNING, COMPLETE), one per call for each kernel since its push, repeating the
  last. With ``max_sessions``, a push while that many kernels run (pushed, no terminal status
  answered yet) is refused as Kaggle refuses it: "Maximum batch TPU session count of N reached."
* ``kernels.KernelsApiService/ListKernelSessionOutput``: ``{files: [{fileName, url}], log,
  nextPageToken}``, paged as Kaggle pages it (``page_size`` files a page, 500 on Kaggle; the
  request's ``pageSize`` when smaller; ``pageToken`` picks the page); each url is
  ``http://localhost/fake-output/<name>``, served by GET, or answered HTTP 404 with a JSON error
  body for the names in ``missing`` (listed, but gone).
* ``security.OAuthService/IntrospectToken``: accepts any token (for ``KAGGLE_API_TOKEN`` runs).
* competitions (``competitions.CompetitionApiService``): ``StartSubmissionUpload`` answers a token and
  an upload URL ``http://localhost/fake-upload/<token>`` that takes the file by PUT;
  ``CreateSubmission`` (blob token) and ``CreateCodeSubmission`` (a kernel version's output file)
  create a submission, refused with HTTP 400 past ``daily_limit`` submissions; ``GetSubmission``
  answers PENDING for ``pending_polls`` calls, then COMPLETE with the scores, or ERROR with the
  reason; ``ListSubmissions``; ``GetSubmissionLimits``. A submission is scored against ``labels``
  (id -> 0/1, known only to the fake): ROC AUC of the sample submission's column (``toxic``) on the public ids (every
  other id in sorted order) and on the private ones; an id set that differs, a missing column
  or a value that is not a finite number ends in ERROR, as Kaggle's scorer does.
* ``competitions.CompetitionApiService/DownloadDataFile``: a redirect to the competition file
  (``data_files``; by default ``sample_submission.csv`` with the labels' ids), served by GET.
* datasets (publishing a checkpoint): ``blobs.BlobApiService/StartBlobUpload`` answers a token and
  an upload URL taking the file by PUT; ``datasets.DatasetApiService/GetDatasetStatus`` (HTTP 404
  for an unknown data set), ``CreateDataset`` and ``CreateDatasetVersion`` record each version's
  notes and files (``FakeKaggle.datasets``).
* kernels by version: ``kernel_outputs`` ({slug: {version: {name: bytes}}}) holds each version's
  output; ``ListKernelSessionOutput`` with ``versionLabel`` lists that version's, without it the
  latest complete version's (on Kaggle, while a new version runs, the previous one's).

Every request is recorded (``FakeKaggle.requests``, and as JSON lines with ``--record``). Calls
without an ``Authorization`` header get HTTP 401, as Kaggle's do.

Standalone::

    python tests/support/fake_kaggle.py --port 8765 --record /tmp/kaggle-requests.jsonl
    HTTP_PROXY=http://127.0.0.1:8765 KAGGLE_API_ENVIRONMENT=LOCALHOST NO_PROXY= \\
        KAGGLE_USERNAME=tester KAGGLE_KEY=fake python scripts/kernels.py push --wait
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

STATUSES = ("QUEUED", "RUNNING", "COMPLETE", "ERROR", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED")


class FakeKaggle:
    """A recording fake of the Kaggle kernels API (see the module docstring).

    Args:
        username: the name IntrospectToken answers with.
        push_error: the ``error`` SaveKernel answers with ("" for success).
        conflicts: SaveKernel answers HTTP 409 this many times before succeeding.
        statuses: GetKernelSessionStatus answers, in order, repeating the last; reset by each push.
        failure_message: sent with an ``ERROR`` status.
        outputs: output files, name -> bytes, listed by ListKernelSessionOutput (in this order).
        log: the run log ListKernelSessionOutput returns.
        page_size: files per page of ListKernelSessionOutput (Kaggle: 500).
        missing: output names that are listed but whose download answers HTTP 404.
        record: a file each request is appended to as one JSON line.
        kernel_outputs: per kernel slug and version, the output files (see the module docstring);
            a push of a slug listed here makes the next version's output the next entry.
        labels: the competition's hidden labels (id -> 0 or 1), for scoring submissions.
        daily_limit: submissions allowed per day (Kaggle's default for this competition: 5).
        pending_polls: GetSubmission answers PENDING this many times before the result.

    Raises:
        ValueError: a status is not one of :data:`STATUSES`.
    """

    def __init__(
        self,
        *,
        username: str = "tester",
        push_error: str = "",
        conflicts: int = 0,
        statuses: tuple[str, ...] = ("QUEUED", "RUNNING", "COMPLETE"),
        failure_message: str = "",
        outputs: dict[str, bytes] | None = None,
        log: str = "",
        page_size: int = 500,
        missing: tuple[str, ...] = (),
        record: str | Path | None = None,
        kernel_outputs: dict[str, dict[int, dict[str, bytes]]] | None = None,
        labels: dict[str, int] | None = None,
        daily_limit: int = 5,
        pending_polls: int = 1,
        data_files: dict[str, bytes] | None = None,
        datasets: dict[str, list[dict]] | None = None,
        max_sessions: int | None = None,
    ) -> None:
        bad = [s for s in statuses if s not in STATUSES]
        if bad or not statuses:
            raise ValueError(f"statuses must be non-empty and among {STATUSES}, got {statuses}")
        self.username = username
        self.push_error = push_error
        self.conflicts = conflicts
        self.statuses = tuple(statuses)
        self.failure_message = failure_message
        self.outputs = dict(outputs or {})
        self.log = log
        self.page_size = page_size
        self.missing = set(missing)
        self.record = Path(record) if record else None
        self.requests: list[dict] = []
        self.kernel_outputs = {k: dict(v) for k, v in (kernel_outputs or {}).items()}
        self.labels = dict(labels or {})
        self.daily_limit = daily_limit
        self.pending_polls = pending_polls
        # the competition's files (DownloadDataFile); without them, a sample submission of the labels' ids
        self.data_files = dict(data_files or {})
        if "sample_submission.csv" not in self.data_files and self.labels:
            self.data_files["sample_submission.csv"] = ("id,toxic\n" + "".join(f"{i},0.5\n" for i in self.labels)).encode()
        # datasets: "owner/slug" -> its versions, each {"notes", "files": {name: bytes}} (CreateDataset, CreateDatasetVersion)
        self.datasets: dict[str, list[dict]] = {k: list(v) for k, v in (datasets or {}).items()}
        self.blobs: dict[str, dict] = {}  # StartBlobUpload token -> {"name", "data"}
        self.uploads: dict[str, bytes] = {}
        self.upload_names: dict[str, str] = {}
        self.submissions: list[dict] = []
        self.kernel_versions: dict[str, int] = {}  # slug -> latest pushed version
        self._status_calls = 0
        self._status_by_slug: dict[str, int] = {}  # slug -> status calls since its last push
        # sessions: Kaggle runs at most this many batch sessions of an account at once and refuses a
        # push beyond ("Maximum batch ... session count of N reached"); a session ends at a terminal status
        self.max_sessions = max_sessions
        self.running: set[str] = set()
        self.peak_running = 0
        self._versions = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1:``port`` (0: a free one) in a daemon thread; returns the port."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                fake._handle(self, "POST")

            def do_GET(self):
                fake._handle(self, "GET")

            def do_PUT(self):
                fake._handle(self, "PUT")

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.port

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.server_address[1]

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeKaggle":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def client_env(self, config_dir: str | Path, username: str = "tester", key: str = "fake-key") -> dict[str, str]:
        """Environment for a ``kaggle`` client process that talks only to this fake.

        ``KAGGLE_CONFIG_DIR`` and ``HOME`` point at ``config_dir`` (``import kaggle`` creates the
        config folder and looks for ``~/.kaggle/access_token``); legacy-key credentials come from
        ``KAGGLE_USERNAME``/``KAGGLE_KEY`` (``KaggleApi.read_config_environment``).
        """
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("KAGGLE_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"))}
        proxy = f"http://127.0.0.1:{self.port}"
        env.update(
            KAGGLE_CONFIG_DIR=str(config_dir), HOME=str(config_dir), XDG_CONFIG_HOME=str(config_dir),
            KAGGLE_USERNAME=username, KAGGLE_KEY=key, KAGGLE_API_ENVIRONMENT="LOCALHOST",
            HTTP_PROXY=proxy, http_proxy=proxy, NO_PROXY="", no_proxy="",
        )
        return env

    def calls(self, method: str) -> list[dict]:
        """The recorded requests to ``method`` (e.g. ``"SaveKernel"``), oldest first."""
        return [r for r in self.requests if r["method"] == method]

    # -- serving -----------------------------------------------------------------------------
    def _reply(self, h: BaseHTTPRequestHandler, code: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, verb: str) -> None:
        path = urlsplit(h.path).path  # absolute URI through the proxy, or a plain path
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        method = path.rsplit("/", 1)[-1]
        rec = {"verb": verb, "path": path, "method": method, "body": body,
               "authorized": bool(h.headers.get("Authorization"))}
        with self._lock:
            self.requests.append(rec)
            if self.record:
                with open(self.record, "a") as f:
                    f.write(json.dumps(rec) + "\n")
        if verb == "PUT" and path.startswith("/fake-blob/"):
            token = path[len("/fake-blob/"):]
            if token not in self.blobs:
                return self._reply(h, 404, {"code": 404, "message": f"no blob upload {token}"})
            self.blobs[token]["data"] = raw
            rec["body"] = {"_bytes": len(raw)}
            return self._reply(h, 200, {})
        if verb == "PUT" and path.startswith("/fake-upload/"):
            token = path[len("/fake-upload/"):]
            if token not in self.uploads:
                return self._reply(h, 404, {"code": 404, "message": f"no upload {token}"})
            self.uploads[token] = raw
            rec["body"] = {"_bytes": len(raw)}
            return self._reply(h, 200, {})
        if verb == "GET" and path.startswith("/fake-data/"):
            name = unquote(path[len("/fake-data/"):])
            if name not in self.data_files:
                return self._reply(h, 404, {"code": 404, "message": f"no data file {name}"})
            data = self.data_files[name]
            h.send_response(200)
            h.send_header("Content-Type", "text/csv")
            h.send_header("Content-Length", str(len(data)))
            h.send_header("Last-Modified", "Tue, 01 Dec 2026 10:00:00 GMT")
            h.end_headers()
            h.wfile.write(data)
            return None
        if verb == "GET" and path.startswith("/fake-output/"):
            rest = unquote(path[len("/fake-output/"):])
            files = self.outputs
            if rest.startswith("v/"):  # /fake-output/v/<slug>/<version>/<name>
                _, slug, version, rest = rest.split("/", 3)
                files = self.kernel_outputs.get(slug, {}).get(int(version), {})
            name = rest
            if name in files and name not in self.missing:
                return self._reply(h, 200, files[name], "application/octet-stream")
            return self._reply(h, 404, {"code": 404, "message": f"no output {name}"})
        if not path.startswith("/api/v1/"):
            return self._reply(h, 404, {"code": 404, "message": f"not an API path: {path}"})
        if not rec["authorized"]:
            return self._reply(h, 401, {"code": 401, "message": "Unauthenticated"})
        with self._lock:
            if method == "SaveKernel":
                if self.conflicts > 0:
                    self.conflicts -= 1
                    return self._reply(h, 409, {"code": 409, "message": "A version of this kernel is still running"})
                slug = body.get("slug") or "unknown/unknown"
                short = slug.split("/")[-1]
                if self.max_sessions is not None and len(self.running - {short}) >= self.max_sessions:
                    return self._reply(h, 200, {"error": f"Maximum batch TPU session count of {self.max_sessions} reached."})
                self._versions += 1
                self._status_calls = 0
                self._status_by_slug[short] = 0
                self.kernel_versions[short] = self._versions
                self.running.add(short)
                self.peak_running = max(self.peak_running, len(self.running))
                return self._reply(h, 200, {
                    "ref": f"/code/{slug}", "url": f"http://localhost/code/{slug}",
                    "versionNumber": self._versions, "error": self.push_error,
                })
            if method == "GetKernelSessionStatus":
                short = body.get("kernelSlug", "")
                n = self._status_by_slug.get(short, self._status_calls)
                status = self.statuses[min(n, len(self.statuses) - 1)]
                self._status_calls += 1
                self._status_by_slug[short] = n + 1
                if status in ("COMPLETE", "ERROR", "CANCEL_ACKNOWLEDGED"):
                    self.running.discard(short)
                reply = {"status": status}
                if status == "ERROR" and self.failure_message:
                    reply["failureMessage"] = self.failure_message
                return self._reply(h, 200, reply)
            if method == "ListKernelSessionOutput" and body.get("kernelSlug") in self.kernel_outputs:
                return self._reply(h, 200, self._version_listing(body))
            if method == "ListKernelSessionOutput":
                names = list(self.outputs)
                size = min(self.page_size, int(body.get("pageSize") or self.page_size))
                start = int(body.get("pageToken") or 0)
                page = names[start:start + size]
                reply = {"files": [{"fileName": k, "url": f"http://localhost/fake-output/{k}"} for k in page], "log": self.log}
                if start + size < len(names):
                    reply["nextPageToken"] = str(start + size)
                return self._reply(h, 200, reply)
            if method == "IntrospectToken":
                return self._reply(h, 200, {"active": True, "username": self.username})
            if method in self._COMPETITION_METHODS:
                return self._competition(h, method, body)
            if method in self._DATASET_METHODS:
                return self._dataset(h, method, body)
        return self._reply(h, 404, {"code": 404, "message": f"the fake does not serve {method}"})


    # -- kernels by version ----------------------------------------------------------------------
    def _latest_complete(self, slug: str) -> int | None:
        """The newest version of ``slug`` whose output exists and whose run is not the one going on."""
        versions = sorted(self.kernel_outputs.get(slug, {}))
        running = self.kernel_versions.get(slug)
        calls = self._status_by_slug.get(slug, self._status_calls)
        status = self.statuses[min(max(calls - 1, 0), len(self.statuses) - 1)]
        done = [v for v in versions if v != running or status == "COMPLETE"]
        return done[-1] if done else None

    def _version_listing(self, body: dict) -> dict:
        slug = body["kernelSlug"]
        label = body.get("versionLabel")
        version = int(label) if label else self._latest_complete(slug)
        files = self.kernel_outputs.get(slug, {}).get(version, {}) if version is not None else {}
        return {"files": [{"fileName": k, "url": f"http://localhost/fake-output/v/{slug}/{version}/{k}"} for k in files],
                "log": json.dumps([{"stream_name": "stdout", "time": 1.0, "data": f"{slug} version {version} log\n"}])}

    # -- competitions ------------------------------------------------------------------------
    _COMPETITION_METHODS = ("StartSubmissionUpload", "CreateSubmission", "CreateCodeSubmission", "GetSubmission",
                            "ListSubmissions", "GetSubmissionLimits", "DownloadDataFile")

    def scored_column(self) -> str:
        """The column submissions are scored on: the sample submission's other than ``id`` (``toxic`` by default)."""
        header = self.data_files["sample_submission.csv"].decode("utf-8").splitlines()[0].split(",") \
            if "sample_submission.csv" in self.data_files else ["id", "toxic"]
        return next((c for c in header if c != "id"), "toxic")

    def score(self, data: bytes) -> tuple[str, str | None, str | None]:
        """(status, public score, private score) of submission bytes, or ("ERROR", reason, None)."""
        import csv
        import io
        import math

        try:
            rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
        except (UnicodeDecodeError, csv.Error) as e:
            return "ERROR", f"unreadable CSV: {e}", None
        col = self.scored_column()
        if not rows or "id" not in rows[0] or col not in rows[0]:
            return "ERROR", f"the submission must have the columns id, {col}", None
        pred = {}
        for r in rows:
            try:
                v = float(r[col])
            except (TypeError, ValueError):
                v = math.nan
            if not math.isfinite(v):
                return "ERROR", f"id {r['id']}: {col} {r[col]!r} is not a finite number", None
            pred[r["id"]] = v
        if len(pred) != len(rows) or set(pred) != set(self.labels):
            return "ERROR", (f"expected {len(self.labels)} distinct ids of the test set, got {len(pred)} "
                             f"({len(set(pred) - set(self.labels))} unknown, {len(set(self.labels) - set(pred))} missing)"), None
        ids = sorted(self.labels)
        return "COMPLETE", f"{_auc([self.labels[i] for i in ids[0::2]], [pred[i] for i in ids[0::2]]):.5f}", \
            f"{_auc([self.labels[i] for i in ids[1::2]], [pred[i] for i in ids[1::2]]):.5f}"

    def _submit(self, h, data: bytes | None, file_name: str, description: str):
        today = len(self.submissions)
        if today >= self.daily_limit:
            return self._reply(h, 400, {"code": 400, "message": f"Submission not allowed: your team has used its daily "
                                                               f"submission allowance ({self.daily_limit}) today"})
        ref = 1000 + len(self.submissions)
        status, public, private = self.score(data) if data is not None else ("ERROR", f"no output file {file_name}", None)
        self.submissions.append({"ref": ref, "fileName": file_name, "description": description, "date": "2026-12-01T10:00:00Z",
                                 "final": status, "public": public, "private": private, "polls": 0, "totalBytes": len(data or b"")})
        return self._reply(h, 200, {"ref": ref, "message": "Successfully submitted to Jigsaw Multilingual Toxic Comment Classification"})

    def _submission(self, s: dict, poll: bool) -> dict:
        if poll:
            s["polls"] += 1
        pending = s["polls"] <= self.pending_polls if poll else s["polls"] <= self.pending_polls
        out = {"ref": s["ref"], "fileName": s["fileName"], "description": s["description"], "date": s["date"],
               "totalBytes": s["totalBytes"], "status": "PENDING" if pending else s["final"]}
        if not pending and s["final"] == "COMPLETE":
            out.update(publicScore=s["public"], privateScore=s["private"])
        if not pending and s["final"] == "ERROR":
            out["errorDescription"] = s["public"]
        return out

    # -- datasets (publishing a checkpoint) -----------------------------------------------------
    _DATASET_METHODS = ("StartBlobUpload", "CreateDatasetVersion", "CreateDataset", "GetDatasetStatus")

    def _dataset(self, h, method: str, body: dict):
        if method == "StartBlobUpload":
            token = f"dblob-{len(self.blobs) + 1}"
            self.blobs[token] = {"name": body.get("name", ""), "data": None}
            return self._reply(h, 200, {"token": token, "createUrl": f"http://localhost/fake-blob/{token}"})
        if method in ("CreateDatasetVersion", "CreateDataset"):
            spec = body.get("body", body)
            if method == "CreateDataset":
                ref = f"{body.get('ownerSlug')}/{body.get('slug')}"
                if ref in self.datasets:
                    return self._reply(h, 200, {"error": f"dataset {ref} already exists", "status": "error"})
                self.datasets[ref] = []
            else:
                ref = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
                if ref not in self.datasets:
                    return self._reply(h, 404, {"code": 404, "message": f"no dataset {ref}"})
            files = {}
            for f in spec.get("files") or []:
                blob = self.blobs.get(f.get("token", ""))
                if blob is None or blob["data"] is None:
                    return self._reply(h, 400, {"code": 400, "message": f"file token {f.get('token')!r} was not uploaded"})
                files[blob["name"]] = blob["data"]
            self.datasets[ref].append({"notes": spec.get("versionNotes", ""), "files": files})
            return self._reply(h, 200, {"ref": ref, "url": f"http://localhost/datasets/{ref}", "status": "ok",
                                        "versionNumber": len(self.datasets[ref])})
        if method == "GetDatasetStatus":
            ref = f"{body.get('ownerSlug')}/{body.get('datasetSlug')}"
            if ref not in self.datasets:
                return self._reply(h, 404, {"code": 404, "message": f"no dataset {ref}"})
            return self._reply(h, 200, {"status": "ready"})
        raise AssertionError(method)

    def _competition(self, h, method: str, body: dict):
        if method == "DownloadDataFile":
            name = body.get("fileName", "")
            if name not in self.data_files:
                return self._reply(h, 404, {"code": 404, "message": f"no data file {name}"})
            h.send_response(302)  # as Kaggle: a redirect to the file's storage URL, which names the file
            h.send_header("Location", f"http://localhost/fake-data/{name}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        if method == "StartSubmissionUpload":
            token = f"blob-{len(self.uploads) + 1}"
            self.uploads[token] = b""
            self.upload_names[token] = body.get("fileName", "submission.csv")
            return self._reply(h, 200, {"token": token, "createUrl": f"http://localhost/fake-upload/{token}"})
        if method == "CreateSubmission":
            token = body.get("blobFileTokens", "")
            if token not in self.uploads:
                return self._reply(h, 400, {"code": 400, "message": f"unknown blob token {token!r}"})
            return self._submit(h, self.uploads[token], self.upload_names[token], body.get("submissionDescription", ""))
        if method == "CreateCodeSubmission":
            slug, version, name = body.get("kernelSlug", ""), int(body.get("kernelVersion") or 0), body.get("fileName", "")
            files = self.kernel_outputs.get(slug, {}).get(version or self.kernel_versions.get(slug, 0), {})
            return self._submit(h, files.get(name), name, body.get("submissionDescription", ""))
        if method == "GetSubmission":
            s = next((s for s in self.submissions if s["ref"] == int(body.get("ref", 0))), None)
            if s is None:
                return self._reply(h, 404, {"code": 404, "message": f"no submission {body.get('ref')}"})
            return self._reply(h, 200, self._submission(s, poll=True))
        if method == "ListSubmissions":
            return self._reply(h, 200, {"submissions": [self._submission(s, poll=False) for s in reversed(self.submissions)]})
        if method == "GetSubmissionLimits":
            n = len(self.submissions)
            return self._reply(h, 200, {"numToday": n, "numTotal": n, "numAllowedNow": max(self.daily_limit - n, 0)})
        raise AssertionError(method)


def _auc(labels: list[int], scores: list[float]) -> float:
    """ROC AUC by the rank-sum formula (ties get their average rank), as sklearn's roc_auc_score."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(labels)
    neg = len(labels) - pos
    if not pos or not neg:
        return float("nan")
    return (sum(r for r, y in zip(ranks, labels) if y) - pos * (pos + 1) / 2) / (pos * neg)


def main(argv: list[str] | None = None) -> int:
    """Serve a :class:`FakeKaggle` on 127.0.0.1 until interrupted (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--record", help="append each request to this file as a JSON line")
    p.add_argument("--push-error", default="", help="SaveKernel answers with this error")
    p.add_argument("--conflicts", type=int, default=0, help="answer SaveKernel with HTTP 409 this many times first")
    p.add_argument("--statuses", default="QUEUED,RUNNING,COMPLETE", help="comma-separated status sequence")
    p.add_argument("--output", action="append", default=[], metavar="NAME=FILE", help="an output file to serve")
    p.add_argument("--log", default="fake run log\n")
    p.add_argument("--page-size", type=int, default=500, help="output files per listing page (Kaggle: 500)")
    p.add_argument("--missing", action="append", default=[], metavar="NAME", help="list this output but answer 404 for it")
    p.add_argument("--kernel-output", action="append", default=[], metavar="SLUG:VERSION:NAME=FILE",
                   help="an output file of one version of a kernel")
    p.add_argument("--labels", help="CSV id,toxic: the hidden labels submissions are scored against")
    p.add_argument("--daily-limit", type=int, default=5, help="submissions allowed per day")
    p.add_argument("--pending-polls", type=int, default=1, help="GetSubmission answers PENDING this many times first")
    p.add_argument("--data-file", action="append", default=[], metavar="NAME=FILE",
                   help="a competition data file (DownloadDataFile; default sample_submission.csv: the labels' ids)")
    a = p.parse_args(argv)
    outputs = {}
    for spec in a.output:
        name, _, file = spec.partition("=")
        outputs[name] = Path(file).read_bytes()
    kernel_outputs: dict = {}
    for spec in a.kernel_output:
        where, _, file = spec.partition("=")
        slug, version, name = where.split(":", 2)
        kernel_outputs.setdefault(slug, {}).setdefault(int(version), {})[name] = Path(file).read_bytes()
    data_files = {}
    for spec in a.data_file:
        name, _, file = spec.partition("=")
        data_files[name] = Path(file).read_bytes()
    labels = {}
    if a.labels:
        import csv

        with open(a.labels, newline="", encoding="utf-8") as f:
            labels = {r["id"]: int(float(r["toxic"]) >= 0.5) for r in csv.DictReader(f)}
    fake = FakeKaggle(push_error=a.push_error, conflicts=a.conflicts, statuses=tuple(a.statuses.split(",")),
                      outputs=outputs, log=a.log, page_size=a.page_size, missing=tuple(a.missing), record=a.record,
                      kernel_outputs=kernel_outputs, labels=labels, daily_limit=a.daily_limit,
                      pending_polls=a.pending_polls, data_files=data_files)
    port = fake.start(a.port)
    print(f"fake Kaggle API on http://127.0.0.1:{port} (use HTTP_PROXY=http://127.0.0.1:{port} KAGGLE_API_ENVIRONMENT=LOCALHOST NO_PROXY=)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
