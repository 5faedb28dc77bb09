"""Hostile input for ``campaign-bot check`` / ``--trusted-keys`` / ``--claims`` and the
screen runner's scope loader: every case must give the documented exit code and a message
naming the file (and field or line where there is one), never a traceback or a hang.

Found by the QA pass (branch qa-hostile); each row failed before its fix."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from evidence.signing import ATTESTATION_FILE, PAYLOAD_TYPE, key_id, pae
from runners.signer import generate_key, load_private_key, sign_bundle

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
BAG = "bundles/baseline-15s"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run campaign-bot in a subprocess (a hang is a TimeoutExpired failure, not a stuck
    test run).  Used for the cases that used to hang (FIFOs, devices)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=ROOT)


_PLUGINS: list[bool] = []


def cli_fast(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run campaign-bot in this process (saves ~1.5 s of imports per case).  An exception
    other than the CLI's own exit is rendered as a traceback in ``stderr``, so the
    no-traceback assertions still catch it."""
    import traceback

    from typer.testing import CliRunner

    from evidence.cli import _load_plugins, app

    if not _PLUGINS:
        _load_plugins()
        _PLUGINS.append(True)
    res = CliRunner().invoke(app, list(args))
    err = res.stderr
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        err += "".join(traceback.format_exception(res.exception))
    return subprocess.CompletedProcess(list(args), res.exit_code, res.stdout, err)


def findings(proc: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout)["findings"]


# ------------------------------------------------------------------ documents in the tree


def _deep_toml(d: Path) -> None:
    with open(d / "campaign.toml", "a") as fh:
        fh.write("\n[x]\na = " + "[" * 2000 + "]" * 2000 + "\n")


def _huge_int_json(d: Path) -> None:
    (d / "results" / "huge.json").write_text('{"schema": "campaign-bot/receipt@1", "slot": '
                                             + "9" * 5000 + "}")


def _gate_inf(d: Path) -> None:
    t = d / "campaign.toml"
    t.write_text(t.read_text().replace("threshold = 0.20", "threshold = inf", 1))


def _gate_nan_range(d: Path) -> None:
    t = d / "campaign.toml"
    t.write_text(t.read_text().replace("low = 0.5", "low = nan", 1))


def _dup_key(key: str, value: str) -> Callable[[Path], None]:
    def mutate(d: Path) -> None:
        r = d / BAG / "data" / "receipts" / "s0-control.json"
        text = r.read_text()
        first = text.index(f'"{key}":')
        end = text.index("\n", first)
        r.write_text(text[:end] + f'\n  "{key}": {value},' + text[end:])
    return mutate


DOC_CASES: list[tuple[str, Callable[[Path], None], str, str, str | None, int | None]] = [
    # id, mutate, rule, path, field, line
    ("toml-nested-too-deep", _deep_toml, "TOML_INVALID", "campaign.toml", None, None),
    ("json-int-over-4300-digits", _huge_int_json, "JSON_INVALID", "results/huge.json", None,
     None),
    ("json-duplicate-key-arm", _dup_key("arm", '"candidate"'), "JSON_INVALID",
     f"{BAG}/data/receipts/s0-control.json", "arm", 8),
    ("json-duplicate-key-schema-hides-receipt", _dup_key("schema", '"x"'), "JSON_INVALID",
     f"{BAG}/data/receipts/s0-control.json", "schema", 3),
    ("gate-threshold-inf", _gate_inf, "SCHEMA_INVALID", "campaign.toml",
     "quality_gates.lpips_max.threshold", 118),
    ("range-gate-nan", _gate_nan_range, "SCHEMA_INVALID", "campaign.toml",
     "quality_gates.audio_rms_ratio.low", 126),
]


@pytest.mark.parametrize(("mutate", "rule", "path", "field", "line"),
                         [c[1:] for c in DOC_CASES], ids=[c[0] for c in DOC_CASES])
def test_hostile_documents_are_findings(tmp_path: Path, mutate: Callable[[Path], None],
                                        rule: str, path: str, field: str | None,
                                        line: int | None) -> None:
    d = tmp_path / "c"
    shutil.copytree(EXAMPLE, d)
    mutate(d)
    proc = cli_fast("check", str(d), "--json")
    assert proc.returncode == 1, proc.stderr
    hits = [f for f in findings(proc) if f["rule"] == rule and f["path"] == path]
    assert hits, [(f["rule"], f["path"]) for f in findings(proc)]
    if field is not None:
        assert any(f["field"] == field for f in hits), hits
        assert "finite" in str(hits[0]["message"]) or "duplicate key" in str(hits[0]["message"])
    if line is not None:
        assert any(f["line"] == line for f in hits), hits


# ------------------------------------------------------------------- signed bundles


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(private key, trusted public key file)."""
    k = tmp_path_factory.mktemp("keys") / "screen.key"
    pub = generate_key(k)
    return k, pub


def _env(d: Path) -> dict[str, object]:
    return json.loads((d / BAG / ATTESTATION_FILE).read_text())


def _put_env(d: Path, obj: object) -> None:
    (d / BAG / ATTESTATION_FILE).write_text(json.dumps(obj))


def _resign(d: Path, key: Path, stmt: object) -> None:
    priv = load_private_key(key)
    body = json.dumps(stmt).encode()
    sig = priv.sign(pae(PAYLOAD_TYPE, body))
    _put_env(d, {"payload": base64.b64encode(body).decode(), "payloadType": PAYLOAD_TYPE,
                 "signatures": [{"keyid": key_id(priv.public_key()),
                                 "sig": base64.b64encode(sig).decode()}]})


def _replace(d: Path, rel: str, make: Callable[[Path], None]) -> None:
    p = d / BAG / rel
    p.unlink()
    make(p)


STMT = "https://in-toto.io/Statement/v1"
SIG_CASES: list[tuple[str, Callable[[Path, Path], None], str]] = [
    # id, tamper(bundle dir, private key), expected words in the SIGNATURE_INVALID message
    ("keyid-is-a-list", lambda d, k: _put_env(d, {**_env(d), "signatures": [
        {"keyid": ["x"], "sig": "AAAA"}]}), "no signature by a trusted key"),
    ("keyid-is-an-object", lambda d, k: _put_env(d, {**_env(d), "signatures": [
        {"keyid": {}, "sig": "AAAA"}]}), "no signature by a trusted key"),
    ("envelope-not-utf8", lambda d, k: (d / BAG / ATTESTATION_FILE).write_bytes(b"\xff{}"),
     "not UTF-8"),
    ("envelope-nested-too-deep", lambda d, k: (d / BAG / ATTESTATION_FILE).write_text(
        "[" * 100000 + "]" * 100000), "nested too deeply"),
    ("envelope-is-a-fifo", lambda d, k: _replace(d, ATTESTATION_FILE, os.mkfifo),
     "not a regular file"),
    ("envelope-is-a-list", lambda d, k: _put_env(d, [1, 2]), "expected an object"),
    ("subject-digest-not-object", lambda d, k: _resign(d, k, {
        "_type": STMT, "subject": [{"name": "tagmanifest-sha256.txt", "digest": "abc"}]}),
     "differs from the signed digest"),
    ("subject-name-not-string", lambda d, k: _resign(d, k, {
        "_type": STMT, "subject": [{"name": 5, "digest": {"sha256": "0"}}]}), "file missing"),
    ("subject-absolute-path", lambda d, k: _resign(d, k, {
        "_type": STMT, "subject": [{"name": "/etc/passwd", "digest": {"sha256": "0"}}]}),
     "file missing"),
    ("payload-manifest-not-utf8", lambda d, k: (d / BAG / "manifest-sha256.txt").write_bytes(
        b"\xff\xfe garbage\n"), "manifest-sha256.txt: cannot read: not UTF-8"),
    ("tag-manifest-not-utf8", lambda d, k: (d / BAG / "tagmanifest-sha256.txt").write_bytes(
        b"\xff\xfe garbage\n"), "tagmanifest-sha256.txt: cannot read: not UTF-8"),
]


@pytest.mark.parametrize(("tamper", "words"), [c[1:] for c in SIG_CASES],
                         ids=[c[0] for c in SIG_CASES])
def test_tampered_signed_bundle_is_a_finding(tmp_path: Path, keys: tuple[Path, Path],
                                             tamper: Callable[[Path, Path], None],
                                             words: str) -> None:
    key, pub = keys
    d = tmp_path / "c"
    shutil.copytree(EXAMPLE / BAG, d / BAG)  # the bag alone: fast, still exit 1 (no scope)
    sign_bundle(d / BAG, load_private_key(key), {"x": 1})
    tamper(d, key)
    run = cli if "fifo" in words or "regular file" in words else cli_fast
    proc = run("check", str(d), "--json", "--trusted-keys", str(pub), timeout=30)
    assert proc.returncode == 1, proc.stderr
    bad = [f for f in findings(proc) if f["rule"] == "SIGNATURE_INVALID"]
    assert bad and all(f["path"] == f"{BAG}/{ATTESTATION_FILE}" for f in bad), bad
    assert any(words in str(f["message"]) for f in bad), bad


def _nonutf8(p: Path) -> None:
    p.write_bytes(b"\xff\xfe\x00")


KEY_CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("keys-not-utf8", lambda t: (_nonutf8(t / "k.pub"), t / "k.pub")[1], "not UTF-8"),
    ("keys-fifo", lambda t: (os.mkfifo(t / "k.pub"), t / "k.pub")[1], "not a regular file"),
    ("keys-dev-zero", lambda t: Path("/dev/zero"), "not a regular file"),
    ("keys-directory", lambda t: t, "a directory"),
]


@pytest.mark.parametrize(("make", "words"), [c[1:] for c in KEY_CASES],
                         ids=[c[0] for c in KEY_CASES])
def test_bad_trusted_keys_file_is_usage_error(tmp_path: Path, make: Callable[[Path], Path],
                                              words: str) -> None:
    kf = make(tmp_path)
    run = cli if "regular file" in words else cli_fast
    proc = run("check", str(EXAMPLE / BAG), "--trusted-keys", str(kf), timeout=30)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    msg = " ".join(proc.stderr.split())
    assert str(kf) in msg and words in msg, msg


def test_claims_file_not_utf8_names_the_file(tmp_path: Path) -> None:
    claims = tmp_path / "pr.md"
    claims.write_bytes(b"gain 40%\n\xff\xfe")
    proc = cli_fast("check", str(EXAMPLE), "--claims", str(claims))
    assert proc.returncode == 2
    msg = " ".join(proc.stderr.split())
    assert "Traceback" not in msg and str(claims) in msg and "line 2" in msg, msg


# --------------------------------------------------------------- screen's scope loader


SCREEN_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("campaign-toml-fifo", lambda d: os.mkfifo(d / "campaign.toml"), "not a regular file"),
    ("campaign-toml-not-utf8", lambda d: (d / "campaign.toml").write_bytes(
        (EXAMPLE / "campaign.toml").read_bytes() + b"\n\xff"), "not UTF-8"),
    ("campaign-toml-nested-too-deep", lambda d: (d / "campaign.toml").write_text(
        "a = " + "[" * 2000 + "]" * 2000 + "\n"), "nested too deeply"),
    ("campaign-toml-gate-inf", lambda d: (d / "campaign.toml").write_text(
        (EXAMPLE / "campaign.toml").read_text().replace("threshold = 0.97", "threshold = inf")),
     "quality_gates.ssim_min.threshold"),
]


@pytest.mark.parametrize(("make", "words"), [c[1:] for c in SCREEN_CASES],
                         ids=[c[0] for c in SCREEN_CASES])
def test_screen_dry_run_bad_campaign(tmp_path: Path, make: Callable[[Path], None],
                                     words: str) -> None:
    d = tmp_path / "camp"
    d.mkdir()
    make(d)
    run = cli if "regular file" in words else cli_fast
    proc = run("screen", "--dry-run", "--campaign", str(d), "--candidate", "tp2-sp2",
               "--track", "5s-lossless", "--out", str(tmp_path / "out"), timeout=30)
    assert proc.returncode == 2
    msg = " ".join(proc.stderr.split()) + " " + " ".join(proc.stdout.split())
    assert "Traceback" not in msg
    assert str(d / "campaign.toml") in msg.replace(" ", "") or \
        str(d / "campaign.toml") in msg, msg
    assert words in msg, msg


def _file(p: Path) -> Path:
    p.write_text("x")
    return p


def _full_dir(p: Path) -> Path:
    p.mkdir()
    (p / "old.json").write_text("{}")
    return p


def _under_file(p: Path) -> Path:
    return _file(p) / "bundle"


OUT_CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    ("out-is-a-file", _file, "exists and is not a directory"),
    ("out-not-empty", _full_dir, "exists and is not empty"),
    ("out-parent-is-a-file", _under_file, "is not a directory"),
]


@pytest.mark.parametrize(("make", "words"), [c[1:] for c in OUT_CASES],
                         ids=[c[0] for c in OUT_CASES])
def test_screen_bad_out(tmp_path: Path, make: Callable[[Path], Path], words: str) -> None:
    """The real run refuses it before anything starts (it used to traceback on a file
    --out when listing it); the dry run says so and exits 2 as the real run would (it
    exited 0: a preflight that passed falsely)."""
    from runners.screen import UsageError, check_out_dir

    out = make(tmp_path / "out")
    with pytest.raises(UsageError, match=words) as exc:
        check_out_dir(out)
    assert f"--out {out}" in str(exc.value)
    proc = cli_fast("screen", "--dry-run", "--campaign", str(EXAMPLE), "--candidate",
                    "tp2-sp2", "--track", "5s-lossless", "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "Traceback" not in text + proc.stderr and words in text, text
    assert "a real screen would stop here on the 2 problem(s) above (exit 2)" in text, text


def test_screen_fresh_out_is_accepted(tmp_path: Path) -> None:
    from runners.screen import check_out_dir

    check_out_dir(tmp_path / "new" / "bundle")
    (tmp_path / "empty").mkdir()
    check_out_dir(tmp_path / "empty")


def test_rich_markup_in_receipt_values_is_printed_literally(tmp_path: Path) -> None:
    """A receipt whose track/screen/candidate hold rich markup ('[/]') used to crash the
    summary table with rich.errors.MarkupError."""
    d = tmp_path / "c"
    shutil.copytree(EXAMPLE, d)
    rec = json.loads((EXAMPLE / BAG / "data" / "receipts" / "s0-control.json").read_text())
    for i, arm in enumerate(("control", "candidate")):
        doc = {**rec, "session_id": f"[/bold]x{i}", "screen_id": "[/]", "track": "[/]",
               "arm": arm, "slot": i}
        if arm == "candidate":
            doc["candidate"] = "[/i]"
        (d / "results" / f"r{i}.json").write_text(json.dumps(doc))
    proc = cli_fast("check", str(d))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    proc = cli_fast("check", str(d), "--details")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert "[/]" in proc.stdout and "results/r0.json" in proc.stdout


def _markup_dir(t: Path) -> Path:
    """``t/a[/x]``: a path whose text holds a rich closing tag ``[/x]``."""
    (t / "a[").mkdir()
    return t / "a[" / "x]"


def _clip(p: Path) -> Path:
    from evidence.media.synth import ClipSpec, make_clip

    make_clip(p, ClipSpec(frames=4))
    return p


MARKUP_CASES: list[tuple[str, Callable[[Path], list[str]], int]] = [
    ("check-missing-dir", lambda t: ["check", str(_markup_dir(t))], 2),
    ("check-dir-is-file", lambda t: ["check", str(_file(_markup_dir(t)))], 2),
    ("claims-not-a-file", lambda t: ["check", str(EXAMPLE / BAG), "--claims",
                                     str(_markup_dir(t))], 2),
    ("media-probe-text-file", lambda t: ["media", "probe", str(_file(_markup_dir(t)))], 2),
    ("media-probe-good-clip", lambda t: ["media", "probe",
                                         str(_clip(t / "a[" / "y].mp4"))
                                         if (t / "a[").mkdir() is None else ""], 0),
    ("screen-dry-run-missing-campaign", lambda t: [
        "screen", "--dry-run", "--campaign", str(_markup_dir(t)), "--candidate", "c",
        "--track", "t", "--out", str(t / "o")], 2),
]


@pytest.mark.parametrize(("make", "code"), [c[1:] for c in MARKUP_CASES],
                         ids=[c[0] for c in MARKUP_CASES])
def test_paths_holding_rich_markup_are_printed_literally(
        tmp_path: Path, make: Callable[[Path], list[str]], code: int) -> None:
    """A path like ``a[/x]`` used to crash every error print with rich.errors.MarkupError."""
    args = make(tmp_path)
    proc = cli_fast(*args)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-2000:]
    assert proc.returncode == code, out
    assert "[/" in out  # the path, literally
