"""Migrations at start stay quiet at INFO (the setup URL must not be buried) and speak at DEBUG.

Each case runs in a fresh interpreter: alembic logs its plug-in set-up once, when
``alembic.command`` is first imported.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import logging, sys
logging.basicConfig(level=getattr(logging, sys.argv[2]), stream=sys.stderr,
                    format="%(levelname)s %(name)s: %(message)s")
from bot.database import make_engine, migrate
print(migrate(make_engine("sqlite:///" + sys.argv[1])))
"""


def _migrate(tmp_path: Path, level: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "bot.db"), level],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_migrate_logs_nothing_from_alembic_below_debug(tmp_path: Path, level: str) -> None:
    res = _migrate(tmp_path, level)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip(), "migrate returned no revision"
    assert "alembic" not in res.stderr, res.stderr


def test_migrate_logs_alembic_steps_at_debug(tmp_path: Path) -> None:
    res = _migrate(tmp_path, "DEBUG")
    assert res.returncode == 0, res.stderr
    assert "INFO alembic.runtime.plugins: setup plugin" in res.stderr
    assert "INFO alembic.runtime.migration: Running upgrade" in res.stderr
