"""``campaign-bot doctor bot``: are the service's settings sound?

Checks, each with a fix when it fails (:class:`evidence.doctor.Check`), reading only:

* GitHub credentials: the App's key signs a JWT that GitHub accepts, and an installation
  token is minted (for ``--repo``'s installation, else the App's first); a token instead of
  an App is reported as such;
* webhook secret: set (the same one as in the App's settings);
* database: reachable, and migrated to this version's newest revision (``campaign-bot
  migrate`` does that; the doctor never changes it);
* public URL: ``CAMPAIGN_BOT_PUBLIC_URL/healthz`` answers 200 ``{"status": "ok"}`` (GitHub
  delivers to ``PUBLIC_URL/webhook``, through the same proxy);
* notification targets (only when ``CAMPAIGN_BOT_NOTIFY_TARGETS`` names any): each alias's URL
  is one Apprise can send to, or a signed webhook's http(s) URL; nothing is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.settings import ENV_PREFIX, Settings
from evidence.doctor import Check

HEALTH_TIMEOUT_S = 10.0


def check_credentials(settings: Settings, repo: str | None) -> Check:
    """Mint an installation token with the App credentials (or report a token)."""
    from github import Auth, GithubException, GithubIntegration

    if settings.app_id is None or (settings.private_key is None
                                   and settings.private_key_file is None):
        if settings.token is not None:
            return Check("GitHub credentials", "warn", "a token (CAMPAIGN_BOT_TOKEN), not a "
                         "GitHub App: one account's permissions, no check runs",
                         "create the App (serve's setup page, or app-manifest) for production")
        return Check("GitHub credentials", "fail", "no App id and key, no token",
                     "start `campaign-bot serve` with CAMPAIGN_BOT_PUBLIC_URL set and open the "
                     "setup URL it prints, or set CAMPAIGN_BOT_APP_ID and "
                     "CAMPAIGN_BOT_PRIVATE_KEY_FILE")
    try:
        pem = settings.private_key_pem() or ""
        gi = GithubIntegration(auth=Auth.AppAuth(int(settings.app_id), pem),
                               base_url=settings.github_api_url)
        if repo:
            owner, _, name = repo.partition("/")
            inst = gi.get_repo_installation(owner, name)
        else:
            found = list(gi.get_installations())
            if not found:
                return Check("GitHub credentials", "fail", f"App {settings.app_id} is installed "
                             "nowhere", "install the App on the campaign repositories (its "
                             "page on GitHub: Install App)")
            inst = found[0]
        tok = gi.get_access_token(inst.id)
    except GithubException as exc:
        msg = exc.data.get("message") if isinstance(exc.data, dict) else str(exc.data)
        fix = ("install the App on " + repo) if exc.status == 404 and repo else (
            "check CAMPAIGN_BOT_APP_ID and the private key (GitHub refused the JWT)"
            if exc.status == 401 else "see GitHub's message")
        return Check("GitHub credentials", "fail", f"App {settings.app_id}: GitHub answered "
                     f"{exc.status}: {msg}", fix)
    except Exception as exc:  # noqa: BLE001 - a bad key, an unreachable host: say which
        return Check("GitHub credentials", "fail", f"App {settings.app_id}: "
                     f"{type(exc).__name__}: {str(exc)[:200]}",
                     "check the private key file and CAMPAIGN_BOT_GITHUB_API_URL")
    expires = getattr(tok, "expires_at", None)
    return Check("GitHub credentials", "ok", f"App {settings.app_id}: installation {inst.id} "
                 f"token minted" + (f" (expires {expires:%Y-%m-%d %H:%M} UTC)" if expires
                                    else ""))


def check_secret(settings: Settings) -> Check:
    """The webhook secret is set."""
    if settings.webhook_secret is None:
        return Check("webhook secret", "fail", f"{ENV_PREFIX}WEBHOOK_SECRET not set (nor "
                     "stored by the setup page)", "set it to the App's webhook secret")
    n = len(settings.webhook_secret.get_secret_value())
    if n < 20:
        return Check("webhook secret", "warn", f"set, but only {n} characters",
                     "use a long random secret (e.g. `openssl rand -hex 32`) in the App and "
                     "here")
    return Check("webhook secret", "ok", f"set ({n} characters)")


def check_database(settings: Settings) -> Check:
    """The database answers and carries this version's newest migration."""
    from sqlalchemy.engine import make_url

    from bot import database

    url = settings.database_url
    shown = url
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - not a URL at all
        return Check("database", "fail", f"{url!r}: {exc}", f"fix {ENV_PREFIX}DATABASE_URL")
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
            and not Path(parsed.database).exists():
        return Check("database", "fail", f"{url}: the file does not exist",
                     "run `campaign-bot migrate` (it creates and migrates it)")
    try:
        engine = database.make_engine(url, sqlite_synchronous=settings.sqlite_synchronous)
        shown = engine.url.render_as_string(hide_password=True)
        try:
            current, head = database.revisions(engine)
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any driver error: say which
        first = str(exc).splitlines()[0] if str(exc) else ""
        return Check("database", "fail", f"{shown}: {type(exc).__name__}: {first[:200]}",
                     f"check {ENV_PREFIX}DATABASE_URL and that the server runs")
    if current != head:
        return Check("database", "fail", f"{shown}: at revision {current or 'none'}, this "
                     f"version needs {head}", "run `campaign-bot migrate`")
    return Check("database", "ok", f"{shown}: migrated ({head})")


def check_public_url(settings: Settings, client: Any = None) -> Check:
    """``PUBLIC_URL/healthz`` answers 200 ``{"status": "ok"}``."""
    import httpx

    if not settings.public_url:
        return Check("public URL", "fail", f"{ENV_PREFIX}PUBLIC_URL not set",
                     "set it to the https URL GitHub reaches the service at")
    url = settings.public_url.rstrip("/") + "/healthz"
    try:
        r = (client or httpx).get(url, timeout=HEALTH_TIMEOUT_S, follow_redirects=False)
    except httpx.HTTPError as exc:
        return Check("public URL", "fail", f"{url}: {type(exc).__name__}: {str(exc)[:150]}",
                     "is the service running and the reverse proxy forwarding to it? (TLS, "
                     "DNS, firewall)")
    try:
        body = r.json()
    except ValueError:
        body = {}
    if r.status_code != 200 or body.get("status") != "ok":
        probs = "; ".join(body.get("problems", [])) if isinstance(body, dict) else ""
        return Check("public URL", "fail", f"{url}: HTTP {r.status_code}" +
                     (f": {probs}" if probs else ""),
                     "read the service log; a 502/504 is the proxy not reaching the service")
    return Check("public URL", "ok", f"{url}: 200 ok")


def check_notify(settings: Settings) -> Check | None:
    """The notification targets: each alias's URL parsed by Apprise (the plugin it selects
    is named), or a signed webhook; None when no target is configured.  Sends nothing, and
    never shows a URL (they hold tokens)."""
    targets = settings.notify.targets
    if not targets:
        return None
    import apprise

    seen, bad = [], []
    for alias, t in sorted(targets.items()):
        if t.signed:
            seen.append(f"{alias} (signed webhook)")
            continue
        plugin = apprise.Apprise.instantiate(t.url.get_secret_value())
        if plugin is None:
            bad.append(alias)
        else:
            seen.append(f"{alias} ({getattr(plugin, 'service_name', type(plugin).__name__)})")
    if bad:
        return Check("notification targets", "fail", f"not an Apprise URL: {', '.join(bad)}",
                     f"fix those aliases in {ENV_PREFIX}NOTIFY_TARGETS (URL forms: "
                     "https://github.com/caronc/apprise/wiki)")
    return Check("notification targets", "ok", ", ".join(seen))


def run_checks(settings: Settings, repo: str | None) -> list[Check]:
    """Every bot check, in table order (the notification targets' only when any is
    configured)."""
    checks = [check_credentials(settings, repo), check_secret(settings),
              check_database(settings), check_public_url(settings)]
    notify = check_notify(settings)
    return checks + ([notify] if notify is not None else [])
