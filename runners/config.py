"""The runner host's configuration file: everything host-specific ``campaign-bot screen`` needs,
so that the screen workflow passes nothing but the screen's own inputs.

Where: ``/etc/campaign-bot/runner.toml``, or the path in ``CAMPAIGN_BOT_RUNNER_CONFIG``.  A
missing default file is not an error (every value then comes from options, environment
variables and defaults); a missing file named by the variable is.  Relative paths in the file
are relative to the file's own directory.  Format (every key optional; unknown keys are errors;
``deploy/runner.toml`` is the commented template)::

    signing_key = "/etc/campaign-bot/runner.key"   # ed25519 private key, mode 0600
    output_dir = "/var/lib/campaign-bot/bundles"   # bundles are written to OUTPUT_DIR/NAME
    min_free_gib = 50                              # `doctor runner` wants this much free there

    [devices]
    tool = "npu-smi"                               # auto, none, npu-smi, nvidia-smi

    [server]
    command = "vllm serve"                         # replaces the 'vllm serve' prefix
    container = false                              # the command runs a container
    pass_env = ["LD_LIBRARY_PATH", "ASCEND_*"]     # runner variables the server keeps
    env = { HF_HUB_OFFLINE = "1" }                 # set for every server

    [isolation]
    user = "campaign-bot-server"                   # the screened server runs as this user

    [media]
    device = "npu"                                 # where LPIPS runs: npu, cuda, cpu
    lpips_weights = "/etc/campaign-bot/lpips/alexnet.ckpt"
    lpips_sha256 = "443c5bc3...44b1"               # SHA-256 the weights file must have

Precedence for each value: the command-line option, then the environment variable where one
exists (``CAMPAIGN_BOT_SIGNING_KEY``, ``CAMPAIGN_BOT_SERVER_CMD``), then this file, then the
built-in default.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

CONFIG_ENV = "CAMPAIGN_BOT_RUNNER_CONFIG"
DEFAULT_PATH = Path("/etc/campaign-bot/runner.toml")
MAX_CONFIG_BYTES = 1 << 20
"""Largest runner config read (bytes); the file is a few hundred bytes."""
DEFAULT_MIN_FREE_GIB = 50.0
"""Free space ``doctor runner`` asks for in ``output_dir`` (GiB): campaign #320's 5 s and
15 s tracks write 1344x768 MP4s of tens of MB per request, and a failed screen's logs and
outputs stay until pruned; 50 GiB holds many screens with room to spare."""


class RunnerConfigError(Exception):
    """The runner config cannot be read or is invalid; the message names the file, the line
    and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DevicesSection(_Strict):
    """The device idle gate's tool: ``auto`` (npu-smi, else nvidia-smi, else none)."""

    tool: Literal["auto", "none", "npu-smi", "nvidia-smi"] = "auto"


class ServerSection(_Strict):
    """How the vLLM-Omni server is started: ``command`` replaces the ``vllm serve`` prefix of
    each session's server command line (e.g. ``docker run --rm ... vllm serve``);
    ``container``: that command runs a container (its exit status is the container's)."""

    command: str | None = None
    container: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: list[str] = Field(default_factory=list)

    @field_validator("pass_env")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", name):
                raise ValueError(f"{name!r}: a variable name, or a name prefix ending in *")
        return v

    @field_validator("command")
    @classmethod
    def _not_blank(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty (leave the key out for 'vllm serve')")
        return v


class IsolationSection(_Strict):
    """Privilege separation of the screened server (:mod:`runners.isolation`): ``user`` is the
    dedicated, unprivileged account every session's server runs as (name or numeric uid),
    never root nor the runner's own account.  Unset: the server runs as the runner itself,
    which ``doctor runner`` reports as a failure and every bundle records."""

    user: str | None = None

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}", v):
            raise ValueError(f"{v!r} is not a user name or uid")
        return v


class MediaSection(_Strict):
    """The media gates: where LPIPS runs and the AlexNet backbone weights it authenticates
    (the file's SHA-256 is compared before the file is parsed)."""

    device: Literal["cpu", "cuda", "npu"] = "cpu"
    lpips_weights: Path | None = None
    lpips_sha256: str | None = Field(default=None, pattern=r"^(sha256:)?[0-9a-f]{64}$")


class RunnerConfig(_Strict):
    """The parsed runner config; paths are absolute once :func:`load` resolved them."""

    signing_key: Path | None = None
    output_dir: Path | None = None
    min_free_gib: float = Field(default=DEFAULT_MIN_FREE_GIB, ge=0)
    devices: DevicesSection = Field(default_factory=DevicesSection)
    server: ServerSection = Field(default_factory=ServerSection)
    isolation: IsolationSection = Field(default_factory=IsolationSection)
    media: MediaSection = Field(default_factory=MediaSection)


@dataclass(frozen=True)
class LoadedRunnerConfig:
    """A runner config and the file it came from (None: no file, all defaults)."""

    config: RunnerConfig
    path: Path | None


def config_path(env: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """``(path, named)``: the file named by ``CAMPAIGN_BOT_RUNNER_CONFIG`` (named=True) or the
    default ``/etc/campaign-bot/runner.toml``."""
    src: Mapping[str, str] = os.environ if env is None else env
    named = src.get(CONFIG_ENV, "").strip()
    return (Path(named), True) if named else (DEFAULT_PATH, False)


def _key_lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line of its table header or ``key =`` line (simple TOML)."""
    out: dict[str, int] = {}
    table = ""
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = re.match(r"^\[\s*([A-Za-z0-9_.-]+)\s*\]", line)
        if m:
            table = m.group(1)
            out.setdefault(table, i)
            continue
        m = re.match(r"^([A-Za-z0-9_-]+)\s*=", line)
        if m:
            out.setdefault(f"{table}.{m.group(1)}" if table else m.group(1), i)
    return out


def parse(text: str, where: Path) -> RunnerConfig:
    """Parse runner config ``text`` read from ``where`` (relative paths resolve against its
    directory).  Raises :class:`RunnerConfigError` naming the file, line and key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RunnerConfigError(f"{where}: not valid TOML: {exc}") from None
    try:
        cfg = RunnerConfig.model_validate(data)
    except ValidationError as exc:
        lines = _key_lines(text)
        msgs = []
        for e in exc.errors():
            loc = [str(p) for p in e["loc"]]
            key = ".".join(loc)
            line = next((lines[".".join(loc[:n])] for n in range(len(loc), 0, -1)
                         if ".".join(loc[:n]) in lines), None)
            msg = "unknown key" if e["type"] == "extra_forbidden" else \
                e["msg"].removeprefix("Value error, ")
            msgs.append(f"{where}{f' line {line}' if line else ''}: {key}: {msg}")
        raise RunnerConfigError("\n".join(msgs)) from None
    base = where.parent
    for model, attr in ((cfg, "signing_key"), (cfg, "output_dir"),
                        (cfg.media, "lpips_weights")):
        p = getattr(model, attr)
        if p is not None:
            p = p.expanduser()
            setattr(model, attr, p if p.is_absolute() else (base / p))
    if cfg.media.lpips_sha256:
        cfg.media.lpips_sha256 = cfg.media.lpips_sha256.removeprefix("sha256:")
    if (cfg.media.lpips_weights is None) != (cfg.media.lpips_sha256 is None):
        line = _key_lines(text).get("media")
        raise RunnerConfigError(f"{where}{f' line {line}' if line else ''}: media: give both "
                                "lpips_weights and lpips_sha256 (the weights are authenticated "
                                "by their SHA-256 before they are loaded)")
    return cfg


def load(env: Mapping[str, str] | None = None) -> LoadedRunnerConfig:
    """The runner config of this host: the file named by ``CAMPAIGN_BOT_RUNNER_CONFIG``, else
    ``/etc/campaign-bot/runner.toml`` when it exists, else all defaults.

    Raises :class:`RunnerConfigError` when the named file is missing, or a file cannot be read
    or is invalid."""
    path, named = config_path(env)
    if not named and not path.exists():
        return LoadedRunnerConfig(RunnerConfig(), None)
    if not path.exists():
        raise RunnerConfigError(f"{path}: does not exist (named by {CONFIG_ENV})")
    try:
        if not path.is_file():
            raise RunnerConfigError(f"{path}: not a file" + (f" (named by {CONFIG_ENV})"
                                                             if named else ""))
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise RunnerConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunnerConfigError(f"{path}: cannot read: {exc}") from None
    return LoadedRunnerConfig(parse(text, path.resolve()), path)
