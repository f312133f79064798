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


def credentials_file_problem(path) -> str | None:
    """What is wrong with the ``kaggle.json`` at ``path``: it does not parse as JSON (with the line
    and column), is not an object, or lacks ``username`` / ``key`` (naming each missing key); None
    when it is fine or absent. The kaggle client itself ignores such a file silently (kaggle 2.2.5
    ``read_config_file`` catches every error), and then reports no credentials at all."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        return f"{path}: not UTF-8 text ({e}): it must be JSON {{\"username\": \"...\", \"key\": \"...\"}}"
    except ValueError as e:
        return (f"{path}: does not parse as JSON (line {e.lineno}, column {e.colno}: {e.msg}): it must be "
                '{"username": "...", "key": "..."}, as downloaded from https://www.kaggle.com/settings/api')
    if not isinstance(data, dict):
        return f"{path}: holds a JSON {type(data).__name__}, not an object {{\"username\": \"...\", \"key\": \"...\"}}"
    missing = [k for k in ("username", "key") if not isinstance(data.get(k), str) or not data.get(k)]
    if missing:
        other = sorted(set(data) - {"username", "key"})
        return (f"{path}: no {' and no '.join(repr(k) for k in missing)} key" + (f" (it has {', '.join(map(repr, other))})" if other else "")
                + ': it must be {"username": "...", "key": "..."}, as downloaded from https://www.kaggle.com/settings/api')
    return None


def kaggle_api(require_credentials: bool = True):
    """The ``kaggle`` package's authenticated ``KaggleApi`` (``kaggle.api``).

    ``import kaggle`` authenticates at import time (kaggle 2.2.5 swallows a failure, after printing
    its help; 2.2.1 called ``exit(1)``, caught here too). What the client prints while
    authenticating is passed through on stderr (its warnings, e.g. a ``kaggle.json`` readable by
    other users); its no-credentials help is replaced by :data:`CREDENTIALS_HELP`, or by what is
    wrong with the ``kaggle.json`` it found (:func:`credentials_file_problem`).

    Args:
        require_credentials: when False and no credentials exist, return an unauthenticated
            ``KaggleApi`` (good for its offline validators) instead of raising.

    Returns:
        ``kaggle.api.kaggle_api_extended.KaggleApi``.

    Raises:
        CredentialsError: no credentials (or an access token that could not be checked), or a
            ``kaggle.json`` that does not parse or lacks a key (naming the file and the key).
    """
    buf = io.StringIO()
    cached = "kaggle" in sys.modules and hasattr(sys.modules["kaggle"], "api")
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            import kaggle  # noqa: F401
        api = sys.modules["kaggle"].api
        if getattr(api, "_authenticated", True) and _CLIENT_AUTH_HELP not in buf.getvalue():
            if not cached:
                _pass_through(buf.getvalue())
            return api
        problem = credentials_file_problem(api.config) or CREDENTIALS_HELP
    except SystemExit:  # kaggle < 2.2.5
        mod = sys.modules.get("kaggle.api.kaggle_api_extended")
        problem = (credentials_file_problem(mod.KaggleApi.config) if mod else None) or CREDENTIALS_HELP
    except Exception as e:  # e.g. an access token whose introspection cannot reach Kaggle
        problem = f"the kaggle client could not authenticate: {type(e).__name__}: {e}"
    if not cached:
        _pass_through(buf.getvalue().split(_CLIENT_AUTH_HELP)[0])
    if require_credentials:
        raise CredentialsError(problem)
    mod = sys.modules.get("kaggle.api.kaggle_api_extended")
    if mod is None:  # the import failed before the module loaded: a real installation problem
        raise CredentialsError(problem)
    return getattr(sys.modules.get("kaggle"), "api", None) or mod.KaggleApi()


def kaggle_username(api) -> str | None:
    """The user the kaggle client authenticated as (``KaggleApi.get_config_value("username")``)."""
    try:
        return api.get_config_value(api.CONFIG_NAME_USER) or None
    except Exception:
        return None
