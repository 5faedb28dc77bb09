"""Units of the upstream contract work that need no server: the pinned pair and the flag
table, the stand-in's flag parser, the client's reading of upstream's error envelope, the
header rounding tolerance, the engine-death lifecycle rule, and the reference-upload rule of
``campaign-bot check`` (REFERENCE_REFUSED_UPSTREAM)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from evidence import reference_rules as rr
from evidence.check import check_campaign
from evidence.models import Lifecycle, RequestRecord, WorkerExit
from runners import standin_contract, upstream
from runners.client import parse_error_body
from runners.standin import build_parser, parse_args

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"


def test_pinned_pair_is_one_setting_and_the_flag_table_matches_it() -> None:
    pins = upstream.pinned_versions()
    assert pins["vllm-omni"] == pins["vllm"]  # stable releases are aligned with vLLM's
    table = upstream.load_flag_table()
    assert (table.vllm_omni, table.vllm) == (pins["vllm-omni"], pins["vllm"])
    lines = [x for x in upstream.REQUIREMENTS.read_text().splitlines()
             if x and not x.startswith("#")]
    assert all("==" in x for x in lines), [x for x in lines if "==" not in x]
    assert not any(x.startswith(("torchvision", "torchaudio")) for x in lines)


def test_pinned_versions_names_a_missing_pin(tmp_path: Path) -> None:
    f = tmp_path / "req.txt"
    f.write_text("vllm==0.30.0\nnumpy==2.3.5\n")
    with pytest.raises(ValueError, match=r"req\.txt: no '=='-pin for vllm-omni"):
        upstream.pinned_versions(f)


RECIPE = ["MiniMaxAI/MiniMax-H3/Ref2VA", "--omni", "--trust-remote-code", "--num-gpus", "8",
          "--usp", "8", "--ring", "1", "--text-encoder-tp-size", "8",
          "--enable-distributed-layerwise-offload", "--vae-parallel-mode", "tile",
          "--vae-use-tiling", "--vae-patch-parallel-size", "8",
          "--diffusion-attention-backend", "FLASH_ATTN", "--host", "0.0.0.0", "--port", "9098"]


def test_standin_accepts_upstream_flags_and_refuses_unknown_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    opts = parse_args(RECIPE)
    assert (opts.model, opts.num_gpus, opts.port, opts.omni) == (RECIPE[0], 8, 9098, True)
    norm = [standin_contract.normalize_flag(a) for a in ["m", "--num_gpus=3", "--vae_use_tiling"]]
    assert norm == ["m", "--num-gpus=3", "--vae-use-tiling"]
    assert parse_args(["serve", "m", "--num_gpus=3"]).num_gpus == 3
    for bad in (["m", "--usp-typo", "3"], ["m", "--video-response-frame-conversion-workers",
                                            "8"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(bad)
        assert exc.value.code == 2
        assert "unrecognized arguments: " + bad[1] in capsys.readouterr().err


def test_standin_switches_are_not_upstream_flags() -> None:
    """A simulation-only switch must never shadow a real flag (except --num-gpus, which the
    stand-in honours with upstream's meaning, and the three it needs to listen)."""
    from runners.standin import OWN_SWITCHES

    shared = OWN_SWITCHES & set(upstream.load_flag_table().actions)
    assert shared == {"--num-gpus", "--omni", "--host", "--port"}


@pytest.mark.parametrize(("status", "body", "want", "rid"), [
    (500, {"error": {"message": "", "type": "InternalServerError", "param": None, "code": 500,
                     "request_id": "video_sync-0123456789abcdef", "error_stage_id": None}},
     "HTTP 500 InternalServerError: (no message)", "video_sync-0123456789abcdef"),
    (504, {"error": {"message": "Video generation timed out after 600.0s.",
                     "type": "Gateway Timeout", "param": None, "code": 504}},
     "HTTP 504 Gateway Timeout: Video generation timed out after 600.0s.", None),
    (404, {"detail": "Not Found"}, "HTTP 404: Not Found", None),
    (500, {"error": {"message": "x", "request_id": "a\nb"}}, "HTTP 500: x", None),
    (500, {"error": {"message": "x", "request_id": "r" * 201}}, "HTTP 500: x", None),
    (502, "<html>bad gateway</html>", "HTTP 502: <html>bad gateway</html>", None),
], ids=["engine-500", "504", "detail", "control-char-id", "long-id", "not-json"])
def test_error_bodies_are_read(status: int, body: object, want: str, rid: str | None) -> None:
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    assert parse_error_body(status, raw) == (want, rid)


def test_error_text_is_capped() -> None:
    text, rid = parse_error_body(500, json.dumps({"error": {"message": "m" * 10000}}).encode())
    assert len(text) == 2000 and rid is None
    text, _ = parse_error_body(500, b"[" * 100000)  # deep nesting is not a crash
    assert text.startswith("HTTP 500: [[[")


@pytest.mark.parametrize(("wall", "server", "covers"), [
    (0.0585, 0.059, True),   # header rounded up by 0.5 ms: still consistent
    (0.0584, 0.059, False),  # beyond the rounding: the client span cannot be shorter
    (1.0, 0.5, True), (None, 0.5, None),
])
def test_wall_covers_server_within_header_rounding(wall: float | None, server: float,
                                                   covers: bool | None) -> None:
    r = RequestRecord(index=0, kind="measured", http_status=200, client_wall_s=wall,
                      server_inference_s=server)
    assert r.wall_covers_server() is covers


def test_exit_0_after_engine_death_is_not_clean() -> None:
    w = [WorkerExit(rank=0, pid=10, state="exited", exit_code=0)]
    base = {"workers": w, "server_exit_code": 0}
    assert Lifecycle(**base).problems() == ["devices not shown idle before",
                                            "devices not shown idle after"]
    life = Lifecycle(**base, server_exited_unasked=True, engine_died=True)
    assert set(life.problems()) - set(Lifecycle(**base).problems()) == {
        "server exited on its own before the runner's SIGTERM",
        "engine died (EngineDeadError in the server log)"}


# ---------------------------------------------------------------------------- references


@pytest.mark.parametrize(("name", "ctype", "kind"), [
    ("a.mp4", "video/mp4", "video"), ("a.bin", "application/octet-stream", "video"),
    ("a.flac", "video/mp4", "audio"), ("a.wav", "audio/wav", "audio"),
    ("a.mp4", "audio/wav", "audio"), ("A.PNG", "", "image"), ("a", "image/png", "image"),
])
def test_media_kind_follows_upstream(name: str, ctype: str, kind: str) -> None:
    assert rr.media_kind(name, ctype) == kind


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize(("name", "ctype", "size", "data", "want"), [
    ("r.mp4", "video/mp4", 50 << 20, b"", None),
    ("r.mp4", "video/mp4", (50 << 20) + 1, b"", "exceeds the 50 MiB size limit"),
    ("r.wav", "audio/wav", (15 << 20) + 1, b"", "exceeds the 15 MiB size limit"),
    ("r.mkv", "video/x-matroska", 10, b"", "videos must use an MP4 or MOV file"),
    ("r.mov", "video/quicktime", 10, b"", None),
    ("r", "video/mp4", 10, b"", None),  # no suffix: upstream lets it through
    ("r.flac", "audio/flac", 10, b"", "audio must use a WAV or MP3 file"),
    ("r.png", "image/png", 10, b"junk", "Invalid uploaded image reference: r.png"),
    ("r.png", "image/png", 10, "png", None),
], ids=["video-at-cap", "video-over", "audio-over", "mkv", "mov", "no-suffix", "flac",
        "bad-image", "png"])
def test_upload_refusal(name: str, ctype: str, size: int, data: bytes | str,
                        want: str | None) -> None:
    payload = _png() if data == "png" else data
    assert isinstance(payload, bytes)
    got = rr.upload_refusal(name, ctype, size, lambda: payload)
    assert got == want if want is None else (got is not None and want in got)


def test_count_refusal() -> None:
    assert rr.count_refusal(12) is None
    assert rr.count_refusal(13) == "MiniMax H3 accepts at most 12 total references."


def test_check_flags_pinned_references_upstream_refuses(tmp_path: Path) -> None:
    camp = tmp_path / "c"
    shutil.copytree(CAMPAIGN, camp)
    clean = [f for f in check_campaign(camp).findings if f.rule == rr.RULE]
    assert clean == []
    (camp / "ref.wav").rename(camp / "ref.flac")
    toml = camp / "campaign.toml"
    toml.write_text(toml.read_text().replace('path = "ref.wav"', 'path = "ref.flac"'))
    found = [f for f in check_campaign(camp).findings if f.rule == rr.RULE]
    assert len(found) == 1
    f = found[0]
    assert (f.severity, f.path, f.field) == ("P2", "campaign.toml", "inputs.reference_audio.path")
    assert f.line == next(i for i, x in enumerate(toml.read_text().splitlines(), 1)
                          if x.startswith("reference_audio"))
    assert "audio must use a WAV or MP3 file" in f.message


def test_check_does_not_read_references_outside_the_campaign(tmp_path: Path) -> None:
    camp = tmp_path / "c"
    shutil.copytree(CAMPAIGN, camp)
    (tmp_path / "secret.flac").write_bytes(b"x")
    toml = camp / "campaign.toml"
    toml.write_text(toml.read_text().replace('path = "ref.wav"', 'path = "../secret.flac"'))
    assert [f for f in check_campaign(camp).findings if f.rule == rr.RULE] == []


def test_check_flags_without_vllm_omni_is_a_usage_error(tmp_path: Path) -> None:
    """No contract environment and no vLLM-Omni in this interpreter: exit 2 naming both."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("vllm_omni") is not None:
        pytest.skip("vLLM-Omni is importable here: the flag check would run")
    env = {**os.environ, upstream.VENV_ENV: str(tmp_path / "absent")}
    res = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()",
                          "runner", "check-flags", str(CAMPAIGN)], capture_output=True,
                         text=True, env=env, timeout=120, cwd=ROOT)
    assert res.returncode == 2, res.stdout + res.stderr
    err = " ".join(res.stderr.split())
    assert "cannot check flags" in err and str(tmp_path / "absent") in err
    assert "install-contract-venv.sh" in err


def test_the_contract_environment_is_never_looked_for_in_site_packages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a normal install (runners/ inside site-packages), the default contract
    environment is under the user's cache folder (it was site-packages/.venv-upstream); in a
    source checkout it stays .venv-upstream at the root."""
    from runners.upstream import default_venv

    root = Path(__file__).resolve().parents[1]
    assert default_venv(root) == root / ".venv-upstream"
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_venv(site) == tmp_path / "cache" / "campaign-bot" / "venv-upstream"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_venv(site) == tmp_path / "home" / ".cache" / "campaign-bot" / "venv-upstream"
