"""The /screen flow through the router-level functions against the GitHub double (PyGithub
over HTTP): exact GitHub writes for queueing, dispatch, job progress, cancel, budget refusal,
unauthorised users and fork approval."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from github import Auth
from screen_scope import scope_dict, toml_dumps
from sqlalchemy import select

from bot.database import make_engine, migrate
from bot.features.screen import budget
from bot.features.screen import queue as screens
from bot.features.screen.commands import run_command
from bot.features.screen.queue import Screen
from bot.features.screen.results import on_workflow_job
from bot.features.screen.runtime import CommentContext, Runtime, ScreenOptions
from bot.github.client import make_client
from bot.github.pygithub import PyGithubPort
from evidence.hashing import git_blob_sha

REPO = "octo/campaign"
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t


@pytest.fixture
def env(github_double, tmp_path: Path) -> Iterator[tuple]:
    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": toml_dumps(scope_dict()),
                      "campaigns/h3/trusted-keys.json": "{}",
                      ".github/workflows/screen.yml": "on: workflow_dispatch\n"})
    d.add_workflow(REPO, "screen.yml")
    d.add_pull(REPO, 5, {"campaigns/h3/candidates.md": "cache-dit\n"})
    d.set_permission(REPO, "maint", "write")
    d.set_permission(REPO, "amy", "read")
    d.set_permission(REPO, "eve", "read")
    auth = Auth.Token("test-token")
    port = PyGithubPort(make_client(d.base_url, auth, throttle=False), REPO, "campaign-bot[bot]",
                        auth=auth, base_url=d.base_url)
    eng = make_engine(f"sqlite:///{tmp_path / 'bot.sqlite3'}")
    migrate(eng)
    clock = Clock()
    rt = Runtime(eng, ScreenOptions(campaign_paths=("campaigns/h3",), debounce_s=10),
                 gh_for=lambda s: port, now=clock)
    yield d, port, rt, clock
    eng.dispose()


def ctx(login: str, number: int = 5, cid: int = 77) -> CommentContext:
    return CommentContext(REPO, number, login, cid, 1, True)


def say(rt, port, login: str, text: str, cid: int = 77) -> None:
    cmd, _, args = text.lstrip("/").partition(" ")
    run_command(rt, port, ctx(login, cid=cid), cmd, args, None)


def comments(d) -> list[str]:
    return [c["body"] for c in sorted(d.repo(REPO).comments.values(), key=lambda c: c["id"])]


def test_candidate_is_queued_dispatched_and_checked(env) -> None:
    d, port, rt, clock = env
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless")
    assert d.write_summary() == [
        ("issues/create-comment", f"/repos/{REPO}/issues/5/comments"),
        ("actions/create-workflow-dispatch",
         f"/repos/{REPO}/actions/workflows/screen.yml/dispatches"),
        ("checks/create", f"/repos/{REPO}/check-runs"),
        ("issues/update-comment", d.writes()[3].path),
    ]
    run = next(iter(d.repo(REPO).runs.values()))
    with rt.db() as db:
        s = db.scalars(select(Screen)).one()
        assert (s.state, s.run_id, s.head_sha) == ("dispatched", run["id"],
                                                   d.repo(REPO).pulls[5].head_sha)
        req_id = s.request_id
    assert run["inputs"] == {"campaign": "campaigns/h3", "candidate": "cache-dit",
                             "track": "5s-lossless", "pr": "5",
                             "head_sha": d.repo(REPO).pulls[5].head_sha, "request_id": req_id,
                             "sessions": "6",
                             # the campaign pool's labels: the one place runner labels live
                             "runs_on": '["self-hosted","ascend-4x910b1"]',
                             # the default branch's campaign.toml, by its git blob SHA
                             "scope_blob": git_blob_sha(
                                 d.repo(REPO).trees[d.repo(REPO).refs["main"]]
                                 ["campaigns/h3/campaign.toml"])}
    assert run["head_branch"] == "main"
    check = next(iter(d.repo(REPO).check_runs.values()))
    assert (check["name"], check["status"], check["external_id"]) == (
        "campaign-bot/screen: cache-dit", "in_progress", req_id)
    body = comments(d)[0]
    assert body.startswith("<!-- campaign-bot:screen-status screen=S1 -->\n### 🚀 Screen S1: "
                           "`cache-dit` on `5s-lossless`: dispatched")
    assert "| estimate | 3.87 wall-hours, 15.47 device-hours |" in body
    # one direction used by the dispatch, nothing charged yet, the estimate reserved
    with rt.db() as db:
        from screen_scope import make_scope

        st = budget.state(db, REPO, make_scope())
        assert (st.directions_used, st.device_used_h) == (1, 0.0)
        assert st.device_reserved_h == pytest.approx(15.4666, abs=1e-3)
    # workflow_job in progress: running on a runner (debounced: 5 s after the last edit)
    n = len(d.writes())
    clock.t += timedelta(seconds=5)
    on_workflow_job(rt, port, {"action": "in_progress", "repository": {"full_name": REPO},
                               "workflow_job": {"run_id": run["id"], "runner_name": "ascend-7",
                                                "started_at": "2026-12-01T10:00:05Z"}})
    assert len(d.writes()) == n  # deferred by the debounce
    from bot.features.screen.watchdog import flush_statuses

    clock.t += timedelta(seconds=10)
    assert flush_statuses(rt) == 1
    assert "| runner | `ascend-7` since 2026-12-01 10:00 UTC |" in comments(d)[0]
    assert "### ⚙️ Screen S1: `cache-dit` on `5s-lossless`: running" in comments(d)[0]


def test_two_screens_one_pool_second_waits_then_cancel(env) -> None:
    d, port, rt, clock = env
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    say(rt, port, "maint", "/screen control track=5s-lossless", cid=2)
    assert len(d.repo(REPO).runs) == 1  # the pool runs one screen at a time
    body = comments(d)[1]
    assert "### ⏳ Screen S2: `control` on `5s-lossless`: queued" in body
    assert ("| queue | position 1 in `pool-4x910b1`, estimated start 2026-12-01 13:52 UTC |"
            in body)
    # an unauthorised user cannot cancel it
    say(rt, port, "eve", "/screen cancel S2", cid=3)
    assert "`eve` may not do this here: repository permission is 'read'" in comments(d)[2]
    say(rt, port, "maint", "/screen cancel S2", cid=4)
    with rt.db() as db:
        s2 = db.get(Screen, 2)
        assert (s2.state, s2.cancelled_by) == ("cancelled", "maint")
    assert "### 🚫 Screen S2: `control` on `5s-lossless`: cancelled" in comments(d)[1]
    assert "| cancelled | by `maint` at 2026-12-01 10:00 UTC |" in comments(d)[1]
    assert len(d.repo(REPO).runs) == 1
    say(rt, port, "maint", "/screen cancel S2", cid=5)
    assert "S2 is already cancelled" in comments(d)[-1]


def test_unauthorised_and_usage_errors_reply_once(env) -> None:
    d, port, rt, _ = env
    say(rt, port, "eve", "/screen candidate cache-dit")
    say(rt, port, "maint", "/screen candidate nope", cid=78)
    say(rt, port, "maint", "/screen candidate cache-dit sessions=3", cid=79)
    c = comments(d)
    assert c[0] == (
        "<!-- campaign-bot:reply comment=77 line=1 -->\n`eve` may not do this "
        "here: repository permission is 'read'. A user with write permission on this "
        "repository, or a requester of the campaign (`amy`), can.\n"
    )
    assert "campaign 'h3-ref2va' has no candidate 'nope'" in c[1]
    assert "Valid: `cache-dit`, `fp8-attn`, `teacache`." in c[1]
    assert "sessions=3 is out of range" in c[2]
    assert not d.repo(REPO).runs and not d.repo(REPO).check_runs


def test_requester_without_write_may_screen_and_extend(env) -> None:
    d, port, rt, _ = env
    say(rt, port, "amy", "/campaign budget extend device-hours=8 reason=second round")
    assert ("Budget of campaign `h3-ref2va` extended by `amy`: +0 candidate directions, "
            "+0.00 wall-hours, +8.00 device-hours (second round). Now: 72.00 device-hours, "
            "16.00 wall-hours and 2 directions left.") in comments(d)[0]
    say(rt, port, "maint", "/campaign budget extend device-hours=8", cid=78)
    # maint has write permission: the refusal must not say write permission would do
    assert ("`maint` may not do this here: only the campaign's requesters may extend its "
            "budget. Only a requester of the campaign (`amy`), can.") in comments(d)[1]
    assert "write permission" not in comments(d)[1]
    say(rt, port, "amy", "/screen candidate cache-dit track=5s-lossless", cid=79)
    assert len(d.repo(REPO).runs) == 1
    with rt.db() as db:
        kinds = [(e.kind, e.by) for e in budget.history(db, REPO, "h3-ref2va")]
    assert kinds == [("extend", "amy"), ("direction", "amy")]


def test_budget_exhausted_is_refused_with_numbers(env) -> None:
    d, port, rt, _ = env
    # both tracks: 3.87 + 9.37 wall-hours, 15.47 + 37.47 device-hours -> fits 64;
    # a second candidate on both tracks does not fit what is left after the reservation
    say(rt, port, "maint", "/screen candidate cache-dit", cid=1)
    say(rt, port, "maint", "/screen candidate fp8-attn", cid=2)
    c = comments(d)
    refusal = c[-1]
    assert refusal.startswith("<!-- campaign-bot:reply comment=2 line=1 -->\nScreen refused: "
                              "the budget of campaign `h3-ref2va` does not cover it.")
    assert ("- device-hours: this screen needs ~52.93 h, 11.07 h left of 64.00 h "
            "(0.00 h charged, 52.93 h reserved)") in refusal
    assert ("- wall-hours: this screen needs ~13.23 h, 2.77 h left of 16.00 h "
            "(0.00 h charged, 13.23 h reserved)") in refusal
    with rt.db() as db:
        assert [s.candidate for s in db.scalars(select(Screen))] == ["cache-dit", "cache-dit"]


def test_dry_run_and_status(env) -> None:
    d, port, rt, _ = env
    say(rt, port, "maint", "/screen candidate cache-dit dry-run", cid=1)
    assert "| `5s-lossless` | 6 | `ABBAAB` | 3.87 | 15.47 |" in comments(d)[0]
    assert "nothing queued, nothing charged" in comments(d)[0]
    assert not d.repo(REPO).runs
    say(rt, port, "maint", "/screen candidate cache-dit", cid=2)
    say(rt, port, "maint", "/screen status", cid=3)
    st = comments(d)[-1]
    assert "| S1 | `cache-dit` on `5s-lossless` | dispatched | `pool-4x910b1` | - | - |" in st
    assert ("| S2 | `cache-dit` on `15s-lossy` | queued | `pool-4x910b1` | 1 | "
            "2026-12-01 13:52 UTC |") in st
    assert "0.00 of 64.00 device-hours charged (52.93 reserved)" in st


def test_fork_pr_needs_sha_bound_approval(env) -> None:
    d, port, rt, clock = env
    pull = d.add_pull(REPO, 6, {"x.txt": "fork"}, fork="mallory/campaign", head_ref="fork-topic")
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)  # PR 5
    run_command(rt, port, ctx("maint", 6, 2), "screen",
                            "candidate teacache track=5s-lossless", None)
    full = f"/screen candidate teacache track=5s-lossless sha={pull.head_sha}"
    assert comments(d)[-1] == (
        "<!-- campaign-bot:reply comment=2 line=1 -->\n"
        "This PR comes from a fork: its code would run on a self-hosted runner, so the "
        "approval must name the full SHA of the head commit you reviewed. To screen the PR "
        f"head as it is now, after reviewing it, comment:\n\n```\n{full}\n```\n")
    # a prefix of the head is never an approval: the reply names the head in full
    for n in (7, 12, 39):
        run_command(rt, port, ctx("maint", 6, 10 + n), "screen",
                                f"candidate teacache track=5s-lossless sha={pull.head_sha[:n]}",
                                None)
        assert (f"sha={pull.head_sha[:n]} is {n} hex digits; an approval names the full "
                f"40-digit head commit (now {pull.head_sha}), never a prefix.") in comments(d)[-1]
        assert f"```\n{full}\n```" in comments(d)[-1]
    # a full SHA that is not the head (an older commit): refused, with the current head
    run_command(rt, port, ctx("maint", 6, 4), "screen",
                            f"candidate teacache track=5s-lossless sha={'0' * 40}", None)
    assert f"sha={'0' * 40} is not the PR head, which is now {pull.head_sha}" in comments(d)[-1]
    with rt.db() as db:
        assert db.get(Screen, 2) is None  # nothing queued by any of these
    run_command(rt, port, ctx("maint", 6, 3), "screen", full.split(" ", 1)[1],
                            None)
    with rt.db() as db:
        s = db.get(Screen, 2)
        assert (s.state, s.from_fork, s.head_sha) == ("queued", True, pull.head_sha)
    # a new push to the fork before the pool frees: the queued screen is not dispatched
    d.push(REPO, 6, {"x.txt": "changed"})
    with rt.db() as db:
        s1 = db.get(Screen, 1)
        s1.state = screens.FINISHED
    from bot.features.screen.dispatch import dispatch_pool

    assert dispatch_pool(rt, "pool-4x910b1") is None
    with rt.db() as db:
        s = db.get(Screen, 2)
        assert (s.state, s.conclusion) == ("failed", "not dispatched")
        assert "the fork PR head moved" in s.detail
    assert len(d.repo(REPO).runs) == 1


def test_push_to_a_fork_cancels_its_queued_screens(env) -> None:
    from bot.features.screen.handlers import ScreenHandlers
    from bot.inbox.router import Event

    d, port, rt, clock = env
    pull = d.add_pull(REPO, 6, {"x.txt": "fork"}, fork="mallory/campaign", head_ref="fork-topic")
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)  # PR 5
    run_command(rt, port, ctx("maint", 6, 2), "screen",
                            f"candidate teacache track=5s-lossless sha={pull.head_sha}", None)
    new_head = d.push(REPO, 6, {"x.txt": "changed"})
    ev = Event("d1", "pull_request", {
        "action": "synchronize", "repository": {"full_name": REPO},
        "pull_request": {"number": 6, "head": {"sha": new_head}}})
    ScreenHandlers(rt).handle_push(ev, port, None)
    with rt.db() as db:
        s = db.get(Screen, 2)
        assert (s.state, s.cancelled_by) == ("cancelled", "campaign-bot")
        assert s.detail == (f"Cancelled: the fork PR got a new head {new_head[:12]}; a new "
                            "push needs a new approval.")
        assert db.get(Screen, 1).state == "dispatched"  # same-repo PR 5 is untouched
    assert "### 🚫 Screen S2: `teacache` on `5s-lossless`: cancelled" in comments(d)[-1]


def test_authorisation_is_checked_again_at_dispatch(env) -> None:
    from bot.features.screen.dispatch import dispatch_pool

    d, port, rt, clock = env
    d.set_permission(REPO, "maint2", "write")
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    say(rt, port, "maint2", "/screen control track=5s-lossless", cid=2)
    say(rt, port, "amy", "/screen candidate fp8-attn track=5s-lossless", cid=3)  # requester
    d.set_permission(REPO, "maint2", "read")  # lost write permission while queued
    with rt.db() as db:
        assert [s.authorised_as for s in db.scalars(select(Screen).order_by(Screen.id))] == [
            "write", "write", "requester"]
        db.get(Screen, 1).state = screens.FINISHED
    s = dispatch_pool(rt, "pool-4x910b1")
    assert s is not None and s.id == 3  # S2 was failed, S3 (amy, still a requester) went
    with rt.db() as db:
        s2 = db.get(Screen, 2)
        assert (s2.state, s2.conclusion) == ("failed", "not dispatched")
        assert s2.detail == ("Not dispatched: maint2 no longer has write permission "
                             "(now 'read'); ask again")
    assert len(d.repo(REPO).runs) == 2


def test_bundle_documents_come_from_the_signed_manifest_only(tmp_path: Path) -> None:
    """A receipt beside a signed bundle (in node_modules/, which walkers skip) refuses the
    bundle; and the reader opens only the documents the signature lists, whatever else lies
    in the tree."""
    from hostile.corpus import RECEIPTS, clean_bundle, forged_receipt

    from bot.features.screen.bundle import read_bundle, verify_bundle
    from runners.signer import generate_key

    key = tmp_path / "runner.key"
    generate_key(key)
    b = clean_bundle(tmp_path / "b", key)
    pub = (tmp_path / "runner.key.pub").read_bytes()
    chk = verify_bundle(b, pub)
    assert chk.ok and chk.documents == sorted(RECEIPTS)
    (b / "node_modules").mkdir()
    (b / "node_modules" / "forged.json").write_text(forged_receipt())
    refused = verify_bundle(b, pub)
    assert not refused.ok and refused.documents == []
    assert ("signature: node_modules/forged.json: not covered by the signed manifests (added "
            "after signing); the bundle is refused and nothing in it is read") in refused.problems
    docs = read_bundle(b, chk.documents)  # the forgery is on disk, and never opened
    assert [r.arm for r in sorted(docs.receipts, key=lambda r: r.slot)] == ["control",
                                                                         "candidate"]
    assert docs.problems == docs.unreadable == []

