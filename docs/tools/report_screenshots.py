"""Regenerate the dashboard screenshots in docs/images/ from the bundled example campaign
(campaign #320's four-device Ascend 910B1 evidence), in headless Chromium, every page type at
1280x800 (a desktop) and 390x844 (a phone):

    .venv/bin/python docs/tools/report_screenshots.py

Needs Debian's chromium at /usr/bin/chromium and Playwright for Python (the [dev] extra); it
never downloads a browser.  Writes docs/images/dashboard-index.png (the overview) and
docs/images/dashboard-screen.png (the resident-layers screen: 173.211 s control against
365.884 s candidate, rejected after its first pair) at 1280x800, and
docs/images/dashboard-TYPE-WIDTH.png for TYPE index, track, screen, pool, budget, findings
and queue.  The queue page is the live service's; it is drawn here with two illustrative
rows (a running screen and a queued one), since the example has no bot database.  The
findings page is drawn as the live service serves it, with its filter form.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bot.features.dashboard.model import build_site  # noqa: E402
from bot.features.dashboard.pages import write_site  # noqa: E402
from bot.features.dashboard.views import slug  # noqa: E402

EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
IMAGES = ROOT / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SHOTS = {
    "dashboard-index.png": "index.html",
    "dashboard-screen.png": f"screen-{slug('screen-resident-layers-24-5s')}.html",
}
PAGE_TYPES = {
    "index": "index.html",
    "track": f"track-{slug('5s-lossless')}.html",
    "screen": f"screen-{slug('screen-resident-layers-24-5s')}.html",
    "pool": f"pool-{slug('ascend910b1-x4')}.html",
    "budget": "budget.html",
    "findings": "findings.html",
    "queue": "queue.html",
}
WIDTHS = ((1280, 800), (390, 844))


def _queue_page(site: object, out: Path) -> None:
    """The live queue page with two illustrative rows, written as ``out/queue.html``."""
    from bot.features.dashboard.live import STUCK_FACTOR, PoolQueue, QueueRow
    from bot.features.dashboard.pages import Links, render_page

    run = QueueRow("S41", 321, "tp4-sp1-resident-dit", "15s-lossless", "running", "requester",
                   "ascend-runner-1", None, 2700.0, 3600.0, False)
    wait = QueueRow("S42", 322, "task-queue-l2", "5s-lossless", "queued", "requester", None,
                    None, 600.0, 1800.0, False)
    html = render_page("queue.html.j2", site, Links(live=True),  # type: ignore[arg-type]
                       now=datetime(2026, 11, 20, 12, 0, tzinfo=UTC),
                       pools=[PoolQueue("ascend910b1-x4", slug("ascend910b1-x4"), [run],
                                        [wait])],
                       stuck_rule=f"{STUCK_FACTOR:g} × its estimate")
    (out / "queue.html").write_text(html, encoding="utf-8")


def _live_findings_page(site: object, out: Path) -> None:
    """The live findings page (its filter form above the table), as ``out/findings.html``."""
    from bot.features.dashboard.pages import Links, render_findings

    html = render_findings(site, Links(live=True))  # type: ignore[arg-type]
    (out / "findings.html").write_text(html, encoding="utf-8")


def main() -> int:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        site_dir = Path(tmp) / "site"
        site = build_site(EXAMPLE)
        write_site(site, site_dir, EXAMPLE)
        _queue_page(site, site_dir)
        _live_findings_page(site, site_dir)
        IMAGES.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for image, name in SHOTS.items():
                page.goto((site_dir / name).as_uri(), wait_until="load")
                page.screenshot(path=str(IMAGES / image))
                print(f"{IMAGES / image}: {name}")
            page.close()
            for width, height in WIDTHS:
                page = browser.new_page(viewport={"width": width, "height": height})
                for kind, name in PAGE_TYPES.items():
                    page.goto((site_dir / name).as_uri(), wait_until="load")
                    image = IMAGES / f"dashboard-{kind}-{width}.png"
                    page.screenshot(path=str(image))
                    print(f"{image}: {name}")
                page.close()
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
