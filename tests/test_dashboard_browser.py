"""The campaign dashboard as a person sees it: every page in headless Chromium (Debian's
``/usr/bin/chromium``, driven by Playwright), served over HTTP by a local ``http.server`` and
opened from ``file://``.

Checked on every page: no console error, no failed request, one ``h1``, every table with a
caption and every header cell with a scope, every chart an image with a title; each chart
has one mark per data point of its data; every link resolves; a hostile screen id opens no
dialog; the tables read the same with JavaScript off.  Screenshots of the overview and of a
screen page at 1280x800 are written to the test's folder.

Skips only when ``/usr/bin/chromium`` is absent and ``CAMPAIGN_BOT_REQUIRE_BROWSER`` is
unset; CI sets it, so a missing browser fails there.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urlsplit

import pytest
from _report_campaign import Plan, write_campaign

from bot.features.dashboard.model import build_site
from bot.features.dashboard.views import Site

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
EXE = Path(sys.executable).parent / "campaign-bot"
HOSTILE = '<img src=x onerror="alert(1)">'
DOTTED = "resident-layers.v2.5s-lossy"
"""A hand-run screen's id with dots (allowed by the receipt schema): its chart's CSS
selectors once broke and it rendered black."""
WIDTHS = ((1280, 800), (390, 844))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    required = bool(os.environ.get("CAMPAIGN_BOT_REQUIRE_BROWSER"))
    if not CHROMIUM.exists():
        if required:
            pytest.fail(f"{CHROMIUM} is missing and CAMPAIGN_BOT_REQUIRE_BROWSER is set "
                        "(apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Chromium is installed but Playwright for Python is not: install the "
                    "[dev] extra")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Path, Site]:
    """12 screens, one with a hostile screen id, rendered with the bot's ledger."""
    root = tmp_path_factory.mktemp("browser")
    plan = write_campaign(root / "c", screens=12)
    for f in (plan.root / "receipts" / plan.screens[4]).glob("*.json"):
        doc = json.loads(f.read_text())
        doc["screen_id"] = HOSTILE
        f.write_text(json.dumps(doc, indent=2))
    plan.measured_timed[HOSTILE] = plan.measured_timed.pop(plan.screens[4])
    plan.screens[4] = HOSTILE
    for f in (plan.root / "receipts" / plan.screens[2]).glob("*.json"):
        doc = json.loads(f.read_text())
        doc["screen_id"] = DOTTED
        f.write_text(json.dumps(doc, indent=2))
    plan.measured_timed[DOTTED] = plan.measured_timed.pop(plan.screens[2])
    plan.screens[2] = DOTTED
    out = root / "site"
    env = {**os.environ, "COLUMNS": "2000"}
    res = subprocess.run([str(EXE), "report", str(plan.root), "--out", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 1, res.stderr  # failed sessions on purpose: site written
    return plan, out, build_site(plan.root)


@pytest.fixture(scope="module")
def server(campaign: tuple[Plan, Path, Site]) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(campaign[1]))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class Watch:
    """Console errors, page errors, dialogs and failed requests of one page."""

    def __init__(self, page: Any) -> None:
        self.problems: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.problems.append(
            f"console: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(
            f"HTTP {r.status}: {r.url}"))
        page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"),
                                     d.dismiss()))


def _pages(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("*.html"))


def _structure(page: Any, name: str) -> None:
    assert page.locator("h1").count() == 1, name
    assert page.evaluate("document.documentElement.lang") == "en", name
    assert page.title().strip(), name
    assert page.locator("th:not([scope])").count() == 0, name
    assert page.locator("table:not(:has(> caption))").count() == 0, name
    assert page.locator("script").count() == 0, name
    for svg in page.locator("svg.chart").all():
        assert svg.get_attribute("role") == "img", name
        ids = (svg.get_attribute("aria-labelledby") or "").split()
        assert len(ids) == 2, name
        texts = [page.evaluate("id => document.getElementById(id).textContent", i)
                 for i in ids]
        assert all(t.strip() for t in texts), (name, ids)
        assert svg.locator(":scope > title").count() == 1, name


def test_every_page_loads_cleanly_and_is_structured(browser: Any, server: str,
                                                    campaign: tuple[Plan, Path, Site]) -> None:
    _plan, out, _site = campaign
    names = _pages(out)
    assert len(names) == 3 + 4 + 1 + 12  # overview, budget, findings; tracks; pool; screens
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watch = Watch(page)
    for name in names:
        page.goto(server + name, wait_until="load")
        _structure(page, name)
        # the stylesheet loaded (system font stack, not the browser default)
        assert "system-ui" in page.evaluate("getComputedStyle(document.body).fontFamily")
    page.close()
    assert watch.problems == []


def test_charts_have_one_mark_per_data_point(browser: Any, server: str,
                                             campaign: tuple[Plan, Path, Site]) -> None:
    plan, out, site = campaign
    page = browser.new_page()
    watch = Watch(page)
    for sc in site.screens:
        page.goto(server + f"screen-{sc.slug}.html")
        want = plan.measured_timed[sc.screen_id]
        marks = page.locator("svg.chart .mark")
        assert marks.count() == want["control"] + want["candidate"], sc.screen_id
        assert page.locator('svg.chart .mark[data-series="control"]').count() == \
            want["control"]
        # every mark names its session, and every session drawn is a session of the screen
        sessions = {s.session_id for s in sc.sessions}
        drawn = {m.get_attribute("data-session") for m in marks.all()}
        assert drawn <= sessions
    pool = site.pools[0]
    page.goto(server + f"pool-{pool.slug}.html")
    assert page.locator("svg.chart .mark").count() == len(
        plan.control_sessions["ascend910b1-x4"])
    page.goto(server + "budget.html")
    charts = page.locator("svg.chart")
    assert charts.count() == 3
    for i in range(3):
        assert charts.nth(i).locator('.mark[data-series="receipts"]').count() == 12
    page.close()
    assert watch.problems == []


def test_every_link_resolves(browser: Any, server: str,
                             campaign: tuple[Plan, Path, Site]) -> None:
    _plan, out, site = campaign
    page = browser.new_page()
    hrefs: dict[str, str] = {}
    for name in _pages(out):
        page.goto(server + name)
        for h in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            hrefs.setdefault(h, name)
    receipts = [h for h in hrefs if "/evidence/" in h]
    assert len(receipts) == sum(len(s.sessions) for s in site.screens) + 1  # + campaign.toml
    for href, where in sorted(hrefs.items()):
        assert urlsplit(href).netloc == urlsplit(server).netloc, (where, href)
        url, frag = urldefrag(href)
        resp = page.request.get(url)
        assert resp.status == 200, (where, href)
        if frag:
            assert f'id="{frag}"' in resp.text(), (where, href)
        if url.endswith(".json"):
            json.loads(resp.body())  # the copy of a receipt is the receipt
    page.close()


def test_pages_open_from_files_and_read_without_javascript(
        browser: Any, campaign: tuple[Plan, Path, Site]) -> None:
    _plan, out, site = campaign
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    watch = Watch(page)
    page.goto((out / "index.html").as_uri())
    rows = page.locator("table").first.locator("tbody tr")
    assert rows.count() == len(site.scope.tracks)
    assert page.locator("text=Screening decisions (not verdicts)").count() >= 1
    sc = site.screens[0]
    page.goto((out / f"screen-{sc.slug}.html").as_uri())
    assert page.locator("table").first.locator("tbody tr").count() == len(sc.sessions)
    link = page.locator('a[href^="evidence/"]').first.get_attribute("href")
    assert link is not None and (out / link).is_file()
    ctx.close()
    assert watch.problems == []


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", head[16:24])
    return int(w), int(h)


def test_screenshots_of_the_overview_and_a_screen(browser: Any, server: str, tmp_path: Path,
                                                  campaign: tuple[Plan, Path, Site]) -> None:
    _plan, _out, site = campaign
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    watch = Watch(page)
    page.goto(server + "index.html")
    page.screenshot(path=str(tmp_path / "index.png"))
    hostile = next(s for s in site.screens if s.screen_id == HOSTILE)
    page.goto(server + f"screen-{hostile.slug}.html")
    assert page.locator("h1").inner_text() == f"Screen {HOSTILE}"  # shown as text
    page.screenshot(path=str(tmp_path / "screen.png"))
    page.close()
    assert watch.problems == []  # the hostile id opened no dialog
    for name in ("index.png", "screen.png"):
        assert _png_size(tmp_path / name) == (1280, 800)


AXE_JS = None


def _axe_source() -> str:
    """axe-core's ``axe.min.js`` as the ``axe-playwright-python`` wheel ships it (a [dev]
    dependency): loaded into each page by the test, never by the pages."""
    global AXE_JS
    if AXE_JS is None:
        import axe_playwright_python

        AXE_JS = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text()
    return AXE_JS


def serious_axe_violations(page: Any) -> list[str]:
    """Violations of serious or critical impact that axe-core finds on ``page`` (every rule
    axe runs by default: WCAG 2.x A and AA, and best practices), as ``rule: target``."""
    page.evaluate(_axe_source())
    res = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [f"{v['id']} ({v['impact']}): {n['target']}" for v in res["violations"]
            if v["impact"] in ("serious", "critical") for n in v["nodes"]]


def narrow_problems(page: Any) -> list[str]:
    """At the page's width: horizontal page scroll, and chart text smaller than 11 px."""
    out = []
    over = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    if over > 0:
        out.append(f"page scrolls sideways by {over} px")
    small = page.evaluate("""() => {
      const out = [];
      for (const svg of document.querySelectorAll('svg.chart')) {
        const vb = svg.viewBox.baseVal;
        const scale = svg.getBoundingClientRect().width / (vb && vb.width ? vb.width : 1);
        for (const t of svg.querySelectorAll('text')) {
          if (!t.textContent.trim() || t.getBBox().width === 0) continue;
          const px = parseFloat(getComputedStyle(t).fontSize) * scale;
          if (px < 11) out.push(`${t.textContent.trim().slice(0, 30)}: ${px.toFixed(1)} px`);
        }
      }
      return out.slice(0, 5);
    }""")
    return out + [f"chart text {t}" for t in small]


def test_no_serious_axe_violation_and_usable_at_390px(browser: Any, server: str,
                                                      campaign: tuple[Plan, Path, Site]) -> None:
    _plan, out, _site = campaign
    problems: list[str] = []
    for width, height in WIDTHS:
        page = browser.new_page(viewport={"width": width, "height": height})
        for name in _pages(out):
            page.goto(server + name)
            problems += [f"{width}px {name}: {v}" for v in serious_axe_violations(page)]
            if width < 600:
                problems += [f"{width}px {name}: {v}" for v in narrow_problems(page)]
        page.close()
    assert problems == []


def test_a_screen_id_with_dots_renders_its_chart(browser: Any, server: str,
                                                 campaign: tuple[Plan, Path, Site]) -> None:
    _plan, _out, site = campaign
    dotted = next(s for s in site.screens if s.screen_id == DOTTED)
    page = browser.new_page()
    page.goto(server + f"screen-{dotted.slug}.html")
    # pygal's style rules are scoped by the chart's id: with them the background is white
    # and the points take the arm's colour; without them both are black (SVG's default)
    fills = page.evaluate("""() => {
      const svg = document.querySelector('svg.chart');
      const bg = getComputedStyle(svg.querySelector('.background')).fill;
      const dot = getComputedStyle(svg.querySelector('.mark')).fill;
      return [bg, dot];
    }""")
    page.close()
    assert fills[0] == "rgb(255, 255, 255)", fills
    assert fills[1] not in ("rgb(0, 0, 0)", "none"), fills


def test_forest_plot_marks_match_the_verdicts(browser: Any, server: str,
                                              campaign: tuple[Plan, Path, Site]) -> None:
    _plan, _out, site = campaign
    page = browser.new_page()
    page.goto(server + "index.html")
    checked = 0
    for row in site.tracks:
        plot = page.locator(f'svg.forest[aria-labelledby^="{_forest_id(row)}"]')
        assert plot.count() == 1, row.track.id
        marks = plot.locator(".mark")
        want = {v.candidate: v for v in row.verdicts if v.ratio is not None}
        assert marks.count() == len(want), row.track.id
        for mk in marks.all():
            v = want[mk.get_attribute("data-candidate")]
            assert mk.get_attribute("data-verdict") == v.verdict
            assert float(mk.get_attribute("data-ratio")) == pytest.approx(v.ratio, rel=1e-5)
            assert mk.get_attribute("data-status") == _settled(v)
            fill = mk.locator("circle").get_attribute("fill")
            assert (fill == "#ffffff") == (_settled(v) != "confirmed")  # open: not settled
            if v.lower is None or v.upper is None:
                assert mk.get_attribute("data-lower") is None
                assert mk.locator("line").count() == 0
                continue
            assert float(mk.get_attribute("data-lower")) == pytest.approx(v.lower, rel=1e-5)
            assert float(mk.get_attribute("data-upper")) == pytest.approx(v.upper, rel=1e-5)
            # the circle sits at the ratio on the plot's own scale, between its bounds
            cx = float(mk.locator("circle").get_attribute("cx"))
            line = mk.locator("line")
            x1, x2 = (float(line.get_attribute(a)) for a in ("x1", "x2"))
            assert x1 <= cx <= x2
            checked += 1
        target = plot.locator(".target")
        assert float(target.get_attribute("data-ratio")) == pytest.approx(row.theta0)
    page.close()
    assert checked >= 4  # the plan has candidates with exact bounds on every track


def _settled(v: Any) -> str:
    """SUPPORTED carries the engine's confirmation state; FAILED and EQUIVALENT are
    settled; INCONCLUSIVE and NOT SHOWN are open."""
    if v.verdict == "SUPPORTED":
        return v.confirmation or "provisional"
    return "confirmed" if v.verdict in ("FAILED", "EQUIVALENT") else "provisional"


def _forest_id(row: Any) -> str:
    from bot.features.dashboard.charts import css_id

    return css_id(f"forest-{row.slug}")
