"""What people read from ``campaign-bot``: the one-screen ``check`` summary (80x24), the
``--details`` listing (a file:line is never split), sentences without ``None``/``null`` or
Python reprs, ``--version``, and help text that rich markup does not swallow."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from evidence.bundle import input_words
from evidence.check import SUMMARY_LINES, CheckReport, render_summary
from evidence.cli import app
from evidence.media.probe import AudioInfo, ProbeResult, VideoInfo, steps_words
from evidence.media.report import render_probe
from evidence.media.validators import _both
from evidence.models import Finding, Lifecycle, WorkerExit, exit_words
from evidence.verdicts import Reason, TrackVerdict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
NONE_WORDS = re.compile(r"\bNone\b|\bnull\b|<[a-zA-Z_.]+ object at 0x|\{'")


def run_cli(*args: str, columns: int = 80, lines: int = 24) -> subprocess.CompletedProcess[str]:
    """campaign-bot in a subprocess, as from a shell with COLUMNS/LINES set (not a tty)."""
    env = {**os.environ, "COLUMNS": str(columns), "LINES": str(lines)}
    env.pop("FORCE_COLOR", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env, stdin=subprocess.DEVNULL)


def report_of(d: Path) -> dict:
    res = CliRunner().invoke(app, ["check", str(d), "--json"])
    return json.loads(res.stdout)


def loc(f: dict) -> str:
    return f["path"] + (f":{f['line']}" if f["line"] else "")


# ------------------------------------------------------------------------- the summary


def test_default_summary_fits_80x24_and_shows_the_first_findings_whole() -> None:
    proc = run_cli("check", "examples/h3-ref2va-4x910b1")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    out = proc.stdout.rstrip("\n").split("\n")
    assert len(out) <= 24, proc.stdout
    assert max(len(x.rstrip()) for x in out) <= 80, proc.stdout
    text = proc.stdout
    assert "integrity: checked 24 hashes in 11 manifests, 0 errors" in out[1]
    assert "findings: P0 0, P1 3, P2 10, P3 4" in text
    assert re.search(r"track +candidate +verdict +ratio +m v n +deciding reason", text)
    assert re.search(r"5s-lossless +resident-layers-24 +INCONCLUSIVE +2\.112 +1 v 1", text)
    assert re.search(r"15s-lossy +\(control only\) +INCONCLUSIVE", text)
    rep = report_of(EXAMPLE)
    shown = int(re.search(r"^(\d+) more finding\(s\)", out[-1], re.M).group(1))
    first = rep["findings"][: len(rep["findings"]) - shown]
    assert len(first) >= 3
    for f in first:  # most severe first, each file:line whole on one line
        assert any(loc(f) in x for x in out), (loc(f), text)
    assert first[0]["severity"] == "P1" and first[0]["rule"] == "LIFECYCLE_FAILED"
    assert "--details" in out[-1] and "--json" in out[-1]
    assert out[-2].startswith("exit 1: 13 problem(s), 4 note(s)")
    assert not NONE_WORDS.search(text), text


def test_summary_gives_a_too_long_file_line_a_line_of_its_own(tmp_path: Path) -> None:
    d = tmp_path / "c"
    shutil.copytree(EXAMPLE, d)
    deep = d / "a-very-long-directory-name-for-raw-evidence" / "nested" / "deeper" / "still"
    deep.mkdir(parents=True)
    (deep / "receipt-with-a-long-name.json").write_text('{"schema": "campaign-bot/receipt@1",\n')
    proc = run_cli("check", str(d))
    out = proc.stdout.rstrip("\n").split("\n")
    rel = ("a-very-long-directory-name-for-raw-evidence/nested/deeper/still/"
           "receipt-with-a-long-name.json")
    assert len(out) <= 24, proc.stdout
    hits = [x for x in out if rel in x]
    assert hits and hits[0].strip().startswith(rel), proc.stdout  # alone, whole
    assert any(x.startswith("P1 JSON_INVALID") for x in out), proc.stdout


def _verdict(i: int) -> TrackVerdict:
    return TrackVerdict(track=f"track-{i}", candidate=f"candidate-with-a-long-name-{i}",
                        verdict="INCONCLUSIVE", m=1, n=1, ratio=0.9,
                        reasons=[Reason(code="TOO_FEW_SESSIONS", gate="design",
                                        text="1 control session(s)" + " and more" * 20)])


def test_summary_caps_rows_and_findings_on_a_large_campaign() -> None:
    rep = CheckReport(root="/srv/campaigns/" + "x" * 120, campaign="c" * 100,
                      verdicts=[_verdict(i) for i in range(40)],
                      findings=[Finding(rule="LIFECYCLE_FAILED", severity="P1",
                                        path=f"bundles/s{i}/data/receipts/s0-control.json",
                                        line=56, message="does not qualify " * 30)
                                for i in range(60)])
    buf = io.StringIO()
    render_summary(rep, Console(file=buf, width=80, highlight=False))
    out = buf.getvalue().rstrip("\n").split("\n")
    assert len(out) <= SUMMARY_LINES, buf.getvalue()
    assert max(len(x.rstrip()) for x in out) <= 80, buf.getvalue()
    assert "... 35 more verdict row(s)" in buf.getvalue()
    assert "bundles/s0/data/receipts/s0-control.json:56" in buf.getvalue()
    assert re.search(r"^\d+ more finding\(s\)", out[-1])


def test_summary_of_a_clean_bundle_says_so() -> None:
    buf = io.StringIO()
    render_summary(CheckReport(root="b", hashes_checked=3),
                   Console(file=buf, width=80, highlight=False))
    text = buf.getvalue()
    assert "verdicts: none" in text and "exit 0: no problems" in text
    assert "more finding" not in text and "--details" in text


# ------------------------------------------------------------------------ --details


def test_details_prints_every_finding_with_its_file_line_unsplit() -> None:
    proc = run_cli("check", "examples/h3-ref2va-4x910b1", "--details")
    assert proc.returncode == 1
    out = proc.stdout.split("\n")
    rep = report_of(EXAMPLE)
    for f in rep["findings"]:
        assert any(loc(f) in x for x in out), loc(f)
        assert any(f["resolution"][:40] in x for x in out)
    for m in rep["manifests"]:
        assert any(m["path"] in x for x in out), m["path"]
    assert "why (the deciding reason first)" in proc.stdout
    assert not NONE_WORDS.search(proc.stdout)


# --------------------------------------------------------------- no None in sentences


def test_lifecycle_and_request_sentences_have_no_none(tmp_path: Path) -> None:
    """Receipts whose optional fields are all missing: every sentence about them reads as
    words (no ``None``, ``null`` or Python repr) in findings, verdicts and screening."""
    d = tmp_path / "c"
    shutil.copytree(EXAMPLE, d)
    rec = json.loads((EXAMPLE / "bundles/screen-tp2-sp2-5s/data/receipts/s1-candidate.json"
                      ).read_text())
    rec |= {"screen_id": "odd", "session_id": "odd-s1"}
    rec["requests"] = [
        {"index": 0, "kind": "warmup", "http_status": None, "client_wall_s": None},
        {"index": 1, "kind": "measured", "http_status": 200, "client_wall_s": None},
        {"index": 2, "kind": "measured", "http_status": 503, "client_wall_s": 1.0,
         "error": "overloaded"}]
    rec["lifecycle"] = {
        "workers": [
            {"rank": 0, "pid": 10, "state": "alive", "exit_code": None, "signal": None},
            {"rank": None, "pid": 11, "state": "gone", "exit_code": None, "signal": None},
            {"rank": 2, "pid": 12, "state": "exited", "exit_code": None, "signal": 9},
            {"rank": 3, "pid": 13, "state": "exited", "exit_code": None, "signal": None},
            {"rank": 4, "pid": 14, "state": "exited", "exit_code": 1, "signal": None}],
        "server_exit_code": None, "server_signal": 15, "container_exit_code": None}
    ctrl = {**rec, "arm": "control", "slot": 0, "session_id": "odd-s0"}
    ctrl.pop("candidate")
    ctrl["lifecycle"] = {**rec["lifecycle"], "server_signal": None}
    (d / "results" / "odd-s1.json").write_text(json.dumps(rec))
    (d / "results" / "odd-s0.json").write_text(json.dumps(ctrl))
    rep = report_of(d)
    texts = [f["message"] for f in rep["findings"]] + [
        f["resolution"] or "" for f in rep["findings"]]
    texts += [r["text"] for v in rep["verdicts"] for r in v["reasons"]]
    texts += [v["summary"] for v in rep["verdicts"]]
    texts += [s["reason"] for s in rep["screening"]]
    texts += [p for a in rep["arms"] for p in a["lifecycle_problems"]]
    bad = [t for t in texts if NONE_WORDS.search(t)]
    assert bad == []
    joined = "\n".join(texts)
    for words in ("warmup request 0 got no HTTP response", "measured request 2 returned HTTP "
                  "503 (overloaded)", "measured request 1 has no finite, positive client "
                  "wall time (none recorded)", "worker rank 0 still running",
                  "worker pid 11 gone, exit status unreadable",
                  "worker rank 2 ended by signal 9 (SIGKILL)",
                  "worker rank 3 exited, exit status not recorded",
                  "worker rank 4 exited with code 1", "server ended by signal 15 (SIGTERM)",
                  "no server exit status recorded"):
        assert words in joined, words
    for details in (False, True):
        proc = run_cli("check", str(d), *(["--details"] if details else []), columns=120)
        assert not NONE_WORDS.search(proc.stdout), proc.stdout


@pytest.mark.parametrize(("code", "sig", "want"), [
    (None, None, "exit status not recorded"),
    (3, None, "exited with code 3"),
    (None, 9, "ended by signal 9 (SIGKILL)"),
    (0, 15, "exited with code 0 after signal 15 (SIGTERM)"),
    (None, 200, "ended by signal 200"),
])
def test_exit_words(code: int | None, sig: int | None, want: str) -> None:
    assert exit_words(code, sig) == want


def test_worker_and_server_words() -> None:
    assert WorkerExit(pid=1, state="alive").describe() == "still running"
    assert WorkerExit(pid=1, state="gone").describe() == "gone, exit status unreadable"
    assert WorkerExit(pid=1, state="gone", exit_code=2).describe() == "exited with code 2"
    assert WorkerExit(rank=None, pid=7, state="alive").who() == "worker pid 7"
    assert Lifecycle().server_problem() == "no server exit status recorded"
    assert Lifecycle(server_exit_code=1).server_problem() == "server exited with code 1"
    assert "server exited with code 1" in Lifecycle(server_exit_code=1).problems()


@pytest.mark.parametrize(("value", "want"), [
    (None, "JSON null"), (True, "true"), (5, "the number 5"), (1.5, "the number 1.5"),
    ("365.884", 'the string "365.884"'), ([1], "an array"), ({"a": 1}, "an object"),
    ("x" * 80, 'the string "' + "x" * 50 + '…"'),
])
def test_input_words_name_json_values_not_python_reprs(value: object, want: str) -> None:
    assert input_words(value) == want


def test_schema_error_names_the_json_type(tmp_path: Path) -> None:
    d = tmp_path / "c"
    shutil.copytree(EXAMPLE, d)
    p = d / "bundles/screen-tp2-sp2-5s/data/receipts/s0-control.json"
    p.write_text(p.read_text().replace('"client_wall_s": 166.572', '"client_wall_s": "166.572"'))
    msgs = [f["message"] for f in report_of(d)["findings"] if f["rule"] == "SCHEMA_INVALID"]
    assert any('(got the string "166.572")' in m for m in msgs), msgs


def test_media_words_have_no_none() -> None:
    assert steps_words({}) == "none"
    assert steps_words({"512": 361, "1024": 1}) == "512 (361 times), 1024 (once)"
    assert _both(None, 124) == "control=not declared, candidate=124"
    probe = ProbeResult(
        path="x.mp4", size_bytes=10, sha256="0" * 64, container="mov", decoder_build="b",
        video=VideoInfo(codec="h264", width=2, height=2, pix_fmt=None, decoded_frames=1,
                        pts_steps={"512": 1, "1024": 2}),
        audio=AudioInfo(codec="aac", sample_rate=48000, channels=2, layout="",
                        decoded_samples=1, decoded_duration_s=0.1, pcm_sha256="0" * 64))
    buf = io.StringIO()
    render_probe(probe, Console(file=buf, width=200))
    assert not NONE_WORDS.search(buf.getvalue()), buf.getvalue()
    assert "variable frame rate: pts steps 512 (once), 1024 (2 times)" in probe.problems()


# ------------------------------------------------------------------ version and help


def test_version_prints_the_installed_version() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout == f"campaign-bot {version('campaign-bot')}\n"
    assert version("campaign-bot") == "0.1.0"


def test_media_compare_help_keeps_square_brackets() -> None:
    from evidence.media.cli import media_app

    res = CliRunner().invoke(media_app, ["compare", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "top level or [quality_gates])." in res.stdout, res.stdout
    assert "\\[" not in res.stdout
