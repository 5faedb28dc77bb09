"""Labels on a pull request from its screens, against the GitHub double (PyGithub over HTTP):
``awaiting-approval`` set when a fork's push cancels its approved screen and cleared by a new
approval; verdict labels set, moved and kept from the latest judged screen of each track;
labels created in the repository on first use only; names from ``[labels]`` of the
repository config."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from test_screen_buttons import REPO, env, finish, fork_push, screen, screen_row  # noqa: F401

from bot.features.screen import queue as screens
from bot.features.screen.labels import STYLE, sync_labels
from bot.features.screen.queue import Screen

P = f"/repos/{REPO}"


def pr_labels(d, number: int) -> list[str]:
    return sorted(d.repo(REPO).issues[number].get("labels", []))


def label_writes(d, since: int) -> list[tuple[str, str]]:
    return [w for w in d.write_summary()[since:] if "label" in w[0]]


def judged(rt, sid: int, verdict: str) -> None:
    """Screen ``sid`` ended with ``verdict`` (what a verified bundle's judgement records)."""
    with rt.db() as db:
        s = db.get(Screen, sid)
        s.state = screens.FINISHED if verdict not in ("NOT COUNTED", "REFUSED") \
            else screens.FAILED
        s.verdict = verdict
        s.completed_at = datetime.now(UTC)


def test_awaiting_approval_is_set_by_a_fork_push_and_cleared_by_an_approval(env) -> None:  # noqa: F811
    d, port, rt = env
    pull = d.add_pull(REPO, 6, {"x.txt": "fork"}, fork="mallory/campaign", head_ref="topic")
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless", cid=1)  # holds the pool
    screen(rt, port, "maint", f"candidate teacache track=5s-lossless sha={pull.head_sha}",
           number=6, cid=2)
    assert pr_labels(d, 6) == [] and d.repo(REPO).labels == {}
    n = len(d.writes())
    h1 = fork_push(d, rt, port, {"x.txt": "changed"})
    # created on first use, with its colour and description, then set on the PR
    assert label_writes(d, n) == [("issues/create-label", f"{P}/labels"),
                                  ("issues/add-labels", f"{P}/issues/6/labels")]
    created = d.repo(REPO).labels["awaiting-approval"]
    assert (created["color"], created["description"]) == STYLE["awaiting_approval"]
    assert pr_labels(d, 6) == ["awaiting-approval"]
    n = len(d.writes())  # a redelivered push: nothing changes, nothing is written
    fork_push_again = {"repository": {"full_name": REPO},
                       "pull_request": {"number": 6, "head": {"sha": h1}}}
    from bot.features.screen.dispatch import on_push

    on_push(rt, port, fork_push_again)
    assert label_writes(d, n) == []
    # a writer approves the new head: the label goes
    n = len(d.writes())
    screen(rt, port, "maint", f"candidate teacache track=5s-lossless sha={h1}", number=6,
           cid=3)
    assert label_writes(d, n) == [("issues/remove-label",
                                   f"{P}/issues/6/labels/awaiting-approval")]
    assert pr_labels(d, 6) == [] and screen_row(rt, 3).state == "queued"
    # the next push needs the label again: it exists, so it is only added
    n = len(d.writes())
    fork_push(d, rt, port, {"x.txt": "again"})
    assert label_writes(d, n) == [("issues/add-labels", f"{P}/issues/6/labels")]
    assert len(d.repo(REPO).labels) == 1 and pr_labels(d, 6) == ["awaiting-approval"]


def test_verdict_labels_follow_the_latest_judged_screen_of_each_track(env) -> None:  # noqa: F811
    d, port, rt = env
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless", cid=1)
    # the run fails: NOT COUNTED judges nothing, so no verdict label, nothing written
    n = len(d.writes())
    finish(d, port, rt)
    assert screen_row(rt, 1).verdict == "NOT COUNTED"
    assert label_writes(d, n) == [] and pr_labels(d, 5) == []

    judged(rt, 1, "SUPPORTED")
    n = len(d.writes())
    assert sync_labels(rt, port, 5) == (["screen:supported"], [])
    assert label_writes(d, n) == [("issues/create-label", f"{P}/labels"),
                                  ("issues/add-labels", f"{P}/issues/5/labels")]
    assert pr_labels(d, 5) == ["screen:supported"]
    assert sync_labels(rt, port, 5) == ([], [])  # converged: nothing more

    # a second screen of the same candidate and track: INCONCLUSIVE replaces SUPPORTED
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless", cid=2)
    judged(rt, 2, "INCONCLUSIVE")
    assert sync_labels(rt, port, 5) == (["screen:inconclusive"], ["screen:supported"])
    assert pr_labels(d, 5) == ["screen:inconclusive"]
    # a third that was refused judges nothing: the INCONCLUSIVE stands
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless", cid=3)
    judged(rt, 3, "REFUSED")
    assert sync_labels(rt, port, 5) == ([], [])
    # another candidate FAILED: both labels, one per result
    screen(rt, port, "maint", "candidate fp8-attn track=5s-lossless", cid=4)
    judged(rt, 4, "FAILED")
    assert sync_labels(rt, port, 5) == (["screen:failed"], [])
    assert pr_labels(d, 5) == ["screen:failed", "screen:inconclusive"]
    # labels the bot does not manage are never touched
    d.repo(REPO).issues[5]["labels"].append("screen:failed-elsewhere")
    d.repo(REPO).labels["screen:failed-elsewhere"] = {"id": 1, "name": "screen:failed-elsewhere",
                                                       "color": "ededed", "description": None}
    judged(rt, 4, "SUPPORTED")
    assert sync_labels(rt, port, 5) == (["screen:supported"], ["screen:failed"])
    assert pr_labels(d, 5) == ["screen:failed-elsewhere", "screen:inconclusive",
                               "screen:supported"]
    with rt.db() as db:
        assert len(db.scalars(select(Screen)).all()) == 4


def test_label_names_come_from_the_repository_config(env) -> None:  # noqa: F811
    d, port, rt = env
    d.set_branch(REPO, "main", {".github/campaign-bot.toml":
                                '[labels]\nsupported = "perf: win"\nawaiting_approval = ""\n'},
                 parent="main")
    rt.configs.clear()
    screen(rt, port, "maint", "candidate cache-dit track=5s-lossless", cid=1)
    judged(rt, 1, "SUPPORTED")
    assert sync_labels(rt, port, 5) == (["perf: win"], [])
    assert pr_labels(d, 5) == ["perf: win"]
    d.set_branch(REPO, "main", {".github/campaign-bot.toml": "[labels]\nenabled = false\n"},
                 parent="main")
    rt.configs.clear()
    n = len(d.writes())
    assert sync_labels(rt, port, 5) == ([], [])
    assert label_writes(d, n) == [] and pr_labels(d, 5) == ["perf: win"]
