"""Live campaign pages in ``campaign-bot serve``: the dashboard's pages at
``/c/{owner}/{repo}/{campaign}/`` (``index.html``, ``screen-*.html``, ``pool-*.html``,
``budget.html``, ``findings.html``, ``style.css``, the evidence documents under
``evidence/``) plus ``queue.html``: each pool's running screen (elapsed against its estimate,
stuck ones flagged) and its queued screens, read from the bot's ``screens`` table.

Where the evidence comes from is one injectable function, ``load_campaign_dir(owner, repo,
campaign) -> Path`` (blocking; it runs in a worker thread): :class:`GitCampaignDirs` reads
the campaign directory from the repository's bare git mirror (:mod:`bot.github.git`, as the
review and the status header do) and caches it by the directory's git tree SHA, so unchanged
evidence is written once.  The loader must return a new path whenever the evidence changes (a
folder named by the tree SHA does): the pages built from a path are cached by that path.

Access (decided here, documented in ``docs/dashboard.md`` and ``docs/security.md``): pages of
a **public** repository are open to anyone.  Without sign-in configured, a **private**
repository, an unknown one and an unknown campaign are all answered ``404 Not Found`` with the
same body, so the pages never tell whether a private repository exists.  With sign-in
(:mod:`bot.features.dashboard.signin`), a visitor without a session is sent to sign in for
*every* repository that is not public (private, unknown, or one the App cannot see alike: the
redirect tells nothing either); once signed in, a repository the person cannot read and one
that does not exist get the same 404, as GitHub itself answers.

The bot's tables are read with SQLAlchemy Core (only the columns used, never written): the
dashboard imports no other feature's code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import logging
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy import Column, Integer, MetaData, String, Table, select
from sqlalchemy.engine import Engine

from bot import links as link_scheme
from bot.features.dashboard import pages
from bot.features.dashboard.ledger import SCREENS, LedgerError, read_ledger_from
from bot.features.dashboard.model import (
    CampaignUnreadable,
    budget_view,
    build_site,
    campaign_status,
)
from bot.features.dashboard.signin import LOGOUT_PATH, SignIn, signin_router
from bot.features.dashboard.views import LedgerScreen, Site, slug
from bot.github.git import GitError, GitMirrors
from bot.github.port import GitHubError
from evidence.header import QueueItem

LoadCampaignDir = Callable[[str, str, str], Path]
"""``(owner, repo, campaign id) -> campaign directory``; raises :class:`CampaignNotFound`."""
RepoPrivate = Callable[[str, str], "bool | None"]
"""``(owner, repo) -> True`` private, ``False`` public, ``None`` no such repository (or the
App cannot see it)."""

PREFIX = link_scheme.PREFIX
"""URL prefix of the live pages (:data:`bot.links.PREFIX`)."""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
"""An owner, repository or campaign id as it may appear in a URL (GitHub's own rules for
owners and repositories are narrower; ``..`` and ``/`` never pass)."""
STUCK_FACTOR = 1.5
STUCK_GRACE_S = 600.0
"""A running screen is stuck past ``max(STUCK_FACTOR x estimate, estimate + STUCK_GRACE_S)``
seconds since it was dispatched: the bot's wall-time estimate already includes setup, so
half again (at least ten minutes more) is well past any normal run."""
TEXT_SUFFIXES = (".json", ".toml", ".md", ".txt", ".sha256", ".jsonl", ".csv", ".yaml", ".yml")
"""Files of a campaign directory written from git for the pages (the evidence is text)."""
SITE_CACHE_ENTRIES = 8
"""Campaign sites (built evidence) kept in memory, most recently used first."""
PAGE_CACHE_BYTES = 64 * 1024 * 1024
"""Rendered pages kept in memory (bytes, all campaigns), least recently used dropped."""
VISIBILITY_TTL_S = 60.0
TREE_RECHECK_S = 15.0
"""Seconds a repository's visibility, and a campaign directory's tree SHA, are reused before
GitHub is asked again."""
VISIBILITY_ENTRIES = 10_000
"""Most repository visibility answers kept (anyone can ask for any name; the oldest answers
are dropped first)."""
NOT_FOUND = "Not Found\n"
ACCOUNT_SLOT = pages.ACCOUNT_SLOT.encode()
def account_form(login: str | None) -> bytes:
    """What replaces the template's account slot on a page of a private repository: the Sign
    out button, after "Signed in as LOGIN" (HTML-escaped) when GitHub named the person at
    sign-in."""
    who = (f'<span class="who">Signed in as <strong>{html.escape(login)}</strong></span> '
           if login else "")
    return (f'<form class="account" method="post" action="{LOGOUT_PATH}">{who}'
            '<button type="submit">Sign out</button></form>').encode()
PRIVATE_HEADERS = MappingProxyType({"Cache-Control": "private, no-store", "Vary": "Cookie"})
"""A private repository's pages are never kept by a shared cache (nor by the browser)."""
log = logging.getLogger(__name__)


class CampaignNotFound(LookupError):
    """No such campaign in the repository (or its directory cannot be read)."""


_md = MetaData()
CAMPAIGN_HEADERS = Table(
    "campaign_headers", _md,
    Column("id", Integer, primary_key=True),
    Column("repo", String(300)),
    Column("path", String(500)),
    Column("campaign_id", String(200)),
    Column("default_branch", String(200)),
)
"""The columns of the status header's table that locate a campaign directory."""
QUEUED, ACTIVE = ("queued",), ("dispatched", "running", "cancelling")


def _utc(dt: datetime | None) -> datetime | None:
    return dt if dt is None or dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def campaign_location(engine: Engine, repo: str, campaign: str) -> tuple[str, str | None] | None:
    """``(directory path, default branch or None)`` of ``campaign`` in ``repo``
    (``owner/name``) as the bot recorded it: the status header's row, else a screen's
    ``campaign_path``; None when the bot knows no such campaign."""
    with engine.connect() as db:
        row = db.execute(select(CAMPAIGN_HEADERS.c.path, CAMPAIGN_HEADERS.c.default_branch)
                         .where(CAMPAIGN_HEADERS.c.repo == repo,
                                CAMPAIGN_HEADERS.c.campaign_id == campaign)
                         .order_by(CAMPAIGN_HEADERS.c.id).limit(1)).first()
        if row is not None:
            return row.path, row.default_branch
        path = db.scalar(select(SCREENS.c.campaign_path)
                         .where(SCREENS.c.repo == repo, SCREENS.c.campaign == campaign)
                         .order_by(SCREENS.c.id.desc()).limit(1))
    return (path, None) if path else None


class GitCampaignDirs:
    """``load_campaign_dir`` over the repositories' bare mirrors (:mod:`bot.github.git`, the
    review's and the status header's path): the default branch fetched with the installation
    token, the campaign directory's text files written from git objects under
    ``cache_root/OWNER/REPO/TREE_SHA`` and reused while the directory's git tree SHA is
    unchanged (the branch is fetched again at most every :data:`TREE_RECHECK_S` seconds).
    No per-file cap: a campaign over the mirrors' ``max_campaign_bytes`` is refused whole.

    ``engine``: the bot's database (where the campaign's directory is recorded, see
    :func:`campaign_location`); ``port_for(full_name)``: a GitHub port for a repository
    (blocking; asked for the default branch when the bot recorded none, and for the git
    remote); ``git``: the mirrors.  Raises :class:`CampaignNotFound`; GitHub errors and
    :class:`bot.github.git.GitError` propagate."""

    def __init__(self, engine: Callable[[], Engine], port_for: Callable[[str], Any],
                 git: GitMirrors, cache_root: Path, *,
                 clock: Callable[[], float] = time.monotonic, keep: Any = None) -> None:
        self.keep = keep  # e.g. the TemporaryDirectory of cache_root: removed with this object
        self.engine, self.port_for, self.git, self.cache_root, self.clock = (
            engine, port_for, git, Path(cache_root), clock)
        self._seen: dict[tuple[str, str, str], tuple[float, Path]] = {}
        self._lock = threading.Lock()

    def __call__(self, owner: str, repo: str, campaign: str) -> Path:
        key = (owner, repo, campaign)
        hit = self._seen.get(key)
        if hit is not None and self.clock() - hit[0] < TREE_RECHECK_S and hit[1].is_dir():
            return hit[1]
        full = f"{owner}/{repo}"
        loc = campaign_location(self.engine(), full, campaign)
        if loc is None:
            raise CampaignNotFound(f"{full}: no campaign {campaign!r} recorded")
        path = loc[0].strip("/")
        port = self.port_for(full)
        ref = loc[1] or port.get_default_branch()
        remote = port.git_remote()
        if remote is None:
            raise CampaignNotFound(f"{full}: no git access")
        branch = f"refs/heads/{ref}"
        tip = self.git.fetch(remote, full, [branch]).get(branch)
        tree = self.git.tree_sha(full, tip, path) if tip else None
        if not tip or not tree:
            raise CampaignNotFound(f"{full}: {path} is not a directory at {ref}")
        dest = self.cache_root / owner / repo / tree
        with self._lock:
            if not dest.is_dir():
                self._write(full, tip, path, dest)
        self._seen[key] = (self.clock(), dest)
        return dest

    def _write(self, full: str, commit: str, path: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
        try:
            self.git.materialise(full, commit, path, tmp, suffixes=TEXT_SUFFIXES)
            tmp.rename(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@dataclass
class QueueRow:
    """One queued or running screen on the queue page; times in seconds."""

    label: str
    pr_number: int
    name: str
    track: str
    state: str
    requested_by: str
    runner: str | None
    run_url: str | None
    elapsed_s: float | None
    estimate_s: float | None
    stuck: bool


@dataclass
class PoolQueue:
    """A pool's running screens and its queue (oldest request first)."""

    pool: str
    slug: str
    running: list[QueueRow]
    queued: list[QueueRow]


def is_stuck(elapsed_s: float | None, estimate_s: float | None) -> bool:
    """True when a running screen's ``elapsed_s`` is past ``max(STUCK_FACTOR x estimate,
    estimate + STUCK_GRACE_S)`` (seconds)."""
    if elapsed_s is None or estimate_s is None:
        return False
    return elapsed_s > max(STUCK_FACTOR * estimate_s, estimate_s + STUCK_GRACE_S)


def read_queue(engine: Engine, repo: str, campaign: str, now: datetime) -> list[PoolQueue]:
    """Every pool with a queued or running screen of ``campaign`` in ``repo``, by name."""
    with engine.connect() as db:
        rows = db.execute(select(SCREENS).where(
            SCREENS.c.repo == repo, SCREENS.c.campaign == campaign,
            SCREENS.c.state.in_(QUEUED + ACTIVE)).order_by(SCREENS.c.requested_at,
                                                           SCREENS.c.id)).all()
    pools: dict[str, PoolQueue] = {}
    for r in rows:
        pq = pools.setdefault(r.pool, PoolQueue(r.pool, slug(r.pool), [], []))
        running = r.state in ACTIVE
        since = _utc(r.dispatched_at or r.started_at) if running else _utc(r.requested_at)
        elapsed = (now - since).total_seconds() if since is not None else None
        row = QueueRow(
            label=f"S{r.id}", pr_number=r.pr_number,
            name=r.candidate if r.kind == "candidate" else "control", track=r.track,
            state=r.state, requested_by=r.requested_by, runner=r.runner_name,
            run_url=r.run_url, elapsed_s=elapsed, estimate_s=r.estimate_wall_s,
            stuck=running and is_stuck(elapsed, r.estimate_wall_s))
        (pq.running if running else pq.queued).append(row)
    return [pools[k] for k in sorted(pools)]


FILTER_VALUE_CHARS = 500
"""Longest ``rule`` or ``file`` value a findings query may carry (longer ones are no
condition: no finding's path or rule is that long)."""


def findings_filter(request: Request) -> pages.FindingsFilter:
    """The findings page's filter from ``request``'s query: ``level`` (repeated, or
    comma-separated: ``P0``..``P3``), ``rule`` and ``file`` (:class:`pages.FindingsFilter`);
    every other parameter is ignored."""
    q = request.query_params

    def one(key: str) -> str | None:
        v = q.get(key)
        return v if v and len(v) <= FILTER_VALUE_CHARS else None

    return pages.FindingsFilter.from_query(q.getlist("level"), one("rule"), one("file"))


def queue_items(screens: list[LedgerScreen]) -> list[QueueItem]:
    """The campaign's screen queue as the status header states it, from the bot's
    ``screens`` rows (oldest first): running screens (dispatched, running, cancelling) and
    queued ones, in request order; an empty list when nothing is queued or running."""
    items = []
    for s in screens:
        if s.state in ACTIVE:
            run = f" (run {s.run_url})" if s.run_url else ""
            items.append(QueueItem(s.candidate, s.track, "running", pr=s.pr_number,
                                   pool=s.pool, waits_on=f"the self-hosted runner on pool "
                                                         f"{s.pool}{run}"))
        elif s.state in QUEUED:
            items.append(QueueItem(s.candidate, s.track, "queued", pr=s.pr_number,
                                   pool=s.pool, waits_on=f"pool {s.pool}"))
    return items


class LiveDashboard:
    """The live pages: :meth:`page` renders one (used by the routes of :meth:`router`).

    ``engine()``: the bot's database; ``load_campaign_dir`` and ``repo_private``: see
    :data:`LoadCampaignDir` and :data:`RepoPrivate`; ``clock()``: now (UTC); ``signin``:
    GitHub sign-in for repositories that are not public (None: they are all 404)."""

    def __init__(self, engine: Callable[[], Engine], load_campaign_dir: LoadCampaignDir,
                 repo_private: RepoPrivate, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 signin: SignIn | None = None) -> None:
        self.engine, self.load_campaign_dir, self.repo_private, self.clock = (
            engine, load_campaign_dir, repo_private, clock)
        self.signin = signin
        self._sites: OrderedDict[tuple[str, Path], Site] = OrderedDict()
        self._budgeted: dict[tuple[str, Path], tuple[str, Site]] = {}
        self._pages: OrderedDict[tuple[str, str], tuple[bytes, str]] = OrderedDict()
        self._page_bytes = 0
        self._visibility: OrderedDict[tuple[str, str], tuple[float, bool | None]] = \
            OrderedDict()
        self._lock = threading.Lock()

    def visibility(self, owner: str, repo: str) -> bool | None:
        """``repo_private(owner, repo)`` (True private, False public, None unknown), kept
        :data:`VISIBILITY_TTL_S` seconds."""
        key = (owner, repo)
        hit = self._visibility.get(key)
        now = time.monotonic()
        if hit is None or now - hit[0] > VISIBILITY_TTL_S:
            hit = (now, self.repo_private(owner, repo))
            with self._lock:
                self._visibility[key] = hit
                self._visibility.move_to_end(key)
                while len(self._visibility) > VISIBILITY_ENTRIES:
                    self._visibility.popitem(last=False)
        return hit[1]

    def public(self, owner: str, repo: str) -> bool:
        """True when ``owner/repo`` exists and is public (see :meth:`visibility`)."""
        return self.visibility(owner, repo) is False

    def authorise(self, request: Request | None, owner: str, repo: str,
                  visibility: bool | None, here: str) -> Response | None:
        """None when ``request`` may see the pages of ``owner/repo`` (not public:
        ``visibility`` True or None), else the answer: 404 without sign-in configured or for
        a signed-in person who cannot read it (or when it does not exist), a redirect to sign
        in (back to ``here``) without a session or with one GitHub no longer accepts.
        Raises :class:`httpx.HTTPError` when GitHub cannot be asked."""
        if self.signin is None or request is None:
            return PlainTextResponse(NOT_FOUND, 404)
        token = self.signin.token(request)
        if token is None:
            return Response(status_code=303, headers={
                "Location": self.signin.login_url(here), **PRIVATE_HEADERS})
        if visibility is None:
            return PlainTextResponse(NOT_FOUND, 404, headers=PRIVATE_HEADERS)
        access = self.signin.access(token, owner, repo)
        if access == "signed-out":
            return self.signin.signed_out(here)
        if access != "read":
            return PlainTextResponse(NOT_FOUND, 404, headers=PRIVATE_HEADERS)
        return None

    def site(self, owner: str, repo: str, campaign: str) -> tuple[Site, Path, str]:
        """The campaign's :class:`Site` with the budget from the bot's ledger as it is now,
        its directory, and a fingerprint of (directory, ledger) that changes whenever a page
        could.  Raises :class:`CampaignNotFound`,
        :class:`~bot.features.dashboard.model.CampaignUnreadable` and
        :class:`~bot.features.dashboard.ledger.LedgerError`."""
        root = self.load_campaign_dir(owner, repo, campaign)
        key = (f"{owner}/{repo}/{campaign}", root)
        with self._lock:
            site = self._sites.get(key)
            if site is None:
                site = build_site(root)
                self._sites[key] = site
                while len(self._sites) > SITE_CACHE_ENTRIES:
                    self._sites.popitem(last=False)
            else:
                self._sites.move_to_end(key)
        ledger = read_ledger_from(self.engine(), site.scope.id, f"{owner}/{repo}",
                                  shown="the bot's database")
        fp = hashlib.sha256(repr((key, ledger.entries, ledger.screens)).encode()).hexdigest()
        with self._lock:
            hit = self._budgeted.get(key)
            if hit is not None and hit[0] == fp:
                return hit[1], root, fp
        budget = budget_view(site.scope, site.screens, ledger)
        status = site.status if site.status_source is None else campaign_status(
            site.scope, site.status_source, budget, site.as_of, site.source_url,
            queue=queue_items(ledger.screens))
        budgeted = dataclasses.replace(site, budget=budget, status=status)
        with self._lock:
            self._budgeted[key] = (fp, budgeted)
            while len(self._budgeted) > SITE_CACHE_ENTRIES:
                self._budgeted.pop(next(iter(self._budgeted)))
        return budgeted, root, fp

    def page(self, owner: str, repo: str, campaign: str, name: str,
             request: Request | None = None) -> Response:
        """The response for page ``name`` (``""`` is the overview) to ``request`` (its
        session cookie, for a repository that is not public: :meth:`authorise`); 404 for
        anything not there.  Pages are kept (at most :data:`PAGE_CACHE_BYTES`) until the
        evidence or the ledger changes; the queue page is rendered for every request."""
        if not all(NAME.match(x) for x in (owner, repo, campaign)):
            return PlainTextResponse(NOT_FOUND, 404)
        private = False
        try:
            visibility = self.visibility(owner, repo)
            if visibility is not False:
                here = f"{PREFIX}/{owner}/{repo}/{campaign}/{quote(name)}"
                try:
                    denied = self.authorise(request, owner, repo, visibility, here)
                except httpx.HTTPError as exc:
                    log.warning("live page %s/%s: access check: %s", owner, repo, exc)
                    return PlainTextResponse("GitHub did not answer; try again in a minute.\n",
                                             503, headers=PRIVATE_HEADERS)
                if denied is not None:
                    return denied
                private = True
            site, root, fp = self.site(owner, repo, campaign)
        except (CampaignNotFound, CampaignUnreadable, FileNotFoundError):
            return PlainTextResponse(NOT_FOUND, 404, headers=PRIVATE_HEADERS if private
                                     else None)
        except GitHubError as exc:
            log.warning("live page %s/%s/%s: GitHub: %s", owner, repo, campaign, exc)
            return PlainTextResponse("GitHub did not answer; try again in a minute.\n", 503)
        except GitError as exc:
            log.warning("live page %s/%s/%s: git: %s", owner, repo, campaign, exc)
            return PlainTextResponse("The repository could not be read; try again in a "
                                     "minute.\n", 503)
        except LedgerError as exc:
            log.warning("live page %s/%s/%s: %s", owner, repo, campaign, exc)
            return PlainTextResponse("The bot's database cannot be read now.\n", 503)
        name = name or "index.html"
        if name == "findings.html" and request is not None:
            only = findings_filter(request)
            if only.active:  # rendered for each query, never kept (findings are few)
                links = pages.Links(f"{PREFIX}/{owner}/{repo}/{campaign}/", live=True)
                body = pages.render_findings(site, links, only).encode()
                return self._respond(body, "text/html; charset=utf-8", private,
                                     self._login(request, private))
        cache_key = (fp, name)
        with self._lock:
            hit = self._pages.get(cache_key)
            if hit is not None:
                self._pages.move_to_end(cache_key)
                return self._respond(hit[0], hit[1], private, self._login(request, private))
        links = pages.Links(f"{PREFIX}/{owner}/{repo}/{campaign}/", live=True)
        out = self._render(site, root, links, name, f"{owner}/{repo}", campaign)
        if out is None:
            return PlainTextResponse(NOT_FOUND, 404, headers=PRIVATE_HEADERS if private
                                     else None)
        body, media_type = out
        if name != "queue.html":
            self.keep(cache_key, body, media_type)
        return self._respond(body, media_type, private, self._login(request, private))

    def cached(self, key: tuple[str, str]) -> bytes | None:
        """A rendered answer kept under ``key`` (fingerprint, name), if still kept."""
        with self._lock:
            hit = self._pages.get(key)
            if hit is None:
                return None
            self._pages.move_to_end(key)
            return hit[0]

    def keep(self, key: tuple[str, str], body: bytes, media_type: str) -> None:
        """Keep a rendered answer (pages and the JSON API share :data:`PAGE_CACHE_BYTES`)."""
        with self._lock:
            old = self._pages.pop(key, None)
            if old is not None:
                self._page_bytes -= len(old[0])
            self._pages[key] = (body, media_type)
            self._page_bytes += len(body)
            while self._page_bytes > PAGE_CACHE_BYTES and self._pages:
                _, (gone, _t) = self._pages.popitem(last=False)
                self._page_bytes -= len(gone)

    def _login(self, request: Request | None, private: bool) -> str | None:
        """The signed-in person's login for a private repository's page, else None."""
        if not private or self.signin is None or request is None:
            return None
        return self.signin.login(request)

    @staticmethod
    def _respond(body: bytes, media_type: str, private: bool,
                 login: str | None = None) -> Response:
        """A page; on a private repository's HTML pages the account slot becomes the
        sign-out button, with ``login`` (who is signed in) when known, and no cache may keep
        it."""
        if not private:
            return Response(body, media_type=media_type)
        if media_type.startswith("text/html"):
            body = body.replace(ACCOUNT_SLOT, account_form(login), 1)
        return Response(body, media_type=media_type, headers=PRIVATE_HEADERS)

    def _render(self, site: Site, root: Path, links: pages.Links, name: str, repo: str,
                campaign: str) -> tuple[bytes, str] | None:
        """``(body, media type)`` of page ``name``; None when there is no such page."""
        html = "text/html; charset=utf-8"
        if name == "index.html":
            return pages.render_index(site, links).encode(), html
        if name == "budget.html":
            return pages.render_budget(site, links).encode(), html
        if name == "findings.html":
            return pages.render_findings(site, links).encode(), html
        if name == pages.STYLESHEET:
            return pages.stylesheet().encode(), "text/css; charset=utf-8"
        if name == "queue.html":
            now = self.clock()
            return pages.render_page(
                "queue.html.j2", site, links, now=now,
                pools=read_queue(self.engine(), repo, campaign, now),
                stuck_rule=f"{STUCK_FACTOR:g} × its estimate (at least "
                           f"{STUCK_GRACE_S / 60:.0f} min more than the estimate)").encode(), html
        for t in site.tracks:
            if name == f"track-{t.slug}.html":
                return pages.render_track(site, t, links).encode(), html
        for p in site.pools:
            if name == f"pool-{p.slug}.html":
                return pages.render_pool(site, p, links).encode(), html
        for s in site.screens:
            if name == f"screen-{s.slug}.html":
                return pages.render_screen(site, s, links).encode(), html
        for d in site.documents:
            if name == d.site_path:
                try:
                    data = (root / d.path).read_bytes()
                except OSError:
                    return None
                if hashlib.sha256(data).hexdigest() != d.sha256:
                    return None  # changed since it was read: not the document the page shows
                kind = "application/json" if d.path.endswith(".json") else "text/plain"
                return data, f"{kind}; charset=utf-8"
        return None

    def router(self) -> APIRouter:
        """The routes under :data:`PREFIX` (sync handlers: they run in the server's thread
        pool, where the blocking GitHub and database calls belong)."""
        r = APIRouter()

        @r.get(PREFIX + "/{owner}/{repo}/{campaign}")
        def campaign_root(owner: str, repo: str, campaign: str, request: Request) -> Response:
            return self.page(owner, repo, campaign, "", request)

        @r.get(PREFIX + "/{owner}/{repo}/{campaign}/{name:path}")
        def campaign_page(owner: str, repo: str, campaign: str, name: str,
                          request: Request) -> Response:
            return self.page(owner, repo, campaign, name, request)

        return r


def add_routes(app: FastAPI, dashboard: LiveDashboard) -> None:
    """Serve ``dashboard``'s pages and the sign-in routes (``/login``,
    ``/login/callback``, ``/logout``: 404 while ``dashboard.signin`` is None, which may be
    set later, e.g. once the setup page stored the App) from ``app``."""
    app.include_router(dashboard.router())
    app.include_router(signin_router(lambda: dashboard.signin))
