"""``campaign-bot screen``, ``campaign-bot keygen`` and ``campaign-bot runner check-flags``
(registered as a plug-in).

Exit codes: 0 clean, 1 problems found, 2 unreadable input or bad usage.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

EXIT_USAGE = 2


def screen_cmd(
    campaign: Annotated[Path, typer.Option(help="Campaign directory (holds campaign.toml).")],
    track: Annotated[str, typer.Option(help="Track id, e.g. 5s-lossless.")],
    out: Annotated[Path | None, typer.Option(
        help="Bundle directory to write (must be empty); default: the runner config's "
             "output_dir / --bundle-name.")] = None,
    bundle_name: Annotated[str | None, typer.Option(
        help="Name of the bundle directory under the runner config's output_dir (the bot's "
             "request id); default: the campaign, track and time.")] = None,
    candidate: Annotated[str | None, typer.Option(
        help="Candidate name declared in campaign.toml.")] = None,
    dry_run: Annotated[bool, typer.Option(
        help="Print the plan and the estimated wall and device hours (wall x the "
             "pool's devices), start nothing.")] = False,
    sessions: Annotated[int | None, typer.Option(
        help="Run N sessions (the protocol order cut or cycled to N).", min=1)] = None,
    control_only: Annotated[bool, typer.Option(
        help="Every session is a control session (baseline repeatability).")] = False,
    device_tool: Annotated[str | None, typer.Option(
        help="Idle gate tool: auto, none, npu-smi, nvidia-smi [default: the runner config's "
             "devices.tool, else auto].")] = None,
    server_cmd: Annotated[str | None, typer.Option(
        help="Replaces the 'vllm serve' prefix of the server command "
             "(default: $CAMPAIGN_BOT_SERVER_CMD, the runner config's server.command, or "
             "'vllm serve').")] = None,
    signing_key: Annotated[Path | None, typer.Option(
        help="ed25519 private key (PEM); default $CAMPAIGN_BOT_SIGNING_KEY, else the runner "
             "config's signing_key.")] = None,
    host: Annotated[str, typer.Option(help="Address the server listens on.")] = "127.0.0.1",
    port: Annotated[int | None, typer.Option(
        help="Server port (default: a free port per session).")] = None,
    container: Annotated[bool | None, typer.Option(
        "--container/--no-container",
        help="The server command runs a container: its exit status is the container's "
             "[default: the runner config's server.container, else no].")] = None,
    health_poll_s: Annotated[float, typer.Option(
        help="Seconds between /health polls while the server loads.")] = 2.0,
    idle_timeout_s: Annotated[float, typer.Option(
        help="How long the device idle gate waits for idle devices.")] = 300.0,
    request_estimate_s: Annotated[float | None, typer.Option(
        help="Expected seconds per request, for the device-time estimate.")] = None,
    media_device: Annotated[str | None, typer.Option(
        help="Where the media gates run LPIPS: cpu, cuda or npu [default: the runner "
             "config's media.device, else cpu].")] = None,
    lpips_weights: Annotated[Path | None, typer.Option(
        help="LPIPS AlexNet backbone file for lossy tracks (with --lpips-sha256) [default: "
             "the runner config's media.lpips_weights].")] = None,
    lpips_sha256: Annotated[str | None, typer.Option(
        help="SHA-256 the LPIPS backbone file must have [default: the runner config's "
             "media.lpips_sha256].")] = None,
    frozen_scope: Annotated[Path | None, typer.Option(
        help="The default branch's campaign.toml (the workflow checks it out): control, "
             "protocol, pool and serving come from it; the campaign's own file may differ "
             "only in its candidates.")] = None,
    frozen_scope_blob: Annotated[str | None, typer.Option(
        help="Git blob SHA the --frozen-scope file must have (the bot pins it at dispatch).")
    ] = None,
    control_revision: Annotated[str | None, typer.Option(
        help="Engine revision (hex) of the control arm of a revision screen (/compare, "
             "/bisect); default: the scope's engine commit.")] = None,
    candidate_revision: Annotated[str | None, typer.Option(
        help="Engine revision (hex) of arm B, which runs the control config at it (a "
             "revision screen; excludes --candidate).  The server command may name "
             "{revision}; the server gets it as $CAMPAIGN_BOT_ENGINE_REVISION.")] = None,
    futility_stop: Annotated[bool, typer.Option(
        help="Stop once the first control/candidate pair shows candidate/control above the "
             "protocol's futility_ratio (the rest of the order is recorded as not run).")
    ] = False,
    follow_up: Annotated[str | None, typer.Option(
        help="LOOK:SCREEN_ID: this screen is look LOOK of the group-sequential series begun "
             "by screen SCREEN_ID ([protocol.sequential]); its receipts say so, signed.")
    ] = None,
) -> None:
    """Run one A/B screen of a candidate against control on one track and write a signed
    bundle.  Host-specific values (signing key, LPIPS weights, media device, device tool,
    server command, output folder) come from the runner config file
    (/etc/campaign-bot/runner.toml or $CAMPAIGN_BOT_RUNNER_CONFIG) unless given here.  Under
    GitHub Actions the bundle directory is written to $GITHUB_OUTPUT as ``bundle_dir``.
    Exit 0 clean, 1 problems found (failed request, unqualified lifecycle, failed media gate,
    interrupted), 2 bad usage or unreadable input."""
    from evidence.console import print_error
    from runners.config import RunnerConfigError
    from runners.screen import ScreenOptions, UsageError, run_screen

    try:
        host_opts = resolve_host_options(
            out=out, bundle_name=bundle_name, campaign_dir=campaign, track=track,
            device_tool=device_tool, server_cmd=server_cmd, signing_key=signing_key,
            container=container, media_device=media_device, lpips_weights=lpips_weights,
            lpips_sha256=lpips_sha256)
    except (RunnerConfigError, UsageError) as exc:
        print_error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    if not dry_run:
        publish_bundle_dir(host_opts["out"])
    opts = ScreenOptions(
        campaign=campaign, candidate=candidate, track=track, dry_run=dry_run,
        sessions=sessions, control_only=control_only, host=host, port=port,
        health_poll_s=health_poll_s, idle_timeout_s=idle_timeout_s,
        request_estimate_s=request_estimate_s, futility_stop=futility_stop,
        frozen_scope=frozen_scope, frozen_scope_blob=frozen_scope_blob, follow_up=follow_up,
        control_revision=control_revision, candidate_revision=candidate_revision, **host_opts)
    try:
        code = run_screen(opts, Console(highlight=False))
    except UsageError as exc:
        print_error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(code)


def resolve_host_options(*, out: Path | None, bundle_name: str | None, campaign_dir: Path,
                         track: str, device_tool: str | None, server_cmd: str | None,
                         signing_key: Path | None, container: bool | None,
                         media_device: str | None, lpips_weights: Path | None,
                         lpips_sha256: str | None) -> dict[str, Any]:
    """The host-specific :class:`runners.screen.ScreenOptions` fields: each option given, else
    its environment variable (``CAMPAIGN_BOT_SIGNING_KEY``, ``CAMPAIGN_BOT_SERVER_CMD``), else
    the runner config (:mod:`runners.config`), else the default.

    Without ``out`` the bundle goes to the config's ``output_dir`` / ``bundle_name`` (default
    ``CAMPAIGN-TRACK-UTCSTAMP``).  Raises :class:`runners.config.RunnerConfigError` for an
    unreadable config and :class:`runners.screen.UsageError` for a bundle location that
    cannot be chosen."""
    from runners import server
    from runners.config import load
    from runners.screen import UsageError

    cfg = load().config
    if out is None:
        if cfg.output_dir is None:
            raise UsageError("no bundle directory: pass --out DIR, or set output_dir in the "
                             "runner config (/etc/campaign-bot/runner.toml or "
                             "$CAMPAIGN_BOT_RUNNER_CONFIG)")
        name = bundle_name or (f"{campaign_dir.resolve().name}-{track}-"
                               f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}")
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name) or name in (".", ".."):
            raise UsageError(f"--bundle-name {name!r}: use 1-100 of A-Z a-z 0-9 . _ -")
        out = cfg.output_dir / name
    env_key = os.environ.get("CAMPAIGN_BOT_SIGNING_KEY")
    env_cmd = os.environ.get(server.SERVER_CMD_ENV)
    return {
        "out": out,
        "signing_key": signing_key or (Path(env_key) if env_key else cfg.signing_key),
        "server_cmd": server_cmd or env_cmd or cfg.server.command,
        "container": cfg.server.container if container is None else container,
        "device_tool": device_tool or cfg.devices.tool,
        "media_device": media_device or cfg.media.device,
        "lpips_weights": lpips_weights or cfg.media.lpips_weights,
        "lpips_sha256": lpips_sha256 or cfg.media.lpips_sha256,
        "server_user": cfg.isolation.user,
        "server_pass_env": list(cfg.server.pass_env),
        "server_env": dict(cfg.server.env),
    }


def publish_bundle_dir(out: Path) -> None:
    """Under GitHub Actions (``$GITHUB_OUTPUT`` set), append ``bundle_dir=OUT`` to the step's
    outputs so that the upload step finds the bundle wherever the runner config put it."""
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        return
    value = str(out.resolve())
    if "\n" in value or "\r" in value:
        return  # never write a line break into the outputs file
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(f"bundle_dir={value}\n")


def keygen_cmd(
    out: Annotated[Path, typer.Argument(help="Private key file to create (mode 0600).")],
) -> None:
    """Create an ed25519 signing key for the screen runner: OUT (private, PEM PKCS#8) and
    OUT.pub (public, PEM; append it to the trusted keys file of `campaign-bot check`)."""
    from evidence.console import print_error
    from runners.signer import generate_key

    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "the folder does not exist"
        print_error(f"{out}: {folder}: {what}; "
                    f"create it first (e.g. `mkdir -p -m 700 {folder}`), then run "
                    "keygen again")
        raise typer.Exit(EXIT_USAGE)
    try:
        pub = generate_key(out)
    except (FileExistsError, OSError) as exc:
        why = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
        print_error(why)
        raise typer.Exit(EXIT_USAGE) from None
    Console(highlight=False).print(f"private key: {out}\npublic key:  {pub}\n"
                                   f"{pub.read_text().splitlines()[0]}")


def doctor_runner_cmd(
    campaign: Annotated[Path | None, typer.Option(
        help="Campaign directory (holds campaign.toml): compare the vLLM-Omni pin, check its "
             "pool's devices and whether it has lossy tracks.")] = None,
    checkout: Annotated[Path | None, typer.Option(
        help="A checkout of the campaign repository: which trusted-keys.pem list this "
             "host's signing key.")] = None,
) -> None:
    """Check this runner host: campaign-bot, runner config, vLLM-Omni and its pin, device tool
    and idle devices, signing key (mode, fingerprint, who trusts it), LPIPS weights, media
    device, output folder.  Exit 0 all passed, 1 a check failed, 2 unreadable config or
    campaign."""
    from evidence.console import output_console, print_error
    from evidence.doctor import print_checks
    from runners.config import RunnerConfigError, load
    from runners.doctor import run_checks
    from runners.screen import UsageError, load_scope

    try:
        loaded = load()
        scope = load_scope(campaign) if campaign is not None else None
    except (RunnerConfigError, UsageError) as exc:
        print_error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    if checkout is not None and not checkout.is_dir():
        print_error(f"--checkout {checkout}: not a directory")
        raise typer.Exit(EXIT_USAGE)
    raise typer.Exit(print_checks(output_console(), "campaign-bot doctor runner",
                                  run_checks(loaded, scope, checkout)))



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

    from evidence.console import output_console, print_error
    from runners.screen import UsageError, load_scope
    from runners.server import build_command
    from runners.upstream import FlagCheckUnavailable, check_flag_lines

    try:
        scope = load_scope(campaign)
    except UsageError as exc:
        print_error(str(exc))
        raise typer.Exit(EXIT_USAGE) from None
    arms = [("control", build_command(scope.serving, None, host="127.0.0.1",
                                      port=scope.serving.port, server_cmd="vllm serve"))]
    arms += [(c.name, build_command(scope.serving, c, host="127.0.0.1",
                                    port=scope.serving.port, server_cmd="vllm serve"))
             for c in scope.candidates]
    try:
        res = check_flag_lines(arms, python=python)
    except (FlagCheckUnavailable, ValueError) as exc:
        print_error(f"cannot check flags: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    if as_json:
        typer.echo(json.dumps({"python": res.python, "vllm_omni": res.vllm_omni, "arms": [
            {"arm": a.arm, "argv": a.argv, "exit": a.exit, "message": a.message}
            for a in res.arms]}, indent=2))
    else:
        out = output_console()
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
    """Add the runner's commands (``screen``, ``keygen``, ``runner check-flags``, ``doctor
    runner``) to ``app``."""
    from evidence.cli import DOCTOR_HELP, command_group

    app.command("screen")(screen_cmd)
    app.command("keygen")(keygen_cmd)
    runner = typer.Typer(help="Runner-side checks against the pinned vLLM-Omni.",
                         no_args_is_help=True, rich_markup_mode=None)
    runner.command("check-flags")(check_flags_cmd)
    app.add_typer(runner, name="runner")
    command_group(app, "doctor", DOCTOR_HELP).command("runner")(doctor_runner_cmd)
