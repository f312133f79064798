"""The ``kaggle`` package's client, authenticated by its own credential lookup, its warnings kept.

Credentials are the ``kaggle`` package's own lookup (``import kaggle`` authenticates): an access
token (``KAGGLE_API_TOKEN``, ``~/.kaggle/access_token``), else ``kaggle.json`` in
``KAGGLE_CONFIG_DIR``/``~/.kaggle``/``$XDG_CONFIG_HOME/kaggle`` overridden by
``KAGGLE_USERNAME``/``KAGGLE_KEY``, else ``kaggle auth login`` OAuth credentials.
"""
from __future__ import annotations

import contextlib
import io
import sys

# The first line of the client's own help when it finds no credentials (kaggle 2.2,
# ``print_auth_help``); :data:`CREDENTIALS_HELP` replaces that help, what came before is kept.
_CLIENT_AUTH_HELP = "Authentication required to call the Kaggle API."

CREDENTIALS_HELP = (
    "no Kaggle credentials: the kaggle package found no access token (KAGGLE_API_TOKEN, "
    "~/.kaggle/access_token), no kaggle.json (in $KAGGLE_CONFIG_DIR, ~/.kaggle or "
    "$XDG_CONFIG_HOME/kaggle; or KAGGLE_USERNAME + KAGGLE_KEY) and no `kaggle auth login` "
    "credentials. Create a token at https://www.kaggle.com/settings/api (docs/kernels.md)."
)


class CredentialsError(RuntimeError):
    """No Kaggle credentials were found by the kaggle package's own lookup."""


def _pass_through(text: str) -> None:
    """Print what the client printed while authenticating (e.g. "Warning: Your Kaggle API key is
    readable by other users ...") on stderr, each line marked ``kaggle:``."""
    for line in text.splitlines():
        if line.strip():
            print(f"kaggle: {line}", file=sys.stderr, flush=True)


def kaggle_api(require_credentials: bool = True):
    """The ``kaggle`` package's authenticated ``KaggleApi`` (``kaggle.api``).

    ``import kaggle`` authenticates at import time and, without credentials, prints help and
    calls ``exit(1)`` (kaggle/__init__.py, ``KaggleApi.authenticate``); that is caught here. What
    the client prints while authenticating is passed through on stderr (its warnings, e.g. a
    ``kaggle.json`` readable by other users); its no-credentials help is replaced by
    :data:`CREDENTIALS_HELP`.

    Args:
        require_credentials: when False and no credentials exist, return an unauthenticated
            ``KaggleApi`` (good for its offline validators) instead of raising.

    Returns:
        ``kaggle.api.kaggle_api_extended.KaggleApi``.

    Raises:
        CredentialsError: no credentials (or an access token that could not be checked).
    """
    if "kaggle" in sys.modules and hasattr(sys.modules["kaggle"], "api"):
        return sys.modules["kaggle"].api
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            import kaggle  # noqa: F401
        _pass_through(buf.getvalue())
        return sys.modules["kaggle"].api
    except SystemExit:
        problem = CREDENTIALS_HELP
    except Exception as e:  # e.g. an access token whose introspection cannot reach Kaggle
        problem = f"the kaggle client could not authenticate: {type(e).__name__}: {e}"
    _pass_through(buf.getvalue().split(_CLIENT_AUTH_HELP)[0])
    if require_credentials:
        raise CredentialsError(problem)
    mod = sys.modules.get("kaggle.api.kaggle_api_extended")
    if mod is None:  # the import failed before the module loaded: a real installation problem
        raise CredentialsError(problem)
    return mod.KaggleApi()


def kaggle_username(api) -> str | None:
    """The user the kaggle client authenticated as (``KaggleApi.get_config_value("username")``)."""
    try:
        return api.get_config_value(api.CONFIG_NAME_USER) or None
    except Exception:
        return None
