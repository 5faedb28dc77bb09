"""The watchdog: jobs registered from one list under stable ids; lost dispatches and runs
that never reported are found, asked of GitHub, and reported instead of waited on forever."""

from __future__ import annotations

from datetime import timedelta

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from test_screen_flow import REPO, comments, env, say  # noqa: F401 - env is a fixture

from bot.features.screen import jobs
from bot.features.screen.queue import Screen
from bot.features.screen.results import on_workflow_job
from bot.features.screen.watchdog import watchdog_pass
from bot.scheduler import add_jobs


def test_jobs_register_once_under_stable_ids(tmp_path) -> None:
    from bot.database import make_engine
    from bot.features.screen.runtime import Runtime

    rt = Runtime(make_engine(f"sqlite:///{tmp_path / 'x.sqlite3'}"))
    sched = BackgroundScheduler(timezone="UTC")
    assert add_jobs(sched, jobs.jobs(rt)) == ["screen-watchdog", "screen-status-flush"]
    add_jobs(sched, jobs.jobs(rt, watchdog_interval_s=5))
    registered = {j.id: j for j in sched.get_jobs()}
    assert sorted(registered) == ["screen-status-flush", "screen-watchdog"]
    assert [j.id for j in jobs.jobs(rt)] == ["screen-watchdog", "screen-status-flush"]
    assert registered["screen-watchdog"].trigger.interval == timedelta(seconds=5)
    assert registered["screen-status-flush"].trigger.interval == timedelta(seconds=5)


def test_dispatch_without_a_runner_times_out_and_the_next_screen_goes(env) -> None:  # noqa: F811
    d, port, rt, clock = env
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    say(rt, port, "maint", "/screen control track=5s-lossless", cid=2)
    run1 = next(iter(d.repo(REPO).runs.values()))
    clock.t += timedelta(minutes=29)
    assert watchdog_pass(rt) == []  # not overdue yet: nothing asked of GitHub
    clock.t += timedelta(minutes=2)
    actions = watchdog_pass(rt)
    assert actions == ["S1: no runner started the job within 30 min",
                       "pool pool-4x910b1: next screen dispatched"]
    assert run1["cancel_requested"] is True
    with rt.db() as db:
        s1, s2 = db.get(Screen, 1), db.get(Screen, 2)
        assert (s1.state, s1.conclusion, s1.charged_device_s) == ("failed", "timed_out", 0.0)
        assert s2.state == "dispatched"
    checks = sorted(d.repo(REPO).check_runs.values(), key=lambda c: c["id"])
    assert [(c["name"], c["conclusion"]) for c in checks] == [
        ("campaign-bot/screen: cache-dit", "timed_out"), ("campaign-bot/screen: control", None)]
    assert ("Watchdog: no runner started the job within 30 min; the run was cancelled and "
            "reported here.") in comments(d)[0]
    assert "### ❌ Screen S1: `cache-dit` on `5s-lossless`: failed" in comments(d)[0]


def test_lost_completion_webhook_is_recovered_from_github(env) -> None:  # noqa: F811
    d, port, rt, clock = env
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    run = next(iter(d.repo(REPO).runs.values()))

    on_workflow_job(rt, port, {"action": "in_progress", "repository": {"full_name": REPO},
                               "workflow_job": {"run_id": run["id"], "runner_name": "r1",
                                                "started_at": "2026-12-01T10:00:00Z"}})
    d.set_run(REPO, run["id"], status="completed", conclusion="failure",
              run_started_at="2026-12-01T10:00:00Z", updated_at="2026-12-01T11:00:00Z")
    # estimate 3.87 h: silent for 2 x 3.87 h + 1 h = 8.73 h before the watchdog asks
    clock.t += timedelta(hours=8)
    assert watchdog_pass(rt) == []
    clock.t += timedelta(hours=1)
    assert watchdog_pass(rt) == ["S1: completion recovered from GitHub (failure)"]
    with rt.db() as db:
        s1 = db.get(Screen, 1)
        assert (s1.state, s1.verdict, s1.charged_device_s) == ("failed", "NOT COUNTED",
                                                                4 * 3600.0)
    result = comments(d)[-1]
    assert ("Screen S1 (cache-dit on 5s-lossless) ended failure: NOT COUNTED. the workflow run "
            "ended failure: charged, never counted as a sample; the run left no bundle "
            "artifact (0 artifacts). Charged 4.00 device-hours.") in result


def test_silent_run_is_cancelled_charged_and_reported(env) -> None:  # noqa: F811
    d, port, rt, clock = env
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    run = next(iter(d.repo(REPO).runs.values()))

    on_workflow_job(rt, port, {"action": "in_progress", "repository": {"full_name": REPO},
                               "workflow_job": {"run_id": run["id"], "runner_name": "r1",
                                                "started_at": "2026-12-01T10:00:00Z"}})
    clock.t += timedelta(hours=9)
    assert watchdog_pass(rt) == [
        "S1: the run did not report within 9.0 h (estimate 3.9 h)"]
    assert run["cancel_requested"] is True
    with rt.db() as db:
        s1 = db.get(Screen, 1)
        assert (s1.state, s1.conclusion) == ("failed", "timed_out")
        assert s1.charged_device_s == 9 * 3600.0 * 4


def test_dispatch_answered_5xx_holds_the_pool_until_the_run_is_found(env) -> None:  # noqa: F811
    """GitHub answers every dispatch attempt 502 and lists no run yet: the screen keeps its
    pool (a run may exist); when the run shows up, the watchdog finds it by request id."""
    from dataclasses import replace

    d, port, rt, clock = env
    rt.options = replace(rt.options, write_backoff_s=0.01)
    d.inject("POST", f"/repos/{REPO}/actions/workflows/screen.yml/dispatches", 502, times=4)
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    say(rt, port, "maint", "/screen control track=5s-lossless", cid=2)
    assert not d.repo(REPO).runs and not d.repo(REPO).check_runs
    with rt.db() as db:
        s1, s2 = db.get(Screen, 1), db.get(Screen, 2)
        assert (s1.state, s1.run_id, s2.state) == ("dispatched", None, "queued")
        assert s1.detail.startswith("GitHub answered the dispatch with an error (")
        rid, head = s1.request_id, s1.head_sha
    assert "waiting for a run named with request" in comments(d)[0]
    # a run of another workflow, or of this one on another branch, titled alike: not it
    d.add_workflow(REPO, "ci.yml")
    d.add_run(REPO, "ci.yml", head, status="queued", conclusion=None, display_title=rid)
    assert watchdog_pass(rt) == []
    run = d.add_run(REPO, "screen.yml", head, status="queued", conclusion=None,
                    display_title=f"screen cache-dit on 5s-lossless (PR #5, request {rid})")
    assert watchdog_pass(rt) == [f"S1: run {run['id']} found by its request id"]
    with rt.db() as db:
        s1 = db.get(Screen, 1)
        assert (s1.state, s1.run_id, s1.detail) == ("dispatched", run["id"], None)
        assert s1.check_run_id is not None
    (check,) = d.repo(REPO).check_runs.values()
    assert (check["external_id"], check["status"]) == (rid, "in_progress")


@pytest.mark.parametrize("commit_bundles", [False, True])
def test_recovered_completion_obeys_the_repository_screen_settings(
        env, tmp_path, commit_bundles: bool) -> None:  # noqa: F811
    """A completion whose webhook was lost is processed as the webhook would have been:
    under the repository's ``[screen]`` settings.  With ``commit_bundles = false`` the
    verified bundle stays in its artifact (nothing pushed); with another ``evidence_path``
    it lands there."""
    from bot.github.git import GitMirrors
    from runners.signer import generate_key, load_private_key, sign_bundle, write_bag

    d, port, rt, clock = env
    key = tmp_path / "runner.key"
    generate_key(key)
    d.set_branch(REPO, "main", {
        "campaigns/h3/trusted-keys.pem": key.with_name("runner.key.pub").read_bytes(),
        ".github/campaign-bot.toml": "[campaigns]\npaths = [\"campaigns/h3\"]\n[screen]\n"
        f"commit_bundles = {str(commit_bundles).lower()}\nevidence_path = \"proof\"\n",
    }, parent="main")
    rt.git = GitMirrors(tmp_path / "mirrors")
    say(rt, port, "maint", "/screen candidate cache-dit track=5s-lossless", cid=1)
    run = next(iter(d.repo(REPO).runs.values()))
    on_workflow_job(rt, port, {"action": "in_progress", "repository": {"full_name": REPO},
                               "workflow_job": {"run_id": run["id"], "runner_name": "r1",
                                                "started_at": "2026-12-01T10:00:00Z"}})
    # the runner's bundle: signed, with the frozen scope the dispatch pinned (scope_blob)
    bundle = tmp_path / "bundle"
    (bundle / "data" / "outputs").mkdir(parents=True)
    (bundle / "data" / "outputs" / "candidate.mp4").write_bytes(b"video bytes")
    write_bag(bundle, {"Bag-Software-Agent": "campaign-bot test"})
    sign_bundle(bundle, load_private_key(key), {
        "screen": "S1", "scope_frozen": True, "scope_blob": run["inputs"]["scope_blob"],
        "candidate": "cache-dit"})
    d.add_artifact(REPO, run["id"], f"screen-bundle-{run['inputs']['request_id']}",
                   {p.relative_to(bundle).as_posix(): p.read_bytes()
                    for p in bundle.rglob("*") if p.is_file()})
    d.set_run(REPO, run["id"], status="completed", conclusion="success",
              run_started_at="2026-12-01T10:00:00Z", updated_at="2026-12-01T11:00:00Z")
    head0 = d.repo(REPO).pulls[5].head_sha
    clock.t += timedelta(hours=9)
    assert watchdog_pass(rt) == ["S1: completion recovered from GitHub (success)"]
    with rt.db() as db:
        s1 = db.get(Screen, 1)
        assert (s1.state, s1.verdict) == ("finished", "INCONCLUSIVE")
        evidence = s1.summary["evidence"]
    head = d.repo(REPO).pulls[5].head_sha
    if commit_bundles:
        assert evidence["state"] == "committed" and head != head0
        assert "proof/S1/attestation.dsse.json" in {
            p.removeprefix("campaigns/h3/") for p in d.repo(REPO).trees[head]}
    else:
        assert evidence["state"] == "off" and head == head0
        assert "Evidence committed" not in comments(d)[-1]
