"""The header feature (bot.features.header) against the GitHub double: PyGithub over real
HTTP, a real SQLite database migrated by Alembic, the evidence loader and the verdict engine.

Each test asserts the exact GitHub writes made (and that no others were made)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from github import Auth
from webhook_helpers import DB_KINDS, database_url

from bot.database import make_engine, migrate
from bot.features import header
from bot.features.header import service as cs
from bot.features.header.block import END, START, current_block
from bot.features.header.handlers import HeaderHandlers
from bot.features.screen.campaign_state import campaign_state
from bot.github.client import make_client
from bot.github.git import GitMirrors
from bot.github.pygithub import PyGithubPort
from bot.inbox.router import Event, Router
from bot.registry import Registry
from bot.repo_config import SCREEN_WORKFLOW, RepoConfigs
from bot.scheduler import add_jobs
from tests.campaign_status.builders import T0, ab_screen, campaign_files, receipt

REPO = "org/campaigns"
ROOT = "campaigns/h3-ref2va-4x910b1"
ISSUE = 7
HUMAN_ABOVE = "Note from amy: see the scope record.\r\n\r\n"
HUMAN_BELOW = "\r\n\r\nGoal and scope\r\n\r\nOptimize MiniMax-H3 Ref2VA on 4 devices.\r\n"


@pytest.fixture(params=DB_KINDS)
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[cs.HeaderService]:
    """The header service on a migrated SQLite file or PostgreSQL schema (both, per test)."""
    with database_url(request.param, tmp_path) as url:
        engine = make_engine(url)
        migrate(engine)
        # the screen queue wired in as the composition root does
        svc = cs.HeaderService(engine, bot_login="campaign-bot[bot]", queue=campaign_state,
                               git=GitMirrors(tmp_path / "git"))
        yield svc
        engine.dispose()


def _no_context(event: Event) -> tuple[Any, Any]:
    raise AssertionError("these tests hand each handler its port")


def _feature(service: cs.HeaderService) -> tuple[Router, HeaderHandlers, Registry]:
    """The header feature registered on ``service`` (router, handlers, registry)."""
    app = Registry(engine=service.engine, context=_no_context, configs=RepoConfigs(),
                   bot_login="campaign-bot[bot]", git=service.git)
    handlers = header.register(app, service=service)
    return app.router, handlers, app


def _handlers(service: cs.HeaderService) -> HeaderHandlers:
    return _feature(service)[1]


@pytest.fixture
def gh(github_double: Any) -> PyGithubPort:
    auth = Auth.Token("test-token")
    client = make_client(github_double.base_url, auth, throttle=False)
    return PyGithubPort(client, REPO, "campaign-bot[bot]", auth=auth,
                        base_url=github_double.base_url)


def _controls(track: str, n: int = 2, clean: bool = True) -> list:
    return [
        receipt(track, "control", 170.0 + i, session=f"base-{track}-{i}", screen="base",
                slot=i, clean=clean, start=T0 + timedelta(hours=i))
        for i in range(n)
    ]


def _setup(double: Any, receipts: list, body: str = HUMAN_ABOVE + HUMAN_BELOW,
           **scope_over: Any) -> None:
    double.add_repo(REPO, campaign_files(ROOT, receipts, **scope_over))
    double.add_issue(REPO, ISSUE, title="[Campaign] H3 on 4x910B1", body=body)


def _calls(double: Any, since: int = 0) -> tuple[list[str], list[str]]:
    """REST reads and all writes since call ``since`` (git fetches are neither)."""
    calls = double.calls[since:]
    reads = [f"{c.method} {c.path}" for c in calls if c.method == "GET" and not c.is_git]
    writes = [f"{c.method} {c.path}" for c in calls if c.is_write]
    return reads, writes


def _git_ops(double: Any, since: int = 0) -> list[str]:
    """The git smart-HTTP requests since call ``since``."""
    return [c.operation for c in double.calls[since:] if c.is_git]


def _body(double: Any) -> str:
    return double.repo(REPO).issues[ISSUE]["body"]


def _register(service: cs.HeaderService, gh: Any) -> Any:
    found = service.discover(gh, None, "main")
    assert found == [ROOT]
    return service.campaigns(REPO)[0]


def test_first_refresh_inserts_on_top_then_ten_refreshes_keep_human_text(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    start = len(github_double.calls)
    res = service.refresh(gh, camp, trigger="test")
    assert res.outcome == "written"
    _, writes = _calls(github_double, start)
    assert writes == [f"PATCH /repos/{REPO}/issues/{ISSUE}"]
    body = _body(github_double)
    assert body.startswith(START + "\n### Campaign status: MiniMax-H3 Ref2VA on 4x Ascend 910B1")
    assert body.endswith(END + "\n\n" + HUMAN_ABOVE + HUMAN_BELOW)
    # a human adds text above the block later; ten refreshes keep every human byte
    github_double.repo(REPO).issues[ISSUE]["body"] = "Pinned by a human.\r\n" + body
    before = _body(github_double)
    for _ in range(10):
        res = service.refresh(gh, camp, trigger="test")
        assert res.outcome == "unchanged"
    assert _body(github_double) == before
    assert github_double.writes()[-1].path == f"/repos/{REPO}/issues/{ISSUE}"
    assert len(github_double.writes()) == 1


def test_unchanged_refresh_makes_no_write_and_at_most_three_reads(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    start = len(github_double.calls)
    res = service.refresh(gh, camp, trigger="test")
    reads, writes = _calls(github_double, start)
    assert res.outcome == "unchanged"
    assert writes == []
    # one git round trip (the default branch's tip: refs listed, nothing new to fetch) and
    # one REST read (the issue, read before any write)
    assert reads == [f"GET /repos/{REPO}/issues/{ISSUE}"]
    assert _git_ops(github_double, start) == ["git-info-refs", "git-upload-pack"]
    assert (res.reads, res.writes, res.fetches) == (1, 0, 1)
    # the scheduler stops after the fetch: no REST call at all
    start = len(github_double.calls)
    res = service.refresh(gh, camp, trigger="schedule", skip_if_unchanged=True)
    assert res.outcome == "skipped"
    assert _calls(github_double, start) == ([], [])
    assert _git_ops(github_double, start) == ["git-info-refs", "git-upload-pack"]


def test_concurrent_human_edit_between_read_and_write_survives(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    # new evidence lands; while the bot reads it, a human edits the issue
    github_double.set_branch(REPO, "main", {
        f"{ROOT}/receipts/base/extra.json": receipt(
            "5s-lossless", "control", 171.0, session="extra", screen="base", slot=5,
        ).model_dump_json(by_alias=True, exclude_none=True)}, parent="main")

    real_loader = service.loader
    edited = []

    def loader_with_human_edit(path: Path) -> Any:
        if not edited:
            issue = github_double.repo(REPO).issues[ISSUE]
            issue["body"] = issue["body"] + "\r\nAdded by a human while the bot was reading.\r\n"
            edited.append(True)
        return real_loader(path)

    service.loader = loader_with_human_edit
    res = service.refresh(gh, camp, trigger="test")
    assert edited and res.outcome == "written"
    body = _body(github_double)
    assert body.endswith("Added by a human while the bot was reading.\r\n")
    assert "3 clean control session(s)" in current_block(body)


def test_deleted_markers_are_reported_once_never_reinserted(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    github_double.repo(REPO).issues[ISSUE]["body"] = "A human rewrote everything."
    start = len(github_double.calls)
    res = service.refresh(gh, camp, trigger="test")
    assert res.outcome == "notice-posted"
    _, writes = _calls(github_double, start)
    assert writes == [f"POST /repos/{REPO}/issues/{ISSUE}/comments"]
    comment = github_double.calls[-1].request["body"]
    assert "header markers were removed" in comment and START in comment
    for _ in range(3):
        res = service.refresh(gh, camp, trigger="test")
        assert res.outcome == "markers-missing"
    assert _body(github_double) == "A human rewrote everything."
    assert len(_calls(github_double, start)[1]) == 1
    # the human pastes the markers back: the next refresh fills them, a later deletion is
    # reported again
    github_double.repo(REPO).issues[ISSUE]["body"] = f"Top\n{START}\n{END}\nBottom"
    assert (service.refresh(gh, camp, trigger="test")).outcome == "written"
    assert _body(github_double).startswith(f"Top\n{START}\n### Campaign status")
    assert _body(github_double).endswith(f"{END}\nBottom")
    github_double.repo(REPO).issues[ISSUE]["body"] = "gone again"
    assert (service.refresh(gh, camp, trigger="test")).outcome == "notice-posted"


def test_failed_baseline_lifecycle_is_in_header_with_fix(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    rs = [receipt("5s-lossless", "control", 814.064, session="orig-5s", screen="baseline-5s",
                  clean=False)]
    _setup(github_double, rs)
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    block = current_block(_body(github_double)) or ""
    assert "The control baseline of 5s-lossless (5 s lossless) failed its lifecycle" in block
    assert ("**Next action:** Fix the baseline: re-run the control baseline of 5s-lossless "
            "(5 s lossless) with a clean shutdown (first failure: 4 workers still running; "
            "4 terminate action(s); 4 kill action(s)); the session does not qualify: rerun it; "
            "a session qualifies only when every worker exits 0") in block
    assert "| 5s-lossless (lossless) | -30 % | 0 clean control session(s), 1 failed lifecycle" \
        in block
    assert "SUPPORTED" not in block


def test_two_prs_with_candidates_on_different_tracks(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    pr_a = github_double.add_pull(REPO, 21, campaign_files(ROOT, ab_screen(
        "5s-lossy", "resident-layers", 173.2, 120.0, screen="scr-a")), head_ref="a",
        title="resident layers")
    pr_b = github_double.add_pull(REPO, 22, campaign_files(ROOT, ab_screen(
        "15s-lossless", "tp2-sp2", 2475.9, 2600.0, screen="scr-b")), head_ref="b",
        title="tp2 sp2")
    # a PR changing only the campaign README (not an evidence path) is not a candidate
    unrelated = github_double.add_pull(REPO, 23, {f"{ROOT}/README.md": "edited"}, head_ref="c")
    for pr in (pr_a, pr_b, unrelated):
        ev = Event(f"d-{pr.number}", "pull_request", {
            "action": "opened", "repository": {"full_name": REPO, "default_branch": "main"},
            "sender": {"login": "amy", "type": "User"},
            "pull_request": {"number": pr.number, "state": "open", "title": pr.title,
                             "head": {"sha": pr.head_sha}}})
        _handlers(service).on_pull_request(ev, gh, None)
    assert [p.number for p in service.candidate_prs(REPO, ROOT)] == [21, 22]
    block = current_block(_body(github_double)) or ""
    lossy = next(x for x in block.splitlines() if x.startswith("| 5s-lossy"))
    lossless15 = next(x for x in block.splitlines() if x.startswith("| 15s-lossless"))
    assert "| resident-layers |" in lossy and "| #21 |" in lossy and "3 vs 3" in lossy
    assert "| tp2-sp2 |" in lossless15 and "| #22 |" in lossless15
    # issue 3 judges the lossy candidate without media reports: INCONCLUSIVE, never SUPPORTED
    assert "SUPPORTED" not in block
    assert f"`{pr_a.head_sha[:8]}`" in block and f"`{pr_b.head_sha[:8]}`" in block
    assert "#23" not in block
    # closing PR 22 drops it from the board
    ev = Event("d-close", "pull_request", {
        "action": "closed", "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "amy", "type": "User"},
        "pull_request": {"number": 22, "state": "closed", "title": "tp2 sp2",
                         "head": {"sha": pr_b.head_sha}}})
    _handlers(service).on_pull_request(ev, gh, None)
    assert "tp2-sp2" not in (current_block(_body(github_double)) or "")


def test_budget_at_limit_names_decision(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    rs = _controls("5s-lossless", n=2)
    _setup(github_double, rs, budget={"candidate_directions": 4, "wall_hours": 0.3,
                                      "device_hours": 100})
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    block = current_block(_body(github_double)) or ""
    # two sessions of 2 x 170 s (+1 s) + 600 s each: (940 + 942) / 3600 = 0.52 wall-hours
    assert "**Decision needed:** budget exhausted (wall-hours 0.52h of 0.3h used): " \
           "@amy-why-3459 decide whether to extend the budget or stop the campaign" in block


def test_own_issue_edits_are_ignored_and_history_is_kept(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="first")
    body = _body(github_double)
    start = len(github_double.calls)
    own = Event("d-own", "issues", {
        "action": "edited", "repository": {"full_name": REPO},
        "sender": {"login": "campaign-bot[bot]", "type": "Bot"},
        "issue": {"number": ISSUE, "body": "x"}, "changes": {"body": {"from": body}}})
    _handlers(service).on_issue_edited(own, gh, None)
    assert github_double.calls[start:] == []
    # /campaign history replies with the recorded change (through the router: the shared
    # command parser ignores the fenced command)
    ev = Event("d-hist", "issue_comment", {
        "action": "created", "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "amy", "type": "User"}, "issue": {"number": ISSUE},
        "comment": {"id": 991, "user": {"login": "amy", "type": "User"},
                    "body": "```\n/campaign refresh\n```\n/campaign history 3"}})
    results = _feature(service)[0].dispatch(ev, gh, None)
    assert all(r.ok for r in results), results
    _, writes = _calls(github_double, start)
    assert writes == [f"POST /repos/{REPO}/issues/{ISSUE}/comments"]
    reply = github_double.calls[-1].request["body"]
    assert "| When (UTC) | Trigger | Evidence | What changed |" in reply
    assert "| first |" in reply and "header inserted" in reply


def test_refresh_command_through_router(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    ev = Event("d-refresh", "issue_comment", {
        "action": "created", "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "amy", "type": "User"}, "issue": {"number": ISSUE},
        "comment": {"id": 992, "user": {"login": "amy", "type": "User"},
                    "body": "/campaign refresh"}})
    results = _feature(service)[0].dispatch(ev, gh, None)
    assert all(r.ok for r in results), results
    assert github_double.write_summary() == [
        ("issues/update", f"/repos/{REPO}/issues/{ISSUE}"),
        ("issues/create-comment", f"/repos/{REPO}/issues/{ISSUE}/comments"),
    ]
    assert "status header updated from the evidence" in github_double.calls[-1].request["body"]
    assert service.history(REPO, ISSUE)[0].trigger == "/campaign refresh by @amy"
    # on an issue that is not a campaign issue: one short reply
    github_double.add_issue(REPO, 99, body="unrelated")
    ev2 = Event("d-refresh2", "issue_comment", {
        "action": "created", "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "amy", "type": "User"}, "issue": {"number": 99},
        "comment": {"id": 993, "user": {"login": "amy", "type": "User"},
                    "body": "/campaign refresh"}})
    _feature(service)[0].dispatch(ev2, gh, None)
    assert "is not a campaign issue" in github_double.calls[-1].request["body"]


def _screen(service: cs.HeaderService, **kw: Any) -> int:
    from sqlalchemy.orm import Session

    from bot.features.screen import queue as screens

    values = dict(
        request_id=screens.new_request_id(), repo=REPO, pr_number=21,
        campaign="h3-ref2va-4x910b1", campaign_path=ROOT, kind="candidate",
        candidate="resident-layers", track="5s-lossy", session_order="ABBAAB",
        pool="910b1-4x", device_count=4, head_sha="e" * 40, requested_by="amy",
        requested_at=T0, state=screens.QUEUED, estimate_wall_s=3600.0,
        estimate_device_s=14400.0,
    )
    values.update(kw)
    with Session(service.engine) as db:
        s = screens.Screen(**values)
        db.add(s)
        db.commit()
        return s.id


def test_queue_and_approval_from_issue_7_screens(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    from bot.features.screen import queue as screens

    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    assert "Nothing is queued or running" in (current_block(_body(github_double)) or "")
    running = _screen(service, state=screens.RUNNING, started_at=T0,
                      run_url="https://github.com/org/campaigns/actions/runs/5")
    _screen(service, candidate="tp2-sp2", track="15s-lossy", pr_number=22)
    _screen(service, candidate="fused-qkv", pr_number=24, state=screens.CANCELLED,
            from_fork=True, detail="Cancelled: the fork PR got a new head 0123456789ab; "
            "a new push needs a new approval.")
    start = len(github_double.calls)
    res = service.refresh(gh, camp, trigger="screen result")
    assert res.outcome == "written"
    reads, writes = _calls(github_double, start)
    # the queue changed, the evidence did not: no evidence file is read again
    assert reads == [f"GET /repos/{REPO}/issues/{ISSUE}"]
    assert _git_ops(github_double, start) == ["git-info-refs", "git-upload-pack"]
    block = current_block(_body(github_double)) or ""
    assert "**Next action:** Screen running: resident-layers on 5s-lossy (PR #21). Waits on: " \
           "the self-hosted runner on pool 910b1-4x" in block
    assert "approve screening candidate fused-qkv on PR #24 head 01234567" in block
    assert "| queued | tp2-sp2 | 15s-lossy | #22 | `eeeeeeee` | 910b1-4x | pool 910b1-4x (S" \
        f"{running} holding the pool; 0 queued ahead) |" in block
    assert "1 screen(s) running, 2 queued" in block
    # a later /screen for the same candidate and track clears the approval request
    _screen(service, candidate="fused-qkv", pr_number=24, head_sha="0123456789ab" + "0" * 28)
    service.refresh(gh, camp, trigger="test")
    assert "approve screening" not in (current_block(_body(github_double)) or "")


def test_push_to_default_branch_refreshes_with_commit_reference(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    payload = {
        "ref": "refs/heads/main", "after": "f" * 40,
        "repository": {"full_name": REPO, "default_branch": "main"},
        "sender": {"login": "amy", "type": "User"},
        "commits": [
            {"id": "c" * 40, "timestamp": "2026-11-21T10:00:00+01:00",
             "added": [f"{ROOT}/campaign.toml"], "modified": [], "removed": []},
            {"id": "d" * 40, "timestamp": "2026-11-21T11:30:00Z",
             "added": [], "modified": ["docs/x.md"], "removed": []},
        ],
    }
    _handlers(service).on_push(Event("d-push", "push", payload), gh, None)
    block = current_block(_body(github_double)) or ""
    assert (f"Updated from evidence at [`cccccccc`](https://github.com/{REPO}/tree/{'c' * 40}/"
            f"{ROOT}) on 2026-11-21 09:00 UTC") in block
    # a push elsewhere (another branch, or not touching the campaign) writes nothing
    start = len(github_double.calls)
    h = _handlers(service)
    h.on_push(Event("d-push2", "push", {**payload, "ref": "refs/heads/topic"}), gh, None)
    h.on_push(Event("d-push3", "push", {**payload, "commits": payload["commits"][1:]}),
              gh, None)
    assert _calls(github_double, start) == ([], [])


def test_scheduler_job_skips_unchanged_campaigns(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    _setup(github_double, _controls("5s-lossless"))
    _register(service, gh)
    ports = {REPO: gh}
    scheduler = AsyncIOScheduler(timezone="UTC")
    assert add_jobs(scheduler, _feature(service)[2].jobs) == ["campaign-header-refresh"]
    job = scheduler.get_job("campaign-header-refresh")
    assert job.trigger.interval.total_seconds() == 30 * 60
    assert cs.scheduled_refresh(service, lambda repo: ports[repo]) == {"written": 1}
    start = len(github_double.calls)
    assert cs.scheduled_refresh(service, lambda repo: ports[repo]) == {"skipped": 1}
    assert _calls(github_double, start) == ([], [])  # one git round trip, no REST call
    assert _git_ops(github_double, start) == ["git-info-refs", "git-upload-pack"]
    # new evidence on the default branch: the next run rewrites the header
    github_double.set_branch(REPO, "main", {
        f"{ROOT}/receipts/base/more.json": receipt(
            "5s-lossless", "control", 172.0, session="more", screen="base", slot=7,
        ).model_dump_json(by_alias=True, exclude_none=True)}, parent="main")
    assert cs.scheduled_refresh(service, lambda repo: ports[repo]) == {"written": 1}
    assert "3 clean control session(s)" in (current_block(_body(github_double)) or "")


def test_workflow_run_of_the_screen_workflow_refreshes_others_do_not(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    _register(service, gh)
    base = {"action": "completed", "repository": {"full_name": REPO},
            "sender": {"login": "github-actions[bot]", "type": "Bot"}}
    start = len(github_double.calls)
    ci = {**base, "workflow_run": {"path": ".github/workflows/ci.yml"}}
    _handlers(service).on_workflow_run(Event("d-ci", "workflow_run", ci), gh, None)
    assert github_double.calls[start:] == []
    screen = {**base, "workflow_run": {"path": f".github/workflows/{SCREEN_WORKFLOW}"}}
    _handlers(service).on_workflow_run(Event("d-screen", "workflow_run", screen), gh, None)
    assert _calls(github_double, start)[1] == [f"PATCH /repos/{REPO}/issues/{ISSUE}"]


def test_finished_screen_result_shows_until_committed(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    from bot.features.screen import queue as screens

    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    sid = _screen(service, state=screens.FINISHED, verdict="INCONCLUSIVE",
                  conclusion="success", completed_at=T0 + timedelta(days=1),
                  started_at=T0 + timedelta(hours=20))
    service.refresh(gh, camp, trigger="screen result")
    block = current_block(_body(github_double)) or ""
    assert (f"Latest screen: S{sid}, resident-layers on 5s-lossy (PR #21, head eeeeeeee), "
            "finished on 2026-11-21 08:00 UTC: INCONCLUSIVE (run success; verified bundle, "
            "judged by the bot).") in block


def test_body_over_githubs_limit_is_not_written(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"), body="x" * 65000)
    camp = _register(service, gh)
    start = len(github_double.calls)
    res = service.refresh(gh, camp, trigger="test")
    assert res.outcome == "too-long"
    assert _calls(github_double, start)[1] == []
    assert _body(github_double) == "x" * 65000


def test_human_edit_removing_markers_gets_one_notice(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    before = _body(github_double)
    github_double.repo(REPO).issues[ISSUE]["body"] = "rewritten by a human"
    ev = Event("d-edit", "issues", {
        "action": "edited", "repository": {"full_name": REPO},
        "sender": {"login": "amy", "type": "User"},
        "issue": {"number": ISSUE, "body": "rewritten by a human"},
        "changes": {"body": {"from": before}}})
    start = len(github_double.calls)
    _handlers(service).on_issue_edited(ev, gh, None)
    _handlers(service).on_issue_edited(ev, gh, None)  # a redelivery: still one notice
    assert _calls(github_double, start)[1] == [f"POST /repos/{REPO}/issues/{ISSUE}/comments"]
    assert _body(github_double) == "rewritten by a human"
    kinds = [h.kind for h in service.history(REPO, ISSUE)]
    assert kinds == ["markers-missing", "write"]


def test_human_edit_lost_to_a_concurrent_write_is_put_back(
    github_double: Any, gh: Any, service: cs.HeaderService
) -> None:
    # the human edits right after the bot read the body and before it writes: GitHub has no
    # conditional PATCH, so the write overwrites the edit; the issues.edited event of the
    # human edit carries the text, and the bot puts it back under its current header
    _setup(github_double, _controls("5s-lossless"))
    camp = _register(service, gh)
    service.refresh(gh, camp, trigger="test")
    github_double.set_branch(REPO, "main", {
        f"{ROOT}/receipts/base/extra.json": receipt(
            "5s-lossless", "control", 171.0, session="extra", screen="base", slot=5,
        ).model_dump_json(by_alias=True, exclude_none=True)}, parent="main")
    real_get_issue = gh.get_issue
    seen: dict[str, str] = {}

    def get_issue_then_human_edits(number: int) -> Any:
        info = real_get_issue(number)
        issue = github_double.repo(REPO).issues[ISSUE]
        seen["from"] = issue["body"]
        issue["body"] = issue["body"] + "\r\nA human line typed at the worst moment.\r\n"
        seen["to"] = issue["body"]
        return info

    gh.get_issue = get_issue_then_human_edits  # type: ignore[method-assign]
    assert (service.refresh(gh, camp, trigger="test")).outcome == "written"
    gh.get_issue = real_get_issue  # type: ignore[method-assign]
    assert "worst moment" not in _body(github_double)  # lost, as on GitHub
    ev = Event("d-human", "issues", {
        "action": "edited", "repository": {"full_name": REPO},
        "sender": {"login": "amy", "type": "User"},
        "issue": {"number": ISSUE, "body": seen["to"]},
        "changes": {"body": {"from": seen["from"]}}})
    start = len(github_double.calls)
    _handlers(service).on_issue_edited(ev, gh, None)
    body = _body(github_double)
    assert body.endswith("A human line typed at the worst moment.\r\n")
    assert "3 clean control session(s)" in (current_block(body) or "")
    assert _calls(github_double, start) == (
        [f"GET /repos/{REPO}/issues/{ISSUE}"], [f"PATCH /repos/{REPO}/issues/{ISSUE}"])
    # the same event again (a redelivery) changes nothing
    start = len(github_double.calls)
    _handlers(service).on_issue_edited(ev, gh, None)
    assert _calls(github_double, start)[1] == []
