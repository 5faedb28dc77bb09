"""The dashboard's read-only JSON API in ``campaign-bot serve``: campaigns, their status,
screens, verdicts, queue, budget and findings, for people's scripts and for agents (the MCP
server, :mod:`bot.features.dashboard.mcp_server`, asks it).  FastAPI describes every route
and answer in the service's OpenAPI document (``/openapi.json``).

Routes, under :data:`API_PREFIX` (``/api/v1``)::

    GET /repos/{owner}/{repo}/campaigns                        campaigns the bot recorded
    GET /repos/{owner}/{repo}/campaigns/{campaign}             status and per-track board
    GET /repos/{owner}/{repo}/campaigns/{campaign}/screens     every screen, oldest first
    GET /repos/{owner}/{repo}/campaigns/{campaign}/screens/{screen_id}
    GET /repos/{owner}/{repo}/campaigns/{campaign}/verdicts    verdicts and screening apart
    GET /repos/{owner}/{repo}/campaigns/{campaign}/queue       running and queued screens
    GET /repos/{owner}/{repo}/campaigns/{campaign}/budget      used / reserved / allowed
    GET /repos/{owner}/{repo}/campaigns/{campaign}/findings    ?level=P1&rule=..&file=..
    GET /openapi.json                                          this API's OpenAPI document

**Access** is the live pages' (:class:`~bot.features.dashboard.live.LiveDashboard`): a
public repository is open; a private one answers only to a person signed in on the pages
(the session cookie) or to ``Authorization: Bearer TOKEN`` where TOKEN is a GitHub token
that can read the repository (a fine-grained personal access token scoped to it, or a
GitHub App user access token), checked with GitHub's ``GET /repos/{owner}/{repo}`` as the
pages check a signed-in person.  Everything else, a private repository without access, an
unknown repository, an unknown campaign or screen, is one identical ``404`` (no redirect:
an API client cannot sign in through a browser), so the API never tells whether a private
repository exists.

**Cache**: answers are built from the pages' cached site (rebuilt only when the evidence or
the ledger changes) and kept per (evidence, ledger, URL); each carries a strong ``ETag`` and
``If-None-Match`` gets ``304``.  A public repository's answers may be kept 15 s by any cache
(``Cache-Control: public, max-age=15``, the live pages' git re-check interval); a private
one's never (``private, no-store``, ``Vary: Cookie, Authorization``).

**Rate limit**: :data:`RATE_PER_MINUTE` requests per minute per client address, over a
moving window (the ``limits`` library, the one slowapi and Flask-Limiter are built on: a
maintained implementation of moving-window counting, rather than our own); past it ``429``
with ``Retry-After``.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from pydantic import BaseModel, Field
from sqlalchemy import select

from bot.features.dashboard import pages
from bot.features.dashboard.charts import verdict_status
from bot.features.dashboard.ledger import SCREENS
from bot.features.dashboard.live import (
    CAMPAIGN_HEADERS,
    NAME,
    PREFIX,
    LiveDashboard,
    QueueRow,
    read_queue,
)
from bot.features.dashboard.views import Site

API_PREFIX = "/api/v1"
RATE_PER_MINUTE = 120
"""Requests per minute per client address (a person's script polling every second and an
agent's burst of tool calls both fit; a crawler does not)."""
PUBLIC_CACHE = "public, max-age=15"
PRIVATE_API_HEADERS = MappingProxyType({"Cache-Control": "private, no-store",
                                        "Vary": "Cookie, Authorization"})
NOT_FOUND_BODY = MappingProxyType({"detail": "Not Found"})


# ------------------------------------------------------------------------------ answers


class VerdictOut(BaseModel):
    """One verdict of the engine (never recomputed): candidate/control ratio with the exact
    distribution-free bounds at ``confidence`` (one-sided, per bound)."""

    track: str
    candidate: str | None
    verdict: Literal["SUPPORTED", "FAILED", "INCONCLUSIVE", "EQUIVALENT", "NOT SHOWN"] | str
    status: Literal["confirmed", "provisional", "not confirmed"] | str = Field(
        description="SUPPORTED: the engine's confirmation state; FAILED and EQUIVALENT: "
                    "confirmed; INCONCLUSIVE and NOT SHOWN: provisional")
    ratio: float | None
    lower: float | None
    upper: float | None
    confidence: float | None
    m: int = Field(description="qualifying control sessions")
    n: int = Field(description="qualifying candidate sessions")
    regression: bool
    summary: str
    screens: list[str]


class ScreeningOut(BaseModel):
    """A screening decision (PROMOTE_TO_FULL_SCREEN, REJECT, CONTINUE): never a verdict."""

    screen_id: str
    track: str
    candidate: str
    decision: str
    reason: str
    first_pair_ratio: float | None
    m: int
    n: int


class TrackOut(BaseModel):
    """One track: its target ratio, control baseline, best candidate and every verdict."""

    id: str
    target_ratio: float = Field(description="1 - target_reduction: a candidate must be at "
                                            "or below this ratio")
    baseline_median_s: float | None
    baseline_sessions: int
    best: VerdictOut | None
    verdicts: list[VerdictOut]
    screening: dict[str, int]
    page: str


class CampaignStatusOut(BaseModel):
    """A campaign at a glance: the status header's three sentences and the board."""

    id: str
    title: str
    issue: int | None
    evidence_until: datetime | None
    current_state: str | None
    decision_needed: str | None
    next_action: str | None
    tracks: list[TrackOut]
    findings_by_severity: dict[str, int]
    page: str


class CampaignRef(BaseModel):
    """A campaign the bot recorded for a repository."""

    id: str
    path: str
    url: str
    page: str


class SessionOut(BaseModel):
    """One session (one receipt): its median of measured client wall seconds (None when a
    measured request failed) and whether it qualifies (:mod:`evidence.sessions`, the one
    count that check, the status header and the pages use)."""

    session_id: str
    slot: int
    arm: str
    candidate: str | None
    track: str
    started_at: datetime
    median_s: float | None
    measured_s: list[float | None]
    qualifies: bool
    problems: list[str]


class ScreenOut(BaseModel):
    """A screen in a list: sessions m vs n, time, device-hours, failures."""

    screen_id: str
    tracks: list[str]
    candidates: list[str]
    pool: str
    m: int
    n: int
    started_at: datetime
    ended_at: datetime
    device_hours: float
    failed_sessions: int
    qualifying_sessions: int
    url: str
    page: str


class ScreenDetailOut(ScreenOut):
    """One screen with its sessions, verdicts, screening decisions and findings."""

    sessions: list[SessionOut]
    verdicts: list[VerdictOut]
    screening: list[ScreeningOut]
    findings: list[FindingOut]


class FindingOut(BaseModel):
    """A finding of the evidence review, with where to read it."""

    severity: str
    rule: str
    path: str
    line: int | None
    field: str | None
    message: str
    resolution: str | None
    link: str | None = Field(description="the file at that line (the repository browser "
                                         "when known, else the live pages' copy)")


class VerdictsOut(BaseModel):
    """Every verdict, and the screening decisions apart."""

    verdicts: list[VerdictOut]
    screening: list[ScreeningOut]


class PoolQueueOut(BaseModel):
    """One pool's running screens and its queue, in the order they will run."""

    pool: str
    running: list[QueueRow]
    queued: list[QueueRow]


class BudgetLineOut(BaseModel):
    """One budget dimension (``unit`` ``h`` for hours, empty for a count)."""

    name: str
    unit: str
    used: float
    failed: float | None
    reserved: float | None = Field(description="queued and running screens' estimates")
    allowed: float
    left: float


class BudgetOut(BaseModel):
    """Budget used / reserved / allowed, from the bot's ledger."""

    lines: list[BudgetLineOut]
    queued_wall_h: float = Field(description="forecast: wall-hours of queued and running "
                                             "screens (their estimates)")
    queued_device_h: float


ScreenDetailOut.model_rebuild()


# ------------------------------------------------------------------------------ building


def _num(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def verdict_out(v: Any) -> VerdictOut:
    """The engine's verdict ``v`` (:class:`evidence.verdicts.TrackVerdict`) as an answer."""
    return VerdictOut(
        track=v.track, candidate=v.candidate, verdict=v.verdict,
        status=verdict_status(v),
        ratio=_num(v.ratio), lower=_num(v.lower), upper=_num(v.upper),
        confidence=_num(v.confidence), m=v.m, n=v.n, regression=bool(v.regression),
        summary=v.summary, screens=list(v.screens))


def screening_out(d: Any) -> ScreeningOut:
    """A screening decision as an answer."""
    return ScreeningOut(screen_id=d.screen_id, track=d.track, candidate=d.candidate,
                        decision=d.decision, reason=d.reason,
                        first_pair_ratio=_num(d.first_pair_ratio), m=d.m, n=d.n)


def campaign_status(site: Site, links: pages.Links) -> CampaignStatusOut:
    """The ``/campaigns/{campaign}`` answer."""
    st = site.status
    return CampaignStatusOut(
        id=site.scope.id, title=site.scope.title, issue=site.scope.issue,
        evidence_until=site.as_of,
        current_state=st.current_state if st else None,
        decision_needed=st.decision_needed if st else None,
        next_action=st.next_action if st else None,
        tracks=[TrackOut(id=t.track.id, target_ratio=t.theta0,
                         baseline_median_s=_num(t.baseline_median_s),
                         baseline_sessions=t.baseline_sessions,
                         best=verdict_out(t.best) if t.best else None,
                         verdicts=[verdict_out(v) for v in t.verdicts],
                         screening=dict(t.screening), page=links.track(t))
                for t in site.tracks],
        findings_by_severity=site.findings_by_severity, page=links.index())


def screen_out(site: Site, sc: Any, links: pages.Links, api: str, detail: bool) -> Any:
    """A screen as a list entry, or with ``detail`` its sessions, verdicts and findings."""
    base = dict(screen_id=sc.screen_id, tracks=sc.tracks, candidates=sc.candidates,
                pool=sc.pool, m=sc.m, n=sc.n, started_at=sc.started_at,
                ended_at=sc.ended_at, device_hours=sc.device_hours,
                failed_sessions=sum(1 for s in sc.sessions if s.failed),
                qualifying_sessions=sum(1 for s in sc.sessions if s.qualifies),
                url=f"{api}/screens/{sc.screen_id}", page=links.screen(sc))
    if not detail:
        return ScreenOut(**base)
    link = pages.source_link(site, links)
    return ScreenDetailOut(
        **base,
        sessions=[SessionOut(
            session_id=s.session_id, slot=s.slot, arm=s.arm, candidate=s.candidate,
            track=s.track, started_at=s.started_at, median_s=_num(s.median_s),
            measured_s=[q.client_wall_s if q.ok else None for q in s.measured],
            qualifies=s.qualifies,
            problems=[*s.lifecycle, *s.request_problems]) for s in sc.sessions],
        verdicts=[verdict_out(v) for v in sc.verdicts],
        screening=[screening_out(d) for d in sc.screening],
        findings=[finding_out(f, link) for f in sc.findings])


def finding_out(f: Any, link: Callable[[str, int | None], str | None]) -> FindingOut:
    """A review finding as an answer, with its link."""
    return FindingOut(severity=str(f.severity), rule=f.rule, path=f.path, line=f.line,
                      field=f.field, message=f.message, resolution=f.resolution,
                      link=link(f.path, f.line))


def findings(site: Site, links: pages.Links, level: str | None, rule: str | None,
             file: str | None) -> list[FindingOut]:
    """The review's findings, most severe first, filtered by ``level`` (``P0``..``P3``,
    comma-separated allowed), ``rule`` (exact) and ``file`` (path or path prefix)."""
    only = pages.FindingsFilter.from_query([level] if level else [], rule, file)
    link = pages.source_link(site, links)
    return [finding_out(f, link) for f in site.findings if only.keeps(f)]


def budget_out(site: Site) -> BudgetOut:
    """The ``/budget`` answer: each dimension and the forecast of queued work."""
    b = site.budget
    open_states = ("queued", "dispatched", "running", "cancelling")
    led = b.ledger.screens if b.ledger else []
    return BudgetOut(
        lines=[BudgetLineOut(name=x.name, unit=x.unit, used=x.used, failed=x.failed,
                             reserved=x.reserved, allowed=x.allowed, left=x.left)
               for x in b.lines],
        queued_wall_h=sum(s.estimate_wall_h for s in led if s.state in open_states),
        queued_device_h=sum(s.estimate_device_h for s in led if s.state in open_states))


def campaigns_of(dashboard: LiveDashboard, owner: str, repo: str) -> list[CampaignRef]:
    """Campaigns the bot recorded for ``owner/repo`` (status headers and screens), by id."""
    full = f"{owner}/{repo}"
    with dashboard.engine().connect() as db:
        rows = db.execute(select(CAMPAIGN_HEADERS.c.campaign_id, CAMPAIGN_HEADERS.c.path)
                          .where(CAMPAIGN_HEADERS.c.repo == full)).all()
        more = db.execute(select(SCREENS.c.campaign, SCREENS.c.campaign_path)
                          .where(SCREENS.c.repo == full).distinct()).all()
    found: dict[str, str] = {}
    for cid, path in [*rows, *more]:
        if cid and NAME.match(cid):
            found.setdefault(cid, path or "")
    api = f"{API_PREFIX}/repos/{owner}/{repo}/campaigns"
    return [CampaignRef(id=c, path=found[c], url=f"{api}/{c}",
                        page=f"{PREFIX}/{owner}/{repo}/{c}/") for c in sorted(found)]


# ------------------------------------------------------------------------------ serving


class Api:
    """The API's access, cache and rate limit over a :class:`LiveDashboard`."""

    def __init__(self, dashboard: LiveDashboard, *, rate_per_minute: int = RATE_PER_MINUTE,
                 clock: Callable[[], float] = time.time) -> None:
        self.dashboard = dashboard
        self.limiter = MovingWindowRateLimiter(MemoryStorage())
        self.rate = RateLimitItemPerMinute(rate_per_minute)
        self.clock = clock
        self._openapi: dict[str, Any] | None = None

    def limited(self, request: Request) -> Response | None:
        """``429`` with ``Retry-After`` when the client address is past the rate, else None."""
        who = request.client.host if request.client else "unknown"
        if self.limiter.hit(self.rate, "api", who):
            return None
        reset, _left = self.limiter.get_window_stats(self.rate, "api", who)
        wait = max(1, math.ceil(reset - self.clock()))
        return JSONResponse({"detail": "Too many requests: at most "
                             f"{self.rate.amount} a minute from one address"}, 429,
                            headers={"Retry-After": str(wait)})

    def allowed(self, request: Request, owner: str, repo: str) -> bool | None:
        """False: public; True: private and this request may read it; None: not to be shown
        (private without access, unknown, or names that cannot be a repository)."""
        d = self.dashboard
        if not (NAME.match(owner) and NAME.match(repo)):
            return None
        visibility = d.visibility(owner, repo)
        if visibility is False:
            return False
        if visibility is None or d.signin is None:
            return None
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else d.signin.token(request)
        if not token:
            return None
        return True if d.signin.access(token, owner, repo) == "read" else None

    def answer(self, request: Request, owner: str, repo: str, campaign: str | None,
               build: Callable[[Any, Any, str], Any]) -> Response:
        """Access, rate limit, cache and ETag around ``build(site, links, api_base)``
        (site and links None when ``campaign`` is: a repository's route), whose result (a
        pydantic model or a list of them; None: 404) is the JSON body."""
        slow = self.limited(request)
        if slow is not None:
            return slow
        private = self.allowed(request, owner, repo)
        if private is None:
            return JSONResponse(dict(NOT_FOUND_BODY), 404)
        headers = dict(PRIVATE_API_HEADERS) if private else {"Cache-Control": PUBLIC_CACHE}
        api = f"{API_PREFIX}/repos/{owner}/{repo}/campaigns"
        site = links = None
        fp = "repo"
        if campaign is not None:
            if not NAME.match(campaign):
                return JSONResponse(dict(NOT_FOUND_BODY), 404, headers=headers)
            api = f"{api}/{campaign}"
            try:
                site, _root, fp = self.dashboard.site(owner, repo, campaign)
            except Exception as exc:  # noqa: BLE001 - the pages' answers for each
                return self._failure(exc, headers)
            links = pages.Links(f"{PREFIX}/{owner}/{repo}/{campaign}/", live=True)
        key = (fp, "api:" + str(request.url.path) + "?" + str(request.url.query))
        cacheable = campaign is not None and not request.url.path.endswith("/queue")
        body = self.dashboard.cached(key) if cacheable else None
        if body is None:
            out = build(site, links, api)
            if out is None:
                return JSONResponse(dict(NOT_FOUND_BODY), 404, headers=headers)
            data = ([o.model_dump(mode="json") for o in out] if isinstance(out, list)
                    else out.model_dump(mode="json"))
            body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
            if cacheable:
                self.dashboard.keep(key, body, "application/json")
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        headers["ETag"] = etag
        if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type="application/json", headers=headers)

    @staticmethod
    def _failure(exc: Exception, headers: dict[str, str]) -> Response:
        from bot.features.dashboard.ledger import LedgerError
        from bot.features.dashboard.live import CampaignNotFound
        from bot.features.dashboard.model import CampaignUnreadable

        if isinstance(exc, CampaignNotFound | CampaignUnreadable | FileNotFoundError):
            return JSONResponse(dict(NOT_FOUND_BODY), 404, headers=headers)
        if isinstance(exc, LedgerError):
            return JSONResponse({"detail": "The bot's database cannot be read now."}, 503)
        return JSONResponse({"detail": "The repository could not be read; try again in a "
                             "minute."}, 503)

    def router(self) -> APIRouter:
        """The API's routes (sync: they run in the server's thread pool)."""
        r = APIRouter(prefix=API_PREFIX, tags=["campaigns (read-only)"])
        base = "/repos/{owner}/{repo}/campaigns"

        @r.get(base, response_model=list[CampaignRef],
               summary="Campaigns the bot recorded for a repository")
        def list_campaigns(owner: str, repo: str, request: Request) -> Response:
            return self.answer(request, owner, repo, None,
                               lambda _s, _l, _a: campaigns_of(self.dashboard, owner, repo))

        @r.get(base + "/{campaign}", response_model=CampaignStatusOut,
               summary="A campaign's status (Current state, Decision needed, Next action) "
                       "and per-track board")
        def status(owner: str, repo: str, campaign: str, request: Request) -> Response:
            return self.answer(request, owner, repo, campaign,
                               lambda s, lk, _a: campaign_status(s, lk))

        @r.get(base + "/{campaign}/screens", response_model=list[ScreenOut],
               summary="Every screen, oldest first")
        def screens(owner: str, repo: str, campaign: str, request: Request) -> Response:
            return self.answer(request, owner, repo, campaign, lambda s, lk, a: [
                screen_out(s, sc, lk, a, False) for sc in s.screens])

        @r.get(base + "/{campaign}/screens/{screen_id}", response_model=ScreenDetailOut,
               summary="One screen: sessions, verdicts, screening decisions, findings")
        def screen(owner: str, repo: str, campaign: str, screen_id: str,
                   request: Request) -> Response:
            def one(s: Site, lk: pages.Links, a: str) -> Any:
                sc = next((x for x in s.screens if x.screen_id == screen_id), None)
                return None if sc is None else screen_out(s, sc, lk, a, True)
            return self.answer(request, owner, repo, campaign, one)

        @r.get(base + "/{campaign}/verdicts", response_model=VerdictsOut,
               summary="Every verdict of the engine, and the screening decisions apart")
        def verdicts(owner: str, repo: str, campaign: str, request: Request) -> Response:
            return self.answer(request, owner, repo, campaign, lambda s, _l, _a: VerdictsOut(
                verdicts=[verdict_out(v) for v in s.verdicts if v.candidate is not None],
                screening=[screening_out(d) for d in s.screening]))

        @r.get(base + "/{campaign}/queue", response_model=list[PoolQueueOut],
               summary="Running and queued screens per pool, now (never cached)")
        def queue(owner: str, repo: str, campaign: str, request: Request) -> Response:
            def q(_s: Site, _l: pages.Links, _a: str) -> Any:
                now = self.dashboard.clock()
                return [PoolQueueOut(pool=p.pool, running=p.running, queued=p.queued)
                        for p in read_queue(self.dashboard.engine(), f"{owner}/{repo}",
                                            campaign, now)]
            return self.answer(request, owner, repo, campaign, q)

        @r.get(base + "/{campaign}/budget", response_model=BudgetOut,
               summary="Budget used, reserved and allowed, with the forecast of queued work")
        def budget(owner: str, repo: str, campaign: str, request: Request) -> Response:
            return self.answer(request, owner, repo, campaign,
                               lambda s, _l, _a: budget_out(s))

        @r.get(base + "/{campaign}/findings", response_model=list[FindingOut],
               summary="Findings of the evidence review, filtered by level, rule and file")
        def list_findings(owner: str, repo: str, campaign: str, request: Request,
                          level: str | None = Query(None, description="P0..P3, comma-separated"),
                          rule: str | None = Query(None, max_length=100),
                          file: str | None = Query(None, max_length=500)) -> Response:
            return self.answer(request, owner, repo, campaign,
                               lambda s, lk, _a: findings(s, lk, level, rule, file))

        @r.get("/openapi.json", include_in_schema=False)
        def openapi() -> Response:
            return JSONResponse(self.openapi(r))

        return r

    def openapi(self, router: APIRouter) -> dict[str, Any]:
        """FastAPI's OpenAPI document of the API's routes alone (the service's other
        routes, the webhook and setup, are not an API for clients and stay undescribed)."""
        if self._openapi is None:
            from fastapi.openapi.utils import get_openapi

            self._openapi = get_openapi(
                title="campaign-bot read-only campaign API", version="1",
                description=(__doc__ or "").split("\n\n")[0], routes=router.routes)
        return self._openapi


