"""Untrusted artifact handling: redirect without the token, size caps, zip-slip, links."""

from __future__ import annotations

import io
import stat
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot.github.artifacts import ArtifactError, Limits, download_zip, safe_extract


def make_zip(entries: list[tuple[str, bytes]], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


def test_extracts_a_clean_bundle(tmp_path: Path) -> None:
    data = make_zip([("receipts/s0.json", b"{}"), ("bagit.txt", b"BagIt-Version: 1.0\n")])
    got = safe_extract(data, tmp_path / "b")
    assert got == ["receipts/s0.json", "bagit.txt"]
    assert (tmp_path / "b" / "receipts" / "s0.json").read_bytes() == b"{}"


@pytest.mark.parametrize(
    "name,reason",
    [
        ("/etc/passwd", "absolute path"),
        ("C:evil", "absolute path"),
        ("\\evil", "absolute path"),
        ("a/../../evil", "'..' in archive path"),
        ("../evil", "'..' in archive path"),
        ("a\\..\\evil", "backslash"),
    ],
)
def test_rejects_unsafe_names(tmp_path: Path, name: str, reason: str) -> None:
    data = make_zip([("ok.txt", b"x"), (name, b"bad")])
    with pytest.raises(ArtifactError, match=reason):
        safe_extract(data, tmp_path / "b")
    assert not (tmp_path / "b").exists()  # nothing written before every entry is checked


def test_rejects_symlinks_duplicates_and_too_many(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="symbolic link"):
        safe_extract(make_zip([("a", b"x")], links={"l": "/etc/passwd"}), tmp_path / "1")
    with pytest.raises(ArtifactError, match="duplicate"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            safe_extract(make_zip([("a", b"x"), ("a", b"y")]), tmp_path / "2")
    with pytest.raises(ArtifactError, match="3 entries, over the 2 cap"):
        safe_extract(make_zip([("a", b"1"), ("b", b"2"), ("c", b"3")]), tmp_path / "3",
                     Limits(max_files=2))


def test_caps_uncompressed_size_declared_and_inflated(tmp_path: Path) -> None:
    bomb = make_zip([("zeros", b"\0" * 1_000_000)])
    assert len(bomb) < 5000
    with pytest.raises(ArtifactError, match="unpacks to 1000000 bytes"):
        safe_extract(bomb, tmp_path / "a", Limits(max_uncompressed=100_000))
    # a header that lies about the size: patch file_size in both headers to 10 bytes
    lying = bytearray(bomb)
    zf = zipfile.ZipFile(io.BytesIO(bomb))
    info = zf.infolist()[0]
    size_le = (1_000_000).to_bytes(4, "little")
    lying = bytes(lying).replace(size_le, (10).to_bytes(4, "little"))
    # zipfile inflates only the declared 10 bytes, then the CRC check fails
    with pytest.raises(ArtifactError, match="corrupt archive entry 'zeros': Bad CRC-32"):
        safe_extract(lying, tmp_path / "b", Limits(max_uncompressed=100_000))
    assert (tmp_path / "b" / "zeros").stat().st_size <= 10
    assert info.file_size == 1_000_000


@pytest.fixture
def blob_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    payload = make_zip([("r.json", b"{}")])

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append({"path": self.path, "auth": self.headers.get("Authorization", "")})
            if self.path == "/api/zip":
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{self.server.server_port}/blob")
                self.end_headers()
            elif self.path == "/blob":
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            else:
                self.send_response(404)
                self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_port}", seen
    srv.shutdown()
    srv.server_close()


def test_download_follows_redirect_without_token(blob_server) -> None:
    base, seen = blob_server
    data = download_zip(f"{base}/api/zip", "tok", 200)
    assert zipfile.ZipFile(io.BytesIO(data)).namelist() == ["r.json"]
    assert seen == [{"path": "/api/zip", "auth": "Bearer tok"}, {"path": "/blob", "auth": ""}]


def test_download_caps(blob_server) -> None:
    base, _ = blob_server
    with pytest.raises(ArtifactError, match="over the 100-byte cap"):
        download_zip(f"{base}/api/zip", "tok", 5000, Limits(max_compressed=100))
    with pytest.raises(ArtifactError, match="exceeded the 50-byte cap"):
        download_zip(f"{base}/api/zip", "tok", None, Limits(max_compressed=50))
    with pytest.raises(ArtifactError, match="HTTP 404"):
        download_zip(f"{base}/nope", "tok", None)
