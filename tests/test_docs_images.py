"""The pictures in ``docs/images/``: each is shown by a document (none left behind when a
page changes, as a stale overview picture once was), every dashboard page type has one at
each width the browser tests use, and each dashboard picture is one that
``docs/tools/report_screenshots.py`` writes (so running it renews all of them)."""

from __future__ import annotations

import importlib.util
import re
import struct
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "report_screenshots", ROOT / "docs" / "tools" / "report_screenshots.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    w, h = struct.unpack(">II", head[16:24])
    return w, h


def test_every_picture_is_shown_by_a_document() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    shown = {m for d in docs for m in re.findall(r"images/([\w.-]+\.png)", d.read_text())}
    on_disk = {p.name for p in IMAGES.glob("*.png")}
    assert on_disk - shown == set(), "pictures no document shows"
    assert shown - on_disk == set(), "pictures documents show that do not exist"


def test_every_dashboard_page_type_has_a_picture_at_both_widths() -> None:
    tool = _tool()
    written = set(tool.SHOTS)
    for kind in tool.PAGE_TYPES:
        for width, height in tool.WIDTHS:
            name = f"dashboard-{kind}-{width}.png"
            written.add(name)
            assert _png_size(IMAGES / name) == (width, height), name
    assert {"index", "track", "screen", "pool", "budget", "findings", "queue"} <= set(
        tool.PAGE_TYPES)
    assert {p.name for p in IMAGES.glob("dashboard-*.png")} == written
