"""Hostile webhook deliveries: signed (the sender has the secret, or GitHub relays what it
was given) but built to break the inbox.  Each must be answered 400 and never stored.
``tests/test_webhook_http.py`` posts them to the real service."""

from __future__ import annotations

DEEP_BODY = b'{"action": "created", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
"""A JSON object nested 100,000 levels: Python's parser would raise RecursionError (a 500)."""

LONG_DELIVERY_IDS = ("x" * 200 + "-first", "x" * 200 + "-second")
"""Two delivery ids sharing their first 200 characters (the stored column's width): cut to
200, the second would be taken for the first and dropped as a duplicate."""
