"""``check`` verifies signatures by default: the campaign folder's ``trusted-keys.pem`` (where
the bot reads a campaign's keys) verifies every signed bundle; an edit after signing is P0
even when both manifests were recomputed; an unsigned bundle where keys are configured is
P1; ``--no-signatures`` is the only way to skip; the summary names the keys.  An empty or
unparsable keys file and an empty ``runner_labels`` are P1.  DSSE envelopes verify in
standard and URL-safe base64, checked against securesystemslib (the reference DSSE
implementation of the Secure Systems Lab)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from _evidence_factory import SCOPE_DATA
from hostile.corpus import RECEIPTS, clean_bundle
from screen_scope import toml_dumps
from typer.testing import CliRunner

from evidence.cli import app
from evidence.launch import check_directory
from evidence.manifest import write_bag
from evidence.signing import key_id, load_trusted_keys, verify_envelope
from runners.signer import generate_key, load_private_key

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE_KEYS = ROOT / "templates" / "repo" / "trusted-keys.pem.j2"


@pytest.fixture(scope="module")
def runner_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A runner's private key and its public key file."""
    key = tmp_path_factory.mktemp("keys") / "runner.key"
    return key, generate_key(key)


def _campaign(tmp: Path, key: Path | None, pub: Path | None, **pool: object) -> Path:
    """A campaign folder: campaign.toml, trusted-keys.pem (when ``pub``) and one bundle
    signed with ``key`` (unsigned when None) under bundles/s1."""
    camp = tmp / "campaign"
    camp.mkdir()
    data = {**SCOPE_DATA, "pool": {**SCOPE_DATA["pool"],
                                   "runner_labels": ["self-hosted", "x4"], **pool}}
    (camp / "campaign.toml").write_text(toml_dumps(data))
    if pub is not None:
        (camp / "trusted-keys.pem").write_bytes(pub.read_bytes())
    clean_bundle(camp / "bundles" / "s1", key)
    return camp


def _check(*args: str) -> tuple[int, dict, str]:
    res = CliRunner().invoke(app, ["check", *args, "--json"])
    text = CliRunner().invoke(app, ["check", *args]).output
    return res.exit_code, json.loads(res.output) if res.output.startswith("{") else {}, text


def _rules(rep: dict) -> set[tuple[str, str, str]]:
    return {(f["rule"], f["severity"], f["path"]) for f in rep["findings"]}


def test_campaign_keys_verify_by_default_and_the_summary_names_them(
        tmp_path: Path, runner_key: tuple[Path, Path]) -> None:
    key, pub = runner_key
    camp = _campaign(tmp_path, key, pub)
    _, rep, text = _check(str(camp))
    kid = key_id(next(iter(load_trusted_keys(pub).values())))
    assert rep["signatures"] == {"source": "campaign", "keys_file": "trusted-keys.pem",
                                 "key_ids": [kid], "signed_bundles": 1, "verified": 1, "refused": 0,
                                 "unsigned": 0}
    assert ("SIGNATURE_VERIFIED", "P3", "bundles/s1/attestation.dsse.json") in _rules(rep)
    assert "signatures: 1 verified, 0 refused, 0 unsigned bundle(s)" in text
    assert f"keys: trusted-keys.pem, 1 key: {kid[:19]}..." in text
    # the bundle checked on its own finds the keys of the campaign folder above it
    _, rep, _ = _check(str(camp / "bundles" / "s1"))
    assert rep["signatures"]["source"] == "campaign" and rep["signatures"]["verified"] == 1
    # nothing is hashed before the signatures hold
    assert check_directory(["check", str(camp)]) is None
    assert check_directory(["check", str(camp), "--no-signatures"]) == camp
    # a signed bundle in a campaign without keys: the summary says it was not verified
    (camp / "trusted-keys.pem").unlink()
    _, rep, text = _check(str(camp))
    assert rep["signatures"]["source"] == "none" and rep["signatures"]["signed_bundles"] == 1
    assert "signatures: not verified (no trusted-keys.pem in the campaign folder)" in text


def test_edit_with_both_manifests_recomputed_is_p0_unless_skipped(
        tmp_path: Path, runner_key: tuple[Path, Path]) -> None:
    key, pub = runner_key
    camp = _campaign(tmp_path, key, pub)
    bundle = camp / "bundles" / "s1"
    rec = bundle / RECEIPTS[0]
    rec.write_text(rec.read_text().replace('"client_wall_s": 10.0', '"client_wall_s": 9.0'))
    write_bag(bundle, info={"External-Identifier": "hostile-corpus"})  # both manifests anew
    code, rep, text = _check(str(camp))
    assert code == 1
    bad = [f for f in rep["findings"] if f["rule"] == "SIGNATURE_INVALID"]
    assert bad and {f["severity"] for f in bad} == {"P0"}
    assert rep["signatures"]["refused"] == 1 and rep["documents"]["receipts"] == 0
    assert "1 refused" in text
    code, rep, text = _check(str(camp), "--no-signatures")
    assert not [f for f in rep["findings"] if f["rule"].startswith("SIGNATURE")]
    assert rep["signatures"]["source"] == "skipped" and rep["documents"]["receipts"] == 2
    assert "signatures: not checked (--no-signatures)" in text
    res = CliRunner().invoke(app, ["check", str(camp), "--no-signatures",
                                   "--trusted-keys", str(pub)])
    assert res.exit_code == 2 and "exclude each other" in res.output


def test_unsigned_bundle_where_keys_are_configured_is_p1(
        tmp_path: Path, runner_key: tuple[Path, Path]) -> None:
    _, pub = runner_key
    camp = _campaign(tmp_path, None, pub)
    code, rep, _ = _check(str(camp))
    assert code == 1
    assert ("SIGNATURE_MISSING", "P1", "bundles/s1/bagit.txt") in _rules(rep)
    assert rep["signatures"]["unsigned"] == 1
    assert not [f for f in rep["findings"] if f["severity"] == "P0"]
    # without keys and with nothing signed, no bundle is flagged and no line is spent
    (camp / "trusted-keys.pem").unlink()
    _, rep, text = _check(str(camp))
    assert rep["signatures"]["source"] == "none"
    assert not [f for f in rep["findings"] if f["rule"].startswith("SIGNATURE")]
    assert "signatures:" not in text


@pytest.mark.parametrize("content", [
    TEMPLATE_KEYS.read_text(),  # what `campaign-bot init` writes: comments, no key
    "",
    "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n",
], ids=["init-template", "empty", "unparsable"])
def test_empty_or_unparsable_keys_file_is_p1(tmp_path: Path, runner_key: tuple[Path, Path],
                                             content: str) -> None:
    key, _ = runner_key
    camp = _campaign(tmp_path, key, None)
    (camp / "trusted-keys.pem").write_text(content)
    code, rep, text = _check(str(camp))
    assert code == 1
    hit = [f for f in rep["findings"] if f["rule"] == "TRUSTED_KEYS_UNUSABLE"]
    assert [(f["severity"], f["path"]) for f in hit] == [("P1", "trusted-keys.pem")]
    assert "refuses every screen bundle" in hit[0]["message"]
    assert rep["signatures"]["source"] == "unusable"
    assert "trusted-keys.pem holds no usable key" in text


@pytest.mark.parametrize("labels", [[], None], ids=["empty", "absent"])
def test_empty_runner_labels_is_p1(tmp_path: Path, labels: list[str] | None) -> None:
    camp = _campaign(tmp_path, None, None)
    text = (camp / "campaign.toml").read_text()
    if labels is None:
        text = re.sub(r"runner_labels = .*\n", "", text)
    else:
        text = re.sub(r"runner_labels = .*\n", "runner_labels = []\n", text)
    (camp / "campaign.toml").write_text(text)
    _, rep, _ = _check(str(camp))
    hit = [f for f in rep["findings"] if f["rule"] == "RUNNER_LABELS_EMPTY"]
    assert [(f["severity"], f["path"], f["field"]) for f in hit] == [
        ("P1", "campaign.toml", "pool.runner_labels")]
    line = text.splitlines()[hit[0]["line"] - 1]
    assert ("runner_labels" in line) if labels is not None else ("[pool]" in line)


# ---------------------------------------------------------------- DSSE, third-party check


def _urlsafe(b64: str, pad: bool) -> str:
    out = base64.urlsafe_b64encode(base64.b64decode(b64)).decode()
    return out if pad else out.rstrip("=")


def test_dsse_envelopes_of_securesystemslib_verify_in_either_base64(
        runner_key: tuple[Path, Path]) -> None:
    """An envelope made and signed by securesystemslib verifies here, in standard base64 and
    re-encoded URL-safe (padded or not), as DSSE's envelope.md requires; ours verifies there."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    key, pub = runner_key
    priv = load_private_key(key)
    keys = load_trusted_keys(pub)
    kid = next(iter(keys))
    public = SSlibKey.from_crypto(priv.public_key(), keyid=kid)
    stmt = {"_type": "https://in-toto.io/Statement/v1", "subject": [
        {"name": "tagmanifest-sha256.txt", "digest": {"sha256": "0" * 64}}],
        "predicateType": "urn:campaign-bot:predicate:screen:v1", "predicate": {"screen": "s"}}
    # any 3 bytes of "?>?>..." encode to a quartet ending in "+" or "/": the two alphabets
    # differ in this payload whatever its alignment
    env = Envelope(payload=json.dumps({**stmt, "pad": "?>" * 6}).encode(),
                   payload_type="application/vnd.in-toto+json", signatures={})
    env.sign(CryptoSigner(priv, public))
    std = env.to_dict()
    assert re.search(r"[+/]", std["payload"]), std
    assert verify_envelope(std, keys)["predicate"] == {"screen": "s"}
    for pad in (True, False):
        url = {**std, "payload": _urlsafe(std["payload"], pad),
               "signatures": [{**std["signatures"][0],
                               "sig": _urlsafe(std["signatures"][0]["sig"], pad)}]}
        assert verify_envelope(url, keys)["predicate"] == {"screen": "s"}
        if pad:  # securesystemslib 1.x reads padded URL-safe base64 and verifies it too
            Envelope.from_dict(url).verify([public], 1)
    # a mixed or damaged encoding is refused, never half-read
    bad = {**std, "payload": std["payload"][:-4] + "*%$#"}
    with pytest.raises(ValueError, match="malformed DSSE envelope"):
        verify_envelope(bad, keys)


def test_runner_signed_bundle_verifies_with_securesystemslib(
        tmp_path: Path, runner_key: tuple[Path, Path]) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    key, pub = runner_key
    bundle = clean_bundle(tmp_path / "b", key)
    env = json.loads((bundle / "attestation.dsse.json").read_text())
    kid = next(iter(load_trusted_keys(pub)))
    public = SSlibKey.from_crypto(load_private_key(key).public_key(), keyid=kid)
    assert list(Envelope.from_dict(env).verify([public], 1)) == [kid]
