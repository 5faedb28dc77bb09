"""The pinned request inputs of a campaign, checked as the screen runner will use them (rules
``INPUT_MISSING`` and ``INPUT_DIGEST_MISMATCH`` of ``campaign-bot check``).

``campaign.toml``'s ``[inputs]`` pins the prompt (inline text or a file) and the reference
video and audio by SHA-256; a file is named by a path relative to the campaign directory, or
by none when it is kept outside the repository.  The runner refuses to start a screen when a
named file is missing or its digest differs from the pin (``runners.screen.resolve_inputs``),
so ``check`` says the same before any runner time is spent:

* a named file that is not a regular file inside the campaign directory: ``INPUT_MISSING``
  (P1), whether absent, a directory, or reached through ``..``, an absolute path or a
  symlink that leaves the directory (such a file is never read);
* a file, or an inline prompt, whose SHA-256 is not the pinned one:
  ``INPUT_DIGEST_MISMATCH`` (P1).

Digests are computed as the runner computes them: a file's bytes for the reference video
and audio; for the prompt, the UTF-8 encoding of its text with line ends read as Python's
text mode reads them (CRLF and CR become LF), which is what the runner sends.
"""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evidence.hashing import digest_file, read_regular
from evidence.lines import line_of
from evidence.models import Finding, InputFile, Inputs

PROMPT_MAX_BYTES = 1 << 20
"""Largest prompt file read (1 MiB); a larger one is reported, not read."""

FILES = ("prompt_file", "reference_video", "reference_audio")
"""The fields of :class:`evidence.models.Inputs` that may name a file."""


@dataclass(frozen=True)
class InputProblem:
    """One pinned input the runner would refuse: ``rule``, the scope ``field`` it concerns
    (dotted, e.g. ``inputs.reference_video.sha256``) and what is wrong."""

    rule: str
    field: str
    message: str
    resolution: str


def prompt_digest(text: str) -> str:
    """SHA-256 (hex) of a prompt as the runner sends it: the UTF-8 encoding of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


def input_problems(root: Path, inputs: Inputs) -> list[InputProblem]:
    """What the runner would refuse in ``inputs`` (a scope's ``[inputs]``) for the campaign
    directory ``root``: a list of :class:`InputProblem`, empty when every named file is
    there with its pinned digest.  Files not named by a path (kept outside the repository)
    are not checked.  Never raises for a bad file; reads at most :data:`PROMPT_MAX_BYTES`
    of a prompt file and hashes the reference files whole, streaming."""
    out: list[InputProblem] = []
    if inputs.prompt is not None and inputs.prompt_sha256 is not None:
        got = prompt_digest(inputs.prompt)
        if got != inputs.prompt_sha256:
            out.append(InputProblem(
                "INPUT_DIGEST_MISMATCH", "inputs.prompt_sha256",
                f"the inline prompt has SHA-256 {got}, pinned {inputs.prompt_sha256}: the "
                "runner refuses to start a screen", "pin the prompt's SHA-256 (of its UTF-8 "
                "text), or restore the prompt the digest was taken of"))
    real_root = os.path.realpath(root)
    for name in FILES:
        ref: InputFile | None = getattr(inputs, name)
        if ref is None or not ref.path:
            continue
        field = f"inputs.{name}"
        missing = InputProblem(
            "INPUT_MISSING", f"{field}.path",
            f"{ref.path}: not a regular file inside the campaign directory (absent, a "
            "directory, or a path or link leaving it); the runner reads the input from "
            "there and refuses to start a screen",
            "commit the file beside campaign.toml, or correct the path")
        if os.path.isabs(ref.path) or ".." in PurePosixPath(ref.path).parts:
            out.append(missing)
            continue
        path = root / ref.path
        try:  # opened as check opens every file: non-blocking, regular, really inside root
            if name == "prompt_file":
                raw = read_regular(path, limit=PROMPT_MAX_BYTES + 1, beneath=real_root)
                if len(raw) > PROMPT_MAX_BYTES:
                    raise ValueError(f"larger than {PROMPT_MAX_BYTES} bytes")
                text = raw.decode("utf-8")
                got = prompt_digest(text.replace("\r\n", "\n").replace("\r", "\n"))
                want = inputs.prompt_sha256 or ref.sha256
            else:
                got = digest_file(path, beneath=real_root)[0]["sha256"]
                want = ref.sha256
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EINVAL, errno.EXDEV,
                             errno.ELOOP, errno.EISDIR):
                out.append(missing)
            else:
                out.append(InputProblem(
                    "INPUT_MISSING", f"{field}.path",
                    f"{ref.path}: cannot be read ({exc.strerror or exc})",
                    "fix the file's permissions"))
            continue
        except ValueError as exc:  # UnicodeDecodeError is a ValueError
            out.append(InputProblem(
                "INPUT_MISSING", f"{field}.path", f"{ref.path}: cannot be read ({exc})",
                "fix the file (a prompt is UTF-8 text)"))
            continue
        if got != want:
            out.append(InputProblem(
                "INPUT_DIGEST_MISMATCH", f"{field}.sha256",
                f"{ref.path} has SHA-256 {got}, pinned {want}: the runner refuses to start "
                "a screen", "restore the pinned file, or pin the file's new SHA-256 (a "
                "changed input is a new scope: screens before and after it do not compare)"))
    return out


def input_findings(root: Path, scope_path: str, scope_text: str,
                   inputs: Inputs) -> list[Finding]:
    """:func:`input_problems` as P1 findings on ``scope_path`` (the campaign.toml, whose
    ``scope_text`` gives each field's line)."""
    return [Finding(rule=p.rule, severity="P1", path=scope_path,
                    line=line_of(scope_text, tuple(p.field.split(".")), fmt="toml"),
                    field=p.field, message=p.message, resolution=p.resolution)
            for p in input_problems(root, inputs)]
