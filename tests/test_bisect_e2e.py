"""``/compare`` and ``/bisect`` end to end: ``campaign-bot serve`` as a subprocess, the GitHub
double (REST and git), and the runner double of ``tests/test_screen_service_e2e.py`` running
``campaign-bot screen`` against the stand-in server, whose latency is set per engine revision
(``--gen-seconds-by-revision``).

The engine repository is a second repository of the double with a 32-commit range
``GOOD..BAD``; one commit of it (and every later one) is slow.  A bisection finds it within
its device-hour cap, each step a screen with its signed bundle committed to the PR's branch;
a cap too small for even an error-free bisection is refused with the numbers; a bisection is
cancelled with its queued step; ``/compare`` of a fast and a slow revision is judged as any
screen, and its reproduce commands name both revisions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_screen_service_e2e import (  # noqa: F401 - fixtures used by name
    PR,
    REPO,
    Env,
    keys,
    receipts_of,
    service,
)
from webhook_helpers import wait_for

from bot.features.screen.bisect import Bisection

pytestmark = pytest.mark.slow

ENGINE = "vllm-project/vllm-omni"
SLOW_AT = 21
"""The first slow commit: c_21 of c_1 .. c_32."""
BUDGET = {"wall_hours": 16.0, "device_hours": 24.0}


def engine_range(double: Any, n: int = 32) -> list[str]:
    """An engine repository with GOOD and ``n`` commits after it; returns [GOOD, c_1..c_n]."""
    double.add_repo(ENGINE, {"README.md": "engine\n"})
    shas = [double.repo(ENGINE).refs["main"]]
    for i in range(1, n + 1):
        shas.append(double.set_branch(ENGINE, "main", {"VERSION": f"{i}\n"}, parent="main"))
    return shas


def slow_from(env: Env, tmp: Path, shas: list[str], k: int) -> None:
    """Commits ``c_k`` and later generate in 6 s instead of 1.5 s: a move far above the
    30 % margin, and generation long enough that a loaded test machine's jitter in the
    request overhead (tenths of a second) cannot pass for one."""
    table = tmp / "latency-by-revision.json"
    table.write_text(json.dumps({sha: 6.0 for sha in shas[k:]}))
    env.runner.server_args = f"--gen-seconds 1.5 --gen-seconds-by-revision {table}"


def bisections(e: Env) -> list[Bisection]:
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    eng = create_engine(f"sqlite:///{e.db}")
    try:
        with Session(eng) as s:
            out = list(s.scalars(select(Bisection).order_by(Bisection.id)))
            s.expunge_all()
            return out
    finally:
        eng.dispose()


def status_comment(e: Env, label: str) -> str:
    return next(b for b in e.comments() if f"campaign-bot:bisect-status bisection={label}" in b)


@pytest.mark.parametrize("service", [BUDGET], indirect=True)
def test_bisection_finds_the_slow_commit_within_the_cap(service: Env,  # noqa: F811
                                                        tmp_path: Path) -> None:
    e = service
    shas = engine_range(e.double)
    slow_from(e, tmp_path, shas, SLOW_AT)
    good, bad = shas[0], shas[-1]
    cid = e.say("maint", f"/bisect {good} {bad} --track 1s-lossless --max-device-hours 12 "
                "noise=0.05")
    wait_for(lambda: bisections(e) and bisections(e)[0].state != "running", 600,
             "the bisection to end")
    b = bisections(e)[0]
    assert b.state == "found", (b.outcome, b.steps)
    assert b.outcome is not None and b.outcome["first"] == b.outcome["last"] == SLOW_AT
    assert b.commits == shas[1:]
    reply = e.reply_to(cid)
    assert "Bisection B1 of 32 commits on 1s-lossless started" in reply
    assert "cap 12.00 device-hours" in reply and "2 sessions per step" in reply
    # every step is a screen of GOOD (arm A) against one commit (arm B), finished, judged,
    # committed as evidence; each answer is right (the stand-in's latencies are far apart)
    screens = e.screens()
    assert [s.id for s in screens] == [x["screen"] for x in b.steps]
    assert 5 <= len(b.steps) <= 11
    for x, s in zip(b.steps, screens, strict=True):
        assert (s.state, s.control_revision, s.candidate_revision) == (
            "finished", good, shas[x["commit"]]), s.detail
        assert s.summary["evidence"]["state"] == "committed"
        assert x["answer"] == ("slow" if x["commit"] >= SLOW_AT else "not slow"), x
        assert (x["ratio"] > 2) == (x["commit"] >= SLOW_AT), x
    asked = {x["commit"] for x in b.steps}
    assert {SLOW_AT - 1, SLOW_AT} <= asked  # the culprit's boundary was screened on both sides
    charged = sum(s.charged_device_s or 0 for s in screens) / 3600
    assert charged <= b.max_device_hours
    wait_for(lambda: "Bisection B1: found" in status_comment(e, "B1"), 30,
             "the final status comment")
    body = status_comment(e, "B1")
    assert "### ✅ Bisection B1: found on `1s-lossless`" in body
    assert f"**First slow commit: `{shas[SLOW_AT]}`** (commit {SLOW_AT} of 32" in body
    assert body.count("| finished |") + body.count("| INCONCLUSIVE |") + body.count(
        "| SUPPORTED |") + body.count("| FAILED |") >= len(b.steps)
    # the steps' result comments carry their reproduce commands, with both revisions
    s1 = screens[0]
    result = next(x for x in e.comments() if f"campaign-bot:screen-result screen={s1.label}"
                  in x)
    assert (f"--control-revision {good} --candidate-revision {s1.candidate_revision} "
            "--out bundle") in result
    # a bisection uses no candidate direction
    cid = e.say("maint", "/screen status")
    wait_for(lambda: any(f"reply comment={cid} " in x for x in e.comments()), 30, "status")
    assert "0 of 8 candidate directions" in e.reply_to(cid)


@pytest.mark.parametrize("service", [BUDGET], indirect=True)
def test_bisection_refused_when_the_cap_is_too_small_and_cancelled(service: Env,  # noqa: F811
                                                                   tmp_path: Path) -> None:
    e = service
    shas = engine_range(e.double)
    slow_from(e, tmp_path, shas, SLOW_AT)
    good, bad = shas[0], shas[-1]
    cid = e.say("maint", f"/bisect {good} {bad} --track 1s-lossless --max-device-hours 2")
    wait_for(lambda: any(f"reply comment={cid} " in x for x in e.comments()), 60, "refusal")
    reply = e.reply_to(cid)
    assert "Bisection refused: 32 commits need at least 5 steps (ceil(log2 32))" in reply
    assert "over the cap of 2.00" in reply
    assert not bisections(e) and not e.screens() and not e.runner.runs
    # a bisection held in the queue is cancelled with its queued step; nothing is charged
    e.runner.hold = True
    e.say("maint", f"/bisect {good} {bad} --track 1s-lossless")
    wait_for(lambda: len(e.runner.runs) == 1, 60, "the first step dispatched")
    cid = e.say("maint", "/bisect cancel B1")
    wait_for(lambda: bisections(e)[0].state == "cancelled", 60, "cancelled")
    wait_for(lambda: e.screens()[0].state == "failed", 60, "the step's run reported")
    wait_for(lambda: "cancelled by maint" in status_comment(e, "B1"), 30, "the status")
    assert e.screens()[0].conclusion == "cancelled"
    assert "Bisection B1 cancelled." in e.reply_to(cid)
    body = status_comment(e, "B1")
    assert "### ⏹️ Bisection B1: cancelled" in body and "cancelled by maint" in body
    assert len(e.screens()) == 1  # no further step


@pytest.mark.parametrize("service", [BUDGET], indirect=True)
def test_compare_two_revisions(service: Env, tmp_path: Path) -> None:  # noqa: F811
    e = service
    shas = engine_range(e.double, 2)
    slow_from(e, tmp_path, shas, 2)
    fast, slow = shas[1], shas[2]
    cid = e.say("maint", f"/compare {fast[:12]} {slow[:12]} --track 1s-lossless")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 120,
             "the comparison reported")
    s1 = e.screen(1)
    assert (s1.state, s1.control_revision, s1.candidate_revision) == (
        "finished", fast[:12], slow[:12]), s1.detail
    assert s1.candidate == f"rev-{slow[:12]}"
    assert "Comparing engine revision" in e.reply_to(cid)
    result = next(x for x in e.comments() if "campaign-bot:screen-result screen=S1" in x)
    m = re.search(r"Ratio candidate/control \(Hodges-Lehmann over session medians\): "
                  r"\*\*([0-9.]+)\*\*", result)
    assert m and float(m.group(1)) > 2, result
    assert "REVISION_MISMATCH" not in result and "CANDIDATE_UNKNOWN" not in result
    # the signed receipts name each arm's revision
    receipts = receipts_of(e.double, s1.run_id)
    assert [(r["arm"], r["engine_revision"]) for r in receipts] == [
        ("control", fast[:12]), ("candidate", slow[:12])]
    assert f"--control-revision {fast[:12]} --candidate-revision {slow[:12]}" in result
    assert f"refs/pull/{PR}/head" in result and f"{REPO}.git" in result
    # the evidence commit's push comes back to the bot before the service stops
    wait_for(lambda: "pull_request.synchronize" in e.runner.delivered, 60, "the push hook")
