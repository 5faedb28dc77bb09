"""``campaign-bot report DIR --out SITE``: write the campaign dashboard as a static site.

Registered through the ``campaign_bot.cli`` entry-point group.  Exit status, as for every
``campaign-bot`` command: 0 site written and the evidence has no problem (no P0-P2 finding);
1 site written, and it shows problems (the pages list them); 2 bad usage or unreadable input
(no valid campaign.toml, an output folder that must not be replaced, an unreadable
database), with nothing written.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from bot.features.dashboard.views import Site

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def report(
    directory: Annotated[Path, typer.Argument(help="Campaign directory (holds campaign.toml).")],
    out: Annotated[Path, typer.Option(
        "--out", help="Folder to write the site into (created; an earlier report there is "
                      "replaced; any other non-empty folder is refused).")],
    database: Annotated[str | None, typer.Option(
        "--database", metavar="URL",
        help="The bot's database (SQLAlchemy URL, e.g. sqlite:///bot.db): adds the budget "
             "ledger, reservations and the screens the bot recorded.")] = None,
    repo: Annotated[str | None, typer.Option(
        "--repo", metavar="OWNER/NAME",
        help="With --database: the repository whose ledger to read, when a campaign id is "
             "used in several.")] = None,
    source_url: Annotated[str | None, typer.Option(
        "--source-url", metavar="URL",
        help="Where the campaign directory can be browsed, e.g. "
             "https://github.com/OWNER/NAME/blob/SHA/campaigns/x: findings link to "
             "URL/PATH#LLINE.")] = None,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", min=1, help="Processes that render pages (default: the CPU count, at most "
                              "4; one for small sites).")] = None,
) -> None:
    """Write the campaign dashboard for DIRECTORY as a static HTML site in OUT: an overview
    per track, a page per screen, per pool and for the budget, and every finding.

    Works offline (no script, font or stylesheet from the network).  Exit 0 written, no
    problems; 1 written, the evidence has P0-P2 findings; 2 bad usage or unreadable input.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress
    from rich.table import Table

    from evidence.console import output_console, print_error

    err = Console(stderr=True, soft_wrap=True)
    try:  # before the pages module, which imports the charts and so pygal
        import pygal  # noqa: F401
    except ImportError:
        print_error("the report's charting library (pygal, a dependency of campaign-bot) "
                    "cannot be imported: the install is incomplete; reinstall campaign-bot (in "
                    "a checkout: pip install --force-reinstall '.'), or pip install "
                    "'pygal>=3.0'")
        raise typer.Exit(EXIT_USAGE) from None

    from bot.features.dashboard.pages import OutputRefused, write_site

    _check_input(directory, source_url)
    t0 = time.perf_counter()
    site = _read_site(directory, source_url, database, repo)
    t1 = time.perf_counter()
    try:
        if err.is_terminal:
            with Progress("writing pages", BarColumn(), MofNCompleteColumn(), console=err,
                          transient=True) as bar:
                task = bar.add_task("pages", total=None)
                written = write_site(site, out, directory, jobs=jobs,
                                     progress=lambda d, t: bar.update(task, completed=d,
                                                                      total=t))
        else:
            written = write_site(site, out, directory, jobs=jobs)
    except OutputRefused as e:
        print_error(f"--out refused: {e}")
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as e:
        print_error(f"cannot write {out}: {e.strerror or str(e)}")
        raise typer.Exit(EXIT_USAGE) from None
    t2 = time.perf_counter()
    console = output_console()
    t = Table(title=f"report of campaign {escape(site.scope.id)} written to "
                    f"{escape(str(written.root))}", title_justify="left")
    t.add_column("what")
    t.add_column("count", justify="right")
    counts = site.findings_by_severity
    rows = [
        ("pages", str(len(written.pages))),
        ("screens", str(len(site.screens))),
        ("documents copied", str(len(written.documents))),
        ("bytes written", str(written.bytes)),
        ("findings P0/P1/P2/P3", "/".join(str(counts[s]) for s in counts)),
        ("budget ledger", "read" if site.budget.ledger is not None else
         "not given (--database)"),
        ("seconds: evidence", f"{t1 - t0:.2f}"),
        ("seconds: pages", f"{t2 - t1:.2f}"),
    ]
    for what, n in rows:
        t.add_row(what, n)
    console.print(t)
    index = written.root / "index.html"
    console.print(f"open {escape(index.resolve().as_uri())} in a web browser (a static site: "
                  "publish the folder as it is)", soft_wrap=True)
    problems = counts["P0"] + counts["P1"] + counts["P2"]
    raise typer.Exit(EXIT_PROBLEMS if problems else EXIT_OK)


def mcp(
    url: Annotated[str, typer.Option(
        "--url", metavar="URL",
        help="Where campaign-bot serve answers, e.g. https://campaign-bot.example.org.")],
) -> None:
    """Serve campaign questions to an agent over MCP (stdio): read-only tools
    list_campaigns, campaign_status, screen_result, queue and explain_finding, answered by
    the service's JSON API.  A private repository needs a GitHub token that can read it in
    the CAMPAIGN_BOT_API_TOKEN environment variable."""
    from urllib.parse import urlsplit

    from evidence.console import print_error

    try:
        import mcp.server.mcpserver  # noqa: F401 - the [mcp] extra

        from bot.features.dashboard.mcp_server import run
    except ImportError:
        print_error("campaign-bot mcp needs the [mcp] extra: pip install '.[mcp]' in a "
                    "checkout of campaign-bot")
        raise typer.Exit(EXIT_USAGE) from None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        print_error(f"--url: {url!r} is not an http(s) URL without credentials")
        raise typer.Exit(EXIT_USAGE)
    run(url)


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``mcp`` to the ``campaign-bot`` app."""
    app.command("report")(report)
    app.command("mcp")(mcp)


def _check_input(directory: Path, source_url: str | None) -> None:
    """Exit with a usage error when ``--source-url`` is not a safe absolute URL or
    ``directory`` is not a campaign directory."""
    from bot.features.dashboard.pages import safe_url
    from evidence.console import print_error

    if source_url is not None and safe_url(source_url) is None:
        print_error(f"--source-url {source_url}: give an absolute http(s) URL "
                    "without a user name or password")
        raise typer.Exit(EXIT_USAGE)
    if not directory.is_dir():
        print_error(f"{directory}: "
                    + ("is not a folder" if directory.exists() else "the folder does not exist")
                    + " (give the campaign directory, which holds campaign.toml)")
        raise typer.Exit(EXIT_USAGE)
    if not (directory / "campaign.toml").is_file():
        print_error(f"{directory}: no campaign.toml here (give the "
                    "campaign directory)")
        raise typer.Exit(EXIT_USAGE)


def _read_site(directory: Path, source_url: str | None, database: str | None,
               repo: str | None) -> Site:
    """The site of ``directory``, with the budget of the bot's ledger when ``database`` is
    given; exits with a usage error naming what could not be read."""
    from bot.features.dashboard.model import CampaignUnreadable, build_site
    from evidence.console import print_error

    try:
        site = build_site(directory, source_url=source_url)
        if database is not None:
            from bot.features.dashboard.ledger import LedgerError, read_ledger
            from bot.features.dashboard.model import budget_view

            try:
                ledger = read_ledger(database, site.scope.id, repo)
            except LedgerError as e:
                print_error(f"--database: {e}")
                raise typer.Exit(EXIT_USAGE) from None
            site.budget = budget_view(site.scope, site.screens, ledger)
    except CampaignUnreadable as e:
        print_error(f"{directory}: {e}")
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as e:
        print_error(f"cannot read {directory}: {e.strerror or str(e)}")
        raise typer.Exit(EXIT_USAGE) from None
    return site
