"""The kagglesdk calls this kit makes that ``KaggleApi`` does not wrap as it needs them.

kagglesdk 0.1.38 (the client kaggle 2.2.5 needs; requirements/push.txt) has every message the kit
sends: ``versionLabel`` on ``GetKernelSessionStatus`` and ``ListKernelSessionOutput`` (one version
of a kernel, ``owner/slug/N`` in kaggle 2.2.5) and ``GetSubmissionLimits``. The hand-made copies
of those messages that kagglesdk 0.1.28 needed are gone; these are thin calls through the SDK's
own service clients.
"""
from __future__ import annotations

from kagglesdk.competitions.types.competition_api_service import ApiGetSubmissionLimitsRequest, ApiSubmissionLimits
from kagglesdk.kernels.types.kernels_api_service import (
    ApiGetKernelSessionStatusRequest as StatusRequest,
    ApiListKernelSessionOutputRequest as OutputRequest,
)

__all__ = ["OutputRequest", "StatusRequest", "kernel_status", "submission_limits"]


def kernel_status(kaggle, owner: str, slug: str, version: int | None = None):
    """``GetKernelSessionStatus`` for the latest run, or for ``version`` (``kaggle``: a
    ``KaggleClient`` from ``KaggleApi.build_kaggle_client()``). Returns its response
    (``status``, ``failure_message``)."""
    request = StatusRequest()
    request.user_name, request.kernel_slug = owner, slug
    if version is not None:
        request.version_label = str(version)
    return kaggle.kernels.kernels_api_client.get_kernel_session_status(request)


def submission_limits(kaggle, competition: str) -> ApiSubmissionLimits:
    """``GetSubmissionLimits``: how many submissions were made today and how many are left (UTC day)."""
    request = ApiGetSubmissionLimitsRequest()
    request.competition_name = competition
    return kaggle.competitions.competition_api_client.get_submission_limits(request)
