"""Follow-up and confirmation screens end to end: ``campaign-bot serve`` as a subprocess, the
GitHub double as GitHub and as the self-hosted runner (``campaign-bot screen`` against the
stand-in model server, signed bundles), exactly as ``tests/test_screen_service_e2e.py``.

The campaign declares a group-sequential design (``[protocol.sequential]``: two looks,
O'Brien-Fleming spending up to 6 sessions per arm) and a candidate ``fast`` whose stand-in
generation takes a fifth of control's.  A first screen of 3 vs 3 sessions cannot decide at
its alpha share: INCONCLUSIVE, with a projected follow-up; ``/screen continue S1`` runs the
projected follow-up (the runner marks its receipts look 2 of S1's series, signed), and the
series decides SUPPORTED (provisional) at look 2 within the budget; the header lists the
candidate as awaiting confirmation; ``/screen confirm fast sessions=6`` runs the
confirmation screen against the original control and turns it into SUPPORTED (confirmed).
``campaign-bot check`` on the committed evidence gives the same verdict offline.  With
``auto_followup = true`` the follow-up is queued without a command.  Then the
refusals: continuing a decided series, a screen of another PR, an unknown screen; and a
campaign without a declared design, where ``/screen continue`` is refused and nothing runs.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_screen_service_e2e import (
    CAMP_DIR,
    ISSUE,
    PR,
    REPO,
    Env,
    cli,
    keys,  # noqa: F401 - the module-scoped key pair fixture
    start_service,
    stop_service,
    tree_at,
)
from webhook_helpers import wait_for

pytestmark = pytest.mark.slow

SEQUENTIAL = {"looks": 2, "max_sessions_per_arm": 6, "spending": "obrien-fleming"}


def fast_candidate(sequential: bool, auto: bool = False) -> Any:
    """The campaign of these tests: control generates for 1.0 s, candidate ``fast`` for
    0.1 s (the stand-in's ``--gen-seconds``; the last flag wins): far below the 0.70 target
    even with the busy machine's noise on top."""

    def update(scope: dict[str, Any]) -> None:
        scope["serving"]["flags"].append("--gen-seconds=1.0")
        scope["candidates"].append({"name": "fast", "description": "five times faster",
                                    "add_flags": ["--gen-seconds=0.1"]})
        if sequential:
            scope["protocol"]["sequential"] = dict(SEQUENTIAL)
        if auto:
            scope["protocol"]["auto_followup"] = True
    return update


@pytest.fixture
def sequential_service(github_double: Any, tmp_path: Path,
                       keys: tuple[Path, Path]) -> Iterator[Env]:  # noqa: F811
    env = start_service(github_double, tmp_path, keys,
                        {"wall_hours": 20.0, "device_hours": 40.0}, issue=ISSUE,
                        scope_update=fast_candidate(True))
    try:
        yield env
    finally:
        stop_service(env, github_double)


@pytest.fixture
def auto_service(github_double: Any, tmp_path: Path,
                 keys: tuple[Path, Path]) -> Iterator[Env]:  # noqa: F811
    env = start_service(github_double, tmp_path, keys,
                        {"wall_hours": 20.0, "device_hours": 40.0},
                        scope_update=fast_candidate(True, auto=True))
    try:
        yield env
    finally:
        stop_service(env, github_double)


@pytest.fixture
def fixed_service(github_double: Any, tmp_path: Path,
                  keys: tuple[Path, Path]) -> Iterator[Env]:  # noqa: F811
    env = start_service(github_double, tmp_path, keys,
                        {"wall_hours": 20.0, "device_hours": 40.0},
                        scope_update=fast_candidate(False))
    try:
        yield env
    finally:
        stop_service(env, github_double)


def _done(e: Env, n: int, timeout: float = 180) -> Any:
    wait_for(lambda: len(e.screens()) >= n and e.screen(n).state in ("finished", "failed"),
             timeout, f"S{n} reported")
    s = e.screen(n)
    assert s.state == "finished", (s.detail, s.summary)
    return s


def _result(e: Env, label: str) -> str:
    return next(b for b in e.comments() if f"campaign-bot:screen-result screen={label}" in b)


def _receipts(e: Env, s: Any) -> list[dict[str, Any]]:
    run = e.double.repo(REPO).runs[s.run_id]
    from test_screen_service_e2e import receipts_of
    return receipts_of(e.double, run["id"])


def test_underpowered_screen_continued_to_supported_then_confirmed(
        sequential_service: Env, tmp_path: Path) -> None:
    e = sequential_service
    d = e.double
    e.say("maint", "/campaign refresh", number=ISSUE)
    wait_for(lambda: "campaign-bot:header" in d.repo(REPO).issues[ISSUE]["body"], 30,
             "the first status header")
    # look 1: 3 vs 3 cannot reach its O'Brien-Fleming share (0.0056 at 3 of 6 sessions per
    # arm; the best 3 vs 3 outcome has p = 1/20)
    e.say("maint", "/screen candidate fast sessions=6")
    s1 = _done(e, 1)
    assert s1.verdict == "INCONCLUSIVE"
    proj = s1.summary["followup"]
    k = proj["sessions_per_arm"]
    assert proj["look"] == 2 and 1 <= k <= 3 and proj["probability"] >= 0.8, proj
    r1 = _result(e, "S1")
    # reasons are escaped for Markdown (`\_`, `\``)
    assert "UNDERPOWERED: 3 vs 3 sessions can never reach one-sided alpha 0.005575" in r1
    assert "SEQUENTIAL\\_LOOK: look 1 of at most 2 (obrien-fleming spending" in r1
    assert re.search(rf"FOLLOW\\_UP: {k} more session\(s\) per arm \(look 2: a follow-up "
                     rf"screen of {2 * k} sessions, about \d+\.\d\d device-hours\) would decide "
                     r"with probability \d+%", r1), r1
    assert "\\`/screen continue S1\\` queues it" in r1
    first_id = _receipts(e, s1)[0]["screen_id"]
    assert all(r.get("look") is None for r in _receipts(e, s1))
    budget_before = s1.charged_device_s
    # look 2, as projected: 2 sessions, the frozen order, a server per session
    e.say("maint", "/screen continue S1")
    s2 = _done(e, 2)
    run2 = d.repo(REPO).runs[s2.run_id]
    assert run2["inputs"]["follow_up"] == f"2:{first_id}"
    assert run2["inputs"]["sessions"] == str(2 * k) and s2.session_order == "AB" * k
    assert run2["inputs"]["scope_blob"] == d.repo(REPO).runs[s1.run_id]["inputs"]["scope_blob"]
    rec2 = _receipts(e, s2)
    assert [(r["arm"], r["look"], r["continues"]) for r in rec2] == [
        ("control", 2, first_id), ("candidate", 2, first_id)] * k
    assert len({r["session_id"] for r in rec2}) == 2 * k  # one server session each
    assert s2.verdict == "SUPPORTED" and s2.summary["confirmation"] == "provisional"
    r2 = _result(e, "S2")
    assert "**Verdict: SUPPORTED (provisional)**" in r2
    assert "SEQUENTIAL\\_LOOK: look 2 of at most 2" in r2
    assert ("\\`/screen confirm fast track=1s-lossless\\` queues the confirmation screen"
            in r2)
    # within the budget: both looks charged, far below the ceiling
    assert budget_before is not None and s2.charged_device_s is not None
    assert (budget_before + s2.charged_device_s) / 3600 < 40.0
    # a decided series is not continued
    cid = e.say("maint", "/screen continue S2")
    wait_for(lambda: any(f"reply comment={cid} " in b for b in e.comments()), 30, "refusal")
    assert "S2 says SUPPORTED: the series has decided" in e.reply_to(cid)
    # the header lists the candidate as awaiting its confirmation
    wait_for(lambda: "**Awaiting confirmation:** fast on 1s-lossless" in
             d.repo(REPO).issues[ISSUE]["body"], 90, "the header's awaiting line")
    # the confirmation screen against the original control: SUPPORTED (confirmed)
    e.say("maint", "/screen confirm fast sessions=6")
    s3 = _done(e, 3)
    assert s3.summary["plan"] == {"purpose": "confirm"}
    assert all(r.get("look") is None for r in _receipts(e, s3))
    assert s3.verdict == "SUPPORTED" and s3.summary["confirmation"] == "confirmed", \
        s3.summary["reasons"]
    r3 = _result(e, "S3")
    assert "**Verdict: SUPPORTED (confirmed)**" in r3
    assert "confirmation screen" in r3 and "S1" not in r3.split("CONFIRMATION:")[0][-5:]
    wait_for(lambda: "Awaiting confirmation" not in d.repo(REPO).issues[ISSUE]["body"]
             and "SUPPORTED (confirmed)" in d.repo(REPO).issues[ISSUE]["body"], 90,
             "the header shows the confirmed verdict")
    # offline: check on the committed evidence gives the same verdict and the looks
    head = d.repo(REPO).pulls[PR].head_sha
    camp = tmp_path / "offline"
    for sub in ("S1", "S2", "S3"):
        for name, data in tree_at(d, head, f"{CAMP_DIR}/screens/{sub}").items():
            dst = camp / "screens" / sub / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
    (camp / "campaign.toml").write_bytes(d.repo(REPO).trees[head][f"{CAMP_DIR}/campaign.toml"])
    for f in ("ref.mp4", "ref.wav", "trusted-keys.pem"):
        (camp / f).write_bytes(d.repo(REPO).trees[head][f"{CAMP_DIR}/{f}"])
    res = cli("check", str(camp), "--json", "--trusted-keys", str(camp / "trusted-keys.pem"))
    doc = json.loads(res.stdout)
    v = next(x for x in doc["verdicts"] if x["candidate"] == "fast")
    assert (v["verdict"], v["confirmation"]) == ("SUPPORTED", "confirmed")
    assert [lk["look"] for lk in v["looks"]] == [1, 2] and v["series"][0] == first_id
    assert v["alpha_spent"] > 0 and v["alpha_level"] <= 0.05
    shutil.rmtree(camp)


def test_continue_refused_without_a_declared_design(fixed_service: Env) -> None:
    e = fixed_service
    e.say("maint", "/screen candidate fast sessions=2")
    s1 = _done(e, 1)
    assert s1.summary.get("followup") is None
    cid = e.say("maint", "/screen continue S1")
    wait_for(lambda: any(f"reply comment={cid} " in b for b in e.comments()), 30, "refusal")
    assert r"declares no \[protocol.sequential\] design" in e.reply_to(cid)
    cid = e.say("maint", "/screen continue S9")
    wait_for(lambda: any(f"reply comment={cid} " in b for b in e.comments()), 30, "refusal")
    assert "no screen S9 on this PR" in e.reply_to(cid)
    cid = e.say("eve", "/screen continue S1")  # read permission only
    wait_for(lambda: any(f"reply comment={cid} " in b for b in e.comments()), 30, "refusal")
    assert "I did not run `/screen continue S1`" in e.reply_to(cid)
    assert len(e.runner.runs) == 1 and len(e.screens()) == 1


def test_auto_followup_queues_the_projected_look_by_itself(auto_service: Env) -> None:
    """``auto_followup = true``: the INCONCLUSIVE first look queues its projected follow-up
    without a command, as its requester, and the series decides."""
    e = auto_service
    e.say("maint", "/screen candidate fast sessions=6")
    s1 = _done(e, 1)
    assert s1.verdict == "INCONCLUSIVE" and s1.summary["followup"]["look"] == 2
    s2 = _done(e, 2)
    k = s1.summary["followup"]["sessions_per_arm"]
    assert (s2.requested_by, s2.authorised_as, s2.source_comment_id) == (
        s1.requested_by, s1.authorised_as, None)
    assert s2.summary["plan"]["look"] == 2 and s2.session_order == "AB" * k
    assert s2.verdict == "SUPPORTED" and s2.summary["confirmation"] == "provisional"
    # a decided series queues nothing more
    time.sleep(2)
    assert len(e.screens()) == 2 and len(e.runner.runs) == 2

