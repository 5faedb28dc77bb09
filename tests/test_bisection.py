"""The noisy bisection (:mod:`evidence.bisection`), revision scopes
(:mod:`evidence.revisions`), the ``/compare`` and ``/bisect`` grammar, the stand-in's
per-revision latency and the reproduce commands of a revision screen: pure tables."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from bot.features.screen.bisect import (
    BisectCancel,
    BisectStart,
    BisectStatus,
    parse_bisect,
    parse_compare,
)
from bot.features.screen.grammar import ScreenUsageError
from evidence.bisection import Posterior, answer, capacity, plan, step_error
from evidence.reproduce import ScreenRecipe, runner_commands
from evidence.revisions import revision_candidate
from runners.standin import revision_seconds

G, B = "a" * 40, "b" * 40


def run(n: int, culprit: int, wrong_at: set[int], q: float = 0.05) -> tuple[int, float, int]:
    """Bisect ``n`` commits whose answers are wrong at the listed steps (0-based)."""
    post = Posterior.uniform(n)
    rng = random.Random(0)
    steps = 0
    while post.best()[1] < 0.95 and steps < 100:
        m = post.query(rng.random())
        assert m is not None and 1 <= m < n
        truth = m >= culprit
        post.update(m, truth != (steps in wrong_at), q)
        steps += 1
    k, mass = post.best()
    return k, mass, steps


@pytest.mark.parametrize(("culprit", "wrong_at"), [
    (1, set()), (21, set()), (32, set()), (21, {0}), (21, {1, 4}), (7, {2}),
], ids=["first", "middle", "last", "first-answer-wrong", "two-wrong", "early-wrong"])
def test_probabilistic_bisection_recovers_from_wrong_answers(culprit: int,
                                                             wrong_at: set[int]) -> None:
    k, mass, steps = run(32, culprit, wrong_at)
    assert (k, mass >= 0.95) == (culprit, True)
    assert steps >= 5  # at least log2(32) answers


def test_query_is_the_randomised_median_and_never_an_end() -> None:
    post = Posterior([0.1, 0.8, 0.1])
    assert {post.query(u) for u in (0.0, 0.49, 0.51, 0.99)} == {1, 2}
    assert Posterior([0.0, 0.0, 1.0]).query(0.9) == 2  # c_N is known slow: never asked
    assert Posterior([1.0, 0.0, 0.0]).query(0.0) == 1  # c_0 is GOOD: never asked
    assert Posterior.uniform(1).query() is None


def test_update_interval_and_errors() -> None:
    post = Posterior.uniform(4)
    post.update(2, True, 0.1)  # culprit <= 2 likely
    assert post.mass[0] == pytest.approx(0.45) and post.mass[3] == pytest.approx(0.05)
    assert post.interval(0.9) == (1, 2)
    with pytest.raises(ValueError, match="outside 1..4"):
        post.update(5, True, 0.1)


@pytest.mark.parametrize(("ratio", "want"), [
    (1.0, False), (1.02, False), (1.03, True), (2.0, True), (None, None), (float("nan"), None),
], ids=["same", "below-midpoint", "above-midpoint", "slow", "none", "nan"])
def test_answer_threshold_is_the_geometric_midpoint(ratio: float | None,
                                                    want: bool | None) -> None:
    assert math.sqrt(1.05) == pytest.approx(1.0247, abs=1e-4)
    assert answer(ratio, 0.05) is want


def test_plan_and_step_error() -> None:
    assert step_error(0.03, 0.3, 1) == pytest.approx(0.00126, abs=2e-5)
    assert step_error(0.02, 0.05, 4) < step_error(0.02, 0.05, 1)
    assert capacity(0.5) == pytest.approx(0.0) and capacity(0.0) == 1.0
    p = plan(32, sigma=0.03, margin=0.3, error_rate=0.05, session_device_h=0.52)
    assert (p.n_per_arm, p.min_steps) == (1, 5)
    assert p.min_device_h == pytest.approx(5.2)
    assert p.expected_device_h == pytest.approx(9.83, abs=0.01)
    p3 = plan(32, sigma=0.03, margin=0.3, error_rate=0.05, session_device_h=0.52,
              min_per_arm=3)
    assert p3.n_per_arm == 3  # the protocol's minimum holds
    with pytest.raises(ValueError, match="error_rate"):
        plan(32, sigma=0.03, margin=0.3, error_rate=1.5, session_device_h=0.5)


@pytest.mark.parametrize(("text", "want"), [
    (f"{G} {B} --track 5s", BisectStart(G, B, "5s")),
    (f"{G} {B} track=5s --max-device-hours 40 error-rate=0.01 noise=0.02",
     BisectStart(G, B, "5s", 40.0, 0.01, 0.02)),
    ("status", BisectStatus()),
    ("cancel B3", BisectCancel(3)),
], ids=["start", "options", "status", "cancel"])
def test_parse_bisect(text: str, want: object) -> None:
    assert parse_bisect(text) == want


@pytest.mark.parametrize(("text", "message"), [
    (f"{G} {B}", "needs --track"),
    (f"{G[:12]} {B} --track 5s", "bad engine revision"),
    (f"{G} {G} --track 5s", "the same commit"),
    (f"{G} {B} --track 5s --max-device-hours", "needs a value"),
    (f"{G} {B} --track 5s error-rate=0.9", "out of range"),
    (f"{G} {B} --track 5s --colour red", "unknown argument 'colour'"),
    ("cancel", "one bisection id"),
], ids=["no-track", "short-sha", "same", "no-value", "error-rate", "unknown", "cancel"])
def test_parse_bisect_refusals(text: str, message: str) -> None:
    with pytest.raises(ScreenUsageError, match=message):
        parse_bisect(text)


def test_parse_compare() -> None:
    got = parse_compare("922f1e9f1cb8 3F9C2E1D0B6A --track 5s sessions=4 track=15s")
    assert (got.rev_a, got.rev_b, got.tracks, got.sessions) == (
        "922f1e9f1cb8", "3f9c2e1d0b6a", ("5s", "15s"), 4)
    with pytest.raises(ScreenUsageError, match="same"):
        parse_compare("922f1e9f1cb8 922f1e9f1cb8")
    with pytest.raises(ScreenUsageError, match="needs two engine revisions"):
        parse_compare("922f1e9f1cb8")
    assert revision_candidate("3F9C2E1D0B6A4C8E") == "rev-3f9c2e1d0b6a"


def test_standin_latency_by_revision(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"abc": 1.0, "abcdef": 2.0}))
    assert revision_seconds(str(f), "abcdef12", 0.05) == 2.0  # longest key wins
    assert revision_seconds(str(f), "abc0", 0.05) == 1.0
    assert revision_seconds(str(f), "ab", 0.05) == 2.0  # a short SHA of a key
    assert revision_seconds(str(f), "fff", 0.05) == 0.05
    f.write_text("[1]")
    with pytest.raises(SystemExit):
        revision_seconds(str(f), "abc", 0.05)


def test_reproduce_commands_of_a_revision_screen() -> None:
    r = ScreenRecipe("https://github.com/o/r.git", "campaigns/x", "5s", "rev-bbbbbbbbbbbb", 4,
                     "c" * 40, "d" * 40, "S3", 7, "main", "a" * 12, "b" * 12)
    assert runner_commands(r)[-1] == (
        "campaign-bot screen --campaign campaigns/x --track 5s --sessions 4 --frozen-scope "
        f"frozen-campaign.toml --frozen-scope-blob {'d' * 40} --control-revision "
        f"{'a' * 12} --candidate-revision {'b' * 12} --out bundle")
