"""Pure parts of the screen runner: flags and command line, plan and estimate, multipart
body, DSSE signing and verification (runners.server, runners.plan, runners.client,
runners.signer, evidence.signing)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

from evidence import signing
from evidence.models import Candidate, Protocol, Serving
from runners.client import FilePart, MultipartBody
from runners.plan import estimate, make_plan
from runners.server import build_command, build_env, config_digest, merge_flags
from runners.signer import generate_key, load_private_key, sign_bundle, write_bag

CONTROL = ["--omni", "--num-gpus=4", "--usp 4", "--vae-use-tiling"]


@pytest.mark.parametrize(("add", "remove", "want"), [
    ([], [], CONTROL),
    (["--usp 2", "--ring 2"], [], ["--omni", "--num-gpus=4", "--vae-use-tiling", "--usp 2",
                                    "--ring 2"]),
    ([], ["--vae-use-tiling", "--usp"], ["--omni", "--num-gpus=4"]),
    (["--num-gpus=2"], ["--usp=4"], ["--omni", "--vae-use-tiling", "--num-gpus=2"]),
], ids=["none", "add-replaces", "remove-by-name", "equals-form"])
def test_merge_flags(add: list[str], remove: list[str], want: list[str]) -> None:
    cand = Candidate(name="c", add_flags=add, remove_flags=remove)
    assert merge_flags(CONTROL, cand) == want


def test_build_command_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAMPAIGN_BOT_SERVER_CMD", raising=False)
    serving = Serving(model="MiniMaxAI/MiniMax-H3/Ref2VA", flags=["--usp 4"], env={"A": "1"})
    argv = build_command(serving, None, host="127.0.0.1", port=9098)
    assert argv == ["vllm", "serve", "MiniMaxAI/MiniMax-H3/Ref2VA", "--omni", "--usp", "4",
                    "--host", "127.0.0.1", "--port", "9098"]
    monkeypatch.setenv("CAMPAIGN_BOT_SERVER_CMD", "python -m runners.standin")
    assert build_command(serving, None, host="h", port=1)[:3] == ["python", "-m",
                                                                  "runners.standin"]
    cand = Candidate(name="c", env={"TASK_QUEUE_ENABLE": "2"})
    env = build_env(serving, cand, device_ids=[0, 1, 2, 3], request_timeout_s=3600,
                    device_tool="npu-smi")
    assert env == {"A": "1", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3",
                   "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
                   "VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "3660", "TASK_QUEUE_ENABLE": "2"}
    # The port does not change the config digest; a flag does.
    a = config_digest(argv, env)
    assert a == config_digest([*argv[:-1], "9999"], env)
    assert a != config_digest([*argv, "--ring", "2"], env)


@pytest.mark.parametrize(("order", "sessions", "control_only", "want"), [
    ("ABBAAB", None, False, "ABBAAB"),
    ("ABBA", 2, False, "AB"),
    ("AB", 5, False, "ABABA"),
    ("ABBA", 3, True, "AAA"),
], ids=["protocol", "cut", "cycle", "control-only"])
def test_plan(order: str, sessions: int | None, control_only: bool, want: str) -> None:
    plan = make_plan(Protocol(order=order, warmups_per_session=2), sessions=sessions,
                     control_only=control_only)
    assert "".join("A" if s.arm == "control" else "B" for s in plan) == want
    assert [s.slot for s in plan] == list(range(len(want)))
    assert all(s.warmups == 2 and s.measured == 1 for s in plan)


def test_plan_rejects_zero_sessions() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        make_plan(Protocol(), sessions=0)


def test_estimate() -> None:
    p = Protocol(order="AB", request_timeout_s=100, init_timeout_s=50, shutdown_timeout_s=10,
                 idle_wait_s=5)
    plan = make_plan(p)
    e = estimate(plan, p, request_s=20, init_s=30)
    # 2 sessions x (30 init + 5 idle) + 4 requests x 20 s
    assert e.typical_s == 2 * 35 + 4 * 20
    assert e.upper_bound_s == 2 * (50 + 10 + 5) + 4 * 100
    assert estimate(plan, p).typical_s is None


def test_multipart_length_matches_bytes(tmp_path: Path) -> None:
    f = tmp_path / "ref.mp4"
    f.write_bytes(b"\x00" * 3_000_001)
    body = MultipartBody([("prompt", "héllo"), ("extra_params", '{"task":"ref2va"}')],
                         [FilePart("input_references", f, "video/mp4")])
    data = b"".join(body)
    assert len(data) == len(body)
    assert body.first_byte_at is not None
    assert b'name="input_references"; filename="ref.mp4"\r\nContent-Type: video/mp4' in data
    assert data.endswith(f"--{body.boundary}--\r\n".encode())


def _bundle(tmp_path: Path) -> tuple[Path, Path]:
    key = tmp_path / "k" / "runner.key"
    key.parent.mkdir()
    pub = generate_key(key)
    root = tmp_path / "bundle"
    (root / "data" / "receipts").mkdir(parents=True)
    (root / "data" / "receipts" / "r.json").write_text('{"n": 1}\n')
    write_bag(root, {"External-Identifier": "t"})
    sign_bundle(root, load_private_key(key), {"count": 3})
    return root, pub


def test_sign_and_verify_roundtrip(tmp_path: Path) -> None:
    root, pub = _bundle(tmp_path)
    keys = signing.load_trusted_keys(pub)
    assert signing.verify_bundle(root, keys) == []
    env = json.loads((root / signing.ATTESTATION_FILE).read_text())
    stmt = json.loads(base64.b64decode(env["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    names = {s["name"] for s in stmt["subject"]}
    assert signing.TAG_MANIFEST in names
    assert stmt["predicate"]["count"] == 3 and isinstance(stmt["predicate"]["count"], int)
    assert env["signatures"][0]["keyid"] in keys


@pytest.mark.parametrize("tamper", ["payload-file", "added-file", "tag-file", "envelope"])
def test_tampering_fails(tmp_path: Path, tamper: str) -> None:
    root, pub = _bundle(tmp_path)
    if tamper == "payload-file":
        (root / "data" / "receipts" / "r.json").write_text('{"n": 2}\n')
    elif tamper == "added-file":
        (root / "data" / "extra.txt").write_text("x")
    elif tamper == "tag-file":
        with open(root / "bag-info.txt", "a") as fh:
            fh.write("Note: edited\n")
    else:
        env = json.loads((root / signing.ATTESTATION_FILE).read_text())
        stmt = json.loads(base64.b64decode(env["payload"]))
        stmt["predicate"]["count"] = 4
        env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
        (root / signing.ATTESTATION_FILE).write_text(json.dumps(env))
    problems = signing.verify_bundle(root, signing.load_trusted_keys(pub))
    assert problems, tamper


def test_untrusted_key_fails(tmp_path: Path) -> None:
    root, _ = _bundle(tmp_path)
    other = generate_key(tmp_path / "other.key")
    problems = signing.verify_bundle(root, signing.load_trusted_keys(other))
    assert problems == [f"{signing.ATTESTATION_FILE}: no signature by a trusted key verifies "
                        "this envelope"]


def test_trusted_keys_file_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pub"
    empty.write_text("# nothing here\n")
    with pytest.raises(signing.KeyFileError, match="no '-----BEGIN PUBLIC KEY-----'"):
        signing.load_trusted_keys(empty)
    ec = tmp_path / "ec.pub"
    ec.write_bytes(generate_private_key(SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(signing.KeyFileError, match="block 1 is not an ed25519 key"):
        signing.load_trusted_keys(ec)
    with pytest.raises(signing.KeyFileError, match="cannot read"):
        signing.load_trusted_keys(tmp_path / "missing.pub")


def test_keygen_refuses_overwrite(tmp_path: Path) -> None:
    k = tmp_path / "runner.key"
    generate_key(k)
    assert (k.stat().st_mode & 0o777) == 0o600
    with pytest.raises(FileExistsError):
        generate_key(k)


@pytest.mark.parametrize(("installed", "pinned", "same"), [
    ("0.30.0", "0.30.0", True), ("0.30.0+npu", "0.30.0", True), ("0.32.0rc1", "0.30.0", False),
    ("0.26.1.dev12", "0.26.1.dev", True), ("0.30.01", "0.30.0", False),
])
def test_engine_version_match(installed: str, pinned: str, same: bool) -> None:
    from runners.screen import _same_version
    assert _same_version(installed, pinned) is same


def test_the_walkthrough_campaign_gives_workers_time_to_leave() -> None:
    """The runner guide's stand-in walk-through (tests/data/screen-campaign) promises exit 0:
    its shutdown ladder must let workers leave on the shutdown message on a busy machine.
    With 0.3 s they did not always ('worker rank 1 gone', '1 terminate action(s)', exit 1);
    the sandbox's campaign has the same ladder."""
    import re
    import tomllib

    root = Path(__file__).resolve().parents[1]
    for toml in (root / "tests" / "data" / "screen-campaign" / "campaign.toml",
                 root / "sandbox" / "campaign" / "campaign.toml"):
        scope = tomllib.loads(toml.read_text())
        (flag,) = [f for f in scope["serving"]["flags"] if f.startswith("--ladder-s=")]
        msg_s, term_s, kill_s = map(float, re.split(",", flag.split("=", 1)[1]))
        assert msg_s >= 2.0, (toml, flag)
        # the stuck-worker path still ends before the runner's own SIGKILL
        assert msg_s + term_s + kill_s < scope["protocol"]["shutdown_timeout_s"], (toml, flag)
