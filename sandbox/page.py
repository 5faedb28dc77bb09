"""The sandbox's web page: write PR comments as a chosen user, watch what the bot does.

One HTML page (``GET /``) that polls ``GET /api/state`` every second and posts comments to
``POST /api/comment``.  The local GitHub's web links (``html_url``: a workflow run, a check
run, the pull request, the campaign issue, the evidence tree the status header was updated
from) point here (:attr:`sandbox.stand.Stand.web_url`): each redirects to its section of the
page (:func:`web_link_target`), so no link the bot writes leaves this machine.  The server is
:class:`http.server.ThreadingHTTPServer` on 127.0.0.1 (standard library: a few routes do not
need a framework).

Guards, because any web site the user visits can send requests to 127.0.0.1: ``POST`` needs
``Content-Type: application/json`` (a cross-site form cannot send it, and a cross-site
``fetch`` with it needs a CORS preflight this server never grants), and every request must
name this server in ``Host`` (a DNS-rebinding page names its own host).  Markdown is rendered
with markdown-it-py with raw HTML off (a comment cannot inject script into the page).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from .stand import ISSUE, PR, REPO, USERS, Stand, candidates

PAGE = Path(__file__).resolve().parent / "page.html"
"""The page: plain HTML, CSS and JavaScript, no build step, nothing fetched from elsewhere."""
MAX_POST_BYTES = 70_000
"""A comment is at most 65,536 characters on GitHub; the JSON around it is small."""
_MD = MarkdownIt("commonmark", {"html": False}).enable("table")
_HIDDEN = re.compile(r"<!--.*?-->", re.S)
_LAYOUT_TAGS = re.compile(r"</?(details|summary|br|sub|sup|p|b|code)\s*/?>", re.I)


def render_markdown(text: str) -> str:
    """GitHub-flavoured-enough HTML of a comment or issue body: the bot's hidden markers
    (``<!-- ... -->``) and layout tags (``<details>``, ``<summary>``...) are dropped, every
    other raw HTML is shown as text."""
    return _MD.render(_LAYOUT_TAGS.sub("", _HIDDEN.sub("", text or "")))


_WEB_LINKS = (
    (re.compile(r"/actions/runs/(\d+)(?:/.*)?"), "run-{}"),
    (re.compile(r"/runs/(\d+)(?:/.*)?"), "check-{}"),
    (re.compile(r"/pull/(\d+)(?:/.*)?"), "pr"),
    (re.compile(r"/issues/(\d+)(?:/.*)?"), "issue"),
    (re.compile(r"/(?:tree|blob|commit|commits)/.*"), "committed"),
)


def web_link_target(path: str, repo: str) -> str | None:
    """The page's section (``/#ID``) for a GitHub web link ``path`` of ``repo``
    (``/OWNER/NAME/actions/runs/7`` -> ``/#run-7``, ``/OWNER/NAME/runs/3`` (a check run) ->
    ``/#check-3``, ``pull/N`` -> ``/#pr``, ``issues/N`` -> ``/#issue``, ``tree``, ``blob``,
    ``commit`` -> ``/#committed``; the repository itself or a person -> ``/``); None for any
    other path."""
    path = path.split("?", 1)[0].split("#", 1)[0]
    prefix = f"/{repo}"
    if path in (prefix, prefix + "/") or re.fullmatch(r"/[A-Za-z0-9-]+(?:\[bot\])?/?", path):
        return "/"
    if not path.startswith(prefix + "/"):
        return None
    rest = path[len(prefix):]
    for pattern, anchor in _WEB_LINKS:
        m = pattern.fullmatch(rest)
        if m:
            return "/#" + anchor.format(*m.groups())
    return None


def page_state(stand: Stand) -> dict[str, Any]:
    """:meth:`Stand.state` with each body rendered to HTML (``html`` keys)."""
    s = stand.state()
    s["issue_html"] = render_markdown(s["issue_body"])
    for c in s["comments"]:
        c["html"] = render_markdown(c["body"])
    for c in s["checks"]:
        c["summary_html"] = render_markdown(c.get("summary") or "")
    return s


class PageServer:
    """Serves the page for ``stand`` on ``host:port`` (0: a free port) in a daemon thread."""

    def __init__(self, stand: Stand, host: str = "127.0.0.1", port: int = 0) -> None:
        self.stand = stand
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self.url = f"http://{host}:{self.port}/"
        self.allowed_hosts = {f"{host}:{self.port}", f"localhost:{self.port}"}
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> str:
        """Start serving; returns the page's URL."""
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving (when started) and close the socket."""
        if self._thread.is_alive():
            self.httpd.shutdown()  # waits for serve_forever: never call it before start
        self.httpd.server_close()


def _handler(server: PageServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return None

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Security-Policy",
                             "default-src 'self'; img-src 'self' data:; style-src 'unsafe-inline'; "
                             "script-src 'unsafe-inline'; frame-ancestors 'none'")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, doc: Any) -> None:
            self._send(status, json.dumps(doc).encode(), "application/json")

        def _host_ok(self) -> bool:
            if self.headers.get("Host", "") in server.allowed_hosts:
                return True
            self._json(421, {"error": "this page answers only to its own address"})
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not self._host_ok():
                return
            if self.path in ("/", "/index.html"):
                self._send(200, PAGE.read_bytes(), "text/html; charset=utf-8")
            elif self.path == "/api/state":
                try:
                    self._json(200, page_state(server.stand))
                except Exception as exc:  # noqa: BLE001 - the page shows it
                    self._json(503, {"error": f"{type(exc).__name__}: {exc}"})
            elif self.path == "/api/setup":
                self._json(200, {"users": USERS, "issue": ISSUE, "pr": PR,
                                 "candidates": candidates()})
            elif (target := web_link_target(self.path, REPO)) is not None:
                self.send_response(303)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if not self._host_ok():
                return
            if self.path != "/api/comment":
                self._json(404, {"error": "not found"})
                return
            kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            n = int(self.headers.get("Content-Length") or 0)
            if kind != "application/json" or not 0 < n <= MAX_POST_BYTES:
                self._json(415 if kind != "application/json" else 413,
                           {"error": "send one JSON object of at most 70,000 bytes"})
                return
            try:
                doc = json.loads(self.rfile.read(n))
                c = server.stand.comment(str(doc["user"]), int(doc["number"]),
                                         str(doc["body"]))
            except (ValueError, KeyError, TypeError) as exc:
                self._json(400, {"error": str(exc)})
                return
            self._json(201, {"id": c["id"]})

    return Handler
