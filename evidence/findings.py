"""Review findings: the consistency rules that catch stale, failed or untraceable evidence.
Each finding has a rule id, a severity (P0 blocks, P1 wrong evidence, P2 ambiguous evidence,
P3 note), the file and exact line, what is wrong and what resolves it.

Rules (severity):

- ``STALE_STATUS`` (P2): a status snapshot not marked frozen says less than the receipts show
  (execution ``planned``/``queued`` beside a completed measured request, or fewer samples
  for a track than completed measured sessions).  Points at the line of the contradicted
  field.  A manifest that still hashes the old status is consistent: not a manifest error.
- ``FROZEN_RECEIPT_CHANGED`` (P1): with ``--base REF``, a receipt that existed at REF was
  edited or deleted (corrections come as new versioned files).  Read-only git subprocesses.
- ``LIFECYCLE_FAILED`` (P1; P2 when the only problem is a device idle check that was never
  recorded): a session's lifecycle is unclean; it does not qualify.
- ``REQUEST_FAILED`` (P1): a request without HTTP 200, or a measured request without a finite
  client wall time; the session does not qualify.
- ``PROTOCOL_SHORTFALL`` (P2; P3 when a screening decision rejected the screen early on
  purpose): fewer sessions than the scope asks, an unbalanced order, a missing warmup, or
  fewer measured requests than the protocol.
- ``INPUTS_DIFFER`` (P1 when a receipt's input differs from the scope or from the other arm
  of its screen; P2 when tracks differ from each other: no duration-scaling claim).
- ``LOSSLESS_UNPROVEN`` (P2): a lossless track whose bit-exactness or control repeatability
  is not established.
- ``SUMMED_GAINS`` (P0), ``CLAIM_CITES_TARGET_AS_RESULT`` and ``UNTRACEABLE_CLAIM`` (P1):
  see :mod:`evidence.claims`.
- ``PROBE_GAIN_AS_MODEL_GAIN`` and ``PROBE_NONEXACT_LOSSLESS`` (P1): see
  :mod:`evidence.operator_probe`; STALE_STATUS on untyped status files:
  :mod:`evidence.untyped_status`.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from evidence import safejson
from evidence.lines import line_of
from evidence.models import Finding, Receipt
from evidence.screening import ScreeningDecision
from evidence.verdicts import (
    Evidence,
    ReceiptIn,
    TrackVerdict,
    control_repeatability,
    hard_lifecycle_issues,
    lifecycle_issues,
    mean_slot_gap,
    request_issues,
    scope_input_digests,
    warmup_issue,
)

SEVERITY_ORDER = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
REVIEW_RULES = frozenset({
    "STALE_STATUS", "FROZEN_RECEIPT_CHANGED", "LIFECYCLE_FAILED", "REQUEST_FAILED",
    "PROTOCOL_SHORTFALL", "INPUTS_DIFFER", "LOSSLESS_UNPROVEN", "SUMMED_GAINS",
    "UNTRACEABLE_CLAIM", "CLAIM_CITES_TARGET_AS_RESULT", "PROBE_GAIN_AS_MODEL_GAIN",
    "PROBE_NONEXACT_LOSSLESS",
})
"""The rule ids of the review findings (the loader's and the manifests' rules are in
:mod:`evidence.bundle` and :mod:`evidence.manifest`)."""

STALE_FIX = (
    'either mark this snapshot historical ("frozen": true, "superseded_by": "{receipt}") or '
    "refresh it (execution, samples) together with its hash in the manifest; a manifest that "
    "still hashes this older status is consistent and is not a manifest error"
)
FROZEN_FIX = (
    "restore the receipt as it was at {ref}; corrections come as a new, versioned receipt or "
    "validator beside the frozen one"
)
LIFECYCLE_FIX = (
    "the session does not qualify: rerun it; a session qualifies only when every worker exits "
    "0 with no signal, no terminate or kill action is needed, the server and container exit "
    "0 and the devices are idle before and after"
)
REQUEST_FIX = (
    "the session does not qualify: rerun it (a failed request is kept in the receipt, never "
    "dropped)"
)
SHORTFALL_FIX = (
    "run the missing sessions under the scope's frozen protocol (order {order}, "
    "{warmups} warmup(s) and {measured} measured request(s) per session, at least {minimum} "
    "sessions per arm)"
)
INPUTS_FIX = (
    "rerun with the scope's pinned inputs; results on different inputs are not comparable "
    "(no A/B and no duration-scaling claim)"
)
LOSSLESS_FIX = (
    "establish control repeatability (two control sessions with equal decoded output) and a "
    "bit-exact candidate-vs-control media report; perceptual gates passing does not make a "
    "track lossless"
)


class BaseRefError(ValueError):
    """``--base REF`` cannot be read (not a git repository, unknown revision)."""


def _line(text: str | None, field: str | None, fmt: str = "json") -> int | None:
    if text is None or not field:
        return None
    loc = tuple(int(p) if p.isdigit() else p for p in field.split("."))
    return line_of(text, loc, fmt=fmt)  # type: ignore[arg-type]


def _f(rule: str, sev: str, path: str | None, text: str | None, field: str | None,
       message: str, resolution: str, fmt: str = "json") -> Finding:
    return Finding(rule=rule, severity=sev, path=path or "<receipt>",  # type: ignore[arg-type]
                   line=_line(text, field, fmt), field=field, message=message,
                   resolution=resolution)


def _completed(r: Receipt) -> bool:
    return any(q.kind == "measured" and q.http_status == 200 for q in r.measured)


# ----------------------------------------------------------------------------- rules


def stale_status(ev: Evidence) -> list[Finding]:
    """STALE_STATUS: a non-frozen status snapshot that says less than the receipts show."""
    out: list[Finding] = []
    done = [it for it in ev.receipts if _completed(it.receipt)]
    if not done:
        return out
    latest = max(done, key=lambda it: it.receipt.started_at)
    per_track: dict[str, set[str]] = defaultdict(set)
    for it in done:
        per_track[it.receipt.track].add(it.receipt.session_id)
    first = next(q for q in latest.receipt.measured if q.http_status == 200)
    took = ("HTTP 200, no client wall time recorded" if first.client_wall_s is None
            else f"{first.client_wall_s} s, HTTP 200")
    seen = (f"{latest.path or latest.receipt.session_id} holds a completed measured request "
            f"({took})")
    fix = STALE_FIX.format(receipt=latest.path or latest.receipt.session_id)
    for st in ev.statuses:
        s = st.status
        if s.frozen or s.campaign != ev.scope.id:
            continue
        if s.execution in ("planned", "queued"):
            out.append(_f("STALE_STATUS", "P2", st.path, st.text, "execution",
                          f'status says execution "{s.execution}" but {seen}', fix))
        for track, sessions in sorted(per_track.items()):
            said = s.samples.get(track)
            if said is None and s.samples:
                field = "samples"
            elif said is None:
                field = "execution"
            else:
                field = f"samples.{track}"
            if (said or 0) < len(sessions):
                out.append(_f("STALE_STATUS", "P2", st.path, st.text, field,
                              f"status says {said or 0} sample(s) for track {track} but the "
                              f"receipts show {len(sessions)} session(s) with a completed "
                              f"measured request", fix))
    return out


def lifecycle_failed(ev: Evidence) -> list[Finding]:
    """LIFECYCLE_FAILED: one finding per session with an unclean lifecycle, at the first
    offending field."""
    return lifecycle_findings(ev.receipts)


def lifecycle_findings(receipts: Iterable[ReceiptIn]) -> list[Finding]:
    """LIFECYCLE_FAILED over receipts alone (needs no scope: also used for a bare runner
    bundle checked without its campaign.toml)."""
    out = []
    for it in receipts:
        issues = lifecycle_issues(it.receipt.lifecycle)
        hard = hard_lifecycle_issues(it.receipt.lifecycle)
        if issues:
            sev = "P1" if hard else "P2"
            out.append(_f("LIFECYCLE_FAILED", sev, it.path, it.text, (hard or issues)[0][0],
                          f"session {it.receipt.session_id} ({it.receipt.arm}) does not "
                          f"qualify: {'; '.join(t for _, t in issues)}", LIFECYCLE_FIX))
    return out


def request_failed(ev: Evidence) -> list[Finding]:
    """REQUEST_FAILED: one finding per failed request or measured request without timing."""
    return request_findings(ev.receipts)


def request_findings(receipts: Iterable[ReceiptIn]) -> list[Finding]:
    """REQUEST_FAILED over receipts alone (needs no scope)."""
    return [_f("REQUEST_FAILED", "P1", it.path, it.text, fld,
               f"session {it.receipt.session_id} ({it.receipt.arm}): {text}", REQUEST_FIX)
            for it in receipts for fld, text in request_issues(it.receipt)]


def protocol_shortfall(ev: Evidence, verdicts: Sequence[TrackVerdict],
                       screenings: Sequence[ScreeningDecision] = ()) -> list[Finding]:
    """PROTOCOL_SHORTFALL: too few sessions per arm, unbalanced order, missing warmup, too
    few measured requests.  P3 instead of P2 for screens a screening decision rejected."""
    p = ev.scope.protocol
    fix = SHORTFALL_FIX.format(order=p.order, warmups=max(1, p.warmups_per_session),
                               measured=p.measured_requests_per_session,
                               minimum=p.min_measured_sessions_per_arm)
    rejected = {(d.screen_id, d.track) for d in screenings if d.decision == "REJECT"}
    out: list[Finding] = []
    for v in verdicts:
        if v.candidate is None:
            continue
        early = all((s, v.track) in rejected for s in v.screens)
        sev = "P3" if early else "P2"
        note = " (the screen was rejected early by screening; no verdict is claimed)" \
            if early else ""
        for arm in ("control", "candidate"):
            k = len({s.session_id for s in v.sessions if s.arm == arm})
            if k < p.min_measured_sessions_per_arm:
                out.append(_f("PROTOCOL_SHORTFALL", sev, ev.scope_path, ev.scope_text,
                              "protocol.min_measured_sessions_per_arm",
                              f"{v.candidate}@{v.track}: {k} {arm} session(s), the scope asks "
                              f"for {p.min_measured_sessions_per_arm}{note}", fix, "toml"))
    by_screen: dict[str, list[ReceiptIn]] = defaultdict(list)
    for it in ev.receipts:
        by_screen[it.receipt.screen_id].append(it)
    for sid, items in sorted(by_screen.items()):
        keys = {(sid, it.receipt.track) for it in items}
        sev = "P3" if keys and keys <= rejected else "P2"
        gap = mean_slot_gap([it.receipt for it in items])
        if gap is not None and gap > 1 + 1e-9:
            first = min(items, key=lambda it: it.receipt.slot)
            out.append(_f("PROTOCOL_SHORTFALL", sev, first.path, first.text, "slot",
                          f"screen {sid}: the arms' mean slots differ by {gap:.2f} (more than "
                          "one slot): unbalanced order", fix))
        for it in items:
            w = warmup_issue(it.receipt, p.warmups_per_session)
            if w:
                out.append(_f("PROTOCOL_SHORTFALL", sev, it.path, it.text, "requests", w, fix))
            k = len(it.receipt.measured)
            if 0 < k < p.measured_requests_per_session:
                out.append(_f("PROTOCOL_SHORTFALL", sev, it.path, it.text, "requests",
                              f"session {it.receipt.session_id} has {k} measured request(s); "
                              f"the protocol asks for {p.measured_requests_per_session}", fix))
    return out


def inputs_differ(ev: Evidence) -> list[Finding]:
    """INPUTS_DIFFER: receipts whose input digests differ from the scope's, from the other
    arm of their screen (P1), or between tracks (P2)."""
    pinned = scope_input_digests(ev.scope)
    out: list[Finding] = []
    by_screen: dict[str, list[ReceiptIn]] = defaultdict(list)
    for it in ev.receipts:
        by_screen[it.receipt.screen_id].append(it)
        for name, sha in sorted(it.receipt.input_digests.items()):
            if name in pinned and pinned[name] != sha:
                out.append(_f("INPUTS_DIFFER", "P1", it.path, it.text, f"input_digests.{name}",
                              f"session {it.receipt.session_id} used {name} {sha[:12]}, the "
                              f"scope pins {pinned[name][:12]}", INPUTS_FIX))
    for sid, items in sorted(by_screen.items()):
        for name in sorted({n for it in items for n in it.receipt.input_digests} - set(pinned)):
            ctrl = {it.receipt.input_digests.get(name) for it in items
                    if it.receipt.arm == "control"}
            for it in items:
                got = it.receipt.input_digests.get(name)
                if it.receipt.arm == "candidate" and ctrl and got not in ctrl:
                    said = (f"candidate {name} {got[:12]} differs from control's" if got
                            else f"candidate records no {name} digest, control does")
                    out.append(_f("INPUTS_DIFFER", "P1", it.path, it.text,
                                  f"input_digests.{name}", f"screen {sid}: {said}",
                                  INPUTS_FIX))
    per_track: dict[str, dict[str, ReceiptIn]] = defaultdict(dict)
    for it in ev.receipts:
        for name in it.receipt.input_digests:
            per_track[name].setdefault(it.receipt.track, it)
    for name, tracks in sorted(per_track.items()):
        digests = {t: it.receipt.input_digests[name] for t, it in tracks.items()}
        if len(set(digests.values())) > 1 and name not in pinned:
            order = {t.id: i for i, t in enumerate(ev.scope.tracks)}
            first, *rest = sorted(tracks, key=lambda t: (order.get(t, len(order)), t))
            for t in rest:
                if digests[t] != digests[first]:
                    it = tracks[t]
                    out.append(_f("INPUTS_DIFFER", "P2", it.path, it.text,
                                  f"input_digests.{name}",
                                  f"tracks {first} and {t} used different {name} inputs: their "
                                  "latencies support no duration-scaling claim", INPUTS_FIX))
    return out


def lossless_unproven(ev: Evidence, verdicts: Sequence[TrackVerdict]) -> list[Finding]:
    """LOSSLESS_UNPROVEN: lossless tracks with unequal or unproven control repeatability, or
    candidates without bit-exact evidence."""
    out: list[Finding] = []
    reports = [r.report for r in ev.reports]
    for t in ev.scope.tracks:
        if t.quality_mode != "lossless":
            continue
        ctrl = [it.receipt for it in ev.receipts
                if it.receipt.track == t.id and it.receipt.arm == "control"]
        state, text = control_repeatability(ctrl, reports)
        if state == "differs":
            ctrl_sha = {q.output_sha256 for r in ctrl for q in r.measured}
            rep = next((r for r in ev.reports if r.report.bit_exact is not None
                        and r.report.control.sha256 in ctrl_sha
                        and r.report.candidate.sha256 in ctrl_sha
                        and r.report.control.sha256 != r.report.candidate.sha256), None)
            msg = (f"track {t.id}: {text}; lossless stays INCONCLUSIVE even when perceptual "
                   "gates pass")
            if rep is not None and rep.path:
                out.append(_f("LOSSLESS_UNPROVEN", "P2", rep.path, rep.text,
                              "bit_exact.frames_equal", msg, LOSSLESS_FIX))
            else:
                out.append(_f("LOSSLESS_UNPROVEN", "P2", ev.scope_path, ev.scope_text,
                              f"tracks.{ev.scope.tracks.index(t)}.quality_mode", msg,
                              LOSSLESS_FIX, "toml"))
    for v in verdicts:
        codes = [r for r in v.reasons if r.code == "LOSSLESS_UNPROVEN"]
        if not codes or v.candidate is None:
            continue
        it = next((it for it in ev.receipts if it.receipt.track == v.track
                   and it.receipt.candidate == v.candidate), None)
        if it is None:
            continue
        idx = next((i for i, q in enumerate(it.receipt.requests) if q.kind == "measured"), 0)
        fld = "media_reports" if it.receipt.media_reports else f"requests.{idx}.output_sha256"
        out.append(_f("LOSSLESS_UNPROVEN", "P2", it.path, it.text, fld,
                      f"{v.candidate}@{v.track}: " + "; ".join(r.text for r in codes),
                      LOSSLESS_FIX))
    return out


# ------------------------------------------------------------------------ frozen receipts


def _git(top: Path, *args: str, stdin: bytes | None = None) -> bytes:
    try:
        res = subprocess.run(["git", "-C", str(top), *args], input=stdin,
                             capture_output=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BaseRefError(f"cannot run git: {e}") from e
    if res.returncode != 0:
        raise BaseRefError(res.stderr.decode(errors="replace").strip() or f"git {args[0]} failed")
    return res.stdout


def _is_receipt(blob: bytes) -> bool:
    try:
        obj = safejson.loads(blob)
    except ValueError:  # not JSON, not UTF-8, nested too deeply
        return False
    return isinstance(obj, dict) and str(obj.get("schema", "")).startswith(
        "campaign-bot/receipt@")


def frozen_receipt_changed(root: Path, base_ref: str) -> list[Finding]:
    """FROZEN_RECEIPT_CHANGED: receipts under ``root`` at git revision ``base_ref`` that are
    now edited or deleted.  Reads only (``git rev-parse``, ``ls-tree``, ``cat-file``).

    Raises :class:`BaseRefError` when ``root`` is not in a git work tree or the revision is
    unknown.
    """
    root = root.resolve()
    top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    try:
        commit = _git(top, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}"
                      ).decode().strip()
    except BaseRefError:
        raise BaseRefError(f"unknown git revision {base_ref!r} in {top}") from None
    prefix = root.relative_to(top).as_posix()
    listing = _git(top, "ls-tree", "-r", "-z", commit, "--", "." if prefix == "." else prefix)
    entries = []
    for rec in listing.split(b"\0"):
        if not rec:
            continue
        meta, _, raw = rec.partition(b"\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == b"blob" and raw.endswith(b".json"):
            entries.append((parts[2].decode(), raw.decode()))
    if not entries:
        return []
    blobs = _cat_batch(top, [oid for oid, _ in entries])
    out: list[Finding] = []
    for (_oid, name), blob in zip(entries, blobs, strict=True):
        if not _is_receipt(blob):
            continue
        rel = PurePosixPath(name).relative_to(prefix).as_posix() if prefix != "." else name
        cur = top / name
        fix = FROZEN_FIX.format(ref=base_ref)
        if not cur.is_file():
            out.append(Finding(rule="FROZEN_RECEIPT_CHANGED", severity="P1", path=rel,
                               message=f"receipt {rel} existed at {base_ref} "
                               f"({commit[:10]}) and is now deleted", resolution=fix))
            continue
        now = cur.read_bytes()
        if now != blob:
            old_lines = blob.decode(errors="replace").split("\n")
            new_lines = now.decode(errors="replace").split("\n")
            line = next((i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines,
                                                               strict=False)) if a != b),
                        min(len(old_lines), len(new_lines)) + 1)
            out.append(Finding(rule="FROZEN_RECEIPT_CHANGED", severity="P1", path=rel,
                               line=max(1, min(line, len(new_lines))),
                               message=f"frozen receipt {rel} differs from {base_ref} "
                               f"({commit[:10]}) from line {line} on", resolution=fix))
    return out


def _cat_batch(top: Path, oids: Iterable[str]) -> list[bytes]:
    data = _git(top, "cat-file", "--batch", stdin=("\n".join(oids) + "\n").encode())
    out: list[bytes] = []
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        header = data[i:nl].split()
        size = int(header[2])
        out.append(data[nl + 1: nl + 1 + size])
        i = nl + 1 + size + 1
    return out


# ---------------------------------------------------------------------------- all rules


def review_findings(ev: Evidence, verdicts: Sequence[TrackVerdict],
                    screenings: Sequence[ScreeningDecision] = ()) -> list[Finding]:
    """All evidence rules except the git and prose ones, deduplicated and sorted by severity,
    path and line."""
    out = (stale_status(ev) + lifecycle_failed(ev) + request_failed(ev)
           + protocol_shortfall(ev, verdicts, screenings) + inputs_differ(ev)
           + lossless_unproven(ev, verdicts))
    return sort_findings(out)


def sort_findings(fs: Iterable[Finding]) -> list[Finding]:
    """Deduplicate and sort by severity, path, line, rule."""
    seen = set()
    out = []
    for f in fs:
        key = (f.rule, f.path, f.line, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return sorted(out, key=lambda f: (SEVERITY_ORDER[f.severity], f.path, f.line or 0, f.rule))
