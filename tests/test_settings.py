"""One settings object: the service's variables and the features' nested sections are read
once, under their existing ``CAMPAIGN_BOT_*`` names, and handed to the worker process whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError, dump_settings, load_settings, restore_settings


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for k in list(os.environ):
        if k.startswith("CAMPAIGN_BOT_"):
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_feature_sections_keep_their_variable_names(env: pytest.MonkeyPatch) -> None:
    env.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", "s")
    env.setenv("CAMPAIGN_BOT_SCREEN_DEBOUNCE_S", "0")
    env.setenv("CAMPAIGN_BOT_SCREEN_DISPATCH_TIMEOUT_S", "60")
    env.setenv("CAMPAIGN_BOT_SCREEN_MAX_ARTIFACT_BYTES", "1024")
    env.setenv("CAMPAIGN_BOT_GITHUB_API_URL", "http://127.0.0.1:9")  # a flat name with "_"
    s = load_settings()
    assert (s.screen.debounce_s, s.screen.dispatch_timeout_s) == (0.0, 60.0)
    assert s.screen.max_artifact_bytes == 1024 and s.screen.silence_factor == 2.0
    assert s.github_api_url == "http://127.0.0.1:9"


def test_the_git_section(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", "s")
    assert load_settings().git.cache_dir == Path("campaign-bot-git")  # in the working dir
    env.setenv("CAMPAIGN_BOT_GIT_CACHE_DIR", str(tmp_path / "mirrors"))
    env.setenv("CAMPAIGN_BOT_GIT_TIMEOUT_S", "30")
    env.setenv("CAMPAIGN_BOT_GIT_MAX_CAMPAIGN_BYTES", "1000")
    s = load_settings()
    assert (s.git.cache_dir, s.git.timeout_s, s.git.max_campaign_bytes) == (
        tmp_path / "mirrors", 30.0, 1000)
    env.setenv("CAMPAIGN_BOT_GIT_TIMEOUT_S", "0")
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_GIT_TIMEOUT_S"):
        load_settings()


def test_a_bad_section_value_names_the_variable(env: pytest.MonkeyPatch) -> None:
    env.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", "s")
    env.setenv("CAMPAIGN_BOT_SCREEN_SILENCE_FACTOR", "0.5")
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_SCREEN_SILENCE_FACTOR"):
        load_settings()


def test_the_secret_is_needed_only_where_it_is_used(env: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_WEBHOOK_SECRET is not set"):
        load_settings()
    assert load_settings(need_secret=False).webhook_secret is None  # `deliveries`


def test_the_worker_gets_the_settings_the_server_read(env: pytest.MonkeyPatch) -> None:
    env.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", "s3cret")
    env.setenv("CAMPAIGN_BOT_TOKEN", "t0ken")
    env.setenv("CAMPAIGN_BOT_SCREEN_DEBOUNCE_S", "3")
    read = load_settings(port=9001)
    data = dump_settings(read)
    # the environment changes after the server read it: the worker must not see that
    env.setenv("CAMPAIGN_BOT_SCREEN_DEBOUNCE_S", "99")
    env.setenv("CAMPAIGN_BOT_PORT", "1")
    got = restore_settings(data)
    assert isinstance(got, Settings)
    assert got.model_dump() == read.model_dump()
    assert got.webhook_secret is not None and got.webhook_secret.get_secret_value() == "s3cret"
    assert got.token is not None and got.token.get_secret_value() == "t0ken"
    assert (got.port, got.screen.debounce_s) == (9001, 3.0)
