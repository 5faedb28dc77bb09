"""The stale-status rule for status files written without our schema.

A ``campaign-bot/status@1`` snapshot is checked by ``STALE_STATUS`` in
:mod:`evidence.findings`.  Campaigns also keep hand-written status files: campaign #320's
draft PR #321 kept a ``results/status.json`` reading ``"execution": "queued"``,
``"four_device_samples": 0`` and ``"No four-device execution result yet"`` beside a receipt
of a completed four-device HTTP measurement (814.064 s), and the review of that draft raised
it as a P2 finding.  This module reads such files by their common shapes and raises the same
``STALE_STATUS`` (P2) at the contradicted line.

Shapes recognised anywhere in the JSON object (nested objects too, to depth 8):

* a state key (``execution``, ``status``, ``state``, ``phase``, ``run_status``,
  ``execution_status``) whose string value says nothing has run: ``planned``, ``queued``,
  ``pending``, ``scheduled``, ``waiting``, ``not started`` (any case, ``_``/``-`` for spaces);
* a sample count: an integer under a key containing ``sample``, ``session``,
  ``measurement`` or ``runs`` (``four_device_samples``, ``samples.5s-lossless``) below
  what the receipts show: below the track's completed sessions when the key path names a
  track id, else 0 (a bare count of nothing);
* prose in a string value: "no ... result/sample/run/execution/measurement ... yet".

A file that marks itself historical is left alone (as the typed rule leaves ``frozen``
snapshots): ``"frozen": true``, ``"historical": true``, a ``superseded_by`` key, or a
``snapshot``/``stage`` key whose value names ``preflight``, ``historical``, ``frozen`` or
``snapshot``.  A file whose ``campaign`` names another campaign is skipped.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import PurePosixPath
from typing import Any

from evidence.lines import line_of
from evidence.models import Finding, Receipt

STATE_KEYS = frozenset({"execution", "status", "state", "phase", "run_status",
                        "execution_status"})
NOT_RUN = frozenset({"planned", "queued", "pending", "scheduled", "waiting", "not started",
                     "not yet started", "not run"})
_COUNT_KEY = re.compile(r"sample|session|measurement|(?:^|_)runs?(?:$|_)", re.I)
_NO_RESULT_YET = re.compile(
    r"\bno\b[^.\n]{0,80}?\b(results?|samples?|runs?|executions?|measurements?)\b[^.\n]{0,40}?"
    r"\byet\b", re.I)
_HISTORICAL = re.compile(r"preflight|historical|frozen|snapshot", re.I)
MAX_DEPTH = 8


def is_untyped_status(rel: str, obj: Any) -> bool:
    """Whether the JSON file ``rel`` (parsed ``obj``) is a status file without a
    ``campaign-bot/`` schema: a JSON object in a file whose name contains ``status``."""
    if not isinstance(obj, dict) or "status" not in PurePosixPath(rel).stem.lower():
        return False
    schema = obj.get("schema")
    return not (isinstance(schema, str) and schema.startswith("campaign-bot/"))


def marked_historical(obj: dict[str, Any]) -> bool:
    """The file says it is a historical snapshot (see module docstring)."""
    if obj.get("frozen") is True or obj.get("historical") is True or "superseded_by" in obj:
        return True
    return any(isinstance(obj.get(k), str) and _HISTORICAL.search(obj[k])
               for k in ("snapshot", "stage", "kind"))


def _walk(obj: Any, path: tuple[str | int, ...] = (), depth: int = 0
          ) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    if depth > MAX_DEPTH:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*path, str(k)), v
            yield from _walk(v, (*path, str(k)), depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:1000]):
            yield (*path, i), v
            yield from _walk(v, (*path, i), depth + 1)


def _completed(r: Receipt) -> bool:
    return any(q.http_status == 200 for q in r.measured)


def untyped_stale_findings(json_docs: dict[str, tuple[Any, str]],
                           receipts: Iterable[tuple[Receipt, str | None]],
                           campaign_id: str | None) -> list[Finding]:
    """``STALE_STATUS`` (P2) findings for untyped status files among ``json_docs`` (path ->
    (parsed object, text)) that say less than ``receipts`` ((receipt, path) pairs) show.
    One finding per contradicted field, at its line.  Nothing when no receipt holds a
    completed measured request."""
    done = [(r, p) for r, p in receipts if _completed(r)]
    if not done:
        return []
    latest, latest_path = max(done, key=lambda rp: rp[0].started_at)
    per_track: dict[str, set[str]] = defaultdict(set)
    for r, _ in done:
        per_track[r.track].add(r.session_id)
    first = next(q for q in latest.measured if q.http_status == 200)
    where = latest_path or latest.session_id
    seen = (f"{where} holds a completed measured request ({first.client_wall_s} s, HTTP 200)")
    fix = (f'mark this file historical ("frozen": true, "superseded_by": "{where}"), or '
           "replace it with a campaign-bot/status@1 snapshot that counts the completed "
           "sessions; a manifest that still hashes this older file is consistent")
    out: list[Finding] = []
    for rel, (obj, text) in sorted(json_docs.items()):
        if not is_untyped_status(rel, obj) or marked_historical(obj):
            continue
        camp = obj.get("campaign")
        if campaign_id is not None and isinstance(camp, str) and camp != campaign_id:
            continue
        for path, value in _walk(obj):
            key = str(path[-1]) if not isinstance(path[-1], int) else ""
            dotted = ".".join(str(p) for p in path)
            msg = None
            if key.lower() in STATE_KEYS and isinstance(value, str) and \
                    re.sub(r"[_-]+", " ", value.strip().lower()) in NOT_RUN:
                msg = f'untyped status says {dotted} "{value}" but {seen}'
            elif isinstance(value, int) and not isinstance(value, bool) and any(
                    _COUNT_KEY.search(p) for p in path if isinstance(p, str)):
                tracks = [t for t in per_track if any(str(p) == t for p in path)]
                need = len(per_track[tracks[0]]) if tracks else 1
                if value < need:
                    n_sess = need if tracks else sum(len(v) for v in per_track.values())
                    what = f"track {tracks[0]}" if tracks else "the campaign"
                    msg = (f"untyped status says {dotted} = {value} but the receipts show "
                           f"{n_sess} session(s) of {what} with a completed measured request")
            elif isinstance(value, str) and (hit := _NO_RESULT_YET.search(value)):
                msg = f"untyped status says {dotted} {hit.group(0)!r} but {seen}"
            if msg:
                out.append(Finding(rule="STALE_STATUS", severity="P2", path=rel,
                                   line=line_of(text, path), field=dotted, message=msg,
                                   resolution=fix))
    return out
