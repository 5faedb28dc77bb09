"""Broken bundles: each kind ends in a clear finding naming the file (and line where there is
one), the right exit code, and never a traceback.  Driven through the real CLI (typer's runner,
in-process) on a copy of the bundled example, or on bags written by ``write_bag``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evidence.cli import app
from evidence.findings import REVIEW_RULES
from evidence.manifest import write_bag

ROOT = Path(__file__).resolve().parents[1]
B5 = "bundles/baseline-5s"
RECEIPT = f"{B5}/data/receipts/s0-control.json"
MANIFEST = f"{B5}/manifest-sha256.txt"


def run_check(d: Path, *extra: str) -> tuple[int, dict]:
    res = CliRunner().invoke(app, ["check", str(d), "--json", *extra])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    rep = json.loads(res.stdout)
    # Integrity only: issue 3's review findings (tests/test_findings.py) are set aside, and
    # the exit code is the one these integrity findings alone give.
    rep["findings"] = [f for f in rep["findings"] if f["rule"] not in REVIEW_RULES]
    code = res.exit_code
    if code != 2:
        code = int(any(f["severity"] in ("P0", "P1", "P2") for f in rep["findings"]))
    return code, rep


def edit_json(path: Path, fn: Callable[[dict], None]) -> None:
    obj = json.loads(path.read_text())
    fn(obj)
    path.write_text(json.dumps(obj, indent=2) + "\n")


def _set_wall(value: object) -> Callable[[dict], None]:
    def fn(o: dict) -> None:
        o["requests"][2]["client_wall_s"] = value
    return fn


def truncated(d: Path) -> None:
    p = d / RECEIPT
    p.write_bytes(p.read_bytes()[:200])


def wrong_type(d: Path) -> None:
    edit_json(d / RECEIPT, _set_wall("814.064"))


def nan_seconds(d: Path) -> None:
    p = d / RECEIPT
    edit_json(p, _set_wall(0.5))
    p.write_text(p.read_text().replace('"client_wall_s": 0.5', '"client_wall_s": NaN'))


def negative_seconds(d: Path) -> None:
    edit_json(d / RECEIPT, _set_wall(-814.064))


def unknown_version(d: Path) -> None:
    edit_json(d / RECEIPT, lambda o: o.__setitem__("schema", "campaign-bot/receipt@2"))


def dotdot_path(d: Path) -> None:
    with open(d / MANIFEST, "a") as f:
        f.write("0" * 64 + "  data/../../../etc/passwd\n")


def absolute_path(d: Path) -> None:
    with open(d / MANIFEST, "a") as f:
        f.write("0" * 64 + "  /etc/passwd\n")


def symlink_escape(d: Path) -> None:
    os.symlink("/etc/hostname", d / B5 / "data" / "receipts" / "host.json")


def crlf(d: Path) -> None:
    p = d / MANIFEST
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))


def uppercase(d: Path) -> None:
    p = d / MANIFEST
    hexd, rest = p.read_text().split("  ", 1)
    p.write_text(hexd.upper() + "  " + rest)


def duplicate(d: Path) -> None:
    p = d / MANIFEST
    p.write_text(p.read_text() * 2)


def missing(d: Path) -> None:
    (d / RECEIPT).unlink()


def extra(d: Path) -> None:
    (d / B5 / "data" / "receipts" / "notes.txt").write_text("added after sealing\n")


def extra_at_root(d: Path) -> None:
    (d / B5 / "README.txt").write_text("unknown tag file\n")


def malformed(d: Path) -> None:
    with open(d / MANIFEST, "a") as f:
        f.write("abc123  data/short-digest.json\n")


def missing_bagit(d: Path) -> None:
    (d / B5 / "bagit.txt").unlink()


def bad_scope(d: Path) -> None:
    p = d / "campaign.toml"
    p.write_text(p.read_text().replace("target_reduction = 0.30", 'target_reduction = "30%"', 1))


def toml_syntax(d: Path) -> None:
    p = d / "campaign.toml"
    p.write_text(p.read_text().replace("[workload]", "[workload"))


def unknown_track(d: Path) -> None:
    edit_json(d / RECEIPT, lambda o: o.__setitem__("track", "10s-lossless"))


def fifo(d: Path) -> None:
    os.mkfifo(d / B5 / "data" / "receipts" / "pipe.json")


def stale_integrity(d: Path) -> None:
    edit_json(d / "results" / "status.json", lambda o: o.__setitem__("execution", "running"))


def line_with(rel: str, needle: str, nth: int = 1) -> Callable[[Path], int]:
    """Expected line: the ``nth`` line of ``rel`` (after mutation) containing ``needle``."""
    def fn(d: Path) -> int:
        hits = [i for i, x in enumerate((d / rel).read_text().split("\n"), 1) if needle in x]
        return hits[nth - 1]
    return fn


def last_line(rel: str) -> Callable[[Path], int]:
    def fn(d: Path) -> int:
        return len((d / rel).read_text().rstrip("\n").split("\n"))
    return fn


WALL = line_with(RECEIPT, '"client_wall_s"', 3)

# (id, mutate, rule, path the finding must name, expected line (int, callable or None),
#  extra CLI args)
CASES = [
    ("truncated-json", truncated, "JSON_INVALID", RECEIPT, last_line(RECEIPT), ()),
    ("wrong-type", wrong_type, "SCHEMA_INVALID", RECEIPT, WALL, ()),
    ("nan-seconds", nan_seconds, "SCHEMA_INVALID", RECEIPT, WALL, ()),
    ("negative-seconds", negative_seconds, "SCHEMA_INVALID", RECEIPT, WALL, ()),
    ("unknown-schema-version", unknown_version, "SCHEMA_INVALID", RECEIPT, 2, ()),
    ("file-over-limit", lambda d: None, "FILE_TOO_LARGE", "campaign.toml", None,
     ("--max-file-bytes", "4000")),
    ("dotdot-path", dotdot_path, "UNSAFE_PATH", MANIFEST, 2, ()),
    ("absolute-path", absolute_path, "UNSAFE_PATH", MANIFEST, 2, ()),
    ("symlink-escape", symlink_escape, "SYMLINK_ESCAPES", f"{B5}/data/receipts/host.json",
     None, ()),
    ("crlf-manifest", crlf, "MANIFEST_CRLF", MANIFEST, 1, ()),
    ("uppercase-hex", uppercase, "MANIFEST_UPPERCASE_HEX", MANIFEST, 1, ()),
    ("duplicate-lines", duplicate, "MANIFEST_DUPLICATE", MANIFEST, 2, ()),
    ("missing-file", missing, "MANIFEST_MISSING_FILE", MANIFEST, 1, ()),
    ("extra-payload-file", extra, "MANIFEST_EXTRA_FILE", f"{B5}/data/receipts/notes.txt",
     None, ()),
    ("unknown-file-at-bag-root", extra_at_root, "MANIFEST_EXTRA_FILE", f"{B5}/README.txt",
     None, ()),
    ("malformed-line", malformed, "MANIFEST_MALFORMED", MANIFEST, 2, ()),
    ("missing-bagit-txt", missing_bagit, "BAG_DECLARATION", f"{B5}/bagit.txt", None, ()),
    ("scope-wrong-type", bad_scope, "SCHEMA_INVALID", "campaign.toml", None, ()),
    ("scope-toml-syntax", toml_syntax, "TOML_INVALID", "campaign.toml",
     line_with("campaign.toml", "[workload"), ()),
    ("receipt-unknown-track", unknown_track, "RECEIPT_SCOPE", RECEIPT,
     line_with(RECEIPT, '"track"'), ()),
    ("fifo-in-bundle", fifo, "NOT_REGULAR_FILE", f"{B5}/data/receipts/pipe.json", None, ()),
    ("edited-after-hashing", stale_integrity, "MANIFEST_MISMATCH", "results/status.json",
     None, ()),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_broken_bundle_names_the_file(example_copy: Path, case: tuple) -> None:
    _, mutate, rule, path, line, args = case
    mutate(example_copy)
    code, rep = run_check(example_copy, *args)
    hits = [f for f in rep["findings"] if f["rule"] == rule]
    assert hits, f"no {rule} finding; got {[(f['rule'], f['path']) for f in rep['findings']]}"
    named = [f for f in hits if f["path"] == path]
    assert named, f"{rule} does not name {path}: {hits}"
    if line is not None:
        want = line(example_copy) if callable(line) else line
        assert named[0]["line"] == want, named[0]
    assert named[0]["message"]
    assert code == 1
    assert rep["exit_code"] == 1


def test_error_messages_say_what_is_wrong(example_copy: Path) -> None:
    wrong_type(example_copy)
    _, rep = run_check(example_copy)
    f = next(f for f in rep["findings"] if f["rule"] == "SCHEMA_INVALID")
    assert f["field"] == "requests.2.client_wall_s"
    assert "valid number" in f["message"] and '(got the string "814.064")' in f["message"]
    unknown_version(example_copy)
    _, rep = run_check(example_copy)
    f = next(f for f in rep["findings"] if f["rule"] == "SCHEMA_INVALID")
    assert "unknown schema version 'campaign-bot/receipt@2'" in f["message"]


def test_scope_error_points_at_toml_line(example_copy: Path) -> None:
    bad_scope(example_copy)
    text = (example_copy / "campaign.toml").read_text().split("\n")
    want = next(i for i, x in enumerate(text, 1) if x.startswith('target_reduction = "30%"'))
    _, rep = run_check(example_copy)
    f = next(f for f in rep["findings"] if f["rule"] == "SCHEMA_INVALID")
    assert (f["path"], f["line"], f["field"]) == ("campaign.toml", want,
                                                  "tracks.0.target_reduction")


def test_one_flipped_byte_among_500(tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    for i in range(500):
        p = bag / "data" / f"d{i // 100}" / f"r{i:03d}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"i": i, "pad": "x" * (i % 97)}) + "\n")
    write_bag(bag)
    victim = bag / "data" / "d3" / "r317.json"
    raw = bytearray(victim.read_bytes())
    raw[raw.index(b"x")] ^= 0x01  # 'x' -> 'y': one bit, still valid JSON
    victim.write_bytes(bytes(raw))
    code, rep = run_check(bag)
    mism = [f for f in rep["findings"] if f["rule"] == "MANIFEST_MISMATCH"]
    assert len(mism) == 1 and mism[0]["path"] == "data/d3/r317.json"
    assert rep["hashes_checked"] == 503 and rep["hash_errors"] == 1
    assert [f["rule"] for f in rep["findings"]] == ["MANIFEST_MISMATCH"]
    assert code == 1


def test_empty_bundle(tmp_path: Path) -> None:
    code, rep = run_check(tmp_path)
    assert [f["rule"] for f in rep["findings"]] == ["EMPTY_BUNDLE"]
    assert code == 1


def test_payload_oxum_is_only_a_warning(example_copy: Path) -> None:
    p = example_copy / B5 / "bag-info.txt"
    p.write_text(p.read_text().replace("Payload-Oxum: ", "Payload-Oxum: 1"))
    # re-seal the tag manifest so only the Oxum is wrong
    import hashlib
    tm = example_copy / B5 / "tagmanifest-sha256.txt"
    lines = []
    for line in tm.read_text().splitlines():
        digest, name = line.split("  ", 1)
        if name == "bag-info.txt":
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}\n")
    tm.write_text("".join(lines))
    code, rep = run_check(example_copy)
    assert [(f["rule"], f["severity"]) for f in rep["findings"]] == [("BAG_PAYLOAD_OXUM", "P3")]
    assert code == 0


def test_external_digests_are_never_verified(example_copy: Path) -> None:
    code, rep = run_check(example_copy)
    assert code == 0
    ext = rep["external"]
    assert len(ext) == rep["external_digests"] == 5
    assert all(e["status"] == "external, digest recorded, not verifiable here" for e in ext)
    jm = next(m for m in rep["manifests"] if m["kind"] == "json-map")
    assert (jm["entries"], jm["verified"], jm["external"]) == (7, 2, 5)


def test_missing_directory_exits_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["check", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "Traceback" not in res.output


def test_unreadable_file_is_a_finding_not_a_crash() -> None:
    base = Path(tempfile.mkdtemp(prefix="cb-perm-"))
    try:
        d = base / "campaign"
        shutil.copytree(ROOT / "examples" / "h3-ref2va-4x910b1", d)
        for p in [base, *base.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (d / RECEIPT).chmod(0o000)
        cmd = [sys.executable, "-c", "from evidence.cli import main; main()", "check", str(d),
               "--json"]
        if os.geteuid() == 0:
            # root reads anything: drop the capabilities that bypass file modes, so the
            # mode-000 file gives a real EACCES (util-linux setpriv)
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.skip("running as root without setpriv: cannot make a file unreadable")
            caps = "-dac_override,-dac_read_search"
            cmd = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert "Traceback" not in res.stderr, res.stderr
        rep = json.loads(res.stdout)
        hits = [f for f in rep["findings"] if f["rule"] == "UNREADABLE"]
        assert [f["path"] for f in hits] == [RECEIPT], rep["findings"]
        assert "Permission denied" in hits[0]["message"]
        assert res.returncode == 1
    finally:
        shutil.rmtree(base)


def test_oversized_document_is_an_error_but_oversized_payload_json_a_note(
        example_copy: Path) -> None:
    (example_copy / "trace.json").write_text(json.dumps({"events": ["x" * 100] * 100}))
    code, rep = run_check(example_copy, "--max-file-bytes", "2500")
    sev = {f["path"]: f["severity"] for f in rep["findings"] if f["rule"] == "FILE_TOO_LARGE"}
    assert sev["trace.json"] == "P3"
    assert sev["campaign.toml"] == "P1"
    assert sev[RECEIPT] == "P1"  # a receipt starts with its campaign-bot schema
    assert code == 1


def test_a_campaign_with_an_invalid_campaign_toml_is_a_campaign(tmp_path: Path) -> None:
    """A campaign directory whose campaign.toml does not validate is headed as a campaign
    with an invalid campaign.toml, and its findings are the campaign.toml's (it was headed
    'bundle' with EMPTY_BUNDLE)."""
    (tmp_path / "campaign.toml").write_text('schema = 5\nid = "x"\n')
    code, rep = run_check(tmp_path)
    assert code == 1 and rep["campaign_file"] is True and rep["campaign"] is None
    rules = [f["rule"] for f in rep["findings"]]
    assert "EMPTY_BUNDLE" not in rules and "SCHEMA_INVALID" in rules, rules
    res = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()",
                          "check", str(tmp_path)], capture_output=True, text=True, timeout=60)
    first = res.stdout.splitlines()[:3]
    assert first[0].startswith("campaign (campaign.toml invalid)  ("), first
    assert first[2].startswith("documents: campaign.toml invalid, "), first
