"""INPUT_MISSING and INPUT_DIGEST_MISMATCH: ``check`` refuses the pinned inputs the screen
runner would refuse (runners.screen.resolve_inputs), before any runner time is spent."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from evidence.check import check_campaign
from evidence.input_rules import input_problems
from runners.screen import UsageError, load_scope, resolve_inputs

DATA = Path(__file__).resolve().parent / "data" / "screen-campaign"


def _campaign(tmp_path: Path) -> Path:
    root = tmp_path / "campaign"
    shutil.copytree(DATA, root)
    return root


def _input_findings(root: Path) -> list[tuple[str, str | None, int | None]]:
    rep = check_campaign(root)
    return [(f.rule, f.field, f.line) for f in rep.findings if f.rule.startswith("INPUT_")]


def _line(root: Path, needle: str) -> int:
    lines = (root / "campaign.toml").read_text().splitlines()
    return next(i for i, t in enumerate(lines, 1) if t.startswith(needle))


def _runner_refuses(root: Path) -> bool:
    try:
        resolve_inputs(load_scope(root), root)
    except UsageError:
        return True
    return False


def test_the_pinned_inputs_pass(tmp_path: Path) -> None:
    root = _campaign(tmp_path)
    assert _input_findings(root) == []
    assert not _runner_refuses(root)


def test_a_changed_reference_file_is_a_digest_mismatch_on_its_line(tmp_path: Path) -> None:
    root = _campaign(tmp_path)
    with open(root / "ref.wav", "ab") as f:
        f.write(b"\0")
    assert _input_findings(root) == [("INPUT_DIGEST_MISMATCH", "inputs.reference_audio.sha256",
                                      _line(root, "reference_audio"))]
    assert _runner_refuses(root)


@pytest.mark.parametrize("how", ["deleted", "directory", "link-outside", "dotdot"])
def test_a_missing_or_escaping_reference_is_never_read(tmp_path: Path, how: str) -> None:
    root = _campaign(tmp_path)
    video = root / "ref.mp4"
    outside = tmp_path / "outside.mp4"
    shutil.copy(video, outside)  # the right bytes, but outside the campaign directory
    video.unlink()
    if how == "directory":
        video.mkdir()
    elif how == "link-outside":
        os.symlink(outside, video)
    elif how == "dotdot":
        toml = root / "campaign.toml"
        toml.write_text(toml.read_text().replace('path = "ref.mp4"', 'path = "../outside.mp4"'))
    assert _input_findings(root) == [("INPUT_MISSING", "inputs.reference_video.path",
                                      _line(root, "reference_video"))]
    assert _runner_refuses(root)


def test_an_inline_prompt_that_is_not_the_pinned_one(tmp_path: Path) -> None:
    root = _campaign(tmp_path)
    toml = root / "campaign.toml"
    toml.write_text(toml.read_text().replace('prompt = "A tiny stand-in screen."',
                                             'prompt = "A tiny stand-in screen!"'))
    assert _input_findings(root) == [("INPUT_DIGEST_MISMATCH", "inputs.prompt_sha256",
                                      _line(root, "prompt_sha256"))]
    assert _runner_refuses(root)


@pytest.mark.parametrize("ends", ["\n", "\r\n"])
def test_a_prompt_file_is_hashed_as_the_runner_sends_it(tmp_path: Path, ends: str) -> None:
    root = _campaign(tmp_path)
    text = f"A tiny{ends}stand-in screen.{ends}"
    (root / "prompt.txt").write_bytes(text.encode())
    pinned = hashlib.sha256(text.replace("\r\n", "\n").encode()).hexdigest()
    toml = root / "campaign.toml"
    body = toml.read_text()
    start = body.index('prompt = "A tiny stand-in screen."')
    end = body.index("\n", body.index("prompt_sha256")) + 1
    toml.write_text(body[:start] + "prompt_file = { path = \"prompt.txt\", sha256 = "
                    f"\"{pinned}\" }}\n" + body[end:])
    assert _input_findings(root) == []
    assert not _runner_refuses(root)
    (root / "prompt.txt").write_bytes(b"\xff not utf-8")
    assert [r for r, _f, _l in _input_findings(root)] == ["INPUT_MISSING"]
    problems = input_problems(root, load_scope(root).inputs)
    assert "cannot be read" in problems[0].message
