"""``campaign-bot mcp``: a Model Context Protocol server (the ``mcp`` SDK's ``MCPServer``,
over stdio) through which an agent asks a running ``campaign-bot serve`` about campaigns.

Every tool is one or two GET requests to the service's read-only JSON API
(:mod:`bot.features.dashboard.api`), so the access rules are the API's by construction: a
public repository is open; a private one answers only to the GitHub token the server was
started with (``CAMPAIGN_BOT_API_TOKEN``: a fine-grained personal access token scoped to the
repository, read-only, is enough); a denied private repository and a missing one give the
same tool error.  Nothing here writes: every tool is marked read-only and idempotent.

Tools:

- ``list_campaigns(repo)``: the campaigns the bot recorded for ``OWNER/NAME``;
- ``campaign_status(repo, campaign)``: Current state, Decision needed and Next action (the
  status header's sentences), and each track's target, baseline, best candidate and
  verdicts; what an agent reads to answer "what should I run next";
- ``screen_result(repo, campaign, screen_id)``: one screen's sessions, verdicts, screening
  decisions and findings;
- ``queue(repo, campaign)``: what runs and what waits on each pool, and the budget with the
  forecast of queued work;
- ``explain_finding(repo, campaign, rule, file, level)``: the matching findings with what is
  wrong, what resolves it and where to read it.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote

import httpx

from bot.features.dashboard.api import API_PREFIX

TOKEN_ENV = "CAMPAIGN_BOT_API_TOKEN"
"""Environment variable holding the GitHub token sent as ``Authorization: Bearer`` (never a
command-line flag: the process list would show it)."""
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
NOT_VISIBLE = ("no such repository or campaign, or this token cannot read it (the service "
               "answers both the same way)")


class ToolError(Exception):
    """A tool's answer is an error the agent reads (bad input, not visible, service down)."""


class ApiClient:
    """GET requests to the JSON API of the service at ``base_url`` with ``token`` (None:
    anonymous); ``http`` may be given (tests), else one is made (30 s timeout)."""

    def __init__(self, base_url: str, token: str | None = None,
                 http: httpx.Client | None = None) -> None:
        self.base = base_url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "campaign-bot-mcp"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.http = http or httpx.Client(timeout=30.0)
        self.headers = headers

    def get(self, repo: str, tail: str = "", params: dict[str, str] | None = None) -> Any:
        """The JSON answer of ``/repos/{repo}/campaigns{tail}``; raises :class:`ToolError`
        for a bad ``repo``, a 404 (:data:`NOT_VISIBLE`), 429 and any other failure."""
        if not REPO.match(repo):
            raise ToolError(f"repo must be OWNER/NAME, got {repo[:120]!r}")
        url = f"{self.base}{API_PREFIX}/repos/{repo}/campaigns{tail}"
        try:
            r = self.http.get(url, headers=self.headers,
                              params={k: v for k, v in (params or {}).items() if v})
        except httpx.HTTPError as exc:
            raise ToolError(f"the campaign service at {self.base} did not answer: {exc}") \
                from None
        if r.status_code == 404:
            raise ToolError(NOT_VISIBLE)
        if r.status_code == 429:
            raise ToolError("rate limited by the service; retry after "
                            f"{r.headers.get('retry-after', '60')} s")
        if r.status_code != 200:
            raise ToolError(f"the campaign service answered HTTP {r.status_code}")
        return r.json()


def _part(value: str, what: str) -> str:
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", value or ""):
        raise ToolError(f"{what} must be an id of letters, digits, '.', '_' or '-', got "
                        f"{value[:120]!r}")
    return value


def build_server(client: ApiClient) -> Any:
    """The MCP server with the five read-only tools over ``client``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
    from mcp.types import ToolAnnotations

    server = MCPServer(
        name="campaign-bot", instructions=(
            "Read-only answers about ML inference performance campaigns run by campaign-bot: "
            "their status and next action, screens, verdicts (SUPPORTED / FAILED / "
            "INCONCLUSIVE are the verdict engine's; screening decisions are not verdicts), "
            "the queue, the budget and review findings. repo is OWNER/NAME."))
    ro = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False,
                         open_world_hint=False)

    def call(fn: Any) -> Any:
        try:
            return fn()
        except ToolError as exc:  # the SDK answers it as a tool error, with this text
            raise SdkToolError(str(exc)) from None

    @server.tool(annotations=ro)
    def list_campaigns(repo: str) -> list[dict[str, Any]]:
        """Campaigns the bot recorded for the repository OWNER/NAME, with their ids."""
        return call(lambda: client.get(repo))

    @server.tool(annotations=ro)
    def campaign_status(repo: str, campaign: str) -> dict[str, Any]:
        """A campaign's status: Current state, Decision needed and Next action (the
        campaign issue's status header sentences), and per track the target ratio, control
        baseline, best candidate and every verdict with its exact bounds."""
        return call(lambda: client.get(repo, f"/{_part(campaign, 'campaign')}"))

    @server.tool(annotations=ro)
    def screen_result(repo: str, campaign: str, screen_id: str) -> dict[str, Any]:
        """One screen: every session's median and whether it qualifies, the verdicts it
        feeds, its screening decision and its findings."""
        return call(lambda: client.get(
            repo, f"/{_part(campaign, 'campaign')}/screens/{quote(screen_id, safe='')}"))

    @server.tool(annotations=ro)
    def queue(repo: str, campaign: str) -> dict[str, Any]:
        """What runs and what waits on each hardware pool now (stuck screens flagged), and
        the budget: used, reserved, allowed, left, and the forecast of queued work."""
        def both() -> dict[str, Any]:
            c = _part(campaign, "campaign")
            return {"pools": client.get(repo, f"/{c}/queue"),
                    "budget": client.get(repo, f"/{c}/budget")}
        return call(both)

    @server.tool(annotations=ro)
    def explain_finding(repo: str, campaign: str, rule: str = "", file: str = "",
                        level: str = "") -> list[dict[str, Any]]:
        """Findings of the evidence review matching ``rule`` (e.g. LIFECYCLE_NOT_CLEAN),
        ``file`` (a path or folder) and ``level`` (P0 blocks, P1 wrong evidence, P2
        ambiguous evidence, P3 note; comma-separated allowed): each with what is wrong,
        what resolves it, and a link to the line."""
        return call(lambda: client.get(repo, f"/{_part(campaign, 'campaign')}/findings",
                                       {"rule": rule, "file": file, "level": level}))

    return server


def run(url: str) -> None:
    """Serve the tools over stdio against the service at ``url`` (the token from
    :data:`TOKEN_ENV`)."""
    build_server(ApiClient(url, os.environ.get(TOKEN_ENV) or None)).run("stdio")
