"""``campaign-bot header DIR``: print the status header a campaign directory would get
(the same computation and template the bot uses on the campaign issue), offline.

Exit status: 0 header printed, evidence without problems; 1 header printed, and the evidence
has problems the header reports (a failed control lifecycle); 2 unreadable campaign.
"""

from __future__ import annotations

import html
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer


def _git_commit(root: Path) -> tuple[str, datetime] | None:
    """Last commit touching ``root`` (SHA, commit time), when it is in a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "log", "-1", "--format=%H %cI", "--", "."],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    if len(out) != 2:
        return None
    return out[0], datetime.fromisoformat(out[1]).astimezone(UTC)


def header(
    campaign: Annotated[Path, typer.Argument(help="Campaign directory (holds campaign.toml).")],
    sha: Annotated[
        str | None, typer.Option(help="Evidence SHA to show (default: last git commit).")
    ] = None,
) -> None:
    """Print the campaign status header for CAMPAIGN as Markdown (no markers)."""
    from bot.features.header.render import render_header
    from evidence.bundle import load_campaign
    from evidence.console import print_error
    from evidence.header import EvidenceRef, build_header, source_from_campaign

    if not (campaign / "campaign.toml").is_file():
        print_error(f"{campaign}: no campaign.toml here")
        raise typer.Exit(2)
    loaded = load_campaign(campaign)
    if loaded.scope is None:
        for f in loaded.findings[:5]:
            print_error(f"{f.path}:{f.line or '-'}: {f.message}")
        raise typer.Exit(2)
    found = _git_commit(campaign)
    ref_sha = sha or (found[0] if found else "0" * 40)
    at = found[1] if found else datetime.fromtimestamp(
        (campaign / "campaign.toml").stat().st_mtime, UTC
    )
    src = source_from_campaign(loaded, sha=ref_sha)
    content = build_header(loaded.scope.model, [src], EvidenceRef(ref_sha, at, None))
    text = render_header(content)
    if sys.stdout.isatty():
        # a person reads it here: '>=' rather than the '&gt;=' GitHub's Markdown needs (a
        # pipe or a file gets the Markdown as the bot posts it)
        text = html.unescape(text)
    typer.echo(text)
    raise typer.Exit(1 if content.problems else 0)


def register(app: typer.Typer) -> None:
    """Add ``header`` to the ``campaign-bot`` app."""
    app.command("header")(header)
