"""``GET /metrics`` text from :class:`bot.metrics.Metrics` (prometheus-client): exact values,
and the worker process's counters merged through the multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from webhook_helpers import metric_values

from bot.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]


def _sample_text(text: str, name: str) -> str:
    """The value token of sample ``name`` as written in the exposition."""
    (line,) = [ln for ln in text.splitlines() if ln.split(" ")[0] == name]
    return line.split(" ")[1]


def test_a_counter_of_1234567_renders_integer_exact() -> None:
    m = Metrics()
    m.inc_processed(failed=False, count=1_234_567)
    text = m.exposition({"queued": 1_234_567}).decode()
    token = _sample_text(text, "campaign_bot_deliveries_processed_total")
    assert float(token) == 1_234_567 and float(token).is_integer(), token  # not 1.23457e+06
    assert metric_values(text)["campaign_bot_deliveries_processed_total"] == 1_234_567
    assert metric_values(text)['campaign_bot_inbox_depth{status="queued"}'] == 1_234_567
    assert m.processed == 1_234_567


def test_rate_limit_per_installation_is_the_last_value_github_sent() -> None:
    m = Metrics()
    assert "campaign_bot_github_rate_limit_remaining{" not in m.exposition({}).decode()
    m.github_call("get", 4999, installation="7")
    m.github_call("POST", 4998, installation="7")
    m.github_call("GET", 120, installation="8", route="pulls", status=404)
    values = metric_values(m.exposition({}).decode())
    assert values['campaign_bot_github_rate_limit_remaining{installation="7"}'] == 4998
    assert values['campaign_bot_github_rate_limit_remaining{installation="8"}'] == 120
    assert values['campaign_bot_github_responses_total{route="other",status="2xx"}'] == 2
    assert values['campaign_bot_github_responses_total{route="pulls",status="4xx"}'] == 1
    assert values['campaign_bot_github_api_calls_total{method="GET"}'] == 2
    assert m.snapshot()["github_calls"] == {"GET": 2, "POST": 1}
    assert m.github_rate_limit_remaining == 120


def test_label_values_are_escaped() -> None:
    m = Metrics()
    m.inc_received('weird"event\\name\n')
    text = m.exposition({}).decode()
    assert 'event="weird\\"event\\\\name\\n"' in text
    assert metric_values(text)[
        'campaign_bot_deliveries_received_by_event_total{event="weird"event\\name\n"}'] == 1


SERVER_START = "from bot.metrics import Metrics\nMetrics()\n"
COUNT = (
    "from bot.metrics import Metrics\n"
    "import sys\n"
    "m = Metrics()\n"
    "m.inc_processed(failed=False, count=int(sys.argv[1]))\n"
    "m.github_call('GET', int(sys.argv[2]), installation='7')\n"
)
SCRAPE = (
    "from bot.metrics import Metrics\n"
    "import sys\n"
    "m = Metrics()\n"
    "sys.stdout.write(m.exposition({'queued': 3}).decode())\n"
)


def test_counters_of_several_processes_are_summed_in_multiprocess_mode(tmp_path: Path) -> None:
    """As ``serve`` runs it: every process keeps its values in PROMETHEUS_MULTIPROC_DIR and
    the scrape merges them (counters summed, the rate-limit gauge the most recent)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    # the server starts first (the rate limit is unknown), then two workers count
    subprocess.run([sys.executable, "-c", SERVER_START], env=env, cwd=ROOT, check=True,
                   timeout=60)
    for count, remaining in ((617_283, 4000), (617_284, 3999)):
        subprocess.run([sys.executable, "-c", COUNT, str(count), str(remaining)], env=env,
                       cwd=ROOT, check=True, timeout=60)
    out = subprocess.run([sys.executable, "-c", SCRAPE], env=env, cwd=ROOT, check=True,
                         timeout=60, capture_output=True, text=True).stdout
    values = metric_values(out)
    assert values["campaign_bot_deliveries_processed_total"] == 1_234_567
    assert values['campaign_bot_github_api_calls_total{method="GET"}'] == 2
    assert values['campaign_bot_github_rate_limit_remaining{installation="7"}'] == 3999
    assert values['campaign_bot_inbox_depth{status="queued"}'] == 3
    assert float(_sample_text(out, "campaign_bot_deliveries_processed_total")) == 1_234_567
