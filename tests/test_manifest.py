"""The BagIt writer and the verifier against other tools: bagit-python validates the bags we
write, ``sha256sum -c`` reads our manifests, and we read what ``sha256sum`` writes (GNU and
BSD forms) and JSON integrity maps."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import bagit
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evidence.manifest import hash_files, sha256_file, verify_tree, write_bag


def make_payload(root: Path, n: int = 12) -> None:
    for i in range(n):
        p = root / "data" / f"sub{i % 3}" / f"file {i}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"i": i}) + "\n")
    (root / "data" / "media.bin").write_bytes(os.urandom(3 << 20))


def test_written_bag_validates_with_bagit_python(tmp_path: Path) -> None:
    make_payload(tmp_path)
    write_bag(tmp_path, info={"External-Identifier": "screen-1", "Note": "two\nlines"})
    bag = bagit.Bag(str(tmp_path))
    bag.validate()  # raises BagValidationError on any problem
    assert bag.info["External-Identifier"] == "screen-1"
    octets = sum(p.stat().st_size for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert bag.info["Payload-Oxum"] == f"{octets}.13"
    res = verify_tree(tmp_path)
    assert (res.hashes_checked, res.errors, res.findings) == (16, 0, [])


def test_rewriting_a_bag_reseals_changed_payload(tmp_path: Path) -> None:
    make_payload(tmp_path, 2)
    write_bag(tmp_path)
    (tmp_path / "data" / "late.json").write_text("{}\n")
    assert verify_tree(tmp_path).extra == 1
    write_bag(tmp_path)
    bagit.Bag(str(tmp_path)).validate()
    assert verify_tree(tmp_path).findings == []


def test_bag_made_by_bagit_python_verifies(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}\n")
    (tmp_path / "b.txt").write_text("b\n")
    bagit.make_bag(str(tmp_path), checksums=["sha256"])
    res = verify_tree(tmp_path)
    assert res.findings == [] and res.hashes_ok == res.hashes_checked == 2 + 3


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="coreutils sha256sum absent")
def test_sha256sum_reads_our_manifests(tmp_path: Path) -> None:
    make_payload(tmp_path)
    write_bag(tmp_path)
    for name in ("manifest-sha256.txt", "tagmanifest-sha256.txt"):
        out = subprocess.run(["sha256sum", "--strict", "-c", name], cwd=tmp_path,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        assert out.stdout.count(": OK") == len((tmp_path / name).read_text().splitlines())


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="coreutils sha256sum absent")
def test_we_read_what_sha256sum_writes(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(3):
        (d / f"server-{i}.log").write_text(f"log {i}\n")
    (d / "back\\slash.log").write_text("escaped name\n")
    names = sorted(p.name for p in d.iterdir())
    gnu = subprocess.run(["sha256sum", *names], cwd=d, capture_output=True, text=True).stdout
    assert gnu.startswith("\\")  # the backslash name is escaped with a leading '\'
    (d / "SHA256SUMS").write_text(gnu)
    bsd = subprocess.run(["sha256sum", "--tag", *names], cwd=d, capture_output=True,
                         text=True).stdout
    (d / "bsd.sha256").write_text(bsd)
    res = verify_tree(tmp_path)
    assert res.findings == []
    assert res.hashes_checked == res.hashes_ok == 8
    (d / "server-1.log").write_text("changed\n")
    res = verify_tree(tmp_path)
    assert res.mismatched == 2
    assert {f.path for f in res.findings} == {"logs/server-1.log"}


def test_json_integrity_map_forms(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "plan").mkdir()
    st = tmp_path / "results" / "status.json"
    st.write_text('{"execution": "queued"}\n')
    digest = hashlib.sha256(st.read_bytes()).hexdigest()
    # flat map at the root, paths relative to the map's directory
    (tmp_path / "integrity.json").write_text(json.dumps({"results/status.json": digest}))
    # nested map in plan/, paths relative to the checked root, one external artifact
    (tmp_path / "plan" / "preflight-integrity.json").write_text(json.dumps({
        "generated_at": "2026-11-04T00:00:00Z",
        "files": {"results/status.json": f"sha256:{digest}",
                  "logs/gone.log": {"sha256": "1" * 64, "external": True},
                  "https://example.org/out.mp4": "2" * 64},
    }, indent=2))
    res = verify_tree(tmp_path)
    assert res.findings == []
    assert res.hashes_ok == 2
    assert sorted(e.path for e in res.external) == ["https://example.org/out.mp4",
                                                    "logs/gone.log"]
    assert all(e.status == "external, digest recorded, not verifiable here"
               for e in res.external)


def test_integrity_map_bad_digest_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    good = hashlib.sha256(b"a\n").hexdigest()
    (tmp_path / "map.json").write_text(
        f'{{\n  "files": {{\n    "a.txt": "{good}",\n    "b.txt": "abc"\n  }}\n}}\n')
    res = verify_tree(tmp_path)
    [f] = res.findings
    assert (f.rule, f.path, f.line) == ("MANIFEST_MALFORMED", "map.json", 4)


def test_a_receipt_is_not_mistaken_for_an_integrity_map(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps({
        "schema": "campaign-bot/receipt@1", "config_digest": "a" * 64}))
    (tmp_path / "other.json").write_text(json.dumps({"title": "x", "commit": "b" * 64}))
    assert verify_tree(tmp_path).manifests == []


def test_symlinks_are_never_followed_out(tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("secret\n")
    bag = tmp_path / "bag"
    (bag / "data").mkdir(parents=True)
    (bag / "data" / "ok.txt").write_text("ok\n")
    write_bag(bag)
    os.symlink(secret, bag / "data" / "leak.txt")
    os.symlink(tmp_path, bag / "data" / "updir")
    with open(bag / "manifest-sha256.txt", "a") as f:
        f.write(f"{hashlib.sha256(b'secret').hexdigest()}  data/leak.txt\n")
        f.write(f"{'0' * 64}  data/updir/outside.txt\n")
    res = verify_tree(bag)
    rules = sorted((f.rule, f.path) for f in res.findings)
    assert ("SYMLINK_ESCAPES", "data/leak.txt") in rules
    assert ("SYMLINK_ESCAPES", "data/updir") in rules
    payload = next(m for m in res.manifests if m.kind == "bagit")
    # only ok.txt was opened; the two linked entries were refused, never hashed
    assert (payload.verified, payload.mismatched, payload.unsafe) == (1, 0, 2)


def test_writer_refuses_links_and_odd_names(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    os.symlink("/etc/hostname", tmp_path / "data" / "x")
    with pytest.raises(ValueError, match="not a regular file"):
        write_bag(tmp_path)
    os.unlink(tmp_path / "data" / "x")
    (tmp_path / "data" / "50%.json").write_text("{}")
    with pytest.raises(ValueError, match="contains '%'"):
        write_bag(tmp_path)
    with pytest.raises(FileNotFoundError, match="no payload directory"):
        write_bag(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="Payload-Oxum"):
        write_bag(tmp_path, info={"Payload-Oxum": "1.1"})


def test_hashing_is_streamed_and_parallel(tmp_path: Path) -> None:
    files = []
    for i in range(4):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(os.urandom((1 << 20) * 3 + i))
        files.append(p)
    seen: list[tuple[int, int]] = []
    got = hash_files(files, progress=lambda d, t: seen.append((d, t)))
    for p in files:
        assert got[p] == (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size)
        assert sha256_file(p) == got[p]
    total = sum(p.stat().st_size for p in files)
    assert seen[-1] == (total, total) or max(d for d, _ in seen) == total
    (tmp_path / "f0.bin").chmod(0)
    if os.geteuid() != 0:
        assert isinstance(hash_files(files)[files[0]], PermissionError)


def test_fetch_txt_entries_are_external(tmp_path: Path) -> None:
    make_payload(tmp_path, 1)
    write_bag(tmp_path)
    with open(tmp_path / "manifest-sha256.txt", "a") as f:
        f.write(f"{'3' * 64}  data/big/out.mp4\n")
    (tmp_path / "fetch.txt").write_text("https://example.org/out.mp4 123 data/big/out.mp4\n")
    res = verify_tree(tmp_path)
    assert [e.path for e in res.external] == ["data/big/out.mp4"]
    assert res.missing == 0
    # the tag manifest still hashed the manifest before the append: exactly that mismatch
    assert [(f.rule, f.path) for f in res.findings] == [("MANIFEST_MISMATCH",
                                                         "manifest-sha256.txt")]


manifest_lines = st.lists(
    st.one_of(
        st.text(max_size=90),
        st.builds(lambda h, p: f"{h}  {p}", st.text("0123456789abcdefABCDEF", min_size=60,
                                                    max_size=66), st.text(max_size=40)),
        st.builds(lambda p: f"{'a' * 64} *{p}", st.text(max_size=40)),
    ), max_size=12)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=manifest_lines, crlf=st.booleans())
def test_any_manifest_text_gives_findings_not_exceptions(tmp_path: Path, lines: list[str],
                                                         crlf: bool) -> None:
    d = tmp_path / "fz"
    shutil.rmtree(d, ignore_errors=True)
    (d / "data").mkdir(parents=True)
    (d / "data" / "x.json").write_text("{}\n")
    nl = "\r\n" if crlf else "\n"
    for name in ("manifest-sha256.txt", "SHA256SUMS"):
        (d / name).write_text(nl.join(lines) + nl, encoding="utf-8", errors="surrogatepass")
    (d / "map.json").write_text(json.dumps({f"data/{i}.txt": x for i, x in enumerate(lines)}))
    res = verify_tree(d)
    for f in res.findings:
        assert f.path and f.message
