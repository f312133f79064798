"""Kaggle API calls through the installed ``kagglesdk``: the one home of the client's version drift.

The project pins kaggle 2.2.1 with kagglesdk 0.1.28: keras-hub 0.32 pins kagglesdk 0.1.28, and
kaggle 2.2.5 needs kagglesdk >= 0.1.38, so the two cannot share the test environment. Instead of a
second environment, this kit calls the SDK's service clients directly (the same requests the
``kaggle`` 2.2.5 CLI sends). kagglesdk 0.1.28 has StartSubmissionUpload, CreateSubmission,
CreateCodeSubmission, GetSubmission and ListSubmissions. It lacks two things, defined here as
kagglesdk 0.1.38 defines them (``kagglesdk/competitions/types/competition_api_service.py``,
``kagglesdk/kernels/types/kernels_api_service.py``) and sent through the SDK's own HTTP client:

* ``GetSubmissionLimits`` (:class:`ApiGetSubmissionLimitsRequest` -> :class:`ApiSubmissionLimits`);
* ``versionLabel`` on ``GetKernelSessionStatus`` and ``ListKernelSessionOutput`` (one version of
  a kernel, ``owner/slug/N`` in kaggle 2.2.5).

Each fallback is used only when the installed SDK lacks the name; delete them when kagglesdk
>= 0.1.38 is installable beside keras-hub (then the imports below succeed and nothing here differs).
"""
from __future__ import annotations

from kagglesdk.kaggle_object import FieldMetadata, KaggleObject, PredefinedSerializer
from kagglesdk.kernels.types.kernels_api_service import (
    ApiGetKernelSessionStatusRequest,
    ApiGetKernelSessionStatusResponse,
    ApiListKernelSessionOutputRequest,
)

try:
    from kagglesdk.competitions.types.competition_api_service import ApiGetSubmissionLimitsRequest, ApiSubmissionLimits
except ImportError:  # kagglesdk < 0.1.38 (delete with the pin, see the module docstring)

    class ApiGetSubmissionLimitsRequest(KaggleObject):
        """kagglesdk 0.1.38's request: ``competition_name``."""

        def __init__(self):
            self._competition_name = ""
            self._freeze()

        @property
        def competition_name(self) -> str:
            return self._competition_name

        @competition_name.setter
        def competition_name(self, value: str):
            self._competition_name = value

    class ApiSubmissionLimits(KaggleObject):
        """kagglesdk 0.1.38's reply: ``num_today``, ``num_total``, ``num_allowed_now`` (left today, UTC),
        ``limited_by_total`` (the lifetime cap, not the daily one, is what limits)."""

        def __init__(self):
            self._num_today = 0
            self._num_total = 0
            self._num_allowed_now = 0
            self._limited_by_total = False
            self._freeze()

        num_today = property(lambda self: self._num_today)
        num_total = property(lambda self: self._num_total)
        num_allowed_now = property(lambda self: self._num_allowed_now)
        limited_by_total = property(lambda self: self._limited_by_total)

    ApiGetSubmissionLimitsRequest._fields = [
        FieldMetadata("competitionName", "competition_name", "_competition_name", str, "", PredefinedSerializer())]
    ApiSubmissionLimits._fields = [
        FieldMetadata("numToday", "num_today", "_num_today", int, 0, PredefinedSerializer()),
        FieldMetadata("numTotal", "num_total", "_num_total", int, 0, PredefinedSerializer()),
        FieldMetadata("numAllowedNow", "num_allowed_now", "_num_allowed_now", int, 0, PredefinedSerializer()),
        FieldMetadata("limitedByTotal", "limited_by_total", "_limited_by_total", bool, False, PredefinedSerializer()),
    ]


def _versioned(base: type) -> type:
    """``base`` with kagglesdk 0.1.38's optional ``versionLabel`` field (``base`` itself when it has one)."""
    if any(f.json_name == "versionLabel" for f in base._fields):
        return base

    class Versioned(base):
        def __init__(self):
            object.__setattr__(self, "_version_label", None)
            super().__init__()

        @property
        def version_label(self):
            return self._version_label

        @version_label.setter
        def version_label(self, value):
            object.__setattr__(self, "_version_label", value)

    Versioned.__name__ = base.__name__
    Versioned._fields = list(base._fields) + [
        FieldMetadata("versionLabel", "version_label", "_version_label", str, None, PredefinedSerializer(), optional=True)]
    return Versioned


StatusRequest = _versioned(ApiGetKernelSessionStatusRequest)
OutputRequest = _versioned(ApiListKernelSessionOutputRequest)
COMPETITIONS = "competitions.CompetitionApiService"


def _http(kaggle):
    """The SDK's ``KaggleHttpClient`` of a ``KaggleClient`` (a method in kagglesdk 0.1.28, a property later)."""
    h = kaggle.http_client
    return h() if callable(h) else h


def kernel_status(kaggle, owner: str, slug: str, version: int | None = None):
    """``GetKernelSessionStatus`` for the latest run, or for ``version`` (``kaggle``: a
    ``KaggleClient`` from ``KaggleApi.build_kaggle_client()``). Returns its response
    (``status``, ``failure_message``)."""
    request = StatusRequest()
    request.user_name, request.kernel_slug = owner, slug
    if version is not None:
        request.version_label = str(version)
    return _http(kaggle).call("kernels.KernelsApiService", "GetKernelSessionStatus", request,
                                   ApiGetKernelSessionStatusResponse)


def submission_limits(kaggle, competition: str) -> ApiSubmissionLimits:
    """``GetSubmissionLimits``: how many submissions were made today and how many are left (UTC day)."""
    request = ApiGetSubmissionLimitsRequest()
    request.competition_name = competition
    return _http(kaggle).call(COMPETITIONS, "GetSubmissionLimits", request, ApiSubmissionLimits)
