"""``campaign-bot mcp`` as an agent uses it: the command started over stdio by the ``mcp``
SDK's client, asking the real service (``create_app`` under uvicorn, the GitHub double over
HTTP, sign-in configured) that serves campaign #320's example evidence from a public and a
private repository.

Checked: the five tools are listed, read-only; on a public repository they answer what the
JSON API answers (the status header's Next action, a screen's sessions, the queue and
budget, findings filtered by rule); a private repository answers only with a GitHub token
that can read it, and without one, or with one that cannot, the error is the one a missing
repository gets; bad arguments are tool errors, never a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_dashboard_api import EXAMPLE, _url
from test_dashboard_signin import CAMPAIGN, PRIVATE, PUBLIC_REPO, Served, serve_campaign

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from bot.features.dashboard.mcp_server import NOT_VISIBLE, TOKEN_ENV  # noqa: E402

EXE = Path(sys.executable).parent / "campaign-bot"
TOOLS = {"list_campaigns", "campaign_status", "screen_result", "queue", "explain_finding"}


@pytest.fixture
def served(github_double: Any, tmp_path: Path) -> Iterator[Served]:
    with serve_campaign(github_double, tmp_path, EXAMPLE) as s:
        yield s


def _params(s: Served, token: str | None = None) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    if token:
        env[TOKEN_ENV] = token
    return StdioServerParameters(command=str(EXE), args=["mcp", "--url", s.base], env=env)


def _token(s: Served, login: str) -> str:
    token = f"ghu_mcp_{login}"
    s.double.user_tokens[token] = (login, time.time() + 3600)
    return token


def _data(res: Any) -> Any:
    assert not res.is_error, res.content
    if res.structured_content is not None:
        sc = res.structured_content
        return sc["result"] if set(sc) == {"result"} else sc
    return json.loads(res.content[0].text)


def _error(res: Any) -> str:
    assert res.is_error
    return " ".join(getattr(c, "text", "") for c in res.content)


async def test_tools_answer_a_public_campaign_as_the_api_does(served: Served) -> None:
    api_status = httpx.get(_url(served, PUBLIC_REPO, f"/{CAMPAIGN}"), timeout=60).json()
    async with Client(_params(served)) as client:
        listed = await client.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        for t in listed.tools:
            assert t.annotations is not None and t.annotations.read_only_hint is True, t.name
            assert t.description

        camps = _data(await client.call_tool("list_campaigns", {"repo": PUBLIC_REPO}))
        assert [c["id"] for c in camps] == [CAMPAIGN]
        status = _data(await client.call_tool(
            "campaign_status", {"repo": PUBLIC_REPO, "campaign": CAMPAIGN}))
        assert status["next_action"] == api_status["next_action"]
        assert status["next_action"].startswith("Fix the baseline")  # example: what to run
        screen_id = "screen-resident-layers-24-5s"
        screen = _data(await client.call_tool(
            "screen_result", {"repo": PUBLIC_REPO, "campaign": CAMPAIGN,
                              "screen_id": screen_id}))
        assert screen["screen_id"] == screen_id and screen["sessions"]
        q = _data(await client.call_tool("queue", {"repo": PUBLIC_REPO, "campaign": CAMPAIGN}))
        assert q["pools"] == [] and len(q["budget"]["lines"]) == 3
        every = _data(await client.call_tool(
            "explain_finding", {"repo": PUBLIC_REPO, "campaign": CAMPAIGN}))
        rule = every[0]["rule"]
        some = _data(await client.call_tool(
            "explain_finding", {"repo": PUBLIC_REPO, "campaign": CAMPAIGN, "rule": rule}))
        assert {f["rule"] for f in some} == {rule}
        assert len(some) == sum(f["rule"] == rule for f in every)
        assert all(f["message"] and f["path"] for f in some)

        # bad arguments are tool errors the agent can read
        bad = _error(await client.call_tool("list_campaigns", {"repo": "../etc"}))
        assert "OWNER/NAME" in bad
        missing = _error(await client.call_tool(
            "screen_result", {"repo": PUBLIC_REPO, "campaign": CAMPAIGN,
                              "screen_id": "no-such-screen"}))
        assert NOT_VISIBLE in missing


async def test_private_campaign_needs_a_token_that_can_read_it(served: Served) -> None:
    args = {"repo": PRIVATE, "campaign": CAMPAIGN}
    async with Client(_params(served)) as anon:
        denied = _error(await anon.call_tool("campaign_status", args))
        missing = _error(await anon.call_tool(
            "campaign_status", {"repo": "org/no-such-repo", "campaign": CAMPAIGN}))
        assert denied == missing and NOT_VISIBLE in denied
    async with Client(_params(served, _token(served, "mallory"))) as mallory:
        assert _error(await mallory.call_tool("campaign_status", args)) == missing
        assert _error(await mallory.call_tool("list_campaigns", {"repo": PRIVATE})) == \
            _error(await mallory.call_tool("list_campaigns", {"repo": "org/no-such-repo"}))
    async with Client(_params(served, _token(served, "amy"))) as amy:
        status = _data(await amy.call_tool("campaign_status", args))
        assert status["id"] == CAMPAIGN and status["decision_needed"]
        assert [c["id"] for c in _data(await amy.call_tool(
            "list_campaigns", {"repo": PRIVATE}))] == [CAMPAIGN]
