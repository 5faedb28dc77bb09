"""The buttons of a screen's check run (Cancel, Re-run, Approve head, +N sessions) and
GitHub's Re-run link, through the screen feature's ``check_run`` handler against the GitHub
double (PyGithub over HTTP), with the exact GitHub writes: each button's happy path, an
unauthorised click, a replayed click (GitHub's redelivery, or the same button clicked again)
and a stale head."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _evidence_factory import screen as receipts
from github import Auth
from screen_scope import scope_dict, toml_dumps
from sqlalchemy import select

from bot.database import make_engine, migrate
from bot.features.screen import followup
from bot.features.screen.buttons import APPROVE, CANCEL, MORE, RERUN, actions_for, more_sessions
from bot.features.screen.campaign import load_campaign
from bot.features.screen.commands import run_command
from bot.features.screen.dispatch import on_push
from bot.features.screen.handlers import ScreenHandlers
from bot.features.screen.queue import Screen
from bot.features.screen.results import _more_button, on_workflow_run_completed
from bot.features.screen.runtime import CommentContext, Runtime, ScreenOptions
from bot.github.pygithub import PyGithubPort, make_client
from bot.inbox.router import Event
from bot.repo_config import RepoConfig, ScreenSection

REPO = "octo/campaign"
P = f"/repos/{REPO}"
FIXTURE = Path(__file__).parent / "fixtures" / "github" / "webhooks" / "check_run"
_deliveries = itertools.count(1)


@pytest.fixture
def env(github_double, tmp_path: Path) -> Iterator[tuple]:
    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": toml_dumps(scope_dict()),
                      ".github/workflows/screen.yml": "on: workflow_dispatch\n"})
    d.add_workflow(REPO, "screen.yml")
    d.add_pull(REPO, 5, {"campaigns/h3/candidates.md": "cache-dit\n"})
    d.set_permission(REPO, "maint", "write")
    d.set_permission(REPO, "eve", "read")
    auth = Auth.Token("test-token")
    port = PyGithubPort(make_client(d.base_url, auth, throttle=False), REPO,
                        "campaign-bot[bot]", auth=auth, base_url=d.base_url)
    eng = make_engine(f"sqlite:///{tmp_path / 'bot.sqlite3'}")
    migrate(eng)
    rt = Runtime(eng, ScreenOptions(campaign_paths=("campaigns/h3",), debounce_s=0),
                 gh_for=lambda s: port)
    yield d, port, rt
    eng.dispose()


def screen(rt, port, login: str, args: str, number: int = 5, cid: int = 77) -> None:
    run_command(rt, port, CommentContext(REPO, number, login, cid, 1, True), "screen", args,
                None)


def check_run(d, screen_label: str | None = None, head: str | None = None) -> dict[str, Any]:
    """The double's newest check run (of a head, when given)."""
    runs = [r for r in d.repo(REPO).check_runs.values() if head in (None, r["head_sha"])]
    return max(runs, key=lambda r: r["id"])


def click(rt, port, run: dict[str, Any], identifier: str | None, login: str, *,
          head: str | None = None, sender_type: str = "User",
          config: RepoConfig | None = None) -> None:
    """GitHub's ``check_run`` delivery for a click on ``run``'s button ``identifier``
    (None: the Re-run link, ``rerequested``), built on octokit's example payload."""
    p = copy.deepcopy(json.loads((FIXTURE / "requested_action.payload.json").read_text()))
    p["action"] = "requested_action" if identifier else "rerequested"
    if identifier:
        p["requested_action"] = {"identifier": identifier}
    else:
        p.pop("requested_action")
    out = run.get("output") or {}
    p["check_run"].update(
        id=run["id"], name=run["name"], head_sha=head or run["head_sha"],
        external_id=run.get("external_id") or "", status=run["status"],
        conclusion=run["conclusion"], pull_requests=[],
        output={**p["check_run"]["output"], "title": out.get("title"),
                "summary": out.get("summary"), "text": out.get("text")})
    p["repository"]["full_name"] = REPO
    p["sender"].update(login=login, type=sender_type)
    ev = Event(f"click-{next(_deliveries)}", "check_run", p)
    ScreenHandlers(rt).handle_check_run(ev, port, config or RepoConfig())


def labels(run: dict[str, Any]) -> list[str]:
    return [a["label"] for a in run.get("actions") or []]


def finish(d, port, rt, conclusion: str = "failure") -> None:
    """The screen's workflow run reports (no bundle: NOT COUNTED)."""
    run = max(d.repo(REPO).runs.values(), key=lambda r: r["id"])
    run.update(status="completed", conclusion=conclusion)
    on_workflow_run_completed(rt, port, {
        "repository": {"full_name": REPO, "default_branch": "main"},
        "workflow_run": {"id": run["id"], "conclusion": conclusion, "status": "completed",
                         "path": ".github/workflows/screen.yml"}}, ScreenSection())


def test_cancel_button(env) -> None:
    d, port, rt = env
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless")
    run = check_run(d)
    assert (run["status"], labels(run)) == ("in_progress", [CANCEL.label])
    head = run["head_sha"]
    n = len(d.writes())

    # stale head: a click that names another commit than the screen runs
    click(rt, port, run, "cancel", "maint", head="f" * 40)
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert "was refused: this check run is for ffffffffffff" in run["output"]["text"]
    # unauthorised: read permission, not the requester, not a campaign requester
    n = len(d.writes())
    click(rt, port, run, "cancel", "eve")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert run["output"]["text"].startswith("**Cancel** by @eve was refused: repository "
                                            "permission is 'read'.\n")
    # a bot's click is ignored
    n = len(d.writes())
    click(rt, port, run, "cancel", "other-app[bot]", sender_type="Bot")
    assert len(d.writes()) == n
    with rt.db() as db:
        assert db.scalars(select(Screen)).one().state == "dispatched"

    # the requester clicks: the run is cancelled, the button goes, the check run says so
    n = len(d.writes())
    click(rt, port, run, "cancel", "maint")
    (wf_run,) = d.repo(REPO).runs.values()
    assert d.write_summary()[n:] == [
        ("?", f"{P}/actions/runs/{wf_run['id']}/cancel"),  # not in the REST subset
        ("issues/update-comment", d.writes()[n + 1].path),
        ("checks/update", f"{P}/check-runs/{run['id']}"),
    ]
    assert labels(run) == [] and run["output"]["text"].startswith("**Cancel** by @maint: S1")
    assert run["head_sha"] == head
    with rt.db() as db:
        s = db.scalars(select(Screen)).one()
        assert (s.state, s.cancelled_by) == ("cancelling", "maint")
    # replayed (redelivered, or clicked again before GitHub refreshed the page): nothing
    n = len(d.writes())
    click(rt, port, run, "cancel", "maint")
    assert len(d.writes()) == n


def test_rerun_button_and_the_rerun_link(env) -> None:
    d, port, rt = env
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless")
    finish(d, port, rt)
    run = check_run(d)
    assert (run["status"], run["conclusion"], labels(run)) == (
        "completed", "failure", [RERUN.label])
    # what the screen wrote in the run (a finished one's reproduce block): kept below answers
    port.update_check_run(run["id"], title=run["output"]["title"],
                          summary=run["output"]["summary"], text="How to reproduce: ...")

    n = len(d.writes())  # unauthorised
    click(rt, port, run, "rerun", "eve")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert run["output"]["text"].startswith("**Re-run** by @eve was refused: @eve may not "
                                            "screen on this repository")
    assert run["output"]["text"].endswith("\nHow to reproduce: ...")
    with rt.db() as db:
        assert len(db.scalars(select(Screen)).all()) == 1

    n = len(d.writes())  # happy path: queued at this head, dispatched, its own check run
    click(rt, port, run, "rerun", "maint")
    with rt.db() as db:
        s1, s2 = db.scalars(select(Screen).order_by(Screen.id)).all()
        assert (s2.state, s2.head_sha, s2.candidate, s2.track, s2.requested_by,
                s2.session_order) == ("dispatched", run["head_sha"], "cache-dit",
                                      "5s-lossless", "maint", s1.session_order)
    new = check_run(d)
    assert new["id"] != run["id"] and labels(new) == [CANCEL.label]
    assert [w for w in d.write_summary()[n:] if w[0] != "issues/update-comment"] == [
        ("issues/create-comment", f"{P}/issues/5/comments"),
        ("actions/create-workflow-dispatch", f"{P}/actions/workflows/screen.yml/dispatches"),
        ("checks/create", f"{P}/check-runs"),
        ("checks/update", f"{P}/check-runs/{run['id']}"),
    ]
    assert labels(run) == [] and run["output"]["text"].startswith(
        f"**Re-run** by @maint at `{run['head_sha']}`: queued as S2")
    assert "@eve" not in run["output"]["text"]  # the earlier answer is replaced
    assert run["output"]["text"].endswith("\nHow to reproduce: ...")
    assert len(d.repo(REPO).runs) == 2

    n = len(d.writes())  # replayed click, and GitHub's Re-run link on the same run: nothing
    click(rt, port, run, "rerun", "maint")
    click(rt, port, run, None, "maint")
    assert len(d.writes()) == n

    # GitHub's Re-run link on the second screen's run while it runs: refused, nothing queued
    click(rt, port, new, None, "maint")
    assert "S2 has not ended yet (dispatched); cancel it first" in new["output"]["text"]
    # ... and once it ended, the link re-runs it like the button
    finish(d, port, rt)
    click(rt, port, new, None, "maint")
    with rt.db() as db:
        assert [s.state for s in db.scalars(select(Screen).order_by(Screen.id))] == [
            "failed", "failed", "dispatched"]


def test_rerun_on_a_stale_head_is_refused(env) -> None:
    d, port, rt = env
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless")
    finish(d, port, rt)
    run = check_run(d)
    new_head = d.push(REPO, 5, {"campaigns/h3/candidates.md": "cache-dit v2\n"})
    n = len(d.writes())
    click(rt, port, run, "rerun", "maint")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert (f"sha={run['head_sha']} is not the PR head, which is now {new_head}"
            in run["output"]["text"])
    with rt.db() as db:
        assert len(db.scalars(select(Screen)).all()) == 1
    assert labels(run) == [RERUN.label]  # a refusal leaves the button


def fork_push(d, rt, port, files: dict[str, str]) -> str:
    """A push to the fork PR #6 and GitHub's ``pull_request`` synchronize for it."""
    head = d.push(REPO, 6, files)
    on_push(rt, port, {"repository": {"full_name": REPO},
                       "pull_request": {"number": 6, "head": {"sha": head}}})
    return head


def test_approve_head_button_on_a_fork(env) -> None:
    d, port, rt = env
    pull = d.add_pull(REPO, 6, {"x.txt": "fork"}, fork="mallory/campaign", head_ref="topic")
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless", cid=1)  # holds the pool
    screen(rt, port, "maint", f"candidate teacache track=5s-lossless sha={pull.head_sha}",
           number=6, cid=2)
    n = len(d.writes())
    h1 = fork_push(d, rt, port, {"x.txt": "changed"})
    # the queued screen is cancelled (the approval was for the old head), and the new head
    # gets a check run that asks for an approval, with the button
    approval = check_run(d, head=h1)
    assert [w[0] for w in d.write_summary()[n:]] == [
        "checks/create", "issues/update-comment", "issues/create-label", "issues/add-labels"]
    assert (approval["name"], approval["status"], approval["conclusion"], labels(approval),
            approval["external_id"]) == (
        "campaign-bot/screen: teacache", "completed", "action_required", [APPROVE.label],
        screen_row(rt, 2).request_id)
    assert h1 in approval["output"]["summary"]

    n = len(d.writes())  # unauthorised: the fork's author cannot approve their own code
    click(rt, port, approval, "approve", "mallory")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{approval['id']}")]
    assert approval["output"]["text"].startswith("**Approve head** by @mallory was refused: "
                                                 "@mallory may not screen")

    h2 = d.push(REPO, 6, {"x.txt": "changed again"})  # stale: the fork moved again
    n = len(d.writes())
    click(rt, port, approval, "approve", "maint")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{approval['id']}")]
    assert f"sha={h1} is not the PR head, which is now {h2}" in approval["output"]["text"]
    assert screen_row(rt, 2).state == "cancelled" and screen_row(rt, 3) is None

    # happy path: the head the writer reviewed is the head: queued again, bound to it
    screen(rt, port, "maint", f"candidate teacache track=5s-lossless sha={h2}", number=6,
           cid=3)
    h3 = fork_push(d, rt, port, {"x.txt": "final"})
    approval = check_run(d, head=h3)
    assert screen_row(rt, 3).state == "cancelled"
    n = len(d.writes())
    click(rt, port, approval, "approve", "maint")
    s4 = screen_row(rt, 4)
    assert (s4.state, s4.head_sha, s4.candidate, s4.from_fork, s4.requested_by) == (
        "queued", h3, "teacache", True, "maint")
    assert [w[0] for w in d.write_summary()[n:]] == [
        "issues/create-comment", "issues/remove-label", "checks/update"]
    assert (approval["conclusion"], labels(approval)) == ("success", [])
    assert approval["output"]["text"].startswith(f"**Approve head** by @maint at `{h3}`: "
                                                 "queued as S4")
    n = len(d.writes())  # replayed: nothing
    click(rt, port, approval, "approve", "maint")
    assert len(d.writes()) == n and screen_row(rt, 5) is None


def screen_row(rt, sid: int) -> Screen | None:
    with rt.db() as db:
        return db.get(Screen, sid)


def inconclusive_look(d, port, rt, *, sequential: bool = True) -> tuple[Screen, Any]:
    """S1 of cache-dit, finished INCONCLUSIVE with a projected follow-up of 2 sessions per
    arm (``FOLLOW_UP``), as a verified bundle leaves it (``Screen.summary``: verdict,
    projection, the verified receipts, the scope blob it was judged under), its campaign
    declaring ``[protocol.sequential]`` (or not); and its check run, with the buttons the
    result gives it (:func:`actions_for` with :func:`_more_button`, as the result does)."""
    scope = scope_dict()
    if sequential:
        scope["protocol"]["sequential"] = {"looks": 3, "max_sessions_per_arm": 9}
    d.set_branch(REPO, "main", {"campaigns/h3/campaign.toml": toml_dumps(scope)},
                 parent="main")
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless")
    finish(d, port, rt)
    camp = load_campaign(port, REPO, "main", "campaigns/h3")
    rs = receipts([100.0, 101.0, 102.0], [90.0, 99.0, 103.0], screen="s1")
    with rt.db() as db:
        s = db.scalars(select(Screen)).one()
        s.state, s.verdict = "finished", "INCONCLUSIVE"
        s.summary = {"verdict": "INCONCLUSIVE", "reasons": [], "scope_blob": camp.blob,
                     "receipts": followup.receipts_json(rs, "5s-lossless"),
                     "followup": {"sessions_per_arm": 2, "look": 2, "probability": 0.9}}
        db.flush()
        buttons = actions_for(s, _more_button(db, s, camp))
    run = check_run(d)
    port.update_check_run(run["id"], title="S1: INCONCLUSIVE", summary="FOLLOW_UP",
                          text="How to reproduce: ...", actions=buttons)
    s1 = screen_row(rt, 1)
    assert s1 is not None
    return s1, run


def test_more_sessions_button_only_where_a_follow_up_would_be_queued(env) -> None:
    d, port, rt = env
    s, run = inconclusive_look(d, port, rt, sequential=False)
    assert labels(run) == [RERUN.label]  # no [protocol.sequential]: no button
    camp = load_campaign(port, REPO, "main", "campaigns/h3")
    with rt.db() as db:
        row = db.get(Screen, s.id)
        assert row is not None
        for change in ({"verdict": "SUPPORTED"}, {"followup": None}):
            row.summary = {**(row.summary or {}), **change}
            assert _more_button(db, row, camp) is None
    # GitHub's limits on the button's texts hold for any follow-up the design allows
    b = more_sessions(9999, 3)
    assert (b.label, b.identifier) == ("+9999 sessions", MORE.identifier)
    assert len(b.label) <= 20 and len(b.description) <= 40 and len(b.identifier) <= 20
    with pytest.raises(ValueError, match="longer than GitHub allows"):
        more_sessions(10**12, 2)


def test_more_sessions_button(env) -> None:
    d, port, rt = env
    s1, run = inconclusive_look(d, port, rt)
    assert labels(run) == [RERUN.label, "+4 sessions"]
    assert d.validation_problems() == []
    (more,) = [a for a in run["actions"] if a["identifier"] == MORE.identifier]
    assert more["description"] == "Look 2: 2 more per arm (continue)"

    n = len(d.writes())  # unauthorised: read permission, not a requester
    click(rt, port, run, "continue", "eve")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert run["output"]["text"].startswith("**+4 sessions** by @eve was refused: @eve may "
                                            "not screen on this repository")
    assert labels(run) == [RERUN.label, "+4 sessions"]  # a refusal leaves the buttons
    assert screen_row(rt, 2) is None

    n = len(d.writes())  # happy path: /screen continue S1 sha=HEAD by the clicker
    click(rt, port, run, "continue", "maint")
    s2 = screen_row(rt, 2)
    assert s2 is not None
    assert (s2.state, s2.head_sha, s2.candidate, s2.track, s2.requested_by,
            s2.session_order, (s2.summary or {}).get("plan")) == (
        "dispatched", run["head_sha"], "cache-dit", "5s-lossless", "maint", "ABBA",
        {"purpose": "followup", "first": s1.id, "look": 2, "continues": "s1"})
    assert [w for w in d.write_summary()[n:] if w[0] != "issues/update-comment"] == [
        ("issues/create-comment", f"{P}/issues/5/comments"),
        ("actions/create-workflow-dispatch", f"{P}/actions/workflows/screen.yml/dispatches"),
        ("checks/create", f"{P}/check-runs"),
        ("checks/update", f"{P}/check-runs/{run['id']}"),
    ]
    wf = max(d.repo(REPO).runs.values(), key=lambda r: r["id"])
    assert (wf["inputs"]["follow_up"], wf["inputs"]["sessions"]) == ("2:s1", "4")
    assert run["output"]["text"].startswith(
        f"**+4 sessions** by @maint at `{run['head_sha']}`: queued as S2, look 2 of the "
        "series")
    assert "@eve" not in run["output"]["text"]
    assert run["output"]["text"].endswith("\nHow to reproduce: ...")
    assert labels(run) == [RERUN.label]  # the follow-up is queued: its button goes

    n = len(d.writes())  # replayed (redelivered, or clicked again before a refresh): nothing
    click(rt, port, run, "continue", "maint")
    click(rt, port, run, "continue", "amy")
    assert len(d.writes()) == n and screen_row(rt, 3) is None


def test_more_sessions_on_a_stale_head_is_refused(env) -> None:
    d, port, rt = env
    _, run = inconclusive_look(d, port, rt)
    new_head = d.push(REPO, 5, {"campaigns/h3/candidates.md": "cache-dit v2\n"})
    n = len(d.writes())
    click(rt, port, run, "continue", "maint")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert run["output"]["text"].startswith("**+4 sessions** by @maint was refused: ")
    assert (f"sha={run['head_sha']} is not the PR head, which is now {new_head}"
            in run["output"]["text"])
    assert screen_row(rt, 2) is None
    assert labels(run) == [RERUN.label, "+4 sessions"]
