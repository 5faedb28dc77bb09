"""The read-only JSON API through the real service (``create_app`` under uvicorn, real
SQLite) against the GitHub double over HTTP, with sign-in configured from the bot's own App
manifest (the ``served`` fixture of the sign-in tests).

Checked: a public repository's campaign answers every route, with the engine's verdicts and
the status header's own sentences; answers carry an ETag (304 on If-None-Match) and may be
cached 15 s; a private repository answers a GitHub token that can read it and a signed-in
person's session, uncacheable; without access, a private repository, an unknown repository,
an unknown campaign and an unknown screen are the same 404, byte for byte; findings filter
by level, rule and file; the OpenAPI document describes every route; the rate limit answers
429 with Retry-After.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_dashboard_signin import CAMPAIGN, PRIVATE, PUBLIC_REPO, Served, _sign_in, serve_campaign

from bot.features.dashboard import api
from bot.features.dashboard.model import build_site
from evidence.bundle import load_campaign

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h3-ref2va-4x910b1"
"""Campaign #320's example evidence: five screens, failed control baselines, findings."""


@pytest.fixture
def served(github_double: Any, tmp_path: Path) -> Iterator[Served]:
    with serve_campaign(github_double, tmp_path, EXAMPLE) as s:
        yield s


def _url(s: Served, repo: str, tail: str = "") -> str:
    return f"{s.base}{api.API_PREFIX}/repos/{repo}/campaigns{tail}"


def _token(s: Served, login: str) -> str:
    """A user access token of ``login`` as the double's OAuth exchange issues them."""
    token = f"ghu_test_{login}"
    s.double.user_tokens[token] = (login, time.time() + 3600)
    return token


def test_public_campaign_answers_every_route(served: Served) -> None:
    with httpx.Client(timeout=60) as c:
        lst = c.get(_url(served, PUBLIC_REPO))
        assert lst.status_code == 200, lst.text
        assert [x["id"] for x in lst.json()] == [CAMPAIGN]
        assert lst.headers["cache-control"] == api.PUBLIC_CACHE

        st = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}"))
        assert st.status_code == 200
        body = st.json()
        for key in ("current_state", "decision_needed", "next_action"):
            assert body[key], key
        assert {t["id"] for t in body["tracks"]} == {
            "5s-lossless", "15s-lossless", "5s-lossy", "15s-lossy"}
        # the same verdicts as the engine, and the same sentences as the status header
        v = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/verdicts")).json()
        served_verdicts = {(x["track"], x["candidate"]): x for x in v["verdicts"]}
        engine = {(x.track, x.candidate): x for x in build_site(EXAMPLE).verdicts
                  if x.candidate is not None}
        assert served_verdicts.keys() == engine.keys() and engine
        for key, x in served_verdicts.items():
            want = engine[key]
            assert (x["verdict"], x["ratio"], x["lower"], x["upper"], x["m"], x["n"]) == (
                want.verdict, want.ratio, want.lower, want.upper, want.m, want.n)
            assert x["status"] == (want.confirmation or "provisional"
                                   if want.verdict == "SUPPORTED" else
                                   "confirmed" if want.verdict in ("FAILED", "EQUIVALENT")
                                   else "provisional")
        assert all(d["decision"] in ("PROMOTE_TO_FULL_SCREEN", "REJECT", "CONTINUE")
                   for d in v["screening"])

        screens = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/screens")).json()
        assert len(screens) == 5
        one = c.get(served.base + screens[0]["url"])
        assert one.status_code == 200
        detail = one.json()
        assert detail["screen_id"] == screens[0]["screen_id"]
        assert len(detail["sessions"]) == detail["m"] + detail["n"]
        page = c.get(served.base + detail["page"])
        assert page.status_code == 200 and detail["screen_id"] in page.text

        b = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/budget")).json()
        assert [x["name"] for x in b["lines"]] == [
            "candidate directions", "wall-hours", "device-hours"]
        assert c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/queue")).json() == []

        # cached answers: a strong ETag, and 304 when it matches
        again = c.get(st.url, headers={"If-None-Match": st.headers["etag"]})
        assert again.status_code == 304 and again.headers["etag"] == st.headers["etag"]


def test_status_sentences_are_the_status_headers(served: Served) -> None:
    from evidence.header import EvidenceRef, build_header, source_from_campaign

    body = httpx.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}"), timeout=60).json()
    loaded = load_campaign(EXAMPLE)
    # the bot's database holds no screen of this campaign: the queue is known and empty
    want = build_header(loaded.scope.model, [source_from_campaign(loaded, sha="x")],
                        EvidenceRef("x", build_site(EXAMPLE).as_of), queue=[])
    assert body["decision_needed"] == want.decision_needed
    # the header computed from receipts alone; the API's budget is the ledger's (empty)
    # here, so only the sentences that do not quote the budget are compared whole
    assert body["current_state"] == want.current_state
    assert body["current_state"].endswith(" Nothing is queued or running.")


def test_findings_filter_by_level_rule_and_file(served: Served) -> None:
    with httpx.Client(timeout=60) as c:
        every = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/findings")).json()
        assert every
        f0 = every[0]
        by_rule = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/findings"),
                        params={"rule": f0["rule"]}).json()
        assert by_rule and all(f["rule"] == f0["rule"] for f in by_rule)
        by_file = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/findings"),
                        params={"file": f0["path"]}).json()
        assert by_file and all(f["path"] == f0["path"] for f in by_file)
        by_level = c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/findings"),
                         params={"level": f0["severity"]}).json()
        assert len(by_level) == sum(f["severity"] == f0["severity"] for f in every)
        assert c.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/findings"),
                     params={"level": "P9"}).json() == []
        linked = [f for f in every if f["link"]]
        assert linked
        assert c.get(served.base + linked[0]["link"].split("#")[0]).status_code == 200


def test_private_repository_needs_access_and_a_denied_one_looks_missing(
        served: Served) -> None:
    anon = httpx.Client(timeout=60)
    routes = ["", f"/{CAMPAIGN}", f"/{CAMPAIGN}/screens", f"/{CAMPAIGN}/verdicts",
              f"/{CAMPAIGN}/queue", f"/{CAMPAIGN}/budget", f"/{CAMPAIGN}/findings"]
    missing = anon.get(_url(served, "org/no-such-repo", f"/{CAMPAIGN}"))
    assert missing.status_code == 404

    def same_as_missing(r: httpx.Response) -> None:
        assert r.status_code == 404
        assert r.content == missing.content
        assert r.headers["content-type"] == missing.headers["content-type"]

    for tail in routes:
        same_as_missing(anon.get(_url(served, PRIVATE, tail)))
    mallory = {"Authorization": f"Bearer {_token(served, 'mallory')}"}
    for tail in routes:
        same_as_missing(anon.get(_url(served, PRIVATE, tail), headers=mallory))
    same_as_missing(anon.get(_url(served, PRIVATE, f"/{CAMPAIGN}"),
                             headers={"Authorization": "Bearer ghu_not_a_token"}))
    amy = {"Authorization": f"Bearer {_token(served, 'amy')}"}
    for tail in routes:
        r = anon.get(_url(served, PRIVATE, tail), headers=amy)
        assert r.status_code == 200, (tail, r.text)
        assert r.headers["cache-control"] == "private, no-store"
        assert "Authorization" in r.headers["vary"]
    # unknown campaign and unknown screen in a readable repository: the same 404
    same_as_missing(anon.get(_url(served, PRIVATE, "/no-such-campaign"), headers=amy))
    same_as_missing(anon.get(_url(served, PRIVATE, f"/{CAMPAIGN}/screens/nope"), headers=amy))
    same_as_missing(anon.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}/screens/nope")))
    anon.close()


def test_signed_in_person_reads_a_private_campaign(served: Served) -> None:
    with httpx.Client(timeout=60) as c:
        back = _sign_in(served, c, "amy")
        assert back.status_code == 303
        r = c.get(_url(served, PRIVATE, f"/{CAMPAIGN}"))
        assert r.status_code == 200 and r.json()["id"] == CAMPAIGN
        assert r.headers["cache-control"] == "private, no-store"


def test_openapi_describes_the_api(served: Served) -> None:
    doc = httpx.get(f"{served.base}{api.API_PREFIX}/openapi.json", timeout=60).json()
    paths = set(doc["paths"])
    base = f"{api.API_PREFIX}/repos/{{owner}}/{{repo}}/campaigns"
    assert paths == {base, base + "/{campaign}", base + "/{campaign}/screens",
                     base + "/{campaign}/screens/{screen_id}", base + "/{campaign}/verdicts",
                     base + "/{campaign}/queue", base + "/{campaign}/budget",
                     base + "/{campaign}/findings"}
    for p in paths:
        assert set(doc["paths"][p]) == {"get"}  # read-only
    assert "CampaignStatusOut" in doc["components"]["schemas"]


def test_rate_limit_answers_429_with_retry_after(served: Served) -> None:
    with httpx.Client(timeout=60) as c:
        codes = [c.get(_url(served, PUBLIC_REPO)).status_code
                 for _ in range(api.RATE_PER_MINUTE + 1)]
        assert codes[:-1] == [200] * api.RATE_PER_MINUTE
        assert codes[-1] == 429
        r = c.get(_url(served, PUBLIC_REPO))
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60

