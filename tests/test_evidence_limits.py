"""Limits on what reading evidence may cost, and counts that add up: extra files in the
integrity line, a per-document size cap, findings capped per rule and file, and a nesting
limit on every JSON parse of an evidence path (file and depth named)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hostile.corpus import RECEIPTS, clean_bundle
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from evidence import safejson
from evidence.cli import app
from evidence.findings import _is_receipt
from evidence.manifest import MAX_FINDINGS_PER_RULE_AND_FILE, verify_tree, write_bag
from evidence.media.errors import MediaInputError
from evidence.media.gates import load_gates_file
from evidence.signing import PAYLOAD_TYPE, key_id, load_trusted_keys, pae, verify_bundle
from runners.signer import generate_key, load_private_key

DEEP = "[" * 100_000 + "]" * 100_000


def check(d: Path, *args: str) -> tuple[int, dict, str]:
    """(exit code, --json report, the rich text output) of ``campaign-bot check d``."""
    runner = CliRunner()
    res = runner.invoke(app, ["check", str(d), "--json", *args])
    assert "Traceback" not in res.output
    text = runner.invoke(app, ["check", str(d), *args])
    return res.exit_code, json.loads(res.stdout), " ".join(text.stdout.split())


def test_integrity_line_counts_extra_files(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", None)
    (b / "data" / "receipts" / "notes.txt").write_text("added after sealing\n")
    code, rep, text = check(b)
    assert rep["hash_errors"] == rep["extra_files"] == 1
    assert "5 hashes in 2 manifests, 1 error (incl. 1 extra file)" in text, text
    assert "exit 1: 1 problem(s)" in text
    assert code == 1


def test_document_cap_is_an_option_and_a_clear_finding(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", None)
    small, big = sorted((b / r).stat().st_size for r in RECEIPTS)
    code, rep, _ = check(b, "--max-document-bytes", str(small - 1))
    hits = sorted((f for f in rep["findings"] if f["rule"] == "FILE_TOO_LARGE"),
                  key=lambda f: len(f["message"]))
    assert {(f["path"], f["severity"]) for f in hits} == {(r, "P1") for r in RECEIPTS}
    assert f"{small} bytes exceeds the {small - 1}-byte limit for documents; not read" in \
        {f["message"] for f in hits}
    assert "--max-document-bytes" in hits[0]["resolution"]
    assert rep["documents"]["receipts"] == 0 and code == 1
    code, rep, _ = check(b, "--max-document-bytes", str(big))
    assert rep["documents"]["receipts"] == 2 and code == 0


def test_schema_errors_of_one_receipt_are_capped(tmp_path: Path) -> None:
    b = tmp_path / "b"
    clean_bundle(b, None)
    p = b / RECEIPTS[0]
    obj = json.loads(p.read_text())
    req = obj["requests"][-1]
    obj["requests"] += [{**req, "index": 10 + i, "client_wall_s": "slow"} for i in range(300)]
    p.write_text(json.dumps(obj, indent=1))
    write_bag(b)
    _, rep, _ = check(b)
    hits = [f for f in rep["findings"] if f["rule"] == "SCHEMA_INVALID"]
    assert len(hits) == MAX_FINDINGS_PER_RULE_AND_FILE + 1
    last = max(f["line"] for f in hits)
    assert hits[-1]["message"] == (f"and 280 more SCHEMA_INVALID findings in {RECEIPTS[0]}, "
                                   f"up to line {last} (the first 20 are listed)")
    assert hits[-1]["severity"] == "P1" and hits[-1]["line"] == last


def test_manifest_findings_are_capped_before_they_are_built(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", None)
    with open(b / "manifest-sha256.txt", "a") as fh:
        fh.write(f"{'0' * 64}  data/gone.json\n" * 3 + "junk\n" * 50)
    res = verify_tree(b)
    rules = [(f.rule, f.path) for f in res.findings]
    assert rules.count(("MANIFEST_MALFORMED", "manifest-sha256.txt")) == 21
    assert res.malformed == 50  # the counts stay exact
    assert rules.count(("MANIFEST_MISSING_FILE", "manifest-sha256.txt")) == 1  # deduplicated


def test_json_depth_in_the_loader_names_file_depth_and_line(tmp_path: Path) -> None:
    b = clean_bundle(tmp_path / "b", None)
    (b / "data" / "deep.json").write_text('{\n "a":\n' + "[" * 70 + "]" * 70 + "}")
    write_bag(b)
    code, rep, _ = check(b)
    [hit] = [f for f in rep["findings"] if f["path"] == "data/deep.json"]
    assert (hit["rule"], hit["severity"], hit["line"]) == ("JSON_INVALID", "P1", 3)
    assert "71 levels at line 3 (the limit is 64 levels)" in hit["message"]
    assert code == 1


def test_json_depth_in_the_verifier_without_the_loader(tmp_path: Path) -> None:
    (tmp_path / "map.json").write_text(DEEP)
    res = verify_tree(tmp_path)  # used to end in RecursionError
    assert res.manifests == []


def test_json_depth_in_a_signed_statement(tmp_path: Path) -> None:
    """A statement nested 100,000 levels, signed by a trusted key, is refused by name."""
    key = tmp_path / "k.key"
    pub = generate_key(key)
    b = clean_bundle(tmp_path / "b", None)
    body = DEEP.encode()
    priv = load_private_key(key)
    (b / "attestation.dsse.json").write_text(json.dumps({
        "payload": base64.b64encode(body).decode(), "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": key_id(priv.public_key()),
                        "sig": base64.b64encode(priv.sign(pae(PAYLOAD_TYPE, body))).decode()}]}))
    assert verify_bundle(b, load_trusted_keys(pub)) == [
        "attestation.dsse.json: payload is not JSON: JSON nested too deeply: 100000 levels at "
        "line 1 (the limit is 64 levels)"]


def test_json_depth_in_frozen_receipt_blobs_and_gates_files(tmp_path: Path) -> None:
    assert _is_receipt(DEEP.encode()) is False  # used to raise RecursionError
    gates = tmp_path / "gates.json"
    gates.write_text(DEEP)
    with pytest.raises(MediaInputError, match="100000 levels at line 1"):
        load_gates_file(gates)


def test_depth_scanner_skips_brackets_inside_strings() -> None:
    text = json.dumps({"s": "[[[[{{{{" * 50, "a": [[1]]})
    assert safejson.nesting_depth(text, 3) == (3, None)
    assert safejson.loads(text)["a"] == [[1]]
    with pytest.raises(safejson.JSONTooDeep) as exc:
        safejson.loads('{"a": [[[1]]]}', limit=3)
    assert (exc.value.depth, exc.value.line) == (4, 1)


def _depth(obj: object) -> int:
    if isinstance(obj, dict):
        return 1 + max(map(_depth, obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max(map(_depth, obj), default=0)
    return 0


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\n\u00e9'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(alphabet='[]{}"\\k', max_size=4), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(obj=_json_values, indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_depth_matches_the_parsed_object(obj: object, indent: int | None,
                                         ascii_only: bool) -> None:
    """The fast path (brackets outside strings at C speed) agrees with the parsed value,
    whatever brackets, quotes and backslashes the strings hold."""
    text = json.dumps(obj, indent=indent, ensure_ascii=ascii_only)
    assert safejson.nesting_depth(text, 64) == (_depth(obj), None)
