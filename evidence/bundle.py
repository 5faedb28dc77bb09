"""Loading a campaign directory: scope, receipts, status snapshots, media reports and
manifests, each validated against its model, with raw text kept so findings can name lines.

Contract shared by ``check``, the verdict engine and the bot's PR review.

What is read:

* ``campaign.toml`` at the root (``campaign-bot/campaign@1``), parsed with ``tomllib``.
* Every ``*.json`` file anywhere in the tree (bags' ``data/`` included; ``.git`` and other
  :data:`evidence.manifest.SKIP_DIRS` skipped outside bags; symlinks never followed; inside a
  signed bundle checked with ``--trusted-keys``, only the files its signed manifests list)
  whose top-level ``schema`` is ``campaign-bot/receipt@1``, ``campaign-bot/status@1``,
  ``campaign-bot/media-report@1``, ``campaign-bot/probe@1``/``@2`` or
  ``campaign-bot/trace-summary@1``/``@2`` (diagnostics: listed, never inputs to a verdict).
  Validation is strict (a string is not a number, ``NaN``
  and negative seconds are refused) and every error becomes a :class:`Finding` with the file,
  the field path and the line, never a traceback.

Decisions:

* A ``status.json`` without a ``campaign-bot/`` schema is an *untyped status*: it is not
  validated (its meaning is unknown) but reported as a P3 ``STATUS_UNTYPED`` note, because a
  reader cannot tell a frozen snapshot from current progress (the P2 review finding on
  campaign #320's stale ``results/status.json``); the resolution names our status schema with
  its ``frozen`` marker.
* Any other ``campaign-bot/NAME@V`` that this version does not know (a newer document type)
  is a P3 ``SCHEMA_UNKNOWN`` note; an unknown *version* of a known type is a P1 error.
* JSON that does not parse is a P1 ``JSON_INVALID`` error wherever it is: a bundle holds no
  broken JSON.
* Receipts must name a track and candidate of the scope and its campaign id (P1 otherwise);
  a session id recorded by two receipts is P2 and only the first (by path) is kept.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from evidence import safejson
from evidence.hashing import read_regular
from evidence.lines import line_of
from evidence.manifest import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    TreeIndex,
    index_tree,
)
from evidence.models import (
    CampaignScope,
    Finding,
    MediaReport,
    Receipt,
    Severity,
    StatusSnapshot,
)
from evidence.operator_probe import OperatorProbe
from evidence.trace_summary import TraceSummary

M = TypeVar("M", bound=BaseModel)

DOC_MODELS: dict[str, type[BaseModel]] = {
    "receipt": Receipt,
    "status": StatusSnapshot,
    "media-report": MediaReport,
    "probe": OperatorProbe,
    "trace-summary": TraceSummary,
}
"""Document types found by their ``schema`` anywhere in the tree (``campaign`` is the TOML)."""

OTHER_KNOWN = frozenset({"campaign", "integrity", "check-report", "finding"})
"""``campaign-bot/`` names that are not campaign documents to validate here."""

_SCHEMA_RE = re.compile(r"^campaign-bot/([a-z0-9-]+)@(\d+)$")


@dataclass
class Doc(Generic[M]):
    """One validated document: ``path`` relative to the campaign root (POSIX separators),
    the parsed ``model``, and the raw ``text`` it was parsed from (for line lookup)."""

    path: str
    model: M
    text: str


@dataclass
class LoadedCampaign:
    """Everything read from one campaign directory.

    ``findings`` holds load and validation problems (each naming file, field and line);
    documents that failed validation are absent from the typed lists, never half-parsed.
    ``json_docs`` maps the path of every JSON file that parsed to ``(object, text)`` (the
    manifest verifier reuses it to find integrity maps); ``index`` is the tree walk.
    """

    root: Path
    scope: Doc[CampaignScope] | None = None
    receipts: list[Doc[Receipt]] = field(default_factory=list)
    statuses: list[Doc[StatusSnapshot]] = field(default_factory=list)
    media_reports: list[Doc[MediaReport]] = field(default_factory=list)
    probes: list[Doc[OperatorProbe]] = field(default_factory=list)
    trace_summaries: list[Doc[TraceSummary]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    json_docs: dict[str, tuple[Any, str]] = field(default_factory=dict, repr=False)
    index: TreeIndex | None = field(default=None, repr=False)


def _f(rule: str, sev: Severity, path: str, msg: str, *, line: int | None = None,
       fieldp: str | None = None, fix: str | None = None) -> Finding:
    return Finding(rule=rule, severity=sev, path=path, line=line, field=fieldp,
                   message=msg, resolution=fix)


def input_words(v: object) -> str:
    """A value read from JSON or TOML, named as those formats name it (``the string "5"``,
    ``the number 1.5``, ``true``, ``JSON null``, ``an array``), at most about 60 characters;
    never a Python repr."""
    if v is None:
        return "JSON null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return f"the number {str(v)[:60]}"
    if isinstance(v, str):
        return "the string " + json.dumps(v if len(v) <= 50 else v[:50] + "…",
                                          ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return f"a {type(v).__name__} value"


def validation_findings(err: ValidationError, path: str, text: str, *,
                        fmt: str = "json") -> list[Finding]:
    """One P1 ``SCHEMA_INVALID`` finding per pydantic error, with field path and line, in the
    order of their lines."""
    out = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        fpath = ".".join(str(x) for x in loc) or None
        line = line_of(text, loc, fmt="toml" if fmt == "toml" else "json")
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] in ("string_too_short", "too_short") and e.get("input") in ("", [], ()):
            msg = "is empty: a value is required here (" + msg[0].lower() + msg[1:] + ")"
        if e["type"] in ("float_type", "int_type", "string_type", "bool_type") and \
                "input" in e:
            msg += f" (got {input_words(e['input'])})"
        out.append(_f("SCHEMA_INVALID", "P1", path, f"{fpath or 'document'}: {msg}",
                      line=line, fieldp=fpath))
    # in the file's order, so that when findings are capped the first lines are the ones shown
    return sorted(out, key=lambda f: f.line or 0)


def _read(root: Path, rel: str, size: int, limit: int, out: list[Finding],
          real_root: str | None = None) -> str | None:
    """Text of ``root/rel`` (``size`` bytes from the index) or None with a finding: over
    ``limit`` (FILE_TOO_LARGE: P1 for a campaign-bot document, P3 for other JSON, which is
    then only hashed), unreadable (also: no longer a regular file, or really outside
    ``real_root``, the resolved root, when the tree changed after it was walked), or not
    UTF-8.  Peak memory is about twice the file."""
    if size > limit:
        # A large JSON payload (a trace, say) is legitimate; a large campaign-bot document is
        # not.  Documents we write start with their schema, so the head tells them apart.
        sev: Severity = "P1"
        what = "documents"
        if rel.endswith(".json"):
            try:
                head = read_regular(root / rel, limit=4096, beneath=real_root)
            except OSError:
                head = b"campaign-bot/"
            if b"campaign-bot/" not in head:
                sev, what = "P3", "JSON read whole (hashed only)"
        out.append(_f("FILE_TOO_LARGE", sev, rel,
                      f"{size} bytes exceeds the {limit}-byte limit for {what}; not read",
                      fix="raise --max-document-bytes (JSON, TOML) or --max-file-bytes if "
                          "this file is meant to be this large"))
        return None
    try:
        raw = read_regular(root / rel, beneath=real_root)
    except OSError as e:
        out.append(_f("UNREADABLE", "P1", rel, f"cannot read: {e.strerror or e}",
                      fix="fix the file's permissions"))
        return None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        out.append(_f("JSON_INVALID" if rel.endswith(".json") else "TOML_INVALID", "P1", rel,
                      f"not UTF-8 text (byte {e.start})",
                      line=raw[: e.start].count(b"\n") + 1))
        return None


class _DuplicateKeys:
    """``object_pairs_hook`` that records keys written twice in one JSON object (Python keeps
    the last value, other readers the first: evidence that depends on the reader is
    ambiguous, so the loader reports it), in the same parse that builds the object."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen:
                    self.keys.append(k)
                seen.add(k)
        return out

    def found(self, text: str) -> list[tuple[str, int | None]]:
        """Each duplicate key once, with the 1-based line of its last repeat (best effort)."""
        out: list[tuple[str, int | None]] = []
        for k in dict.fromkeys(self.keys):
            hits = list(re.finditer(re.escape(json.dumps(k)) + r"\s*:", text))
            line = text.count("\n", 0, hits[-1].start()) + 1 if len(hits) > 1 else None
            out.append((k, line))
        return out


def load_campaign(root: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                  max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
                  index: TreeIndex | None = None,
                  readable: Callable[[str], bool] | None = None) -> LoadedCampaign:
    """Read and validate every campaign document under ``root``.

    Each JSON or TOML file is parsed whole only up to ``min(max_file_bytes,
    max_document_bytes)`` bytes (defaults 64 MiB and 8 MiB): a larger campaign-bot document
    is a P1 ``FILE_TOO_LARGE`` finding, larger other JSON a P3 note (hashed, not parsed).
    JSON nested deeper than :data:`evidence.safejson.MAX_JSON_DEPTH` levels is a P1
    ``JSON_INVALID`` finding naming the depth and line.  ``readable(rel)``, when given, is
    asked for each file first; a file it refuses is not read at all (``check --trusted-keys``
    passes one that admits, inside a signed bundle, only the files its signed manifests list).
    Raises ``OSError`` only when ``root`` itself cannot be listed; every other problem is a
    finding in the result.
    """
    root = Path(root)
    idx = index or index_tree(root)
    lc = LoadedCampaign(root=root, index=idx)
    fs = lc.findings
    doc_limit = min(max_file_bytes, max_document_bytes)

    if "campaign.toml" in idx.files and (readable is None or readable("campaign.toml")):
        text = _read(root, "campaign.toml", idx.files["campaign.toml"], doc_limit, fs,
                     idx.real_root)
        if text is not None:
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as e:
                m = re.search(r"at line (\d+)", str(e))
                fs.append(_f("TOML_INVALID", "P1", "campaign.toml", f"not valid TOML: {e}",
                             line=int(m.group(1)) if m else None))
            except RecursionError:
                fs.append(_f("TOML_INVALID", "P1", "campaign.toml",
                             "not valid TOML: arrays or tables nested too deeply"))
            else:
                try:
                    scope = CampaignScope.model_validate(data, strict=True)
                    lc.scope = Doc("campaign.toml", scope, text)
                except ValidationError as e:
                    fs.extend(validation_findings(e, "campaign.toml", text, fmt="toml"))

    seen_sessions: dict[str, str] = {}
    for rel in sorted(idx.files):
        if not rel.endswith(".json") or (readable is not None and not readable(rel)):
            continue
        text = _read(root, rel, idx.files[rel], doc_limit, fs, idx.real_root)
        if text is None:
            continue
        # One parse: the duplicate-key hook only on our documents (a hook per object is slow
        # on large traces), and no second copy of the tree.
        dups = _DuplicateKeys() if "campaign-bot/" in text else None
        try:
            obj = safejson.loads(text, object_pairs_hook=dups)
        except safejson.JSONTooDeep as e:
            fs.append(_f("JSON_INVALID", "P1", rel, str(e), line=e.line,
                         fix=f"evidence documents are a few levels deep; the reader refuses "
                             f"more than {e.limit}"))
            continue
        except json.JSONDecodeError as e:
            fs.append(_f("JSON_INVALID", "P1", rel, f"not valid JSON: {e.msg} (column "
                         f"{e.colno})", line=e.lineno,
                         fix="restore the complete file (truncated or edited by hand?)"))
            continue
        except ValueError as e:  # e.g. an integer literal over Python's 4300-digit limit
            fs.append(_f("JSON_INVALID", "P1", rel, f"not valid JSON: {e}".split("; use ")[0]))
            continue
        if dups is not None:
            for key, dline in dups.found(text):
                fs.append(_f("JSON_INVALID", "P1", rel,
                             f"duplicate key {key!r} in one object: readers disagree on "
                             "which value wins (this one keeps the last)", line=dline,
                             fieldp=key,
                             fix="write each key once"))
        lc.json_docs[rel] = (obj, text)
        schema = obj.get("schema") if isinstance(obj, dict) else None
        if not (isinstance(schema, str) and schema.startswith("campaign-bot/")):
            if PurePosixPath(rel).name == "status.json":
                fs.append(_f("STATUS_UNTYPED", "P3", rel,
                             "status file without a campaign-bot schema: not validated; "
                             "readers cannot tell a frozen snapshot from current progress",
                             line=1, fix="write it as 'campaign-bot/status@1' with 'frozen' "
                                         "and 'superseded_by' when it is historical"))
            continue
        m = _SCHEMA_RE.match(schema)
        name = m.group(1) if m else None
        model = DOC_MODELS.get(name or "")
        if model is None:
            if name not in OTHER_KNOWN:
                fs.append(_f("SCHEMA_UNKNOWN", "P3", rel,
                             f"schema {schema!r} is not a document type this campaign-bot "
                             "validates; skipped", line=line_of(text, ("schema",)),
                             fieldp="schema"))
            continue
        try:
            doc = model.model_validate_json(text, strict=True)
        except ValidationError as e:
            fs.extend(validation_findings(e, rel, text))
            continue
        if isinstance(doc, Receipt):
            if doc.session_id in seen_sessions:
                fs.append(_f("DUPLICATE_SESSION", "P2", rel,
                             f"session {doc.session_id!r} is also recorded in "
                             f"{seen_sessions[doc.session_id]}; counted once",
                             line=line_of(text, ("session_id",)), fieldp="session_id"))
                continue
            seen_sessions[doc.session_id] = rel
            lc.receipts.append(Doc(rel, doc, text))
        elif isinstance(doc, StatusSnapshot):
            lc.statuses.append(Doc(rel, doc, text))
        elif isinstance(doc, MediaReport):
            lc.media_reports.append(Doc(rel, doc, text))
        elif isinstance(doc, OperatorProbe):
            lc.probes.append(Doc(rel, doc, text))
        elif isinstance(doc, TraceSummary):
            lc.trace_summaries.append(Doc(rel, doc, text))

    if lc.scope is not None:
        _against_scope(lc)
    return lc


def _against_scope(lc: LoadedCampaign) -> None:
    assert lc.scope is not None
    scope = lc.scope.model
    tracks = {t.id for t in scope.tracks}
    cands = {c.name for c in scope.candidates}
    for d in lc.receipts:
        r = d.model
        if r.campaign != scope.id:
            lc.findings.append(_f(
                "RECEIPT_SCOPE", "P1", d.path,
                f"campaign {r.campaign!r} is not this scope's id {scope.id!r}",
                line=line_of(d.text, ("campaign",)), fieldp="campaign"))
        if r.track not in tracks:
            lc.findings.append(_f(
                "RECEIPT_SCOPE", "P1", d.path,
                f"track {r.track!r} is not in campaign.toml (tracks: {sorted(tracks)})",
                line=line_of(d.text, ("track",)), fieldp="track"))
        if r.candidate is not None and r.arm == "candidate" and r.candidate not in cands:
            lc.findings.append(_f(
                "RECEIPT_SCOPE", "P1", d.path,
                f"candidate {r.candidate!r} is not in campaign.toml (candidates: "
                f"{sorted(cands)})", line=line_of(d.text, ("candidate",)), fieldp="candidate"))
    for sd in lc.statuses:
        if sd.model.campaign != scope.id:
            lc.findings.append(_f(
                "STATUS_SCOPE", "P1", sd.path,
                f"campaign {sd.model.campaign!r} is not this scope's id {scope.id!r}",
                line=line_of(sd.text, ("campaign",)), fieldp="campaign"))
