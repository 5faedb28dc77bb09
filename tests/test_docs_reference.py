"""The reference pages are true to the code, and the documentation holds together.

* The generated pages of docs/reference/ equal what ``docs/tools/gen_reference.py`` writes
  from the code now (a new command, option, config key or document field must be
  regenerated into them).
* The hand-written environment page lists every setting of the settings classes with its
  default; the findings page lists every rule and reason code that ``evidence/`` emits, and
  no code that no longer exists.
* Every relative link (and ``#anchor``) in README.md and docs/ points at something that exists.
* No internal work-tracking words in the shipped documentation.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
REGENERATE = "python docs/tools/gen_reference.py"


def test_generated_reference_pages_are_up_to_date() -> None:
    res = subprocess.run([sys.executable, "docs/tools/gen_reference.py", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (
        f"docs/reference/ is stale: run `{REGENERATE}` and commit the result.\n"
        f"{res.stderr[-2000:]}\n{res.stdout[-6000:]}")


def _env_rows() -> dict[str, str]:
    """``variable -> default cell`` of every table row in docs/reference/environment.md."""
    text = (ROOT / "docs" / "reference" / "environment.md").read_text()
    rows = {}
    for m in re.finditer(r"^\| `([A-Z][A-Z0-9_]+)` \| ([^|]*) \|", text, re.M):
        rows[m.group(1)] = m.group(2).strip()
    return rows


def _shown(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def test_environment_page_lists_every_setting_with_its_default() -> None:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from bot.features.screen.settings import ScreenSettings
    from bot.settings import ENV_PREFIX, GitSettings, Settings

    rows = _env_rows()
    wrong = []
    # optional in the model (`deliveries` reads the database without it, `serve` in setup mode
    # runs without it), required by `serve` once the App exists and by `replay`
    required = {"webhook_secret": "required once the App exists; not in setup mode"}
    for cls, prefix in ((Settings, ENV_PREFIX), (ScreenSettings, "CAMPAIGN_BOT_SCREEN_"),
                        (GitSettings, "CAMPAIGN_BOT_GIT_")):
        for name, f in cls.model_fields.items():
            if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
                continue  # a feature's section: its own class is checked with its prefix
            var = prefix + name.upper()
            if var not in rows:
                wrong.append(f"{var}: not listed")
                continue
            want = (required[name] if name in required
                    else "(required)" if f.default is PydanticUndefined
                    else _shown(f.default))
            if rows[var] != want:
                wrong.append(f"{var}: page says {rows[var]}, the code's default is {want}")
    assert wrong == []


def test_environment_page_lists_every_variable_the_code_reads() -> None:
    rows = _env_rows()
    read = set()
    for path in [*(ROOT / "evidence").rglob("*.py"), *(ROOT / "bot").rglob("*.py"),
                 *(ROOT / "runners").rglob("*.py")]:
        text = path.read_text()
        name = r"\"([A-Z][A-Z0-9_]*[A-Z0-9])\""
        read |= set(re.findall(r"environ(?:\.get)?[\[(]\s*" + name, text))
        read |= set(re.findall(r"^[A-Z_]*ENV[A-Z_]* = " + name, text, re.M))
    assert read, "found no environment reads: the pattern above is broken"
    assert sorted(read - set(rows)) == []


# Literals in evidence/ that look like rule codes but are names of other things.
NOT_CODES = {"CURRENT_VALIDATOR", "DEFAULT_GATES",
             "FORCE_TERMINAL",  # rich's environment variable (evidence/cli.py)
             "O_NONBLOCK", "O_CLOEXEC"}  # os.open flags (evidence/hashing.py)


def _codes_in_evidence() -> set[str]:
    codes = set()
    for path in (ROOT / "evidence").rglob("*.py"):
        codes |= set(re.findall(r"[\"']([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)[\"']", path.read_text()))
    return {c for c in codes if c not in NOT_CODES and not c.startswith("CAMPAIGN_BOT_")}


def test_findings_page_lists_every_code_of_the_code_and_no_other() -> None:
    page = (ROOT / "docs" / "reference" / "findings.md").read_text()
    documented = set(re.findall(r"`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)`", page))
    codes = _codes_in_evidence()
    assert len(codes) > 40, "the code scan found too few codes: its pattern is broken"
    assert sorted(codes - documented) == [], "emitted but not documented"
    single = {"REJECT", "CONTINUE", "OVERLAP", "REGRESSION", "UNDERPOWERED"}
    text = "".join(p.read_text() for p in (ROOT / "evidence").rglob("*.py"))
    stale = sorted(c for c in documented | single if f'"{c}"' not in text)
    assert stale == [], "documented but no longer in evidence/"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_relative_links_and_anchors_resolve() -> None:
    broken = []
    for doc in DOCS:
        text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{doc.relative_to(ROOT)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where}: no heading with that anchor")
    assert broken == []


INTERNAL_WORDS = re.compile(
    r"\b[Ii]ssues? \d|\bseed \d{3}\b|DESIGN\.md|GITHUB\.md|VLLM_OMNI(?:_REAL_SERVER)?\.md"
    r"|shared folder|\.\./shared/")


def test_no_internal_tracking_words_in_the_documentation() -> None:
    found = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in INTERNAL_WORDS.finditer(line):
                found.append(f"{doc.relative_to(ROOT)}:{n}: {m.group(0)!r}")
    assert found == []
