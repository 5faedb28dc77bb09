"""deploy/prometheus (alert rules and their unit tests) and deploy/grafana (the dashboard),
checked with promtool from Debian's prometheus package: the rules load (``promtool check
rules``), each alert fires on its test series and stays quiet on the others (``promtool test
rules``), every query of the dashboard parses, and every metric the rules and the dashboard
name is one ``GET /metrics`` exposes from the start.  Skipped, with the reason, without
promtool; .ci/run installs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bot.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "campaign-bot.rules.yml"
RULE_TESTS = PROM / "campaign-bot.rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "campaign-bot.json"

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("CAMPAIGN_BOT_REQUIRE_DEPLOY_TOOLS"),
    reason="promtool is not installed (apt-get install prometheus); .ci/run installs it")


def promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_the_rules_load() -> None:
    res = promtool("check", "rules", RULES.name)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 9 rules found" in res.stdout


def test_each_alert_fires_in_the_rule_unit_tests() -> None:
    res = promtool("test", "rules", RULE_TESTS.name)
    assert res.returncode == 0, res.stdout + res.stderr
    tested = {case["alertname"] for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for case in group.get("alert_rule_test", []) if case.get("exp_alerts")}
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"]
              for r in g["rules"]}
    assert tested == alerts, alerts - tested  # every alert is shown firing


def test_the_rule_tests_are_not_vacuous(tmp_path: Path) -> None:
    """A rule whose threshold is raised no longer fires where its test expects it."""
    (tmp_path / RULES.name).write_text(RULES.read_text().replace(
        "campaign_bot_github_rate_limit_remaining < 500",
        "campaign_bot_github_rate_limit_remaining < 50"))
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    res = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert res.returncode != 0 and "CampaignBotGitHubRateLimitLow" in res.stdout + res.stderr


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query, loaded as a recording rule."""
    queries = dashboard_queries()
    assert len(queries) >= 12
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"campaign_bot_dashboard:q{i}", "expr": q} for i, q in enumerate(queries)]}]}
    (tmp_path / "dash.yml").write_text(yaml.safe_dump(rules))
    res = promtool("check", "rules", "dash.yml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def _names(expr: str) -> set[str]:
    return set(re.findall(r"\bcampaign_bot_\w+", expr))


def test_the_rules_and_the_dashboard_name_only_metrics_the_bot_exposes() -> None:
    m = Metrics()
    m.init_series(["issue_comment"])  # as the composition root does with the subscriptions
    m.github_call("GET", 4999)  # a rate limit's series appears with GitHub's first answer
    text = m.exposition({}, {}, {"x4": (0, 0.0)}).decode()
    exposed = {ln.split("{")[0].split(" ")[0] for ln in text.splitlines()
               if ln and not ln.startswith("#")}
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    used = set().union(*(_names(r["expr"]) for r in rules), *map(_names, dashboard_queries()))
    assert used and used <= exposed, used - exposed
    # and the dashboard shows every family the bot exposes (besides the redeliveries, which
    # `campaign-bot deliveries --missing` shows)
    families = {re.sub(r"_(bucket|count|sum|created|total)$", "", n) for n in exposed}
    shown = {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in set().union(
        *map(_names, dashboard_queries()))}
    missing = {f for f in families - shown if "redeliver" not in f}
    assert not missing, missing
