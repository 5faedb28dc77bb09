"""Timing of the live campaign pages of ``campaign-bot serve`` (``/c/OWNER/REPO/CAMPAIGN/``):
a synthetic campaign of 200 screens x 6 sessions (1200 receipts, as
``benchmarks/report_render.py``) served by the real app under uvicorn, requested over HTTP
with httpx, one request at a time.  Run with

    .venv/bin/python benchmarks/live_pages.py [--screens 200] [--requests 40]

Target (not asserted): warm p95 of every live page and JSON API answer under 200 ms on a
2-core machine.  The
evidence comes from an injected ``load_campaign_dir`` returning the folder (what the GitHub
loader returns once a tree is cached, and what a git mirror returns); the bot's database is
SQLite with the campaign's ledger and 20 queued or running screens.  Rows: the first request
(builds the site from the evidence), then warm requests per page kind (p50, p95, max), and
the overview of a private repository for a signed-in person (session cookie decrypted, the
access answer from its cache; GitHub's ``GET /repos`` answered in-process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi import FastAPI
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _report_campaign import TRACKS, write_campaign  # noqa: E402
from webhook_helpers import threaded_server  # noqa: E402

from bot import database  # noqa: E402
from bot.features.dashboard import live, signin  # noqa: E402
from bot.features.dashboard.api import API_PREFIX, Api  # noqa: E402
from bot.features.dashboard.views import slug  # noqa: E402
from bot.features.screen.queue import Screen  # noqa: E402

TARGET_S = 0.200
REPO, CAMPAIGN = "org/campaigns", "h3-ref2va-4x910b1"


def _screens(n: int) -> list[Screen]:
    now = datetime.now(UTC)
    out = []
    for i in range(n):
        state = "running" if i < 2 else "queued"
        t = now - timedelta(hours=3 - i * 0.1)
        out.append(Screen(
            request_id=uuid.uuid4().hex, repo=REPO, pr_number=300 + i, campaign=CAMPAIGN,
            campaign_path="campaigns/x", kind="candidate", candidate=f"c{i}",
            track="5s-lossless", session_order="ABBAAB", pool=f"pool-{i % 2}",
            head_sha="a" * 40, requested_by="amy", requested_at=t, state=state,
            estimate_device_s=4 * 3600.0, estimate_wall_s=3600.0,
            dispatched_at=t if state == "running" else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--screens", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--requests", type=int, default=40, help="warm requests per page kind")
    a = ap.parse_args()
    console = Console()
    tmp = Path(tempfile.mkdtemp(prefix="live-bench-"))
    plan = write_campaign(tmp / "campaign", a.screens, a.sessions)
    engine = database.make_engine(f"sqlite:///{tmp / 'bot.sqlite3'}")
    database.migrate(engine)
    with Session(engine) as db:
        db.add_all(_screens(20))
        db.commit()
    app = FastAPI()
    github = httpx.Client(transport=httpx.MockTransport(
        lambda req: httpx.Response(200, json={"permissions": {"pull": True}})))
    sign = signin.SignIn(signin.SignInConfig(
        client_id="Iv1.bench", client_secret="bench", github_url="https://github.com",
        api_url="https://api.github.com", public_url="http://127.0.0.1", secret=b"bench"),
        http=github)
    dashboard = live.LiveDashboard(lambda: engine, lambda o, r, c: plan.root,
                                   lambda o, r: r != "campaigns", signin=sign)
    app.include_router(dashboard.router())
    # the API as serve mounts it, with its rate limit raised past this benchmark's requests
    # (the limiter still counts every one of them)
    app.include_router(Api(dashboard, rate_per_minute=1_000_000).router())
    cookies = {signin.SESSION_COOKIE: sign.session_value("ghu_bench", 3600)}
    private_base = f"{live.PREFIX}/org/private-campaigns/{CAMPAIGN}/"
    base = f"{live.PREFIX}/{REPO}/{CAMPAIGN}/"
    API = f"{API_PREFIX}/repos/{REPO}/campaigns/{CAMPAIGN}"  # noqa: N806
    kinds = {
        "overview": ["index.html"],
        "screen": [f"screen-{slug(s)}.html" for s in plan.screens[:: max(1, a.screens // 20)]],
        "pool": [f"pool-{slug(p)}.html" for p in sorted({"ascend910b1-x4"})],
        "budget": ["budget.html"],
        "findings": ["findings.html"],
        "findings, filtered (form's query, never kept)": ["findings.html?level=P1&level=P2"],
        "queue": ["queue.html"],
        "track": [f"track-{slug(t)}.html" for t in TRACKS],
        "API: campaign status": [API],
        "API: screens": [API + "/screens"],
        "API: one screen": [f"{API}/screens/{s}" for s in plan.screens[:: max(1, a.screens // 20)]],
        "API: verdicts": [API + "/verdicts"],
        "API: queue (read for every request)": [API + "/queue"],
        "API: budget": [API + "/budget"],
        "API: findings, level P1": [API + "/findings?level=P1"],
    }
    console.print(f"synthetic campaign: {len(plan.screens)} screens, {plan.receipts} receipts; "
                  f"{os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}")
    t = Table(title=f"live pages: {a.screens} screens x {a.sessions} sessions, "
                    f"{a.requests} warm requests per kind (target p95 < {TARGET_S * 1000:.0f} "
                    "ms)", title_justify="left")
    for col in ("page", "p50 ms", "p95 ms", "max ms", "bytes", "target"):
        t.add_column(col, justify="left" if col in ("page", "target") else "right")
    with threaded_server(app) as url, httpx.Client(base_url=url, timeout=120) as c:
        t0 = time.perf_counter()
        r = c.get(base + "index.html")
        r.raise_for_status()
        t.add_row("first request (builds the site)", f"{(time.perf_counter() - t0) * 1e3:.0f}",
                  "", "", str(len(r.content)), "")
        kinds["overview, private repository, signed in"] = ["index.html"]
        # its own site (another repository): built once before the warm requests
        c.get(private_base + "index.html", cookies=cookies).raise_for_status()
        for kind, names in kinds.items():
            times: list[float] = []
            size = 0
            private = kind.startswith("overview, private")
            for i in range(a.requests):
                name = names[i % len(names)]
                t0 = time.perf_counter()
                r = (c.get(private_base + name, cookies=cookies) if private
                     else c.get(name if name.startswith("/") else base + name))
                times.append(time.perf_counter() - t0)
                r.raise_for_status()
                size = len(r.content)
            times.sort()
            p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
            t.add_row(kind, f"{statistics.median(times) * 1e3:.1f}", f"{p95 * 1e3:.1f}",
                      f"{times[-1] * 1e3:.1f}", str(size),
                      "met" if p95 < TARGET_S else "MISSED")
    console.print(t)
    engine.dispose()


if __name__ == "__main__":
    main()
