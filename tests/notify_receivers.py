"""Local receivers for every notification protocol the notify feature speaks, each a real
server that records what it got.

* :class:`ServiceDouble`: the chat services (Slack, Feishu, Lark, DingTalk, Microsoft Teams
  workflows) at their real host names.  Apprise posts to fixed hosts
  (``hooks.slack.com``, ``open.feishu.cn``, ``oapi.dingtalk.com``...), so the double is an
  HTTPS proxy (``HTTPS_PROXY``) that answers ``CONNECT`` and terminates TLS itself with a
  certificate for the asked host, issued by a test CA that the client trusts through
  ``REQUESTS_CA_BUNDLE``: Apprise's own code, requests and TLS run unchanged, and the double
  answers as each service documents (Slack ``ok``, DingTalk ``{"errcode": 0}``, Feishu and
  Lark ``{"code": 0}``, Teams workflows 202).
* :class:`SignedHookReceiver`: the bot's signed webhook on plain HTTP; it verifies the
  HMAC-SHA256 signature itself and answers 401 to a wrong one.
* :class:`MailReceiver`: an SMTP server (aiosmtpd) recording each message.
"""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import hashlib
import hmac
import json
import select
import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    """One request a receiver got: host, path (with query), headers, raw body."""

    host: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)

    @property
    def query(self) -> dict[str, list[str]]:
        """The query string, parsed (values unquoted once)."""
        return parse_qs(urlsplit(self.path).query)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class TestCA:
    """A throw-away CA (P-256) that issues one leaf certificate per host name."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(_name("campaign-bot test CA"))
            .issuer_name(_name("campaign-bot test CA")).public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()),
                           critical=False)
            .sign(self.key, hashes.SHA256()))
        self.bundle = work / "test-ca.pem"
        self.bundle.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def context_for(self, host: str) -> ssl.SSLContext:
        """A server-side TLS context presenting a certificate for ``host``."""
        with self._lock:
            if host in self._contexts:
                return self._contexts[host]
            key = ec.generate_private_key(ec.SECP256R1())
            now = dt.datetime.now(dt.UTC)
            cert = (
                x509.CertificateBuilder().subject_name(_name(host))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]),
                               critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.key.public_key()), critical=False)
                .sign(self.key, hashes.SHA256()))
            safe = host.replace(":", "_")
            cert_path, key_path = self.work / f"{safe}.pem", self.work / f"{safe}.key"
            cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            key_path.write_bytes(key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption()))
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert_path, key_path)
            self._contexts[host] = ctx
            return ctx


def service_answer(host: str) -> tuple[int, bytes]:
    """What each service answers an accepted message (their documented success answers)."""
    if host == "hooks.slack.com":
        return 200, b"ok"
    if host == "oapi.dingtalk.com":
        return 200, b'{"errcode":0,"errmsg":"ok"}'
    if host in ("open.feishu.cn", "open.larksuite.com"):
        return 200, b'{"code":0,"msg":"success","data":{}}'
    if host.endswith(".logic.azure.com"):
        return 202, b""
    return 404, b"unknown service"


class _Handler(BaseHTTPRequestHandler):
    server: _ProxyServer
    protocol_version = "HTTP/1.1"
    tunnel_host = ""

    def log_message(self, *args: Any) -> None:
        pass

    def do_CONNECT(self) -> None:  # noqa: N802 - http.server's naming
        host = self.path.rsplit(":", 1)[0]
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        tls = self.server.ca.context_for(host).wrap_socket(self.connection, server_side=True)
        self.connection = tls
        self.rfile = tls.makefile("rb")
        self.wfile = tls.makefile("wb")
        self.tunnel_host = host
        self.close_connection = False
        while not self.close_connection:
            self.handle_one_request()

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        host = self.tunnel_host or (self.headers.get("Host") or "")
        status, answer = self.server.answer(host)
        self.server.received.append(Received(
            host, "POST", self.path, {k: v for k, v in self.headers.items()}, body))
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("Content-Type", "application/json" if answer[:1] == b"{"
                         else "text/plain")
        self.end_headers()
        self.wfile.write(answer)
        self.wfile.flush()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    ca: TestCA
    received: list[Received]
    fail_status: int | None = None

    def answer(self, host: str) -> tuple[int, bytes]:
        if self.fail_status is not None:
            return self.fail_status, b"down"
        return service_answer(host)


class ServiceDouble:
    """The chat services behind an intercepting HTTPS proxy (see the module docstring).
    Use :attr:`env` as the client's environment; :attr:`received` lists what arrived;
    :attr:`fail_status` set makes every service answer that status."""

    def __init__(self, work: Path) -> None:
        self.ca = TestCA(work)
        self.server = _ProxyServer(("127.0.0.1", 0), _Handler)
        self.server.ca = self.ca
        self.server.received = []
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def received(self) -> list[Received]:
        """Requests received so far, oldest first."""
        return self.server.received

    def set_failing(self, status: int | None) -> None:
        """Every service answers ``status`` (None: their success answers again)."""
        self.server.fail_status = status

    @property
    def env(self) -> dict[str, str]:
        """Environment that routes HTTPS through the double and trusts its CA (local
        addresses go direct)."""
        port = self.server.server_address[1]
        return {"HTTPS_PROXY": f"http://127.0.0.1:{port}", "https_proxy":
                f"http://127.0.0.1:{port}", "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost", "REQUESTS_CA_BUNDLE": str(self.ca.bundle)}

    def close(self) -> None:
        """Stop the server."""
        self.server.shutdown()
        self.server.server_close()


class _HookHandler(BaseHTTPRequestHandler):
    server: _HookServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        got = self.headers.get("X-Campaign-Bot-Signature-256", "")
        want = "sha256=" + hmac.new(self.server.secret, body, hashlib.sha256).hexdigest()
        ok = hmac.compare_digest(got, want)
        rec = Received(self.headers.get("Host", ""), "POST", self.path, dict(self.headers),
                       body)
        (self.server.received if ok else self.server.rejected).append(rec)
        self.send_response(204 if ok else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _HookServer(ThreadingHTTPServer):
    daemon_threads = True
    secret: bytes
    received: list[Received]
    rejected: list[Received]


class SignedHookReceiver:
    """The signed webhook's receiver: verifies ``X-Campaign-Bot-Signature-256`` with
    ``secret``; :attr:`received` holds verified requests, :attr:`rejected` the others."""

    def __init__(self, secret: str) -> None:
        self.server = _HookServer(("127.0.0.1", 0), _HookHandler)
        self.server.secret = secret.encode()
        self.server.received = []
        self.server.rejected = []
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        """Where to post."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/campaign"

    @property
    def received(self) -> list[Received]:
        """Verified requests."""
        return self.server.received

    @property
    def rejected(self) -> list[Received]:
        """Requests whose signature did not verify."""
        return self.server.rejected

    def close(self) -> None:
        """Stop the server."""
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Mail:
    """One message the SMTP receiver accepted."""

    sender: str
    recipients: list[str]
    message: email.message.EmailMessage = field(repr=False)

    @property
    def subject(self) -> str:
        """The Subject header."""
        return str(self.message["Subject"])

    @property
    def text(self) -> str:
        """The text/plain body."""
        part = self.message.get_body(("plain",))
        return part.get_content() if part is not None else ""


class MailReceiver:
    """An SMTP server on 127.0.0.1 (aiosmtpd) recording every message in :attr:`mails`."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.mails: list[Mail] = []
        outer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any,  # noqa: N802
                                  envelope: Any) -> str:
                msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
                outer.mails.append(Mail(envelope.mail_from, list(envelope.rcpt_tos), msg))
                return "250 Message accepted for delivery"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def close(self) -> None:
        """Stop the server."""
        self.controller.stop()


__all__ = ["MailReceiver", "Received", "ServiceDouble", "SignedHookReceiver", "select"]
