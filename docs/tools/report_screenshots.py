"""Regenerate the dashboard screenshots in docs/images/ from the bundled example campaign
(campaign #320's four-device Ascend 910B1 evidence), in headless Chromium at 1280x800:

    .venv/bin/python docs/tools/report_screenshots.py

Needs Debian's chromium at /usr/bin/chromium and Playwright for Python (the [dev] extra); it
never downloads a browser.  Writes docs/images/dashboard-index.png (the overview) and
docs/images/dashboard-screen.png (the resident-layers screen: 173.211 s control against
365.884 s candidate, rejected after its first pair).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bot.features.dashboard.model import build_site, slug  # noqa: E402
from bot.features.dashboard.pages import write_site  # noqa: E402

EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
IMAGES = ROOT / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SHOTS = {
    "dashboard-index.png": "index.html",
    "dashboard-screen.png": f"screen-{slug('screen-resident-layers-24-5s')}.html",
}


def main() -> int:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        site_dir = Path(tmp) / "site"
        write_site(build_site(EXAMPLE), site_dir, EXAMPLE)
        IMAGES.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            for image, name in SHOTS.items():
                page.goto((site_dir / name).as_uri(), wait_until="load")
                page.screenshot(path=str(IMAGES / image))
                print(f"{IMAGES / image}: {name}")
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
