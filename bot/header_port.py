"""The GitHub calls of the status header (:class:`bot.campaign_status.StatusPort`) over
PyGithub 2.10, and over the shared ``bot.github`` port when it offers them.

PyGithub must be built with ``lazy=True`` (GITHUB.md 4.1): then ``get_repo``, ``get_issue``
and ``get_pull`` build objects from URLs without a request, and each method below costs
exactly one HTTP request per page (an issue read is one ``GET .../issues/N``, a write one
``PATCH``).  Calls run in a worker thread so the event loop never blocks on HTTP.
"""

from __future__ import annotations

import asyncio
from typing import Any

from github import Github
from github.GithubException import UnknownObjectException


class PyGithubStatusPort:
    """:class:`bot.campaign_status.StatusPort` over a ``github.Github`` (``lazy=True``)."""

    def __init__(self, gh: Github) -> None:
        self.gh = gh

    def _repo(self, repo: str) -> Any:
        return self.gh.get_repo(repo)

    async def get_issue_body(self, repo: str, number: int) -> str | None:
        """The issue's body (None when empty): one GET."""

        def run() -> str | None:
            issue = self._repo(repo).get_issue(number)
            return issue.body

        return await asyncio.to_thread(run)

    async def edit_issue_body(self, repo: str, number: int, body: str) -> None:
        """PATCH the body only (PyGithub sends just ``{"body": ...}``)."""
        await asyncio.to_thread(lambda: self._repo(repo).get_issue(number).edit(body=body))

    async def create_issue_comment(self, repo: str, number: int, body: str) -> int:
        """POST one comment; returns its id."""
        c = await asyncio.to_thread(
            lambda: self._repo(repo).get_issue(number).create_comment(body)
        )
        return int(c.id)

    async def list_dir(self, repo: str, path: str, ref: str) -> list[dict[str, Any]]:
        """Entries of directory ``path`` at ``ref``; [] when it does not exist."""

        def run() -> list[dict[str, Any]]:
            try:
                items = self._repo(repo).get_contents(path, ref=ref)
            except UnknownObjectException:
                return []
            if not isinstance(items, list):
                items = [items]
            return [
                {"path": i.path, "type": i.type, "sha": i.sha, "size": i.size} for i in items
            ]

        return await asyncio.to_thread(run)

    async def get_file(self, repo: str, path: str, ref: str) -> bytes:
        """Bytes of one file (at most 1 MB through the contents API) at ``ref``."""

        def run() -> bytes:
            item = self._repo(repo).get_contents(path, ref=ref)
            if isinstance(item, list):
                raise IsADirectoryError(f"{path} is a directory at {ref}")
            return bytes(item.decoded_content)

        return await asyncio.to_thread(run)

    async def list_pull_files(self, repo: str, number: int) -> list[str]:
        """File names changed by PR ``number`` (paginated GETs)."""
        return await asyncio.to_thread(
            lambda: [f.filename for f in self._repo(repo).get_pull(number).get_files()]
        )
