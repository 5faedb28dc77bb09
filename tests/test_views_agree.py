"""One computation, four views: ``campaign-bot check``, the status header, the static report
and the live pages show the same qualifying-session counts and the same verdicts, for the
example campaign and for campaigns hypothesis generates (lifecycles that fail in each way the
rule knows, failed requests, missing idle checks, receipts repeated, tracks mixed)."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _report_campaign import COMMIT, EXAMPLE_SCOPE, INPUTS, sha
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot import database
from bot.features.dashboard import live, pages
from bot.features.dashboard.model import build_site
from bot.features.header.render import render_header
from evidence.bundle import load_campaign
from evidence.check import check_campaign
from evidence.header import EvidenceRef, build_header, source_from_campaign

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h3-ref2va-4x910b1"
CAMPAIGN = "h3-ref2va-4x910b1"
TRACKS = ("5s-lossless", "15s-lossless", "5s-lossy")
T0 = datetime(2026, 11, 4, 8, 0, tzinfo=UTC)


class LiveSite:
    """The live pages of ``campaign-bot serve`` (FastAPI test client) over a folder loader."""

    def __init__(self, tmp: Path) -> None:
        from fastapi import FastAPI
        from fastapi.testclient import TestClient

        self.engine = database.make_engine(f"sqlite:///{tmp / 'bot.sqlite3'}")
        database.migrate(self.engine)
        self.root = EXAMPLE
        app = FastAPI()
        live.add_routes(app, live.LiveDashboard(lambda: self.engine, lambda o, r, c: self.root,
                                                lambda o, r: False))
        self.client = TestClient(app)

    def page(self, root: Path, name: str) -> str:
        self.root = root
        res = self.client.get(f"{live.PREFIX}/o/pub/{CAMPAIGN}/{name}")
        assert res.status_code == 200, (name, res.status_code)
        return res.text


@pytest.fixture(scope="module")
def live_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    s = LiveSite(tmp_path_factory.mktemp("live"))
    yield s
    s.engine.dispose()


def _figures(root: Path, live_site: LiveSite) -> None:
    """Compute every view of the campaign at ``root`` and compare each figure."""
    rep = check_campaign(root)
    loaded = load_campaign(root)
    assert loaded.scope is not None
    scope = loaded.scope.model
    src = source_from_campaign(loaded, sha="0" * 40)
    content = build_header(scope, [src], EvidenceRef("0" * 40, T0, None))
    header_md = render_header(content)
    site = build_site(root)
    links = pages.Links()

    # check: qualifying sessions per (screen, arm) and per track's control arm
    check_ctrl = Counter()
    check_screen: Counter[str] = Counter()
    for a in rep.arms:
        check_screen[a.screen_id] += a.sessions_clean
        if a.arm == "control":
            check_ctrl[a.track] += a.sessions_clean
    index_html = pages.render_index(site, links)
    live_index = live_site.page(root, "index.html")
    for t in scope.tracks:
        n = check_ctrl[t.id]
        # status header: the board's baseline cell, in the data and in the rendered markdown
        row = next(b for b in content.board if b.track == t.id)
        assert row.baseline.startswith(f"{n} clean control session(s)"), (t.id, row.baseline)
        assert f"{n} clean control session(s)" in header_md
        # static report and live pages: the index's baseline cell of that track
        trow = next(r for r in site.tracks if r.track.id == t.id)
        assert trow.baseline_sessions == n
        tid = re.escape(t.id)
        for html in (index_html, live_index):
            # the board row's baseline cell, and the track's card where the page has one
            cell = re.search(rf"<th scope=\"row\">(?:<a [^>]*>)?<code>{tid}</code>.*?"
                             r"<td class=\"num\">(.*?)</td>", html, re.S)
            assert cell and f"{n} clean control session(s)" in cell.group(1), (t.id, n)
            for card in re.findall(rf"Track <code>{tid}</code>.*?<dt>Sessions</dt><dd>(\d+) "
                                   r"clean control session", html, re.S):
                assert int(card) == n, (t.id, n, card)
    # pool pages: every qualifying control session of the pool, on every track
    for p in site.pools:
        want = sum(check_ctrl.values()) if p.name == scope.pool.name else 0
        assert len(p.points) == want
        for html in (pages.render_pool(site, p, links),
                     live_site.page(root, links.pool(p))):
            assert f"{want} qualifying, on" in html
    # screen pages: the "Qualifies" column, yes per qualifying session of the screen
    for s in site.screens:
        assert sum(x.qualifies for x in s.sessions) == check_screen[s.screen_id]
        for html in (pages.render_screen(site, s, links),
                     live_site.page(root, links.screen(s))):
            table = html.split("<caption>Server and worker lifecycle", 1)[1].split("</table>")[0]
            assert table.count("<td>yes</td>") == check_screen[s.screen_id], s.screen_id
    # verdicts: check, header source and the site give the same verdict per (track, candidate)
    # (shown: with the provisional / confirmed state of a SUPPORTED)
    want_v = {(v.track, v.candidate): v.shown for v in rep.verdicts if v.candidate}
    assert {(v.track, v.candidate): v.shown for v in site.verdicts if v.candidate} == want_v
    assert {(v.track, v.candidate): v.shown for v in src.verdicts} == want_v


def test_the_example_campaign_views_agree(live_site: LiveSite) -> None:
    """The case that disagreed: 3 "clean" 5 s controls on the dashboard, clean 0/1 in check."""
    _figures(EXAMPLE, live_site)
    site = build_site(EXAMPLE)
    assert [r.baseline_sessions for r in site.tracks] == [0, 0, 0, 0]
    assert [len(p.points) for p in site.pools] == [0]


# ---------------------------------------------------------------- generated campaigns

LIFECYCLES = ("clean", "worker-killed", "idle-unrecorded", "devices-busy", "server-exit-1")
REQUESTS = ("ok", "http-500", "no-time")


def _lifecycle(kind: str) -> dict[str, Any]:
    workers = [{"rank": i, "pid": 4000 + i, "state": "exited", "exit_code": 0}
               for i in range(4)]
    out: dict[str, Any] = {"workers": workers, "server_exit_code": 0, "container_exit_code": 0,
                           "devices_idle_before": {"idle": True},
                           "devices_idle_after": {"idle": True}}
    if kind == "worker-killed":
        workers[1].update(exit_code=None, signal=9)
        out["kill_actions"] = 1
    elif kind == "idle-unrecorded":
        out["devices_idle_before"] = None
    elif kind == "devices-busy":
        out["devices_idle_after"] = {"idle": False}
    elif kind == "server-exit-1":
        out["server_exit_code"] = 1
    return out


# clean sessions drawn more often than each failure, so that most campaigns have some
session = st.tuples(st.sampled_from(("clean",) * 4 + LIFECYCLES[1:]),
                    st.sampled_from(("ok",) * 3 + REQUESTS[1:]),
                    st.floats(min_value=50.0, max_value=900.0))
screen = st.tuples(st.sampled_from(TRACKS), st.integers(0, 3),
                   st.lists(session, min_size=1, max_size=6), st.booleans())


def _write(root: Path, screens: list[Any]) -> None:
    root.mkdir(parents=True)
    shutil.copyfile(EXAMPLE_SCOPE, root / "campaign.toml")
    cands = ("resident-layers-24", "tp2-sp2", "tp4-sp1-resident-dit", "task-queue-l2")
    for i, (track, c, sessions, repeat) in enumerate(screens):
        sid = f"screen-{i}"
        for k, (lc, req, wall) in enumerate(sessions):
            arm = "control" if "ABBAAB"[k] == "A" else "candidate"
            t = T0 + timedelta(hours=3 * i, minutes=25 * k)
            measured: dict[str, Any] = {"index": 1, "kind": "measured", "http_status": 200,
                                        "client_wall_s": round(wall, 3),
                                        "output_sha256": sha(track)}
            if req == "http-500":
                measured.update(http_status=500, client_wall_s=None, error="HCCL timeout")
            elif req == "no-time":
                measured["client_wall_s"] = None
            doc = {
                "schema": "campaign-bot/receipt@1", "screen_id": sid,
                "session_id": f"{sid}-s{k}", "campaign": CAMPAIGN, "track": track,
                "arm": arm, "candidate": cands[c] if arm == "candidate" else None,
                "slot": k, "order": "ABBAAB", "engine_revision": COMMIT,
                "config_digest": sha("control" if arm == "control" else cands[c]),
                "input_digests": INPUTS, "pool": "ascend910b1-x4",
                "devices": ["npu:0", "npu:1", "npu:2", "npu:3"],
                "started_at": t.isoformat(),
                "stopped_at": (t + timedelta(minutes=20)).isoformat(),
                "requests": [{"index": 0, "kind": "warmup", "http_status": 200,
                              "client_wall_s": round(wall * 1.3, 3)}, measured],
                "lifecycle": _lifecycle(lc),
            }
            text = json.dumps(doc, indent=2) + "\n"
            path = root / "receipts" / sid / f"s{k}-{arm}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if repeat and k == 0:  # the same session committed twice: counted once
                (root / "copies" / sid).mkdir(parents=True, exist_ok=True)
                (root / "copies" / sid / f"s{k}-{arm}.json").write_text(text)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(screens=st.lists(screen, min_size=1, max_size=4))
def test_generated_campaign_views_agree(screens: list[Any], live_site: LiveSite,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("gen") / "campaign"
    _write(root, screens)
    _figures(root, live_site)
