"""Regenerate docs/images/check-run-buttons.png: a screen's check runs with their buttons, as
the bot writes them.

    python docs/tools/render_check_run_image.py [--chromium /usr/bin/chromium] [--out PATH]

Steps: run the /screen flow in this process against the GitHub double (``sandbox/
github_double``, the same server the tests use) on the example campaign: a screen of
``tp2-sp2`` is dispatched (its check run gets Cancel), a second one's workflow run reports
(Re-run), an unauthorised click on it is refused, and a fork's push cancels an approved screen
(a check run on the new head asks for Approve head).  The check runs are then read back from
the double (name, status, conclusion, title, summary, text, buttons) and drawn in a page
styled like GitHub's Checks tab (the layout is an illustration; every text and button is the
bot's), screenshotted in headless Chromium through Playwright.

Needs the ``[docs]`` extra (Playwright for Python) and a Chromium binary (Debian:
``apt-get install chromium``); Playwright's browser download is never used.  Nothing is
fetched from the network.

Exit codes: 0 written; 2 Playwright or Chromium is missing.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1" / "campaign.toml"
DEFAULT_OUT = ROOT / "docs" / "images" / "check-run-buttons.png"
REPO = "octo/campaign"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
STYLE = """
body { margin: 0; background: #ffffff; font-family: "Liberation Sans", "DejaVu Sans",
  Helvetica, Arial, sans-serif; font-size: 14px; line-height: 1.5; color: #1f2328; }
.page { padding: 16px 24px; width: 960px; }
.run { border: 1px solid #d1d9e0; border-radius: 6px; margin: 0 0 14px 0; overflow: hidden; }
.head { display: flex; align-items: center; background: #f6f8fa; padding: 8px 16px;
  border-bottom: 1px solid #d1d9e0; }
.name { font-weight: 600; flex: 1; }
.state { color: #59636e; margin-right: 12px; font-size: 13px; }
.btn { border: 1px solid #d1d9e0; border-radius: 6px; background: #f6f8fa; padding: 3px 12px;
  margin-left: 6px; font-weight: 500; font-size: 13px; }
.body { padding: 8px 16px; }
.title { font-size: 16px; font-weight: 600; margin: 4px 0 6px 0; }
.summary { color: #1f2328; margin: 0 0 6px 0; }
p { margin: 0 0 6px 0; }
.text { color: #59636e; border-left: 3px solid #d1d9e0; padding-left: 10px; margin: 0 0 6px 0; }
code { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: 85%;
  background: rgba(129, 139, 152, 0.12); border-radius: 6px; padding: 0.2em 0.4em; }
"""


def check_runs() -> list[dict[str, Any]]:
    """Run the flow against the GitHub double and return its check runs, oldest first."""
    from github import Auth

    from bot.database import make_engine, migrate
    from bot.features.screen.commands import run_command
    from bot.features.screen.dispatch import on_push
    from bot.features.screen.handlers import ScreenHandlers
    from bot.features.screen.results import on_workflow_run_completed
    from bot.features.screen.runtime import CommentContext, Runtime, ScreenOptions
    from bot.github.pygithub import PyGithubPort, make_client
    from bot.inbox.router import Event
    from bot.repo_config import RepoConfig, ScreenSection
    from sandbox.github_double import GitHubDouble, OpenAPISubset
    from sandbox.github_double.server import default_openapi_path

    d = GitHubDouble(OpenAPISubset(default_openapi_path()))
    d.start()
    tmp = Path(tempfile.mkdtemp(prefix="campaign-bot-picture-"))
    try:
        d.add_repo(REPO, {"campaigns/h3/campaign.toml": EXAMPLE.read_text(),
                          ".github/workflows/screen.yml": "on: workflow_dispatch\n"})
        d.add_workflow(REPO, "screen.yml")
        d.add_pull(REPO, 5, {"campaigns/h3/NOTES.md": "tp2-sp2\n"})
        pull = d.add_pull(REPO, 6, {"x.txt": "fork"}, fork="contributor/campaign")
        d.set_permission(REPO, "maint", "write")
        d.set_permission(REPO, "eve", "read")
        auth = Auth.Token("test-token")
        port = PyGithubPort(make_client(d.base_url, auth, throttle=False), REPO,
                            "campaign-bot[bot]", auth=auth, base_url=d.base_url)
        eng = make_engine(f"sqlite:///{tmp / 'bot.sqlite3'}")
        migrate(eng)
        rt = Runtime(eng, ScreenOptions(campaign_paths=("campaigns/h3",), debounce_s=0),
                     gh_for=lambda s: port)

        def say(number: int, cid: int, args: str) -> None:
            run_command(rt, port, CommentContext(REPO, number, "maint", cid, 1, True),
                        "screen", args, None)

        say(5, 1, "candidate tp2-sp2 track=5s-lossless")
        wf = max(d.repo(REPO).runs.values(), key=lambda r: r["id"])
        wf.update(status="completed", conclusion="failure")
        on_workflow_run_completed(rt, port, {
            "repository": {"full_name": REPO, "default_branch": "main"},
            "workflow_run": {"id": wf["id"], "conclusion": "failure", "status": "completed",
                             "path": ".github/workflows/screen.yml"}}, ScreenSection())
        ended = max(d.repo(REPO).check_runs.values(), key=lambda r: r["id"])
        click = {"action": "requested_action", "requested_action": {"identifier": "rerun"},
                 "repository": {"full_name": REPO}, "sender": {"login": "eve", "type": "User"},
                 "check_run": {k: ended[k] for k in ("id", "name", "head_sha", "external_id",
                                                       "status", "conclusion", "output")}}
        ScreenHandlers(rt).handle_check_run(Event("picture", "check_run", click), port,
                                            RepoConfig())
        say(5, 2, "candidate tp2-sp2 track=15s-lossless")  # dispatched: Cancel
        say(6, 3, f"candidate tp4-sp1-resident-dit track=5s-lossless sha={pull.head_sha}")
        head = d.push(REPO, 6, {"x.txt": "changed"})
        on_push(rt, port, {"repository": {"full_name": REPO},
                           "pull_request": {"number": 6, "head": {"sha": head}}})
        runs = sorted(d.repo(REPO).check_runs.values(), key=lambda r: r["id"])
        eng.dispose()
        return [dict(r) for r in runs]
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def page(runs: list[dict[str, Any]]) -> str:
    """The check runs as a GitHub-like Checks page (summary and text are Markdown, rendered
    with markdown-it-py as CommonMark)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    parts = []
    for r in runs:
        out = r.get("output") or {}
        state = r["conclusion"] or r["status"]
        buttons = "".join(f'<span class="btn">{html.escape(a["label"])}</span>'
                          for a in r.get("actions") or [])
        text = (out.get("text") or "").split("<!--")[0].strip()
        parts.append(
            f'<div class="run"><div class="head"><span class="name">{html.escape(r["name"])}'
            f' <code>{r["head_sha"][:7]}</code></span><span class="state">{state}</span>'
            f'{buttons}</div><div class="body"><div class="title">'
            f'{html.escape(out.get("title") or "")}</div><div class="summary">'
            f'{md.render(out.get("summary") or "")}</div>'
            + (f'<div class="text">{md.render(text)}</div>' if text else "")
            + "</div></div>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head>"
            f"<body><div class='page'>{''.join(parts)}</div></body></html>")


def main(argv: list[str] | None = None) -> int:
    """Write the picture; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("Playwright for Python is missing: pip install -e '.[docs]'", file=sys.stderr)
        return 2
    if not Path(args.chromium).exists():
        print(f"no Chromium at {args.chromium}: --chromium PATH", file=sys.stderr)
        return 2
    doc = page(check_runs())
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        tab = browser.new_page(viewport={"width": 1008, "height": 400})
        tab.set_content(doc)
        tab.locator(".page").screenshot(path=str(args.out))
        browser.close()
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
