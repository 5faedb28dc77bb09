"""Validate the double's responses against GitHub's official REST description.

``openapi-subset.json`` (beside this module) is an OpenAPI 3.0 cut of
github/rest-api-description (see its SOURCE.md).  OpenAPI 3.0 schemas are JSON Schema with
``nullable``; :func:`_to_json_schema` rewrites ``nullable: true`` into a ``null`` alternative
so that python-jsonschema (Draft 7) can check them, and every ``$ref`` resolves inside the
same document through a ``referencing`` registry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

DOC_URI = "urn:github-openapi-subset"
ERROR_SCHEMA = {"anyOf": [
    {"$ref": f"{DOC_URI}#/components/schemas/{name}"}
    for name in ("basic-error", "validation-error", "validation-error-simple")
]}


def _to_json_schema(node: Any) -> Any:
    """Return a copy of an OpenAPI 3.0 schema tree with ``nullable`` made explicit."""
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items()}
    if out.pop("nullable", False) is True:
        t = out.get("type")
        if isinstance(t, str) and "$ref" not in out and "enum" not in out:
            out["type"] = [t, "null"]
        else:
            return {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Operation:
    """One REST operation: ``method`` (upper case), OpenAPI ``path`` template, id."""

    method: str
    path: str
    operation_id: str
    regex: re.Pattern[str]


class OpenAPISubset:
    """The REST description, with path matching and response validation.

    ``validate(method, path, status, body, content_type)`` returns a list of problems
    (empty when the response conforms).  A response for an operation or status that the
    description does not list is itself a problem: the double must not drift.
    """

    def __init__(self, path: Path) -> None:
        self.doc = json.loads(path.read_text())
        self.schema_doc = _to_json_schema(self.doc)
        self.registry = Registry().with_resource(
            DOC_URI, Resource.from_contents(self.schema_doc, default_specification=DRAFT7)
        )

    @cached_property
    def operations(self) -> list[Operation]:
        """Every operation of the subset, concrete paths before templated ones."""
        ops = []
        for p, item in self.doc["paths"].items():
            # contents paths contain slashes, and so may branch names ("Get a branch" of
            # release/1.0: PyGithub sends the name with its slash, as GitHub accepts it)
            pat = re.escape(p).replace(r"\{path\}", ".+").replace(r"\{branch\}", ".+")
            rx = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", pat) + "$")
            for m, op in item.items():
                if isinstance(op, dict) and "operationId" in op:
                    ops.append(Operation(m.upper(), p, op["operationId"], rx))
        # a literal segment beats a parameter: sort by parameter count
        ops.sort(key=lambda o: o.path.count("{"))
        return ops

    def match(self, method: str, path: str) -> Operation | None:
        """The operation serving ``method path`` (query string excluded), or None."""
        for op in self.operations:
            if op.method == method.upper() and op.regex.match(path):
                return op
        return None

    def validate(
        self, method: str, path: str, status: int, body: Any, content_type: str | None
    ) -> list[str]:
        """Problems of one response against its operation's schema for ``status``."""
        op = self.match(method, path)
        if op is None:
            return [f"{method} {path}: no such operation in openapi-subset.json"]
        resp = self.doc["paths"][op.path][op.method.lower()]["responses"].get(str(status))
        if resp is None:
            if status >= 400:
                # the description lists few error statuses; any GitHub error has this shape
                return self._validate_ref(body, ERROR_SCHEMA, f"{op.operation_id} {status}")
            return [f"{op.operation_id}: status {status} is not documented"]
        resp = self._deref(resp)
        content = resp.get("content")
        if not content:
            if body not in (None, b"", ""):
                return [f"{op.operation_id} {status}: documented without a body, got one"]
            return []
        ctype = (content_type or "application/json").split(";")[0].strip()
        media = content.get(ctype) or content.get("application/json") or next(
            iter(content.values())
        )
        schema = media.get("schema")
        if schema is None:
            return []
        ptr = self._pointer(op, status, ctype if ctype in content else next(iter(content)))
        return self._validate_ref(body, {"$ref": f"{DOC_URI}#{ptr}"}, f"{op.operation_id} {status}")

    def _validate_ref(self, body: Any, schema: dict[str, Any], what: str) -> list[str]:
        validator = Draft7Validator(schema, registry=self.registry)
        return [
            f"{what} at /{_path(e)}: {e.message[:300]}"
            for e in validator.iter_errors(body)
        ]

    def _deref(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            parts = node["$ref"].lstrip("#/").split("/")
            cur: Any = self.doc
            for p in parts:
                cur = cur[p.replace("~1", "/").replace("~0", "~")]
            node = cur
        return node

    def _pointer(self, op: Operation, status: int, ctype: str) -> str:
        """JSON pointer to the response schema (following a response-level $ref)."""
        resp = self.doc["paths"][op.path][op.method.lower()]["responses"][str(status)]
        if "$ref" in resp:
            base = resp["$ref"].lstrip("#")
        else:
            esc = op.path.replace("~", "~0").replace("/", "~1")
            base = f"/paths/{esc}/{op.method.lower()}/responses/{status}"
        return f"{base}/content/{ctype.replace('~', '~0').replace('/', '~1')}/schema"

    def example(self, name: str) -> Any:
        """A deep copy of ``components.examples[name].value``."""
        return json.loads(json.dumps(self.doc["components"]["examples"][name]["value"]))


def _path(err: Any) -> str:
    return "/".join(map(str, err.absolute_path))
