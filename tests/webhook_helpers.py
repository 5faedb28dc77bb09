"""Helpers for the webhook service tests (issue 5a): signing, a real uvicorn server on a
thread, and the SQLite/PostgreSQL database parametrisation.

Imported by the test modules (fixtures are re-exported there), so no shared conftest.py is
needed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import text

from bot import database
from bot.inbox.delivery import sign

ROOT = Path(__file__).resolve().parents[1]
WEBHOOKS = ROOT / "tests" / "fixtures" / "github" / "webhooks"
SECRET = "test-secret-\u00e9"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def fixture_bytes(event: str, name: str | None = None) -> bytes:
    """Raw bytes of an octokit webhook example in ``tests/fixtures/github/webhooks``
    (the first file of ``event`` if no ``name``)."""
    d = WEBHOOKS / event
    path = d / name if name else sorted(d.glob("*.json"))[0]
    return path.read_bytes()


def headers_for(body: bytes, event: str, delivery: str, *, secret: str = SECRET,
                signature: str | None = "auto", content_type: str = "application/json"
                ) -> dict[str, str]:
    """GitHub-like headers for ``body``; ``signature=None`` omits the signature header."""
    h = {
        "Content-Type": content_type,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "User-Agent": "GitHub-Hookshot/test",
    }
    if signature == "auto":
        h["X-Hub-Signature-256"] = sign(secret, body)
    elif signature is not None:
        h["X-Hub-Signature-256"] = signature
    return h


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def threaded_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a thread; yields the base URL; shuts down on exit."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(20)


def wait_for(pred: Any, timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``pred()`` until true or fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


DB_KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@contextlib.contextmanager
def database_url(kind: str, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL: an SQLite file in ``tmp_path``, or a PostgreSQL URL whose
    ``search_path`` is a new schema (dropped afterwards)."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'bot.sqlite3'}"
        return
    schema = "t5_" + uuid.uuid4().hex[:12]
    admin = database.make_engine(PG_URL)
    try:
        with admin.begin() as c:
            c.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"PostgreSQL on 127.0.0.1:5432 (database test) is needed: {exc}")
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as c:
            c.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def metric_values(text: str) -> dict[str, float]:
    """The samples of a Prometheus text exposition, parsed by prometheus-client:
    ``'name{label="v"}' -> value`` (labels sorted; no braces without labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def post(base: str, body: bytes, headers: dict[str, str], **kw: Any) -> httpx.Response:
    """POST ``body`` to ``base``/webhook."""
    return httpx.post(f"{base}/webhook", content=body, headers=headers, timeout=30, **kw)
