"""Which environment variables a campaign may set for the model server.

``campaign.toml``'s ``[serving.env]`` (the control) and each candidate's ``env`` are written
by whoever edits the campaign, a pull request's author included, and the runner applies them
to the screened server.  A name that changes how a program is loaded or found (the dynamic
loader's ``LD_*``, Python's ``PYTHON*`` such as ``PYTHONPATH`` with a ``sitecustomize.py``
beside it, a shell's ``BASH_ENV``, ``PATH``), that belongs to the CI runner (``GITHUB_*``,
``RUNNER_*``, ``ACTIONS_*``, the runner's own ``CAMPAIGN_BOT_`` settings), or that looks like a
credential is refused: the screen is not run and ``campaign-bot check`` reports the field.
Tuning knobs of the engine and the device stack (``VLLM_*``, ``ASCEND_*``, ``HCCL_*``,
``TASK_QUEUE_ENABLE``, ...) are what the field is for and stay allowed.

Host-specific values that need such names (CANN's ``LD_LIBRARY_PATH`` and ``PYTHONPATH``
from ``set_env.sh``, a Hugging Face cache) belong in the runner host's own config
(``[server] env`` and ``pass_env`` of ``runner.toml``), which a pull request cannot edit.

Sources for the loader and interpreter names: ld.so(8) "ENVIRONMENT", python(1)
"ENVIRONMENT VARIABLES", bash(1) ``BASH_ENV``/``ENV``, glibc's unsecure-envvars list
(``sysdeps/generic/unsecvars.h``: ``GCONV_PATH``, ``GLIBC_TUNABLES``, ``HOSTALIASES``,
``LOCALDOMAIN``, ``NLSPATH``, ``RES_OPTIONS``, ``TMPDIR``, ...), and GitHub's
"Store information in variables: default environment variables" page.
"""

from __future__ import annotations

import re

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
"""A portable environment variable name (POSIX.1-2017 section 8.1), at most 128 characters."""

REFUSED_PREFIXES = tuple("""
    LD_ PYTHON GITHUB_ RUNNER_ ACTIONS_ PERL5 RUBY NODE_ MALLOC_ GCONV_ GLIBC_ SSL_CERT_ GIT_
    SUDO_""".split())
"""Loader, interpreter, CI runner and library-path names (upper-cased before matching)."""

REFUSED_NAMES = frozenset("""
    PATH HOME TMPDIR SHELL BASH_ENV ENV IFS CDPATH HOSTALIASES LOCALDOMAIN NLSPATH RES_OPTIONS
    RESOLV_HOST_CONF LOCPATH TZDIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE HTTP_PROXY HTTPS_PROXY
    ALL_PROXY NO_PROXY CI USER LOGNAME CAMPAIGN_BOT_SIGNING_KEY CAMPAIGN_BOT_RUNNER_CONFIG
    CAMPAIGN_BOT_SERVER_CMD""".split())
"""Exact names refused (upper-cased before matching)."""

CREDENTIAL_WORDS = tuple("""
    TOKEN SECRET PASSWORD PASSWD CREDENTIAL PRIVATE_KEY API_KEY ACCESS_KEY""".split())
"""A name containing one of these words is read as a credential: never in a public file."""


def refused_env_name(name: str) -> str | None:
    """Why ``name`` may not be set by a campaign for the server (one sentence naming it),
    or None when it may: ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT`` may, ``PYTHONPATH`` may not."""
    if not NAME_RE.match(name):
        return (f"{name[:40]!r} is not an environment variable name (letters, digits and _, "
                "not starting with a digit, at most 128 characters)")
    up = name.upper()
    if up in REFUSED_NAMES or up.startswith(REFUSED_PREFIXES):
        return (f"{name} changes how programs are loaded or belongs to the CI runner; set "
                "host-specific values in the runner host's runner.toml ([server] env or "
                "pass_env), never in campaign.toml")
    if any(w in up for w in CREDENTIAL_WORDS):
        return f"{name} looks like a credential; a campaign file is public, keep it out"
    return None


def env_problems(env: dict[str, str]) -> list[str]:
    """One message per refused name of ``env`` (see :func:`refused_env_name`); values too
    long (over 4,096 characters) or holding a NUL are refused as well."""
    out: list[str] = []
    for k, v in env.items():
        why = refused_env_name(k)
        if why:
            out.append(why)
        elif "\x00" in v or len(v) > 4096:
            out.append(f"{k}: the value holds a NUL character or is over 4,096 characters")
    return out
