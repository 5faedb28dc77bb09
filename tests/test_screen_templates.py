"""The status and result comments render exactly (StrictUndefined; mentions neutralised)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.features.screen.queue import QueuePlace, Screen
from bot.features.screen.report import Decision, build_result
from bot.render import marker, render
from evidence.models import Lifecycle, Receipt, RequestRecord, WorkerExit

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
H = "1" * 64


def receipt(slot: int, arm: str, wall: float | None, clean: bool = True) -> Receipt:
    workers = [WorkerExit(rank=i, pid=100 + i, state="exited", exit_code=0) for i in range(2)]
    lc = Lifecycle(
        workers=workers,
        server_exit_code=0,
        devices_idle_before={"idle": True},
        devices_idle_after={"idle": True},
        terminate_actions=0 if clean else 4,
        kill_actions=0 if clean else 4,
    )
    reqs = [RequestRecord(index=0, kind="warmup", http_status=200, client_wall_s=999.0)]
    if wall is None:
        reqs.append(RequestRecord(index=1, kind="measured", http_status=500, error="HTTP 500"))
    else:
        reqs.append(RequestRecord(index=1, kind="measured", http_status=200, client_wall_s=wall))
    return Receipt(
        screen_id="S1", session_id=f"s{slot}", campaign="h3-ref2va", track="5s-lossless",
        arm=arm, candidate="cache-dit" if arm == "candidate" else None, slot=slot,
        order="ABBA", engine_revision="abc", config_digest=H, started_at=T0,
        requests=reqs, lifecycle=lc,
    )


def test_status_comment_queued() -> None:
    s = Screen(
        id=3, request_id="r", repo="o/r", pr_number=5, campaign="h3-ref2va",
        campaign_path="c", kind="candidate", candidate="cache-dit", track="5s-lossless",
        session_order="ABBAAB", pool="pool-4", device_count=4, head_sha="a" * 40,
        from_fork=False, requested_by="amy", requested_at=T0, state="queued",
        estimate_wall_s=7200, estimate_device_s=28800,
    )
    s.dispatched_at = s.runner_name = s.completed_at = s.charged_device_s = None
    s.cancelled_by = s.verdict = s.detail = s.run_url = s.started_at = None
    body = render("screen_status.md.j2", marker_text=marker("screen-status", screen="S3"), s=s,
                  place=QueuePlace(2, 1, T0 + timedelta(hours=3)))
    assert body == (
        "<!-- campaign-bot:screen-status screen=S3 -->\n"
        "### ⏳ Screen S3: `cache-dit` on `5s-lossless`: queued\n\n"
        "| | |\n|---|---|\n"
        "| campaign | `h3-ref2va` |\n"
        "| requested by | `amy` at 2026-12-01 10:00 UTC |\n"
        "| head | `aaaaaaaaaaaa` |\n"
        "| sessions | 6 (`ABBAAB`, A = control, B = candidate) |\n"
        "| pool | `pool-4` (4 devices) |\n"
        "| estimate | 2.00 wall-hours, 8.00 device-hours |\n"
        "| queue | position 2 in `pool-4` (1 ahead), estimated start 2026-12-01 13:00 UTC |\n\n"
        "Cancel with `/screen cancel S3`.\n"
    )


def test_result_comment_has_sessions_ratio_chart_and_budget() -> None:
    rs = [receipt(0, "control", 100.0), receipt(1, "candidate", 80.0),
          receipt(2, "candidate", None), receipt(3, "control", 110.0, clean=False)]
    view = build_result(
        label="S1", name="cache-dit", kind="candidate", campaign="h3-ref2va",
        track="5s-lossless", quality_mode="lossless", target_reduction=0.3, head_sha="b" * 40,
        order="ABBA", run_url="http://x/run/9", integrity="Manifests: 12 files, signature ok.",
        receipts=rs, media=[],
        decision=Decision("INCONCLUSIVE", ["only 1 qualified session per arm @amy"],
                          ratio=0.8, ratio_low=0.7, ratio_high=0.9),
        charged_wall_s=3600, device_count=4, device_left_h=60.0, wall_left_h=15.0,
        directions_left=1,
    )
    assert [a.samples for a in view.arms] == [[100.0], [80.0]]
    body = render("screen_result.md.j2", marker_text=marker("screen-result", screen="S1"),
                  r=view)
    assert "**Verdict: INCONCLUSIVE**\n\n- only 1 qualified session per arm @\u200bamy" in body
    assert "| 1 | control | `s0` | 100.000 | 200 | clean |" in body
    assert "| 3 | candidate | `s2` | failed | 500 | clean |" in body
    assert ("| 4 | control | `s3` | 110.000 | 200 | FAILED: 4 terminate action(s); "
            "4 kill action(s) |") in body
    assert ("Ratio candidate/control (Hodges-Lehmann over session medians): **0.8000** "
            "(20.0 % lower latency), exact bounds [0.7000, 0.9000]; target ≤ 0.7000 "
            "(30 % lower).") in body
    assert '  x-axis ["1A", "2B", "3B", "4A"]' in body
    assert "  bar [100.000, 0, 0, 110.000]\n  bar [0, 80.000, 0, 0]" in body
    assert "  y-axis \"seconds\" 0 --> 122" in body
    assert "xychart-beta" in body and 'plotColorPalette: "#1f77b4, #ff7f0e"' in body
    assert ("Device time charged: **4.00 device-hours** (1.00 wall-hours on 4 devices). "
            "Budget left: 60.00 device-hours, 15.00 wall-hours, 1 candidate directions.") in body
    assert "1 of 4 sessions do not qualify:\n- session 4 (control): 4 terminate" in body


