"""Deliveries about one pull request are processed one at a time whatever their shape, through
the real service (``campaign-bot serve``, worker process, SQLite, the GitHub double).

GitHub sends a ``pull_request`` delivery with an ``installation`` block to an App's webhook
and one without it to a repository webhook; both can reach the bot for one PR (an App plus a
repository webhook left from before, or a redelivery of an old delivery).  They must not race:
the PR gets one summary comment and one review for its head, never two.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from github_helpers import BOT, REPO, clear_configs, example_files, pr_event
from test_head_of_line import Service
from test_review import bad_status
from webhook_helpers import wait_for

from bot.inbox.delivery import delivery_key

STATUS = "campaigns/h3/results/status.json"


def _summaries(double: Any) -> list[dict[str, Any]]:
    return [c for c in double.repo(REPO).comments.values()
            if c["user"] == BOT and "<!-- campaign-bot:summary pr=2 -->" in c["body"]]


@pytest.mark.parametrize("rounds", [3])
def test_racing_deliveries_with_and_without_installation_give_one_review(
        github_double: Any, tmp_path: Any, rounds: int) -> None:
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: bad_status()}, user="dave")
    clear_configs()
    service = Service(github_double, tmp_path)
    try:
        sent = []
        for i in range(rounds):
            with_inst = pr_event(2, pull.head_sha, delivery=f"with-{i}").payload
            without = pr_event(2, pull.head_sha, delivery=f"without-{i}").payload
            without.pop("installation")
            assert delivery_key(with_inst) == delivery_key(without)
            # both posted at once, as two GitHub deliveries arrive
            threads = [threading.Thread(target=service.send, args=(guid, p, "pull_request"))
                       for guid, p in ((f"with-{i}", with_inst), (f"without-{i}", without))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sent += [f"with-{i}", f"without-{i}"]
        wait_for(lambda: all(service.row(g).get("status") == "done" for g in sent), 120,
                 "every delivery processed")
        reviews = [r for r in github_double.repo(REPO).reviews.values()
                   if r["commit_id"] == pull.head_sha]
        assert len(reviews) == 1, reviews
        assert len(_summaries(github_double)) == 1
        assert len(github_double.repo(REPO).check_runs) == 1
    finally:
        service.stop()


def test_the_key_is_the_repository_whatever_the_payload_carries() -> None:
    with_inst = {"installation": {"id": 7}, "repository": {"full_name": "acme/x"}}
    assert delivery_key(with_inst) == delivery_key({"repository": {"full_name": "acme/x"}})
    assert delivery_key(with_inst) != delivery_key({"installation": {"id": 7},
                                                    "repository": {"full_name": "acme/y"}})
    # an installation event has no repository: its key is the installation
    assert delivery_key({"installation": {"id": 7}}) == "installation:7"
    assert delivery_key({}) == "global"
