"""``campaign-bot init``: the files a campaign repository needs, from templates packaged with
this version (``templates/repo/``), and the drift check between a repository's screen
workflow and this version's template.

Files written (paths relative to the repository)::

    .github/campaign-bot.toml          every key present, commented, at its default
    .github/workflows/screen.yml       the screen workflow of this version, byte for byte
    campaigns/NAME/campaign.toml       a skeleton: values marked ``# FILL`` are blanks
    campaigns/NAME/trusted-keys.pem    how to add runner keys (no key)

Rules: a file that does not exist is created; one with the same bytes is left alone
("unchanged"); one that differs is kept ("kept"), so running init twice is harmless.
``force`` replaces only the packaged files that are not the user's to edit (the screen
workflow, :data:`PACKAGED`); the user-owned files (``.github/campaign-bot.toml``,
``campaign.toml``, ``trusted-keys.pem``) are created when missing and never overwritten, so a
filled-in campaign, appended runner keys or a customised config survive ``init --force``.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from jinja2 import Environment, StrictUndefined

from bot.repo_config import CONFIG_PATH, SCREEN_WORKFLOW, ConfigProblem, parse
from evidence.models import DEFAULT_EVIDENCE_PATHS

CAMPAIGN_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
WORKFLOWS_DIR = ".github/workflows"
FILL = re.compile(r"#\s*FILL:?\s*(.*)$")
OLD_WORKFLOW_SIGNS = (
    ("vars.CAMPAIGN_BOT_POOL_LABELS",
     "it reads the CAMPAIGN_BOT_POOL_LABELS repository variable, which this version no longer "
     "uses: runner labels now come from the campaign's [pool] runner_labels as the runs_on "
     "input (delete the variable once the workflow is replaced)"),
    ("CAMPAIGN_BOT_SIGNING_KEY:",
     "it sets CAMPAIGN_BOT_SIGNING_KEY: host settings now live in each runner's runner config "
     "(/etc/campaign-bot/runner.toml)"),
)


def is_packaged(rel: str) -> bool:
    """True for a path init may replace under ``force``: a workflow under
    ``.github/workflows/`` (the bot's own file, compared by ``init --check``); every other
    file init writes belongs to the user once it exists."""
    return rel.startswith(WORKFLOWS_DIR + "/")


class InitError(Exception):
    """Bad usage (campaign name, target directory); the message says what to fix."""


def template_bytes(name: str) -> bytes:
    """A file of ``templates/repo/`` as packaged with this version."""
    return resources.files("templates").joinpath("repo", name).read_bytes()


def workflow_template() -> bytes:
    """The screen workflow of this version (``templates/repo/screen.yml``)."""
    return template_bytes(SCREEN_WORKFLOW)


def _render(name: str, **ctx: object) -> bytes:
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True,
                      autoescape=False)  # TOML and PEM text, not HTML
    return env.from_string(template_bytes(name).decode()).render(**ctx).encode()


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join('"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
                           for x in items) + "]"


def repository_files(campaign: str, runner_labels: list[str] | None = None) -> dict[str, bytes]:
    """``{path: bytes}`` that init writes for campaign ``campaign``.  Raises
    :class:`InitError` for a name that cannot be a campaign id or directory."""
    if not CAMPAIGN_NAME.match(campaign) or campaign in (".", ".."):
        raise InitError(f"--campaign {campaign!r}: use 1-100 of A-Z a-z 0-9 . _ - (it becomes "
                        "the campaign id and its directory under campaigns/)")
    labels = [x.strip() for x in runner_labels or [] if x.strip()]
    path = f"campaigns/{campaign}"
    return {
        CONFIG_PATH: template_bytes("campaign-bot.toml"),
        f"{WORKFLOWS_DIR}/{SCREEN_WORKFLOW}": workflow_template(),
        f"{path}/campaign.toml": _render("campaign.toml.j2", campaign=campaign, path=path,
                                         runner_labels=_toml_list(labels) if labels else "",
                                         evidence_paths=_toml_list(list(DEFAULT_EVIDENCE_PATHS))),
        f"{path}/trusted-keys.pem": _render("trusted-keys.pem.j2", campaign=campaign),
    }


@dataclass(frozen=True)
class Blank:
    """A value of the campaign.toml skeleton to fill: dotted ``key``, 1-based ``line``, and
    what to put there."""

    key: str
    line: int
    hint: str


def _still_empty(value: str) -> bool:
    """Whether the TOML value text of a ``# FILL`` line is still the skeleton's empty one:
    ``""``, ``[]`` or an inline table with an empty string (``sha256 = ""``).  A value that
    does not parse counts as filled: ``check`` reports it with its line."""
    try:
        v = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return False
    if isinstance(v, dict):
        return any(x in ("", []) for x in v.values())
    return v in ("", [])


def blanks(text: str) -> list[Blank]:
    """The ``# FILL`` lines of a campaign.toml whose value is still empty, in file order: a
    line filled in place keeps its ``# FILL`` comment but is no longer a blank."""
    out: list[Blank] = []
    table = ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if m:
            table = m.group(1)
            continue
        m = re.match(r"^([A-Za-z0-9_-]+)\s*=", line)
        f = FILL.search(line)
        if m and f and _still_empty(line[m.end():f.start()].strip()):
            key = f"{table}.{m.group(1)}" if table else m.group(1)
            out.append(Blank(key, n, f.group(1).strip()))
    return out


@dataclass
class InitReport:
    """What init did: ``{path: created | unchanged | kept | overwritten}`` and the blanks of
    the campaign.toml it wrote (or found)."""

    root: Path
    actions: dict[str, str] = field(default_factory=dict)
    blanks: list[Blank] = field(default_factory=list)
    campaign_path: str = ""

    @property
    def kept(self) -> list[str]:
        """Files that differ from this version's and were not overwritten."""
        return [p for p, a in self.actions.items() if a == "kept"]


def init_repository(root: Path, campaign: str, *, runner_labels: list[str] | None = None,
                    force: bool = False) -> InitReport:
    """Write the files of :func:`repository_files` under ``root`` (created if missing).

    Never follows a symlink out of ``root``; a differing file is kept, except that ``force``
    replaces a packaged one (:func:`is_packaged`).  Raises :class:`InitError` for a bad name
    or an unusable ``root``, and ``OSError`` as the filesystem does."""
    files = repository_files(campaign, runner_labels)
    rep = InitReport(root, campaign_path=f"campaigns/{campaign}")
    _write(root, files, rep, force)
    camp = root / rep.campaign_path / "campaign.toml"
    rep.blanks = blanks(camp.read_text(encoding="utf-8", errors="replace"))
    return rep


def pin_inputs(campaign_dir: Path, files: list[Path]) -> list[tuple[str, str, str]]:
    """Pin each of ``files`` in ``campaign_dir/campaign.toml``: the ``[inputs]`` entry whose
    ``path`` is the file's name gets the file's SHA-256, and the file is copied beside
    campaign.toml when it is elsewhere (inputs are read relative to the campaign directory).

    Returns ``(entry key, path, sha256)`` per file.  Raises :class:`InitError` naming the
    file when it is not a regular file, when no entry has its name as ``path`` (the message
    lists the entries' paths), or when a different file of that name is already beside
    campaign.toml (never overwritten); nothing is written unless every file is usable."""
    toml = campaign_dir / "campaign.toml"
    lines = toml.read_text(encoding="utf-8").splitlines(keepends=True)
    entry = re.compile(r'^\s*([A-Za-z0-9_-]+)\s*=\s*\{[^}]*\bpath\s*=\s*"([^"]*)"')
    section = ""
    entries: dict[str, tuple[int, str]] = {}  # path -> (line index, key)
    for n, line in enumerate(lines):
        head = re.match(r"^\s*\[\[?\s*([^\]]+?)\s*\]", line)
        if head:
            section = head.group(1)
            continue
        m = entry.match(line)
        if section == "inputs" and m:
            entries[m.group(2)] = (n, m.group(1))
    plan: list[tuple[Path, str, int, str, str, bytes]] = []
    for f in files:
        if not f.is_file():
            raise InitError(f"--inputs {f}: not a regular file")
        if f.name not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise InitError(f"--inputs {f}: no [inputs] entry of {toml} has path "
                            f'"{f.name}" (their paths: {known})')
        data = f.read_bytes()
        dest = campaign_dir / f.name
        if dest.exists() and not dest.samefile(f) and dest.read_bytes() != data:
            raise InitError(f"--inputs {f}: {dest} exists with other content; not replacing it")
        n, key = entries[f.name]
        plan.append((f, f.name, n, key, hashlib.sha256(data).hexdigest(), data))
    out = []
    for _f, name, n, key, digest, data in plan:
        dest = campaign_dir / name
        if not dest.exists():
            dest.write_bytes(data)
        code, sep, comment = lines[n].partition("#")
        code = re.sub(r'\bsha256\s*=\s*"[^"]*"', f'sha256 = "{digest}"', code)
        # the FILL note is done with: keep any other comment
        comment = "" if FILL.search("#" + comment) else sep + comment
        lines[n] = code.rstrip() + ("  " + comment.rstrip() if comment else "") + "\n"
        out.append((f"inputs.{key}", name, digest))
    tmp = toml.with_name(".campaign.toml.campaign-bot-init")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(toml)
    return out


def refresh_workflow(root: Path, *, force: bool) -> InitReport:
    """``init --force`` without ``--campaign``: write this version's screen workflow at the
    path ``init --check`` compares (``[screen] workflow`` of the repository config, default
    screen.yml), replacing a differing one when ``force``; nothing else is touched.  Raises
    :class:`InitError` for an unusable ``root`` and ``OSError`` as the filesystem does."""
    if not root.is_dir():
        raise InitError(f"{root}: not a directory")
    rep = InitReport(root)
    _write(root, {f"{WORKFLOWS_DIR}/{configured_workflow(root)}": workflow_template()},
           rep, force)
    return rep


def _write(root: Path, files: dict[str, bytes], rep: InitReport, force: bool) -> None:
    if root.exists() and not root.is_dir():
        raise InitError(f"{root}: exists and is not a directory")
    root.mkdir(parents=True, exist_ok=True)
    real_root = root.resolve()
    for rel, data in files.items():
        target = root / rel
        if target.is_symlink() or not str(target.resolve()).startswith(str(real_root) + "/"):
            raise InitError(f"{target}: is a symlink or leads outside {root}; not writing it")
        if target.exists() and not target.is_file():
            raise InitError(f"{target}: exists and is not a file")
        if target.is_file():
            old = target.read_bytes()
            if old == data:
                rep.actions[rel] = "unchanged"
                continue
            if not (force and is_packaged(rel)):
                rep.actions[rel] = "kept"
                continue
            rep.actions[rel] = "overwritten"
        else:
            rep.actions[rel] = "created"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.campaign-bot-init")
        tmp.write_bytes(data)
        tmp.replace(target)


@dataclass
class DriftReport:
    """``init --check``: the repository's workflow against this version's template.

    ``state``: ``same``, ``differs`` or ``missing``; ``diff``: unified diff lines (repository
    -> template); ``notes``: known old forms recognised in the repository's file;
    ``config_problems``: what is wrong with .github/campaign-bot.toml (old ``[pools]`` tables
    included)."""

    workflow: str
    state: str
    diff: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config_problems: list[ConfigProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the workflow is this version's and the config has no problem."""
        return self.state == "same" and not self.config_problems


USES = re.compile(r"^[ \t-]*uses:[ \t]*['\"]?([^\s@'\"#]+)@([^\s'\"#]+)['\"]?"
                  r"(?:[ \t]+#[ \t]*(\S+))?", re.M)
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def action_pins(text: str) -> dict[str, tuple[str, str | None]]:
    """``uses: OWNER/REPO@REF  # TAG`` steps of a workflow's text: action -> (ref, tag of the
    comment or None).  The last step of an action wins (a workflow may use one twice)."""
    return {m.group(1): (m.group(2), m.group(3)) for m in USES.finditer(text)}


def pin_drift(have: str, want: str) -> list[str]:
    """One note per action whose pin in ``have`` (a repository's workflow) is not the pin of
    ``want`` (this version's template): a tag or branch (movable by the action's owner:
    zizmor's ``unpinned-uses``, GitHub's "Security hardening for GitHub Actions" advises a
    full commit SHA), or another commit; and per action ``have`` runs that ``want`` does not."""
    mine, theirs = action_pins(have), action_pins(want)
    notes = []
    for action, (ref, tag) in theirs.items():
        shown = f"{ref} ({tag})" if tag else ref
        if action not in mine:
            continue
        got, got_tag = mine[action]
        if got == ref:
            continue
        if not FULL_SHA.match(got):
            notes.append(f"pin drift: {action} is pinned to {got!r}, a tag or branch its owner "
                         f"can move to other code; this version pins commit {shown}")
        else:
            was = f" ({got_tag})" if got_tag else ""
            notes.append(f"pin drift: {action} is pinned to commit {got}{was}; this version "
                         f"pins commit {shown}")
    for action in sorted(set(mine) - set(theirs)):
        notes.append(f"pin drift: it runs {action}@{mine[action][0]}, which this version's "
                     "workflow does not use")
    return notes


def workflow_drift(text: bytes | None, workflow: str = SCREEN_WORKFLOW) -> DriftReport:
    """Compare a repository's workflow bytes (None: absent) with the template."""
    if text is None:
        return DriftReport(workflow, "missing")
    want = workflow_template()
    if text == want:
        return DriftReport(workflow, "same")
    have = text.decode("utf-8", errors="replace")
    diff = list(difflib.unified_diff(have.splitlines(), want.decode().splitlines(),
                                     f"{WORKFLOWS_DIR}/{workflow} (repository)",
                                     f"{WORKFLOWS_DIR}/{workflow} (this version)", lineterm=""))
    notes = [why for sign, why in OLD_WORKFLOW_SIGNS if sign in have]
    notes += pin_drift(have, want.decode())
    if not re.search(r"^\s+runs_on:\s*$", have, re.M):  # the workflow_dispatch input
        notes.append("it has no runs_on input: this version's bot dispatches every screen with "
                     "runs_on (the campaign pool's runner labels), which GitHub refuses for a "
                     "workflow that does not declare it")
    return DriftReport(workflow, "differs", diff, notes)


def check_repository(root: Path) -> DriftReport:
    """``init --check`` on a checkout at ``root``: the configured screen workflow (``[screen]
    workflow``, default screen.yml) against the template, and the repository config's
    problems."""
    workflow, problems = _workflow_and_problems(root)
    wf = root / WORKFLOWS_DIR / workflow
    rep = workflow_drift(wf.read_bytes() if wf.is_file() else None, workflow)
    rep.config_problems = problems
    return rep


def configured_workflow(root: Path) -> str:
    """The screen workflow's file name under .github/workflows/ of the checkout at ``root``:
    ``[screen] workflow`` of its .github/campaign-bot.toml, else screen.yml."""
    return _workflow_and_problems(root)[0]


def _workflow_and_problems(root: Path) -> tuple[str, list[ConfigProblem]]:
    cfg_file = root / CONFIG_PATH
    problems: list[ConfigProblem] = []
    workflow = SCREEN_WORKFLOW
    if cfg_file.is_file():
        cfg, problems = parse(cfg_file.read_text(encoding="utf-8", errors="replace"))
        if cfg is not None:
            workflow = cfg.screen.workflow
        else:
            try:
                workflow = tomllib.loads(cfg_file.read_text())["screen"]["workflow"]
            except (tomllib.TOMLDecodeError, KeyError, TypeError, UnicodeDecodeError):
                workflow = SCREEN_WORKFLOW
            if not isinstance(workflow, str) or "/" in workflow:
                workflow = SCREEN_WORKFLOW
    return workflow, problems
