"""``campaign-bot header DIR`` on the bundled example campaign (issue 2's examples/)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bot.features.header.cli import register

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h3-ref2va-4x910b1"


@pytest.fixture
def app() -> typer.Typer:
    a = typer.Typer()
    register(a)

    @a.command("noop")
    def _noop() -> None:  # a second command keeps typer in multi-command mode
        return None

    return a


@pytest.mark.skipif(not EXAMPLE.is_dir(), reason="example campaign not present")
def test_example_campaign_header(app: typer.Typer) -> None:
    res = CliRunner().invoke(app, ["header", str(EXAMPLE), "--sha", "a" * 40])
    assert res.exit_code == 1, res.output  # the example's baselines failed their lifecycles
    out = res.output
    assert ("The control baselines of 5s-lossless (5 s lossless) and 15s-lossless (15 s "
            "lossless) failed their lifecycles, so no verdict on those tracks can qualify yet."
            in " ".join(out.split()))
    assert out.startswith("### Campaign status: MiniMax-H3 Ref2VA")
    assert "Fix the baseline: re-run the control baseline of 5s-lossless (5 s lossless)" in out
    assert "4 workers still running; 4 terminate action(s); 4 kill action(s)" in out
    assert "5s-lossless: REJECT" in out  # screening, in the candidates table
    assert "SUPPORTED" not in out
    assert "Updated from evidence at `aaaaaaaa`" in out


def test_not_a_campaign(app: typer.Typer, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["header", str(tmp_path)])
    assert res.exit_code == 2
    assert "no campaign.toml" in res.output


def test_header_in_a_terminal_shows_characters_not_entities() -> None:
    """In a terminal the header reads '>=30%' (it printed '&gt;=30%'); into a pipe it stays
    the Markdown the bot posts."""
    import os
    import pty
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[1] / "examples" / "h3-ref2va-4x910b1"
    cmd = [sys.executable, "-c", "from evidence.cli import main; main()", "header",
           str(example)]
    piped = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert "&gt;=30%" in piped.stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(60)
    os.close(leader)
    shown = b"".join(chunks).decode()
    assert ">=30%" in shown and "&gt;" not in shown, shown[:300]
