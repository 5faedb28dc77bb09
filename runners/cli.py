"""``campaign-bot screen``, ``campaign-bot keygen`` and ``campaign-bot runner check-flags``
(registered as a plug-in).

Exit codes: 0 clean, 1 problems found, 2 unreadable input or bad usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

EXIT_USAGE = 2


def screen_cmd(
    campaign: Annotated[Path, typer.Option(help="Campaign directory (holds campaign.toml).")],
    track: Annotated[str, typer.Option(help="Track id, e.g. 5s-lossless.")],
    out: Annotated[Path, typer.Option(help="Bundle directory to write (must be empty).")],
    candidate: Annotated[str | None, typer.Option(
        help="Candidate name declared in campaign.toml.")] = None,
    dry_run: Annotated[bool, typer.Option(
        help="Print the plan and the estimated device time, start nothing.")] = False,
    sessions: Annotated[int | None, typer.Option(
        help="Run N sessions (the protocol order cut or cycled to N).", min=1)] = None,
    control_only: Annotated[bool, typer.Option(
        help="Every session is a control session (baseline repeatability).")] = False,
    device_tool: Annotated[str, typer.Option(
        help="Idle gate tool: auto, none, npu-smi, nvidia-smi.")] = "auto",
    server_cmd: Annotated[str | None, typer.Option(
        help="Replaces the 'vllm serve' prefix of the server command "
             "(default: $CAMPAIGN_BOT_SERVER_CMD or 'vllm serve').")] = None,
    signing_key: Annotated[Path | None, typer.Option(
        help="ed25519 private key (PEM); default $CAMPAIGN_BOT_SIGNING_KEY.")] = None,
    host: Annotated[str, typer.Option(help="Address the server listens on.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(
        help="Server port (default: a free port per session).")] = None,
    container: Annotated[bool, typer.Option(
        help="The server command runs a container: its exit status is the container's.")
    ] = False,
    health_poll_s: Annotated[float, typer.Option(
        help="Seconds between /health polls while the server loads.")] = 2.0,
    idle_timeout_s: Annotated[float, typer.Option(
        help="How long the device idle gate waits for idle devices.")] = 300.0,
    request_estimate_s: Annotated[float | None, typer.Option(
        help="Expected seconds per request, for the device-time estimate.")] = None,
    media_device: Annotated[str, typer.Option(
        help="Where the media gates run LPIPS: cpu, cuda or npu.")] = "cpu",
    lpips_weights: Annotated[Path | None, typer.Option(
        help="LPIPS AlexNet backbone file for lossy tracks (with --lpips-sha256).")] = None,
    lpips_sha256: Annotated[str | None, typer.Option(
        help="SHA-256 the LPIPS backbone file must have.")] = None,
    futility_stop: Annotated[bool, typer.Option(
        help="Stop once the first control/candidate pair shows candidate/control above the "
             "protocol's futility_ratio (the rest of the order is recorded as not run).")
    ] = False,
) -> None:
    """Run one A/B screen of a candidate against control on one track and write a signed
    bundle.  Exit 0 clean, 1 problems found (failed request, unqualified lifecycle, failed
    media gate, interrupted), 2 bad usage or unreadable input."""
    from runners.screen import ScreenOptions, UsageError, run_screen

    err = Console(stderr=True)
    opts = ScreenOptions(
        campaign=campaign, candidate=candidate, track=track, out=out, dry_run=dry_run,
        sessions=sessions, control_only=control_only, device_tool=device_tool,
        server_cmd=server_cmd, signing_key=signing_key, host=host, port=port,
        container=container, health_poll_s=health_poll_s, idle_timeout_s=idle_timeout_s,
        request_estimate_s=request_estimate_s, media_device=media_device,
        lpips_weights=lpips_weights, lpips_sha256=lpips_sha256, futility_stop=futility_stop)
    try:
        code = run_screen(opts, Console(highlight=False))
    except UsageError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(code)


def keygen_cmd(
    out: Annotated[Path, typer.Argument(help="Private key file to create (mode 0600).")],
) -> None:
    """Create an ed25519 signing key for the screen runner: OUT (private, PEM PKCS#8) and
    OUT.pub (public, PEM; append it to the trusted keys file of `campaign-bot check`)."""
    from runners.signer import generate_key

    try:
        pub = generate_key(out)
    except (FileExistsError, OSError) as exc:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None
    Console(highlight=False).print(f"private key: {out}\npublic key:  {pub}\n"
                                   f"{pub.read_text().splitlines()[0]}")


def check_flags_cmd(
    campaign: Annotated[Path, typer.Argument(help="Campaign directory (holds campaign.toml).")],
    python: Annotated[Path | None, typer.Option(
        help="Interpreter with vLLM-Omni installed (default: the upstream contract "
             "environment, else this interpreter when it can import vllm_omni).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Parse every arm's server command line (control, then each candidate) with vLLM-Omni's
    own ``vllm serve --omni`` argument parser, as the real server would at start-up.  Exit 0
    every arm accepted, 1 an arm refused (unknown flag, bad value), 2 unreadable campaign or
    vLLM-Omni not available."""
    import json

    from rich.table import Table

    from runners.screen import UsageError, load_scope
    from runners.server import build_command
    from runners.upstream import FlagCheckUnavailable, check_flag_lines

    err = Console(stderr=True)
    try:
        scope = load_scope(campaign)
    except UsageError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    arms = [("control", build_command(scope.serving, None, host="127.0.0.1",
                                      port=scope.serving.port, server_cmd="vllm serve"))]
    arms += [(c.name, build_command(scope.serving, c, host="127.0.0.1",
                                    port=scope.serving.port, server_cmd="vllm serve"))
             for c in scope.candidates]
    try:
        res = check_flag_lines(arms, python=python)
    except (FlagCheckUnavailable, ValueError) as exc:
        err.print(f"[red]cannot check flags:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    if as_json:
        typer.echo(json.dumps({"python": res.python, "vllm_omni": res.vllm_omni, "arms": [
            {"arm": a.arm, "argv": a.argv, "exit": a.exit, "message": a.message}
            for a in res.arms]}, indent=2))
    else:
        out = Console(highlight=False)
        t = Table(title=f"serving flags against vLLM-Omni {res.vllm_omni}'s parser "
                        f"({res.python})", title_justify="left")
        for c in ("arm", "result", "upstream's message"):
            t.add_column(c)
        for a in res.arms:
            t.add_row(escape(a.arm), "[green]accepted[/]" if a.ok else f"[red]exit {a.exit}[/]",
                      escape(a.message))
        out.print(t)
    raise typer.Exit(0 if res.ok else 1)


def register(app: typer.Typer) -> None:
    """Add the runner's commands (``screen``, ``keygen``, ``runner check-flags``) to
    ``app``."""
    app.command("screen")(screen_cmd)
    app.command("keygen")(keygen_cmd)
    runner = typer.Typer(help="Runner-side checks against the pinned vLLM-Omni.",
                         no_args_is_help=True)
    runner.command("check-flags")(check_flags_cmd)
    app.add_typer(runner, name="runner")
