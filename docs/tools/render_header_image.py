"""Regenerate docs/images/status-header.png: the example campaign's status header as a reader
of the campaign issue sees it.

    python docs/tools/render_header_image.py [--chromium /usr/bin/chromium] [--out PATH]

Steps: run ``campaign-bot header examples/h3-ref2va-4x910b1`` (the same computation and
template the bot uses on the issue), render its Markdown to HTML with markdown-it-py
(CommonMark plus tables, HTML allowed, as GitHub allows the ``<details>`` block the header
uses), and screenshot it in headless Chromium through Playwright with a GitHub-like style.

Needs the ``[docs]`` extra (``pip install -e '.[docs]'``: Playwright for Python) and a
Chromium binary on the machine (Debian: ``apt-get install chromium``). Playwright's own
browser download is never used: the browser is the one at ``--chromium``. Nothing is fetched
from the network while rendering (the page has no external resources, and Chromium runs
without background networking).

Exit codes: 0 written; 1 the header command failed; 2 Playwright or Chromium is missing.
"""

from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/h3-ref2va-4x910b1"
DEFAULT_OUT = ROOT / "docs" / "images" / "status-header.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WIDTH_PX = 1012
"""Viewport width: about the width of an issue body on github.com at a 1280 px window."""

STYLE = """
body { margin: 0; background: #ffffff; }
.issue { box-sizing: border-box; width: 100%; padding: 16px 24px 8px 24px;
  font-family: "Liberation Sans", "DejaVu Sans", Helvetica, Arial, sans-serif;
  font-size: 14px; line-height: 1.5; color: #1f2328; }
.frame { border: 1px solid #d1d9e0; border-radius: 6px; overflow: hidden; }
.frame-head { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px;
  color: #59636e; font-size: 13px; }
.frame-body { padding: 8px 16px 4px 16px; }
h3 { font-size: 1.25em; font-weight: 600; margin: 12px 0 16px 0; }
p { margin: 0 0 12px 0; }
code { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: 85%;
  background: rgba(129, 139, 152, 0.12); border-radius: 6px; padding: 0.2em 0.4em; }
table { border-collapse: collapse; margin: 0 0 14px 0; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 5px 11px; }
th { font-weight: 600; background: #f6f8fa; }
tr:nth-child(2n) td { background: #f6f8fa; }
ul { margin: 0 0 12px 0; padding-left: 2em; }
details { margin: 0 0 12px 0; }
summary { cursor: pointer; }
sub { color: #59636e; }
"""


def header_markdown() -> str:
    """The example campaign's header, exactly as ``campaign-bot header`` prints it.

    Exit status 1 of ``header`` only says the evidence has problems the header reports (the
    example's failed control lifecycles); 2 is an error."""
    res = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()",
                          "header", EXAMPLE], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    if res.returncode not in (0, 1) or not res.stdout.strip():
        sys.stderr.write(res.stderr)
        raise SystemExit(f"error: campaign-bot header {EXAMPLE} exited {res.returncode}")
    return res.stdout


def page_html(markdown: str) -> str:
    """The header rendered to a self-contained HTML page (no external resources)."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    caption = html.escape(f"campaign issue body: the block the bot keeps ({EXAMPLE})")
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head>"
            f"<body><div class='issue'><div class='frame'><div class='frame-head'>{caption}"
            f"</div><div class='frame-body'>{body}</div></div></div></body></html>")


def screenshot(page: str, out: Path, chromium: str) -> None:
    """Render ``page`` in headless Chromium and write a PNG of the whole page to ``out``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("error: Playwright for Python is not installed: "
                         "pip install -e '.[docs]'") from None
    if shutil.which(chromium) is None and not Path(chromium).is_file():
        raise SystemExit(f"error: no Chromium at {chromium} (Debian: apt-get install chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": WIDTH_PX, "height": 600},
                                   device_scale_factor=1)
            tab.set_content(page, wait_until="load")
            out.parent.mkdir(parents=True, exist_ok=True)
            tab.locator(".issue").screenshot(path=str(out))
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    """Write the PNG; returns the exit code (errors exit through SystemExit with a message)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium binary")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="PNG to write")
    ap.add_argument("--html", type=Path, help="also write the HTML page here")
    args = ap.parse_args(argv)
    try:
        markdown = header_markdown()
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    page = page_html(markdown)
    if args.html:
        args.html.write_text(page, encoding="utf-8")
    try:
        screenshot(page, args.out, args.chromium)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
