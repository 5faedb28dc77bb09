"""The ``campaign-bot`` command line (typer + rich).

The foundation commands (``check``, ``schema``) live here; other packages add theirs as
plug-ins through the ``campaign_bot.cli`` entry-point group, so that ``evidence`` never imports
``bot`` or ``runners``.

Exit codes, for every command: 0 clean, 1 problems found, 2 unreadable input or bad usage.

Start-up cost
-------------
Every command starts in the time it takes to import typer, its own plug-in module and what
its body needs: ``campaign-bot --help`` imports no pydantic model, PyAV, numpy, scipy, torch,
SQLAlchemy, FastAPI or PyGithub; ``check`` and ``schema`` load no plug-in at all (their names
are reserved); ``check`` imports scipy only when a verdict needs it
(``benchmarks/startup.py`` measures it, ``tests/test_startup.py`` enforces it).  The console
script enters through :mod:`evidence.launch`, which starts hashing a bag for ``check
DIRECTORY`` before this module (and typer) is imported.  Help texts are prepared only when
help is shown (:func:`escape_help_on_demand`), so ``check --json`` never
imports rich; every evidence model is declared with pydantic's ``defer_build``, so a model's
validator is built the first time it is used, and a check builds only those it needs.

Plug-in contract
----------------
A package adds commands with one entry point per plug-in module in its ``pyproject.toml``::

    [project.entry-points."campaign_bot.cli"]
    NAME = "package.module:register"

1. ``register(app: typer.Typer) -> None`` adds commands (``app.command("x")(fn)``) and
   command groups (``app.add_typer(sub_app, name="x")``) and nothing else.  ``NAME`` only
   names the plug-in in messages.
2. The plug-in module, and every package ``__init__`` above it, imports at module level
   only the standard library, ``typer`` and ``rich``: the module is imported to build
   ``campaign-bot --help`` and to run *every* other plug-in's commands.  Everything else
   (pydantic models and settings, PyAV, numpy, scipy, torch, SQLAlchemy, FastAPI, uvicorn,
   PyGithub, asyncio, other modules of the package) is imported inside the command
   functions' bodies.  Types used in command signatures are stdlib types or small
   ``enum.StrEnum`` classes defined in the plug-in module itself.
3. Command names are unique: ``check`` and ``schema`` (:data:`CORE_COMMANDS`) belong to this
   module and are never replaced; a name another plug-in already added is refused.  A
   refused name, an import error or an exception in ``register`` is one warning line on
   stderr naming the entry point; the plug-in adds nothing and every other command works.

``tests/test_startup.py`` checks rule 2 for every installed plug-in.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from evidence.hashing import HashPool

PLUGIN_GROUP = "campaign_bot.cli"
"""Entry-point group of the command plug-ins (see the module docstring)."""

CORE_COMMANDS = frozenset({"check", "schema"})
"""Commands defined here: running one of them loads no plug-in, and no plug-in replaces one."""

SCHEMA_NAMES = ("campaign", "receipt", "status", "media-report", "finding", "probe",
                "trace-summary", "check-report")
"""Document types ``campaign-bot schema NAME`` prints (the keys of
:data:`evidence.models.SCHEMA_MODELS` plus ``probe``, ``trace-summary`` and ``check-report``;
a test keeps them equal), named without importing the models."""


def _all_schemas() -> dict[str, Any]:
    from evidence.check import CheckReport
    from evidence.models import SCHEMA_MODELS
    from evidence.operator_probe import OperatorProbe
    from evidence.trace_summary import TraceSummary

    return {**SCHEMA_MODELS, "probe": OperatorProbe, "trace-summary": TraceSummary,
            "check-report": CheckReport}


EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2

app = typer.Typer(
    name="campaign-bot",
    help="Evidence, screens and status for ML inference performance campaigns.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: names are never cut, help texts wrap to the terminal (escape_help)
    rich_markup_mode=None,
    # every command inherits these: -h, and help as wide as the terminal (click's default
    # stops at 80 columns)
    context_settings={"help_option_names": ["-h", "--help"],
                      "max_content_width": shutil.get_terminal_size((80, 24)).columns},
)


def _stderr() -> Console:
    """The rich console on stderr, made on first use (``check --json`` never imports rich):
    :func:`evidence.console.output_console`'s, shared with :func:`print_error`."""
    from evidence.console import _stderr as shared

    return shared()


def print_error(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr as one line: :func:`evidence.console.print_error`,
    the one error style of every ``campaign-bot`` command."""
    from evidence.console import print_error as shared

    shared(message)


def escape(text: str) -> str:
    """``text`` with rich markup escaped (:func:`rich.markup.escape`, imported on first use)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _progress() -> _LazyProgress | None:
    """The hashing progress bar when stderr is a terminal (as rich judges it), else None."""
    if not sys.stderr.isatty() and "FORCE_TERMINAL" not in os.environ:
        return None  # the common non-interactive case, decided without importing rich
    return _LazyProgress(_stderr()) if _stderr().is_terminal else None


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("campaign-bot")
        except PackageNotFoundError:  # run from a source tree that was never installed
            from evidence import __version__ as v
        sys.stdout.write(f"campaign-bot {v}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option(
        "--version", help="Print the installed version and exit.", is_eager=True,
        callback=_version)] = False,
) -> None:
    """Evidence, screens and status for ML inference performance campaigns."""


@app.command("schema")
def schema_cmd(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCHEMA_NAMES)}")],
) -> None:
    """Print the JSON Schema of one evidence document type."""
    models = _all_schemas()
    model = models.get(name)
    if model is None:
        print_error(f"unknown schema {name!r}; valid: {', '.join(models)}")
        raise typer.Exit(EXIT_USAGE)
    sys.stdout.write(schema_text(name) + "\n")


def schema_text(name: str) -> str:
    """The JSON Schema of document type ``name`` as committed under evidence/schemas/."""
    model = _all_schemas()[name]
    return json.dumps(model.model_json_schema(by_alias=True), indent=2)


class _LazyProgress:
    """A rich progress bar on stderr that appears only once hashing has run for 1 s."""

    def __init__(self, console: Console, delay_s: float = 1.0) -> None:
        self.console = console
        self.t0 = time.monotonic()
        self.delay = delay_s
        self.bar: Any = None
        self.task: Any = None
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.t0 < self.delay:
                return
            with self.lock:
                if self.bar is None:
                    from rich.progress import (
                        BarColumn,
                        DownloadColumn,
                        Progress,
                        TimeRemainingColumn,
                        TransferSpeedColumn,
                    )

                    bar = Progress("hashing", BarColumn(), DownloadColumn(),
                                   TransferSpeedColumn(), TimeRemainingColumn(),
                                   console=self.console, transient=True)
                    self.task = bar.add_task("hashing", total=total)
                    bar.start()
                    self.bar = bar
        self.bar.update(self.task, completed=done, total=total)  # total grows as files queue

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command("check")
def check_cmd(
    directory: Annotated[Path, typer.Argument(help="Campaign or bundle directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    details: Annotated[bool, typer.Option(
        "--details", help="Print every table and every finding (default: a one-screen "
        "summary).")] = False,
    max_file_bytes: Annotated[int, typer.Option(
        help="Largest manifest or other file read whole (payload files are streamed).",
        min=1)] = 64 << 20,
    max_document_bytes: Annotated[int, typer.Option(
        help="Largest JSON or TOML file parsed whole (receipts, statuses, media reports, "
             "integrity maps): a larger campaign-bot document is a P1 finding.",
        min=1)] = 8 << 20,
    base: Annotated[str | None, typer.Option(
        "--base", metavar="REF",
        help="Git revision of the default branch: frozen receipts are compared with it "
             "(FROZEN_RECEIPT_CHANGED), and its campaign.toml is the frozen scope signed "
             "bundles must have run under (CONTROL_REDEFINED; default: the clone's "
             "origin/HEAD).")] = None,
    claims: Annotated[Path | None, typer.Option(
        "--claims", metavar="FILE",
        help="Prose (PR description, status comment) whose numbers must trace to receipts "
             "or verdicts (UNTRACEABLE_CLAIM, SUMMED_GAINS, "
             "CLAIM_CITES_TARGET_AS_RESULT).")] = None,
    prior_noise: Annotated[bool, typer.Option(
        "--prior-noise",
        help="Also show the labelled, model-based prior-noise decision where the campaign "
             "holds >= 10 historical control-vs-control differences.")] = False,
    trusted_keys: Annotated[Path | None, typer.Option(
        "--trusted-keys",
        help="File of trusted ed25519 public keys (PEM blocks), instead of the campaign "
             "folder's trusted-keys.pem: every signed bundle (attestation.dsse.json) under "
             "DIRECTORY must verify, every file in it must be covered by its signed "
             "manifests, and at least one must exist; documents are read from a signed "
             "bundle only as its signed manifests list them.")] = None,
    no_signatures: Annotated[bool, typer.Option(
        "--no-signatures",
        help="Do not verify signatures (by default the campaign folder's trusted-keys.pem, "
             "found as the bot finds it, verifies every signed bundle, and each unsigned "
             "bundle is a P1 finding).")] = False,
    campaign: Annotated[Path | None, typer.Option(
        "--campaign", metavar="DIR",
        help="The campaign whose campaign.toml and trusted-keys.pem judge DIRECTORY, a "
             "bundle kept outside it (a run's artifact, a runner's output folder).")] = None,
) -> None:
    """Validate every document and verify every manifest under DIRECTORY in one pass, then
    give per-track verdicts, screening decisions and review findings.

    Prints a summary that fits an 80x24 terminal; --details prints everything, --json one
    JSON document.  DIRECTORY may also be a repository root (it holds
    .github/campaign-bot.toml): each campaign its [campaigns] paths name is checked in turn
    (--json: a JSON array), and the exit status is the worst.

    Exit 0 clean, 1 problems found (any P0-P2 finding), 2 unreadable directory or bad usage.
    """
    from evidence import prestart
    from evidence.hashing import HashPool, prefetch_bag
    from evidence.keyfile import campaign_keys_file

    if no_signatures and trusted_keys is not None:
        print_error("--no-signatures and --trusted-keys exclude each other")
        raise typer.Exit(EXIT_USAGE)
    if campaign is not None and not (campaign / "campaign.toml").is_file():
        print_error(f"--campaign {campaign}: no campaign.toml there")
        raise typer.Exit(EXIT_USAGE)
    if campaign is None and not (directory / "campaign.toml").exists():
        from evidence.repository import RepositoryError, campaign_dirs

        try:
            found = campaign_dirs(directory)
        except RepositoryError as exc:
            print_error(str(exc))
            raise typer.Exit(EXIT_USAGE) from None
        if found is not None:  # a repository root: every campaign in turn
            _check_repository(directory, found, as_json, dict(
                details=details, max_file_bytes=max_file_bytes,
                max_document_bytes=max_document_bytes, base=base, claims=claims,
                prior_noise=prior_noise, trusted_keys=trusted_keys,
                no_signatures=no_signatures))
    found_keys = None if no_signatures or trusted_keys is not None else \
        campaign_keys_file(campaign if campaign is not None else directory)
    keys_label = None
    scratch = contextlib.ExitStack()
    if not no_signatures and trusted_keys is None:
        # keys a pull request brings are never trusted: in a clone that knows the default
        # branch, its trusted-keys.pem is the campaign's, as for the bot
        found_keys, keys_label = _default_branch_keys(
            campaign if campaign is not None else directory, base, found_keys, scratch)
    verify = trusted_keys is not None or found_keys is not None

    # The hashing threads start on a bag's payload before the document models are imported
    # (evidence.launch, before typer), so both cores hash while this thread imports and parses.
    early = prestart.EARLY_HASHING.take(directory)
    if early is not None and verify:  # signatures first: nothing is hashed before they hold
        early[0].close(cancel=True)
        early = None
    if early is not None:
        pool, progress = early
    else:
        progress = _progress()
        pool = HashPool(progress=progress, beneath=directory)
        if not verify and directory.is_dir():
            prefetch_bag(directory, pool)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(prestart.HASHING_SWITCH_INTERVAL_S)
    try:
        _check(pool, progress, directory, as_json, details, max_file_bytes,
               max_document_bytes, base, claims, prior_noise, trusted_keys,
               found_keys, no_signatures, campaign, keys_label)
    finally:
        sys.setswitchinterval(switch)
        scratch.close()
        pool.close(cancel=True)


def _default_branch_keys(directory: Path, base: str | None, found: Path | None,
                         scratch: contextlib.ExitStack) -> tuple[Path | None, str | None]:
    """``(keys file, label)`` for ``check``: the default branch's ``trusted-keys.pem`` of the
    campaign covering ``directory`` (written to a file in a folder ``scratch`` removes),
    labelled ``trusted-keys.pem at REF``, None when the default branch has none; ``(found,
    None)`` (the checkout's own file) when the clone does not know the default branch or the
    campaign is not on it (:func:`evidence.scope_binding.default_branch_keys`)."""
    import tempfile

    from evidence.keyfile import TRUSTED_KEYS_FILE, campaign_folder
    from evidence.scope_binding import default_branch_keys

    folder = campaign_folder(directory)
    at_base = default_branch_keys(folder, base) if folder is not None else None
    if at_base is None:
        return found, None
    label, pem = at_base
    if pem is None:
        return None, label
    tmp = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="campaign-bot-keys-")))
    (tmp / TRUSTED_KEYS_FILE).write_bytes(pem)
    return tmp / TRUSTED_KEYS_FILE, label


def _check_repository(root: Path, campaigns: list[Path], as_json: bool,
                      options: dict[str, Any]) -> None:
    """``check`` of each campaign of the repository at ``root`` in turn (as
    ``check CAMPAIGN``), each under a ``== path`` line, or one JSON array with ``--json``;
    raises ``typer.Exit`` with the worst exit status (2 when there is no campaign)."""
    import contextlib
    import io
    import json

    if not campaigns:
        print_error(f"{root}: no campaign directory (a folder with campaign.toml) matches the "
                    "[campaigns] paths of .github/campaign-bot.toml")
        raise typer.Exit(EXIT_USAGE)
    worst, docs = 0, []
    for n, camp in enumerate(campaigns):
        rel = camp.relative_to(root).as_posix()
        buf = io.StringIO()
        if not as_json:
            print(f"{chr(10) if n else ''}== {rel}", flush=True)
        try:
            with contextlib.redirect_stdout(buf) if as_json else contextlib.nullcontext():
                check_cmd(directory=camp, as_json=as_json, campaign=None, **options)
            code = EXIT_OK
        except typer.Exit as exc:
            code = exc.exit_code
        worst = max(worst, code)
        if as_json and buf.getvalue().strip():
            docs.append(json.loads(buf.getvalue()))
    if as_json:
        sys.stdout.write(json.dumps(docs, indent=2) + "\n")
    else:
        print(f"\nrepository {root}: {len(campaigns)} campaign(s) checked, exit {worst}")
    raise typer.Exit(worst)


def _check(pool: HashPool, progress: _LazyProgress | None, directory: Path, as_json: bool,
           details: bool, max_file_bytes: int, max_document_bytes: int, base: str | None,
           claims: Path | None, prior_noise: bool, trusted_keys: Path | None,
           found_keys: Path | None, no_signatures: bool, campaign: Path | None = None,
           keys_label: str | None = None) -> None:
    """The body of ``campaign-bot check`` once the hashing pool runs: raises
    ``typer.Exit`` with the exit code.  ``found_keys``: the campaign folder's keys file
    (:func:`evidence.signing.campaign_keys_file`); an empty or unparsable one is a P1
    ``TRUSTED_KEYS_UNUSABLE``, not a usage error."""
    from evidence.check import SignatureSummary, check_campaign, render
    from evidence.findings import BaseRefError
    from evidence.models import Finding

    if claims is not None and not claims.is_file():
        why = "not a regular file" if claims.exists() else "no such file"
        print_error(f"--claims {claims}: {why}")
        raise typer.Exit(EXIT_USAGE)
    keys = None
    summary = SignatureSummary(source="skipped" if no_signatures else "none")
    setup: list[Finding] = []
    if trusted_keys is not None or found_keys is not None:
        # cryptography (0.02 s to import) only where keys are in use
        from evidence.signing import KeyFileError, load_trusted_keys
    if trusted_keys is not None:
        try:
            keys = load_trusted_keys(trusted_keys)
        except KeyFileError as e:
            print_error(f"--trusted-keys: {e}")
            raise typer.Exit(EXIT_USAGE) from None
        summary = SignatureSummary(source="--trusted-keys", keys_file=str(trusted_keys))
    elif found_keys is not None:
        shown = keys_label or (os.path.relpath(found_keys, directory) if found_keys.parent ==
                               directory.absolute() else str(found_keys))
        try:
            keys = load_trusted_keys(found_keys)
            summary = SignatureSummary(source="campaign", keys_file=shown)
        except KeyFileError as e:
            summary = SignatureSummary(source="unusable", keys_file=shown)
            setup.append(Finding(
                rule="TRUSTED_KEYS_UNUSABLE", severity="P1", path=shown,
                message=f"{str(e).split(': ', 1)[-1]}: the bot refuses every screen bundle "
                        "of this campaign, and no signature was verified here",
                resolution="add each runner's PEM public key (runner guide, signing keys), "
                           "or remove the file"))
    if keys is not None:
        summary.key_ids = sorted(keys)
    try:
        frozen, read_blob = None, None
        if keys is not None:  # the default branch's campaign.toml judges signed bundles
            from evidence.scope_binding import frozen_from_git

            frozen, read_blob = frozen_from_git(campaign or directory, base)
        rep = check_campaign(directory, max_file_bytes=max_file_bytes,
                             max_document_bytes=max_document_bytes, progress=progress,
                             base_ref=base, claims_file=claims, prior_noise=prior_noise,
                             trusted_keys=keys, hasher=pool, signatures=summary,
                             require_signed=trusted_keys is not None,
                             setup_findings=setup, campaign_dir=campaign,
                             frozen_scope=frozen, read_blob=read_blob)
    except BaseRefError as e:
        if progress:
            progress.stop()
        print_error(f"--base {base}: {e}")
        raise typer.Exit(EXIT_USAGE) from None
    except (ValueError, UnicodeDecodeError) as e:
        if progress:
            progress.stop()
        print_error(f"cannot check {directory}: {e}")
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as e:
        if progress:
            progress.stop()
        why = f"{directory}: {e.strerror}" if e.strerror else str(e)
        print_error(f"cannot read {why}")
        raise typer.Exit(EXIT_USAGE) from None
    if progress:
        progress.stop()
    if as_json:
        sys.stdout.write(report_json(rep) + "\n")
    else:
        from rich.console import Console

        out = Console(highlight=False)
        if details and not out.is_terminal and "COLUMNS" not in os.environ:
            out.width = 160  # a file or pipe: wide tables, unless COLUMNS says otherwise
        render(rep, out, details=details)
    raise typer.Exit(rep.exit_code)


def printable(value: Any) -> Any:
    """``value`` (nested dicts, lists and strings) with every string made encodable as
    UTF-8: a file name's undecodable bytes (Python's ``surrogateescape``) become ``\\xNN``
    escapes, any other lone surrogate ``\\uNNNN``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            pass
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable(v) for v in value]
    return value


def report_json(rep: Any) -> str:
    """``check --json``'s document for the report ``rep`` (a pydantic model): its JSON, or,
    when a string in it cannot be written as UTF-8 (a file name that is not valid UTF-8),
    the same report with such strings made :func:`printable`."""
    from pydantic_core import PydanticSerializationError

    try:
        return str(rep.model_dump_json(indent=2, by_alias=True))
    except PydanticSerializationError:
        clean = printable(rep.model_dump(by_alias=True))
        return str(type(rep).model_validate(clean).model_dump_json(indent=2, by_alias=True))


def command_group(parent: typer.Typer, name: str, help_text: str) -> typer.Typer:
    """The sub-command group ``name`` of ``parent``, created on first use, so that several
    plug-ins can add commands to one group (``doctor runner`` from runners/, ``doctor bot``
    from bot/)."""
    for info in parent.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(name=name, help=help_text, no_args_is_help=True,
                        add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=None)
    parent.add_typer(group, name=name)
    return group


DOCTOR_HELP = "Check a runner host or the bot service; print a fix for each failure."



def _names(app_: typer.Typer) -> list[str]:
    """Names of the commands and command groups registered on ``app_``, in order."""
    from typer.main import get_command_name, solve_typer_info_defaults

    out = []
    for c in app_.registered_commands:
        cb = c.callback
        out.append(c.name or (get_command_name(cb.__name__) if cb else ""))
    for g in app_.registered_groups:
        out.append(solve_typer_info_defaults(g).name or "")
    return out


def _group(app_: typer.Typer, name: str) -> typer.Typer | None:
    """The command group ``name`` registered on ``app_`` (None: no such group)."""
    from typer.main import solve_typer_info_defaults

    for g in app_.registered_groups:
        if solve_typer_info_defaults(g).name == name and g.typer_instance is not None:
            return g.typer_instance
    return None


@functools.cache
def _load_plugins() -> list[str]:
    """Add every ``campaign_bot.cli`` plug-in's commands to :data:`app`, once per process.

    Each plug-in registers into a scratch app first, so one that fails adds nothing.  A
    command group that an earlier plug-in added (``doctor``, made with :func:`command_group`)
    takes the later plug-in's sub-commands when none of their names is taken.  Returns the
    problems as one line each (import error, exception in ``register``, a command name
    already taken); the caller prints them.  A second call does nothing and
    returns the first call's problems (:func:`functools.cache`).
    """
    from importlib.metadata import entry_points

    problems: list[str] = []
    taken = set(_names(app)) | CORE_COMMANDS
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: (e.name, e.value)):
        scratch = typer.Typer()
        try:
            ep.load()(scratch)
        except Exception as e:  # noqa: BLE001 - a broken plug-in must not break the others
            first = str(e).splitlines()[0] if str(e) else ""
            problems.append(f"plug-in {ep.name!r} ({ep.value}) not loaded: "
                            f"{type(e).__name__}: {first}")
            continue
        cmd_names = _names(scratch)
        n_cmds = len(scratch.registered_commands)
        for i, (name, info) in enumerate(zip(
                cmd_names, [*scratch.registered_commands, *scratch.registered_groups],
                strict=True)):
            if name and name in taken and i >= n_cmds:
                shared = _group(app, name)
                sub = getattr(info, "typer_instance", None)
                if shared is not None and sub is not None:
                    # one group filled by several plug-ins (``doctor runner``, ``doctor bot``):
                    # its sub-commands join the group unless one of them is taken
                    have = set(_names(shared))
                    clash = [n for n in _names(sub) if not n or n in have]
                    if not clash:
                        shared.registered_commands.extend(sub.registered_commands)
                        shared.registered_groups.extend(sub.registered_groups)
                        continue
                    problems.append(f"plug-in {ep.name!r} ({ep.value}): command {name!r} "
                                    f"is already taken, and its sub-command(s) "
                                    f"{', '.join(repr(n) for n in clash)} too; not added")
                    continue
            if not name or name in taken:
                problems.append(f"plug-in {ep.name!r} ({ep.value}): command "
                                f"{name or '(unnamed)'!r} is already taken; not added")
                continue
            taken.add(name)
            if i < n_cmds:
                app.registered_commands.append(info)  # type: ignore[arg-type]
            else:
                app.registered_groups.append(info)  # type: ignore[arg-type]
    return problems


def reflow(text: str) -> str:
    """``text`` with the hard line breaks of a docstring joined inside each paragraph.

    A paragraph is text between blank lines; its lines are joined with one space so that
    the terminal, not the source file, decides where a line of ``--help`` ends.  A
    paragraph that is a list, a table or preformatted (a line starting with ``-``, ``*``,
    ``|``, a space, or click's ``\\b`` marker) keeps its lines.  Returns the new text."""
    out = []
    for para in text.split("\n\n"):
        lines = para.split("\n")
        keep = any(ln.startswith(("-", "*", "|", " ", "\b")) for ln in lines[1:]) or \
            para.startswith("\b")
        out.append(para if keep else " ".join(ln.strip() for ln in lines))
    return "\n\n".join(out)


def plain_rst(text: str) -> str:
    """``text`` with reStructuredText inline literals (````x````, as docstrings write code)
    shown as Markdown-style backticks (```x```), the way the rest of the help quotes
    commands."""
    return text.replace("``", "`")


def escape_help(cmd: Any) -> Any:
    """``cmd`` (a click command as typer builds it) and its sub-commands with every help text
    (command help, short help, epilog, option and argument help) made plain:
    reStructuredText literals as backticks (:func:`plain_rst`), command help
    :func:`reflow`-ed, and on/off flags shown without a value placeholder.  Help is click's
    plain text (the app's ``rich_markup_mode=None``): bracketed text such as ``[default:
    ...]`` needs no escaping, option names are never cut to fit a narrow terminal (rich's
    option table cut them at 80 columns: ``--idle-timeout…``), and only the help texts
    wrap.  Returns ``cmd``."""
    for attr in ("help", "short_help", "epilog"):
        if isinstance(getattr(cmd, attr, None), str):
            setattr(cmd, attr, reflow(plain_rst(getattr(cmd, attr))))
    for param in getattr(cmd, "params", ()):
        if isinstance(getattr(param, "help", None), str):
            param.help = plain_rst(param.help)
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""  # an on/off flag takes no value: show none (typer shows <bool>)
    for sub in (getattr(cmd, "commands", None) or {}).values():  # a group's sub-commands
        escape_help(sub)
    return cmd


def escape_help_on_demand(root: Any) -> Any:
    """``root`` (a click command) whose help texts are escaped (:func:`escape_help`) the
    first time any command of its tree formats its help, not before: escaping imports rich
    and walks every help text, which a command that only runs (``check --json``) never
    shows.  Returns ``root``."""
    state = {"escaped": False}

    def wrap(cmd: Any) -> None:
        original = cmd.format_help

        def format_help(ctx: Any, formatter: Any) -> Any:
            if not state["escaped"]:
                state["escaped"] = True
                escape_help(root)
            help_option = cmd.get_help_option(ctx)  # made per command on first use
            if help_option is not None and help_option.metavar is None:
                help_option.metavar = ""
            return original(ctx, formatter)

        cmd.format_help = format_help  # an instance attribute: click calls self.format_help
        for sub in (getattr(cmd, "commands", None) or {}).values():
            wrap(sub)

    wrap(root)
    return root


def command(*, plugins: bool = True) -> Any:
    """The ``campaign-bot`` click command as the console script runs it: the typer app with
    (unless ``plugins`` is False) its plug-ins from the entry-point group
    ``campaign_bot.cli``, help texts escaped when help is first shown
    (:func:`escape_help_on_demand`).  A plug-in that cannot be loaded is reported as one
    warning line on stderr and adds nothing."""
    if plugins:
        for line in _load_plugins():
            _stderr().print(f"[yellow]warning:[/] {escape(line)}", highlight=False)
    return escape_help_on_demand(typer.main.get_command(app))


def main() -> None:
    """Entry point (the console script runs it through :func:`evidence.launch.main`, which
    first starts hashing for ``check DIRECTORY``): load the plug-ins unless a core command
    runs, then run the app (help texts escaped when shown: :func:`escape_help_on_demand`)."""
    from evidence.prestart import command_of

    run_command(command(plugins=command_of(sys.argv[1:]) not in CORE_COMMANDS))


def run_command(cmd: Any, args: list[str] | None = None) -> None:
    """Run the click command ``cmd`` (``args``, default ``sys.argv[1:]``) and exit with its
    status, reporting click's own usage errors (a missing argument, an unknown option or
    command, a bad value) in the one error style: ``error: MESSAGE (see `COMMAND --help`)``
    on one line, exit 2, instead of click's usage block.  Raises :class:`SystemExit`."""
    # typer carries its own copy of click (typer._click) and exports only some of its
    # exceptions: BadParameter derives from that click's UsageError and ClickException
    mro: list[Any] = [c for c in typer.BadParameter.__mro__
                      if issubclass(c, Exception)]
    usage_error = next(c for c in mro if c.__name__ == "UsageError")
    click_exception = next(c for c in mro if c.__name__ == "ClickException")
    try:
        rv = cmd.main(args=args, prog_name="campaign-bot", standalone_mode=False)
    except usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group without a command: its help
            exc.show()
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        print_error(exc.format_message() + hint)
        sys.exit(exc.exit_code)
    except click_exception as exc:
        print_error(exc.format_message())
        sys.exit(exc.exit_code)
    except typer.Abort:
        print_error("aborted")
        sys.exit(1)
    # without standalone mode click returns a typer.Exit's status; commands return None
    sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
