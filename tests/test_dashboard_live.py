"""The live campaign pages of ``campaign-bot serve`` (``/c/OWNER/REPO/CAMPAIGN/``): the
FastAPI app under uvicorn on a thread, real SQLite, the campaign read from the GitHub double
through its git transport (a bare mirror); headless Chromium opens every page.

Checked: every page answers 200 and, in Chromium, loads with no console error and no failed
request; every link on every page resolves; the queue page flags the stuck screen (and only
it); a private repository, an unknown repository, an unknown campaign and a path outside the
campaign all get the same 404; unchanged evidence is fetched once (tree SHA cache);
an injected loader replaces GitHub, and a new folder from it (new evidence) is a new site;
the status header, a screen result and the check run link to the pages only when
``CAMPAIGN_BOT_PUBLIC_URL`` is set.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx
import pytest
from _report_campaign import write_campaign
from sqlalchemy.orm import Session
from webhook_helpers import SECRET, threaded_server

from bot import database
from bot.app import create_app
from bot.features.dashboard import live
from bot.features.header.render import render_header
from bot.features.header.store import CampaignHeader
from bot.features.screen.queue import Screen
from bot.links import campaign_page
from bot.render import render
from bot.settings import load_settings

REPO = "org/campaigns"
PRIVATE = "org/secret-campaigns"
ROOT = "campaigns/h3-ref2va-4x910b1"
CAMPAIGN = "h3-ref2va-4x910b1"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
NOW = datetime.now(UTC)


def _screen(pool: str, state: str, *, ago_h: float, estimate_h: float, pr: int,
            candidate: str = "fp8-vae") -> Screen:
    t = NOW - timedelta(hours=ago_h)
    return Screen(
        request_id=uuid.uuid4().hex, repo=REPO, pr_number=pr, campaign=CAMPAIGN,
        campaign_path=ROOT, kind="candidate", candidate=candidate, track="5s-lossless",
        session_order="ABBAAB", pool=pool, head_sha="a" * 40, requested_by="amy",
        requested_at=t, state=state, estimate_device_s=4 * 3600 * estimate_h,
        estimate_wall_s=3600 * estimate_h,
        dispatched_at=t if state != "queued" else None,
        started_at=t + timedelta(minutes=2) if state == "running" else None,
        runner_name="npu-runner-1" if state == "running" else None,
        run_url="https://github.com/org/campaigns/actions/runs/77" if state == "running"
        else None)


@dataclass
class Served:
    base: str
    double: Any
    files: dict[str, bytes]
    database_url: str = ""


@pytest.fixture
def served(github_double: Any, tmp_path: Path) -> Iterator[Served]:
    plan = write_campaign(tmp_path / "c", screens=6)
    # findings of three severities, four rules, in several folders (the findings filter)
    (plan.root / "results").mkdir()
    (plan.root / "results" / "status.json").write_text('{"state": "screening"}\n')
    (plan.root / "notes").mkdir()
    (plan.root / "notes" / "plan.json").write_text('{"schema": "campaign-bot/plan@1"}\n')
    (plan.root / "notes" / "twice.json").write_text('{"a": 1, "a": 2}\n')
    files = {f"{ROOT}/{p.relative_to(plan.root).as_posix()}": p.read_bytes()
             for p in plan.root.rglob("*") if p.is_file()}
    github_double.add_repo(REPO, files)
    github_double.add_repo(PRIVATE, files).private = True
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    engine = database.make_engine(url)
    database.migrate(engine)
    with Session(engine) as db:
        for repo in (REPO, PRIVATE):
            db.add(CampaignHeader(repo=repo, path=ROOT, campaign_id=CAMPAIGN, issue=320,
                                  default_branch="main", evidence_paths=[], inserted=False))
        db.add(_screen("ascend910b1-x4", "running", ago_h=5, estimate_h=1, pr=321))
        db.add(_screen("ascend910b1-x4", "queued", ago_h=1, estimate_h=1, pr=318,
                       candidate="tiled-vae"))
        db.add(_screen("ascend910c-x4", "running", ago_h=0.5, estimate_h=1, pr=317))
        db.commit()
    settings = load_settings(webhook_secret=SECRET, database_url=url, token="test-token",
                             github_api_url=github_double.base_url, github_throttle=False,
                             run_worker=False)
    app = create_app(settings, engine=engine, run_worker=False)
    try:
        with threaded_server(app) as base:
            yield Served(base, github_double, files, url)
    finally:
        engine.dispose()


def _page(s: Served, name: str = "") -> str:
    return f"{s.base}{live.PREFIX}/{REPO}/{CAMPAIGN}/{name}"


def _crawl(s: Served) -> dict[str, str]:
    """Every page reachable from the overview under the campaign's prefix: URL -> HTML."""
    prefix = _page(s)
    seen: dict[str, str] = {}
    todo = [prefix]
    with httpx.Client(timeout=30) as c:
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            r = c.get(u)
            assert r.status_code == 200, (u, r.status_code)
            seen[u] = r.text
            if "text/html" not in r.headers["content-type"]:
                continue
            for href in _hrefs(r.text):
                target = urldefrag(urljoin(u, href)).url
                if target.startswith(prefix):
                    todo.append(target)
                elif urlsplit(target).scheme in ("http", "https"):
                    assert urlsplit(target).netloc == "github.com", target
    return seen


def _hrefs(html: str) -> list[str]:
    from html.parser import HTMLParser

    out: list[str] = []

    class P(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            for k, v in attrs:
                if k == "href" and v and not v.startswith(("data:", "#")):
                    out.append(v)

    P().feed(html)
    return out


def test_every_live_page_answers_and_every_link_resolves(served: Served) -> None:
    pages = _crawl(served)
    names = {u.rsplit("/", 1)[1] for u in pages}
    assert {"", "index.html", "budget.html", "findings.html", "queue.html",
            "style.css"} <= names
    assert sum(n.startswith("screen-") for n in names) == 6
    assert any(n.startswith("pool-") for n in names)
    assert any(u.split(f"/{CAMPAIGN}/", 1)[1].startswith("evidence/") for u in pages)
    assert "Served live by" in pages[_page(served, "index.html")]


def test_queue_page_flags_the_stuck_screen_only(served: Served) -> None:
    html = httpx.get(_page(served, "queue.html"), timeout=30).text
    assert html.count("STUCK") == 1
    stuck_row = next(line for line in html.splitlines() if "STUCK" in line)
    assert "#321" in stuck_row and "npu-runner-1" in stuck_row
    assert "ascend910c-x4" in html and "#317" in html  # running within its estimate
    assert "#318" in html and "tiled-vae" in html  # queued
    assert "Served live by" in html


def _status(html: str) -> str:
    """The overview's status list as text (Current state, Decision needed, Next action)."""
    import re

    block = html.split('<dl class="status">', 1)[1].split("</dl>", 1)[0]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", block)).strip()


def test_overview_states_the_queue_from_the_database(served: Served) -> None:
    """The live overview's status states the bot's screen queue as it is in the database
    (it said "Screen queue: unknown"), and follows it when a screen finishes; the JSON API's
    status says the same."""
    status = _status(httpx.get(_page(served, ""), timeout=30).text)
    assert "Screen queue: unknown" not in status
    assert "2 screen(s) running, 1 queued." in status, status
    assert "Next action Screen running: fp8-vae on 5s-lossless (PR #321)." in status, status
    assert "Waits on: the self-hosted runner on pool ascend910b1-x4 (run https://github.com/" \
           "org/campaigns/actions/runs/77)." in status, status
    api = httpx.get(f"{served.base}/api/v1/repos/{REPO}/campaigns/{CAMPAIGN}",
                    timeout=30).json()
    assert "2 screen(s) running, 1 queued." in api["current_state"], api
    engine = database.make_engine(served.database_url)
    try:
        with Session(engine) as db:
            for s in db.query(Screen).all():
                s.state = "completed"
            db.commit()
    finally:
        engine.dispose()
    status = _status(httpx.get(_page(served, ""), timeout=30).text)
    assert "Nothing is queued or running." in status, status
    assert "Screen running" not in status


def test_private_unknown_and_hostile_paths_get_one_404(served: Served) -> None:
    bodies = set()
    for path in (f"{PRIVATE}/{CAMPAIGN}/", f"{PRIVATE}/{CAMPAIGN}/queue.html",
                 f"org/no-such-repo/{CAMPAIGN}/", f"{REPO}/no-such-campaign/",
                 f"{REPO}/{CAMPAIGN}/../../etc/passwd", f"{REPO}/{CAMPAIGN}/%2e%2e/x",
                 f"{REPO}/{CAMPAIGN}/evidence/../../campaign.toml",
                 f"{REPO}/{CAMPAIGN}/screen-nope.html"):
        r = httpx.get(f"{served.base}{live.PREFIX}/{path}", timeout=30)
        assert r.status_code == 404, path
        bodies.add(r.text)
    assert bodies == {live.NOT_FOUND}
    # the private repository's evidence was never fetched
    assert not [c for c in served.double.calls if c.path.startswith(
        (f"/repos/{PRIVATE}/contents", f"/{PRIVATE}.git"))]


def test_unchanged_evidence_is_read_from_github_once(served: Served) -> None:
    for _ in range(3):
        assert httpx.get(_page(served, "index.html"), timeout=30).status_code == 200
    # one git fetch within the recheck interval; never the contents API
    fetches = [c for c in served.double.calls if c.operation == "git-info-refs"]
    assert len(fetches) == 1
    assert not [c for c in served.double.calls if c.path.startswith(f"/repos/{REPO}/contents")]


def test_loader_is_injectable_and_pages_follow_a_new_tree(tmp_path: Path) -> None:
    """Another loader (here: a function returning folders) replaces the git mirrors; a new
    folder (a new tree) is a new site."""
    from fastapi.testclient import TestClient

    trees = [write_campaign(tmp_path / "t1", screens=2).root,
             write_campaign(tmp_path / "t2", screens=3).root]
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    engine = database.make_engine(url)
    database.migrate(engine)
    current = [trees[0]]
    asked: list[tuple[str, str, str]] = []

    def load(owner: str, repo: str, campaign: str) -> Path:
        asked.append((owner, repo, campaign))
        return current[0]

    from fastapi import FastAPI

    app = FastAPI()
    live.add_routes(app, live.LiveDashboard(lambda: engine, load,
                                            lambda o, r: False if r == "pub" else None))
    c = TestClient(app)
    first = c.get(f"{live.PREFIX}/o/pub/{CAMPAIGN}/index.html").text
    current[0] = trees[1]
    second = c.get(f"{live.PREFIX}/o/pub/{CAMPAIGN}/index.html").text
    assert first.count('href="/c/o/pub/') < second.count('href="/c/o/pub/')
    assert asked == [("o", "pub", CAMPAIGN)] * 2
    assert c.get(f"{live.PREFIX}/o/other/{CAMPAIGN}/").status_code == 404
    assert asked == [("o", "pub", CAMPAIGN)] * 2  # not public: never loaded
    engine.dispose()


def test_stuck_rule() -> None:
    assert not live.is_stuck(None, 3600)
    assert not live.is_stuck(3600 * 1.49, 3600)
    assert live.is_stuck(3600 * 1.51, 3600)
    assert not live.is_stuck(900, 300)  # 5-min estimate: ten minutes' grace
    assert live.is_stuck(901, 300)


@pytest.mark.skipif(not CHROMIUM.exists() and not os.environ.get("CAMPAIGN_BOT_REQUIRE_BROWSER"),
                    reason=f"{CHROMIUM} is not installed")
def test_every_live_page_loads_in_chromium_without_console_errors(served: Served) -> None:
    from playwright.sync_api import sync_playwright

    pages = [u for u in _crawl(served) if not u.endswith((".css", ".json", ".toml", ".txt",
                                                          ".jsonl", ".sha256", ".md"))]
    assert len(pages) >= 10
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = b.new_page()
            errors: list[str] = []
            failed: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: failed.append(r.url))
            for u in pages:
                resp = page.goto(u)
                assert resp is not None and resp.status == 200, u
                assert page.locator("h1").count() == 1, u
            stuck = page.goto(_page(served, "queue.html"))
            assert stuck is not None and stuck.status == 200
            assert page.locator("tr.stuck").count() == 1
            assert "STUCK" in page.locator("tr.stuck").inner_text()
            assert errors == [] and failed == []
        finally:
            b.close()


def _finding_rows(html: str) -> list[tuple[str, str, str]]:
    """(severity, rule, path) of each row of a findings page's table."""
    import re

    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    out = []
    for row in body.split("<tr>")[1:]:
        sev = re.search(r'class="sev sev-p\d"[^>]*>(P\d)<', row)
        if sev is None:
            continue
        rule = re.search(r"<td><code>([^<]+)</code></td>", row)
        path = re.search(r"<code>([^<:]+)(?::\d+)?</code>", row.split("</td>", 1)[1])
        assert rule and path, row
        out.append((sev.group(1), rule.group(1), path.group(1)))
    return out


def test_findings_page_filters_by_level_rule_and_file_without_javascript(
        served: Served) -> None:
    """The findings page's filter is a plain GET form applied by the server: each query
    lists exactly the findings the JSON API lists for it, the form shows what is selected,
    and the unfiltered page still lists them all."""
    url = _page(served, "findings.html")
    every = _finding_rows(httpx.get(url, timeout=30).text)
    assert len({sev for sev, _r, _p in every}) >= 2 and len({r for _s, r, _p in every}) >= 3
    api = f"{served.base}/api/v1/repos/{REPO}/campaigns/{CAMPAIGN}/findings"
    level = every[-1][0]
    rule = every[0][1]
    path = every[0][2]
    folder = path.split("/", 1)[0]
    for params, api_params in [
        ([("level", level)], {"level": level}),
        ([("level", "P0"), ("level", "P1")], {"level": "P0,P1"}),
        ([("rule", rule), ("file", "")], {"rule": rule}),
        ([("file", folder)], {"file": folder}),
        ([("level", level), ("rule", rule), ("file", path)],
         {"level": level, "rule": rule, "file": path}),
        ([("level", "P9")], {"level": "P9"}),
    ]:
        html = httpx.get(url, params=params, timeout=30).text
        rows = _finding_rows(html)
        want = [(f["severity"], f["rule"], f["path"])
                for f in httpx.get(api, params=api_params, timeout=30).json()]
        assert rows == want, params
        assert len(rows) < len(every) or not rows or params == [("file", folder)]
        assert "Show every finding" in html
        for key, value in params:
            if value and key == "level" and value != "P9":
                assert f'value="{value}" checked' in html
            elif value and key != "level" and value in {r for _s, r, _p in every} | {
                    p for _s, _r, p in every}:
                assert f'value="{value}" selected' in html
    assert not _finding_rows(httpx.get(url, params={"level": "P9"}, timeout=30).text)
    assert "no finding matches this filter" in httpx.get(
        url, params={"level": "P9"}, timeout=30).text
    assert _finding_rows(httpx.get(url, params={"level": "", "rule": ""}, timeout=30).text) \
        == every  # the form's "any": no condition
    hostile = httpx.get(url, params={"level": "<script>alert(1)</script>", "rule": '"><img>',
                                     "file": "x" * 600}, timeout=30)
    assert hostile.status_code == 200
    assert "<script>alert" not in hostile.text.lower() and '"><img>' not in hostile.text
    assert "no finding matches this filter" in hostile.text


@pytest.mark.skipif(not CHROMIUM.exists() and not os.environ.get("CAMPAIGN_BOT_REQUIRE_BROWSER"),
                    reason=f"{CHROMIUM} is not installed")
def test_findings_filter_in_chromium_without_javascript_and_accessible(
        served: Served) -> None:
    """In Chromium with JavaScript off, ticking a severity and choosing a rule then
    submitting lists only those findings; the filtered page, the overview and the queue
    page have no axe-core violation of serious or critical impact and no sideways scroll,
    at 1280x800 and 390x844."""
    from playwright.sync_api import sync_playwright
    from test_dashboard_browser import WIDTHS, narrow_problems, serious_axe_violations

    every = _finding_rows(httpx.get(_page(served, "findings.html"), timeout=30).text)
    level, rule = every[0][0], every[0][1]
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            ctx = b.new_context(java_script_enabled=False)
            page = ctx.new_page()
            page.goto(_page(served, "findings.html"))
            page.get_by_label(f"{level} (").check()
            page.get_by_label("Rule").select_option(rule)
            page.get_by_role("button", name="Show these findings").click()
            page.wait_for_load_state()
            assert f"level={level}" in page.url and f"rule={rule}" in page.url
            shown = _finding_rows(page.content())
            assert shown and all(s == level and r == rule for s, r, _p in shown), shown
            filtered = page.url
            ctx.close()
            problems: list[str] = []
            for width, height in WIDTHS:
                page = b.new_page(viewport={"width": width, "height": height})
                for u in (filtered, _page(served, "findings.html"), _page(served, ""),
                          _page(served, "queue.html")):
                    page.goto(u)
                    problems += [f"{width}px {u}: {v}" for v in serious_axe_violations(page)]
                    if width < 600:
                        problems += [f"{width}px {u}: {v}" for v in narrow_problems(page)]
                page.close()
            assert problems == []
        finally:
            b.close()


# ------------------------------------------------- links from the texts the bot writes

PUBLIC = "https://bot.example.org/"


def test_campaign_page_urls() -> None:
    assert campaign_page(None, REPO, CAMPAIGN) is None
    assert campaign_page("", REPO, CAMPAIGN) is None
    assert campaign_page("javascript:alert(1)", REPO, CAMPAIGN) is None
    assert campaign_page(PUBLIC, REPO, CAMPAIGN, "findings.html") == (
        f"https://bot.example.org/c/{REPO}/{CAMPAIGN}/findings.html")
    assert campaign_page(PUBLIC, "o/r", "a b/..") == "https://bot.example.org/c/o/r/a%20b%2F../"


def test_header_links_to_the_live_pages_only_when_the_url_is_set() -> None:
    from evidence.bundle import load_campaign
    from evidence.header import EvidenceRef, build_header, source_from_campaign

    root = Path(__file__).resolve().parents[1] / "examples" / CAMPAIGN
    loaded = load_campaign(root)
    assert loaded.scope is not None
    scope = loaded.scope.model

    def content() -> Any:
        return build_header(scope, [source_from_campaign(loaded, sha="a" * 40)],
                            EvidenceRef("a" * 40, NOW, None))

    url = campaign_page(PUBLIC, REPO, CAMPAIGN)
    assert f"[Campaign dashboard]({url})" in render_header(content(), dashboard=url)
    assert "Campaign dashboard" not in render_header(content())


def test_screen_result_links_to_the_live_pages_only_when_the_url_is_set() -> None:
    from test_screen_templates import receipt

    from bot.features.screen.report import Decision, build_result

    view = build_result(
        label="S1", name="cache-dit", kind="candidate", campaign=CAMPAIGN,
        track="5s-lossless", quality_mode="lossless", target_reduction=0.3, head_sha="b" * 40,
        order="AB", run_url="http://x/run/9", integrity="Manifests: 4 files, signature ok.",
        receipts=[receipt(0, "control", 100.0), receipt(1, "candidate", 80.0)], media=[],
        decision=Decision("INCONCLUSIVE", ["one session per arm"]), charged_wall_s=3600,
        device_count=4, device_left_h=60.0, wall_left_h=15.0, directions_left=1)
    url = campaign_page(PUBLIC, REPO, CAMPAIGN)
    with_link = render("screen_result.md.j2", marker_text="m", r=view, dashboard=url)
    without = render("screen_result.md.j2", marker_text="m", r=view, dashboard=None)
    assert f"[Campaign dashboard]({url})" in with_link
    assert "Campaign dashboard" not in without


def test_check_run_links_to_the_live_findings_page(github_double: Any) -> None:
    from github_helpers import GIT, clear_configs, example_files, port
    from github_helpers import REPO as REVIEW_REPO

    from bot.features.review.review import review_pull
    from bot.repo_config import RepoConfig

    github_double.add_repo(REVIEW_REPO, example_files())
    status = "campaigns/h3/results/status.json"
    raw = example_files()[status]
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    pull = github_double.add_pull(REVIEW_REPO, 2, {status: text.replace(
        '"execution": "queued"', '"execution": "runing"')}, user="dave")
    clear_configs()
    review_pull(port(github_double), RepoConfig(), 2, git=GIT, public_url=PUBLIC)
    (run,) = github_double.repo(REVIEW_REPO).check_runs.values()
    assert run["head_sha"] == pull.head_sha
    url = campaign_page(PUBLIC, REVIEW_REPO, CAMPAIGN, "findings.html")
    assert f"]({url})" in run["output"]["summary"]
    github_double.repo(REVIEW_REPO).check_runs.clear()
    review_pull(port(github_double), RepoConfig(), 2, git=GIT)  # no public URL: no link
    assert "Live findings" not in next(iter(
        github_double.repo(REVIEW_REPO).check_runs.values()))["output"]["summary"]


def test_git_loader_caches_by_tree_sha_and_sees_a_push_after_the_recheck(
        github_double: Any, tmp_path: Path) -> None:
    from github import Auth

    from bot.github.client import make_client
    from bot.github.git import GitMirrors
    from bot.github.pygithub import PyGithubPort

    plan = write_campaign(tmp_path / "c", screens=2)
    files = {f"{ROOT}/{p.relative_to(plan.root).as_posix()}": p.read_bytes()
             for p in plan.root.rglob("*") if p.is_file()}
    files["README.md"] = b"outside the campaign\n"
    github_double.add_repo(REPO, files)
    engine = database.make_engine(f"sqlite:///{tmp_path / 'bot.sqlite3'}")
    database.migrate(engine)
    with Session(engine) as db:
        db.add(CampaignHeader(repo=REPO, path=ROOT, campaign_id=CAMPAIGN, issue=320,
                              default_branch="main", evidence_paths=[], inserted=False))
        db.commit()
    auth = Auth.Token("test-token")

    def port_for(full: str) -> PyGithubPort:
        return PyGithubPort(make_client(github_double.base_url, auth, throttle=False), full,
                            "campaign-bot[bot]", auth=auth, base_url=github_double.base_url)

    now = [1000.0]
    dirs = live.GitCampaignDirs(lambda: engine, port_for, GitMirrors(tmp_path / "git"),
                                tmp_path / "cache", clock=lambda: now[0])
    owner, name = REPO.split("/")
    first = dirs(owner, name, CAMPAIGN)
    assert (first / "campaign.toml").read_bytes() == files[f"{ROOT}/campaign.toml"]
    assert not (first / "README.md").exists() and first.parent == tmp_path / "cache" / REPO
    # read through git (one fetch), never file by file through the contents API
    assert not [c for c in github_double.calls if c.operation == "repos/get-content"]
    # (one git-info-refs per fetch: the upload-pack POSTs of protocol v2 follow it)
    assert [c.operation for c in github_double.calls if c.is_git].count("git-info-refs") == 1
    calls = len(github_double.calls)
    assert dirs(owner, name, CAMPAIGN) == first and len(github_double.calls) == calls
    github_double.set_branch(REPO, "main", {f"{ROOT}/notes.md": "new evidence\n"},
                             parent="main")
    assert dirs(owner, name, CAMPAIGN) == first  # within the recheck interval
    now[0] += live.TREE_RECHECK_S + 1
    second = dirs(owner, name, CAMPAIGN)
    assert second != first and (second / "notes.md").read_text() == "new evidence\n"
    with pytest.raises(live.CampaignNotFound):
        dirs(owner, name, "no-such-campaign")
    # a file named over 255 bytes on the default branch (ENAMETOOLONG if written) is left
    # out; the campaign is still read, so its pages answer
    github_double.set_branch(REPO, "main", {f"{ROOT}/{'n' * 300}.json": "{}\n"},
                             parent="main")
    now[0] += live.TREE_RECHECK_S + 1
    third = dirs(owner, name, CAMPAIGN)
    assert third != second  # the new tree was read, not the old copy kept
    assert (third / "campaign.toml").is_file() and (third / "notes.md").is_file()
    engine.dispose()
