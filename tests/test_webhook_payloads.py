"""Real webhook payloads (octokit examples and the derived ones) validate against their JSON
schemas, and the bot's payload models read them (unknown fields accepted)."""

from __future__ import annotations

import json

import pytest
from github_helpers import FIXTURES
from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from bot.inbox import payloads
from bot.inbox.router import Event

PAYLOADS = sorted([*(FIXTURES / "webhooks").rglob("*.json"),
                   *(FIXTURES / "webhooks-derived").rglob("*.json")])


@pytest.fixture(scope="module")
def registry() -> Registry:
    reg = Registry()
    for p in (FIXTURES / "schemas").rglob("*.schema.json"):
        doc = json.loads(p.read_text())
        reg = reg.with_resource(doc["$id"], Resource.from_contents(doc, DRAFT7))
    return reg


def _schema_id(event: str, payload: dict) -> str:
    return f"{event}${payload['action']}" if "action" in payload else f"{event}$event"


@pytest.mark.parametrize("path", PAYLOADS, ids=lambda p: f"{p.parent.parent.name}/"
                         f"{p.parent.name}/{p.name}")
def test_payload_matches_schema_and_parses(path, registry) -> None:
    event = path.parent.name
    payload = json.loads(path.read_text())
    sid = _schema_id(event, payload)
    validator = Draft7Validator({"$ref": sid}, registry=registry)
    errors = [e.message for e in validator.iter_errors(payload)]
    assert errors == []
    ev = Event("d", event, payload)
    assert ev.action == payload.get("action")
    model = payloads.parse(event, payload)
    if event in payloads.MODELS:
        assert model is not None
        assert model.repository.full_name == ev.repo_full_name
        assert model.sender.login == ev.sender_login
        assert model.repository.model_extra  # unknown fields are kept, not refused


def test_comment_on_pull_request_is_recognised() -> None:
    p = json.loads((FIXTURES / "webhooks-derived/issue_comment/edited.on-pull-request.json")
                   .read_text())
    m = payloads.parse("issue_comment", p)
    assert m.issue.is_pull and m.changes.body.from_ == "/screen candidate old-name"
    plain = json.loads((FIXTURES / "webhooks/issue_comment/created.payload.json").read_text())
    assert not payloads.parse("issue_comment", plain).issue.is_pull


def test_pull_request_fork_flag() -> None:
    p = json.loads((FIXTURES / "webhooks/pull_request/opened.payload.json").read_text())
    m = payloads.parse("pull_request", p)
    assert m.number == m.pull_request.number and not m.pull_request.is_fork
    p["pull_request"]["head"]["repo"] = None
    assert payloads.parse("pull_request", p).pull_request.is_fork


@pytest.mark.parametrize(("event", "payload", "field"), [
    ("workflow_run", {"workflow_run": {"id": 2**63}}, "workflow_run.id"),
    ("workflow_job", {"workflow_job": {"id": 1, "run_id": 2**64}}, "workflow_job.run_id"),
    ("workflow_run", {"workflow_run": {"id": 1}, "repository": {"name": "r"}},
     "repository.full_name"),
])
def test_ids_past_64_bits_and_a_nameless_repository_are_permanent_shape_errors(
        event: str, payload: dict, field: str) -> None:
    from bot.inbox.payloads import PayloadShapeError, check_shape

    with pytest.raises(PayloadShapeError, match=f"{event} payload: {field}: "):
        check_shape(event, {"action": "completed", "repository": {"full_name": "o/r"},
                            **payload})
    check_shape(event, {"action": "completed", "repository": {"full_name": "o/r"},
                        "workflow_run": {"id": 2**63 - 1},
                        "workflow_job": {"id": 2**63 - 1, "run_id": 2**63 - 1}})
