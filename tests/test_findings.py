"""Review finding rules on plain data: rule, severity, exact file line and field (issue 3)."""

from __future__ import annotations

from typing import Any

import pytest
from _evidence_factory import (
    as_items,
    lifecycle,
    line_containing,
    lossless_report,
    receipt,
    scope,
    screen,
    sha,
)

from evidence.findings import REVIEW_RULES, review_findings, stale_status
from evidence.models import Receipt, StatusSnapshot
from evidence.screening import screen_decisions
from evidence.verdicts import Evidence, ReportIn, StatusIn, judge

FAST = ([100.0, 101.0, 102.0], [60.0, 61.0, 62.0])


def _run(receipts: list[Receipt], reports: list[Any] = (), statuses: list[StatusIn] = (),
         **sc: Any) -> tuple[Evidence, list]:
    ev = Evidence(scope(**sc), as_items(receipts), list(reports), statuses=list(statuses))
    vs = judge(ev)
    return ev, review_findings(ev, vs, screen_decisions(ev))


def _with(r: Receipt, **update: Any) -> Receipt:
    data = r.model_dump(by_alias=True)
    data.update(update)
    return Receipt.model_validate(data)


def _failed(r: Receipt) -> Receipt:
    reqs = [q.model_copy(update={"http_status": 503}) if q.kind == "measured" else q
            for q in r.requests]
    return r.model_copy(update={"requests": reqs})


# rule, severity, builder -> receipts, the session hit, a substring of the pointed line
CASES: list[tuple[str, str, str, Any, str, str]] = [
    ("lifecycle-container-exit", "LIFECYCLE_FAILED", "P1",
     lambda: [*screen(*FAST)[:5], _with(screen(*FAST)[5], lifecycle=lifecycle(
         container_exit_code=1))], "s1-5s-lossless-5", '"container_exit_code": 1'),
    ("lifecycle-killed-worker", "LIFECYCLE_FAILED", "P1",
     lambda: [_with(screen(*FAST)[0], lifecycle=lifecycle(kill_actions=4)), *screen(*FAST)[1:]],
     "s1-5s-lossless-0", '"kill_actions": 4'),
    ("lifecycle-idle-check-missing", "LIFECYCLE_FAILED", "P2",
     lambda: [_with(screen(*FAST)[0], lifecycle=lifecycle(devices_idle_after=None)),
              *screen(*FAST)[1:]], "s1-5s-lossless-0", '"lifecycle"'),
    ("request-503", "REQUEST_FAILED", "P1",
     lambda: [screen(*FAST)[0], _failed(screen(*FAST)[1]), *screen(*FAST)[2:]],
     "s1-5s-lossless-1", '"http_status": 503'),
    ("inputs-differ-from-scope", "INPUTS_DIFFER", "P1",
     lambda: [*screen(*FAST)[:2], _with(screen(*FAST)[2], input_digests={
         "prompt": sha("other"), "reference_video": sha("video"),
         "reference_audio": sha("audio")}), *screen(*FAST)[3:]],
     "s1-5s-lossless-2", sha("other")),
    ("warmup-missing", "PROTOCOL_SHORTFALL", "P2",
     lambda: [*screen(*FAST)[:3], receipt("control", 3, 101.0, warmups=0),
              *screen(*FAST)[4:]], "s1-5s-lossless-3", '"requests"'),
    ("unbalanced-order", "PROTOCOL_SHORTFALL", "P2",
     lambda: screen(*FAST, order="AAABBB"), "s1-5s-lossless-0", '"slot": 0'),
]


@pytest.mark.parametrize(("rule", "severity", "build", "session", "needle"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(rule: str, severity: str, build: Any, session: str, needle: str) -> None:
    ev, fs = _run(build())
    hits = [f for f in fs if f.rule == rule]
    assert hits, [(f.rule, f.message) for f in fs]
    f = hits[0]
    assert f.severity == severity
    item = next(i for i in ev.receipts if i.receipt.session_id == session)
    assert f.path == item.path
    assert f.line == line_containing(item.text, needle), (f.field, needle)
    assert f.resolution and f.message


def test_clean_screen_has_no_findings() -> None:
    _, fs = _run(screen(*FAST))
    assert fs == []


def test_too_few_sessions_points_at_scope_and_rejected_screens_are_nits() -> None:
    ev = Evidence(scope(), as_items(screen([100.0], [75.0], order="AB")),
                  scope_text=SCOPE_TOML)
    fs = review_findings(ev, judge(ev), screen_decisions(ev))
    hits = [f for f in fs if f.rule == "PROTOCOL_SHORTFALL"]
    assert {f.severity for f in hits} == {"P2"} and len(hits) == 2
    assert hits[0].path == "campaign.toml" and hits[0].line == 4
    ev = Evidence(scope(), as_items(screen([100.0], [200.0], order="AB")),
                  scope_text=SCOPE_TOML)
    fs = review_findings(ev, judge(ev), screen_decisions(ev))
    assert {f.severity for f in fs if f.rule == "PROTOCOL_SHORTFALL"} == {"P3"}


SCOPE_TOML = "[protocol]\norder = \"ABBAAB\"\nwarmups_per_session = 1\n" \
             "min_measured_sessions_per_arm = 3\n"


def test_inputs_differ_between_tracks_is_p2() -> None:
    a = screen(*FAST)
    b = [_with(r, input_digests={**r.input_digests, "seed_file": sha("seed-15")})
         for r in screen(*FAST, track="15s-lossy")]
    a = [_with(r, input_digests={**r.input_digests, "seed_file": sha("seed-5")}) for r in a]
    _, fs = _run(a + b)
    hits = [f for f in fs if f.rule == "INPUTS_DIFFER"]
    assert [(f.severity, f.path.split("/")[-1]) for f in hits] == [
        ("P2", "s1-15s-lossy-0.json")]
    assert "duration-scaling" in hits[0].message


def test_lossless_unproven_control_not_repeatable_points_at_report() -> None:
    rs = screen(*FAST, ctrl_outputs=["c-a", "c-b", "c-c"])
    rep = lossless_report("c-a", "c-b", False)
    text = rep.model_dump_json(by_alias=True, indent=2)
    _, fs = _run(rs, [ReportIn(rep, "reports/control-repeat.json", text)])
    hits = [f for f in fs if f.rule == "LOSSLESS_UNPROVEN"]
    at_report = [f for f in hits if f.path == "reports/control-repeat.json"]
    assert len(at_report) == 1 and "not repeatable" in at_report[0].message
    assert at_report[0].line == line_containing(text, '"frames_equal": false')
    assert all(f.severity == "P2" for f in hits)


STATUS_JSON = """{
  "schema": "campaign-bot/status@1",
  "campaign": "h3-test",
  "execution": "queued",
  "samples": {
    "5s-lossless": 0
  },
  "as_of": "2026-11-01T00:00:00Z"
}
"""


@pytest.mark.parametrize(("update", "fields"), [
    ({}, ["execution", "samples.5s-lossless"]),
    ({"execution": "running"}, ["samples.5s-lossless"]),
    ({"execution": "running", "samples": {"5s-lossless": 6}}, []),
    ({"frozen": True, "superseded_by": "receipts/x.json"}, []),
    ({"campaign": "another"}, []),
], ids=["queued-zero", "running-zero", "up-to-date", "frozen", "other-campaign"])
def test_stale_status(update: dict, fields: list[str]) -> None:
    import json

    obj = json.loads(STATUS_JSON) | update
    text = json.dumps(obj, indent=2) + "\n"
    st = StatusIn(StatusSnapshot.model_validate(obj), "results/status.json", text)
    ev = Evidence(scope(), as_items(screen(*FAST)), statuses=[st])
    fs = stale_status(ev)
    assert [f.field for f in fs] == fields
    for f in fs:
        key = f.field.split(".")[-1]
        assert f.line == line_containing(text, f'"{key}"')
        assert f.severity == "P2" and "frozen" in (f.resolution or "")


def test_every_emitted_rule_is_declared() -> None:
    rs = [_failed(screen(*FAST)[0]), *screen(*FAST, order="AAABBB")[1:]]
    _, fs = _run(rs)
    assert fs and {f.rule for f in fs} <= REVIEW_RULES
