"""Errors of the media gates."""

from __future__ import annotations

from pathlib import Path


class MediaInputError(Exception):
    """An input that cannot be judged at all: missing, empty, not a media container, no video
    stream, unreadable weights or gates.  The CLI turns it into exit code 2 with this message.
    """

    def __init__(self, path: Path | str | None, message: str) -> None:
        self.path = None if path is None else Path(path)
        self.message = message
        super().__init__(f"{path}: {message}" if path is not None else message)
