"""Claims in prose (a PR description, a status comment) traced to evidence.

``campaign-bot check --claims FILE`` reads the prose; every latency (``s``, ``ms``),
percentage (``%``) and ratio (``x``, ``×``) it states must be traceable, at the stated
precision, to a receipt or a computed verdict:

- latencies: any request's client wall, server inference or stage seconds, any session
  median (seconds, or milliseconds when stated in ms), and the scope's own durations
  (track durations, protocol timeouts);
- percentages: the scope's target reductions; each verdict's ``(1 - ratio)``, bounds and
  pairwise session changes; and the change between two traced latencies stated on the same
  line (``407.27 -> 108.12 s (73.45 % lower)``);
- ratios: each verdict's ratio, bounds and control spread, pairwise session ratios, the
  futility margin, and the ratio of two traced latencies on the same line; "4x Ascend910B1"
  (the pool's device count before its device model, "NPU", "GPU", "device" or "card") names
  the pool.

"At the stated precision" means ``|true - stated| <= 0.5 * 10**-decimals`` (plus float noise):
``73.45 %`` needs a source in [73.445, 73.455].

A percentage or ratio equal to a scope *setting* (a track's target reduction, the futility
margin) traces to it only when its own stretch of the sentence frames it as a setting: a
framing word ("target", "goal", "at least", ">=", "gate", "threshold", "margin", "futility",
"aim", "required") between the previous number (or the sentence start) and the next one.
Otherwise the prose states a setting as a result ("tp2-sp2 cuts latency by 30%", "a 1.1x
speedup"): a CLAIM_CITES_TARGET_AS_RESULT finding (P1), the claim a reviewer must question
first.  A match in the evidence (a receipt, a verdict) always wins over a setting.  Track
durations and protocol timeouts describe the workload, not a result, and trace as before.

A percentage that traces to nothing but equals the sum (or the compounded product) of two
other percentages of the text, or that follows two other percentages of its line and a
combination word after them ("combined", "together", "total", "stacked", "overall",
"cumulative", "sum"), is a SUMMED_GAINS finding (P0): a combination is judged only by its own direct
A/B.  Anything else untraced is UNTRACEABLE_CLAIM (P1).

Fenced code blocks, inline code and HTML comments are not prose and are skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evidence.models import Finding
from evidence.verdicts import Evidence, TrackVerdict, session_median

Kind = Literal["latency", "percent", "ratio"]

_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
_CLAIM = re.compile(
    rf"(?<![\d.,]){_NUM}(?:\s?(ms|s|secs?|seconds?|%|percent)|(x|×))(?![A-Za-z0-9])"
)
_RANGE = re.compile(
    rf"(?<![\d.,]){_NUM}\s*(?:→|->|–|—|\bto\b)\s*{_NUM}\s?(ms|s|secs?|seconds?|%)(?![A-Za-z0-9])"
)
_COMBINE = re.compile(r"\b(combined|together|total|stacked|overall|cumulative|sum(?:med)?|"
                      r"in combination|adds? up)\b", re.I)
_SKIP = [re.compile(r"```.*?```", re.S), re.compile(r"<!--.*?-->", re.S),
         re.compile(r"`[^`\n]*`"), re.compile(r"https?://\S+")]

UNTRACEABLE_FIX = (
    "cite the receipt or verdict this number comes from at its precision, or remove it; a "
    "number that no receipt or computed verdict shows is not evidence"
)
SETTING_FIX = (
    "quote the measured figure (the verdict's ratio or bounds, or the receipts) for a result; "
    "a number that equals a scope setting is a target, and is written as one (\"the 30 % "
    "target\", \"at least 30 %\")"
)
SUMMED_FIX = (
    "run the combination as its own direct A/B against control and quote that screen's "
    "verdict; gains of separate screens are never added or multiplied"
)


class Claim(BaseModel):
    """One number stated in prose: ``line`` (1-based), ``text`` as written, ``value`` in the
    stated unit, ``decimals`` stated, and the source it traced to (None when untraced)."""

    model_config = ConfigDict(defer_build=True)

    line: int
    col: int = 0
    text: str
    kind: Kind
    unit: str
    value: float
    decimals: int
    traced_to: str | None = None
    summed: bool = False
    setting_as_result: str | None = None
    """The scope setting (label) this number equals, when the prose frames it as a result."""


def _mask(text: str) -> str:
    """Blank out non-prose spans, keeping newlines so line numbers hold."""
    for rx in _SKIP:
        text = rx.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return text


def _num(intpart: str, frac: str | None) -> tuple[float, int]:
    return float(intpart.replace(",", "") + ("." + frac if frac else "")), len(frac or "")


def _kind(unit: str) -> tuple[Kind, str]:
    if unit in ("%", "percent"):
        return "percent", "%"
    if unit in ("x", "×"):
        return "ratio", "x"
    if unit == "ms":
        return "latency", "ms"
    return "latency", "s"


def extract_claims(text: str) -> list[Claim]:
    """Every latency, percentage and ratio stated in ``text``, in order of appearance.

    In ``A -> B s`` or ``A–B s`` the first number takes the unit of the second.
    """
    out: list[Claim] = []
    masked = _mask(text)
    for no, line in enumerate(masked.split("\n"), 1):
        seen: set[int] = set()
        for m in _RANGE.finditer(line):
            kind, unit = _kind(m.group(5))
            val, dec = _num(m.group(1), m.group(2))
            out.append(Claim(line=no, col=m.start(0),
                             text=m.group(0)[: m.end(2) - m.start(0)
                                             if m.group(2) else m.end(1) - m.start(0)],
                             kind=kind, unit=unit, value=val, decimals=dec))
            seen.add(m.start(1))
        for m in _CLAIM.finditer(line):
            if m.start(1) in seen:
                continue
            kind, unit = _kind(m.group(3) or m.group(4))
            val, dec = _num(m.group(1), m.group(2))
            out.append(Claim(line=no, col=m.start(0), text=m.group(0), kind=kind, unit=unit,
                             value=val, decimals=dec))
    out.sort(key=lambda c: (c.line, c.col))
    return out


_FRAMING = re.compile(
    r"(?:\b(?:targets?|targeted|goals?|at\s+least|no\s+less\s+than|gates?|thresholds?|"
    r"margins?|futility|aims?|aiming|required|requires?|objective|criterion|pre-registered)\b"
    r"|>=|≥|⩾)", re.I)
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)")


@dataclass
class Sources:
    """Traceable values: (value, label) by kind.  Latencies in seconds.  ``settings`` holds
    the labels of scope settings that a result must never be traced to (see the module
    docstring)."""

    latency: list[tuple[float, str]] = field(default_factory=list)
    percent: list[tuple[float, str]] = field(default_factory=list)
    ratio: list[tuple[float, str]] = field(default_factory=list)
    settings: set[str] = field(default_factory=set)
    device_count: tuple[int, str, re.Pattern[str]] | None = None
    """``(count, label, device words)``: "4x Ascend910B1" names the pool, not a ratio."""


def sources_from(ev: Evidence, verdicts: Sequence[TrackVerdict]) -> Sources:
    """Everything a claim may trace to, from receipts, verdicts and the scope."""
    s = Sources()
    sc = ev.scope
    for t in sc.tracks:
        s.latency.append((t.duration_s, f"scope track {t.id} duration"))
        label = (f"scope track {t.id} max slowdown" if t.kind == "no-regression"
                 else f"scope track {t.id} target reduction")
        s.percent.append((abs(t.target_reduction) * 100, label))
        s.settings.add(label)
    p = sc.protocol
    for name in ("request_timeout_s", "shutdown_timeout_s", "init_timeout_s", "idle_wait_s"):
        s.latency.append((getattr(p, name), f"scope protocol.{name}"))
    s.ratio.append((p.futility_ratio, "scope protocol.futility_ratio"))
    s.settings.add("scope protocol.futility_ratio")
    words = re.compile(rf"\s*(?:{re.escape(sc.pool.device_model)}|NPUs?|GPUs?|devices?|cards?)"
                       r"(?![A-Za-z])", re.I)
    s.device_count = (sc.pool.device_count, "scope pool.device_count", words)
    for it in ev.receipts:
        r = it.receipt
        where = it.path or r.session_id
        for i, q in enumerate(r.requests):
            for fname in ("client_wall_s", "server_inference_s"):
                v = getattr(q, fname)
                if v is not None and math.isfinite(v):
                    s.latency.append((v, f"{where} requests.{i}.{fname}"))
            for stage, v in q.stage_durations.items():
                s.latency.append((v, f"{where} requests.{i}.stage_durations.{stage}"))
        med = session_median(r)
        if med is not None:
            s.latency.append((med, f"{where} session median"))
    for v in verdicts:
        tag = (f"verdict {v.candidate}@{v.track}" if v.candidate is not None
               else f"track {v.track} controls")
        for name in ("ratio", "lower", "upper"):
            x = getattr(v, name)
            if x is not None:
                s.ratio.append((x, f"{tag} {name}"))
                s.percent.append(((1 - x) * 100, f"{tag} reduction from {name}"))
                s.percent.append(((x - 1) * 100, f"{tag} increase from {name}"))
        if v.control_spread is not None:
            s.ratio.append((v.control_spread, f"{tag} control spread"))
            s.percent.append(((v.control_spread - 1) * 100, f"{tag} control spread"))
        for cm in v.control_medians_s:
            for tm in v.candidate_medians_s:
                s.ratio += [(tm / cm, f"{tag} pair {tm:g}/{cm:g}"),
                            (cm / tm, f"{tag} pair {cm:g}/{tm:g}")]
                s.percent += [((1 - tm / cm) * 100, f"{tag} pair {tm:g} vs {cm:g}"),
                              ((tm / cm - 1) * 100, f"{tag} pair {tm:g} vs {cm:g}")]
    return s


def _tol(c: Claim) -> float:
    return 0.5 * 10 ** (-c.decimals) + 1e-9 * max(1.0, abs(c.value))


def _match(c: Claim, vals: Sequence[tuple[float, str]], scale: float = 1.0,
           settings: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The first label of ``vals`` within the claim's precision, evidence before settings."""
    tol = _tol(c)
    hits = [label for v, label in vals if abs(v * scale - c.value) <= tol]
    return next((h for h in hits if h not in settings), hits[0] if hits else None)


def _framed_as_setting(c: Claim, line: str, neighbours: Sequence[Claim]) -> bool:
    """Whether the stretch of ``line`` around claim ``c`` (from the previous number or the
    sentence start to the next number or the sentence end) holds a framing word."""
    start = max((m.end() for m in _SENTENCE_END.finditer(line, 0, c.col)), default=0)
    end = next((m.start() for m in _SENTENCE_END.finditer(line, c.col + len(c.text))),
               len(line))
    for o in neighbours:
        if o is c:
            continue
        if o.col < c.col:
            start = max(start, o.col + len(o.text))
        elif o.col > c.col:
            end = min(end, o.col)
    stretch = line[start:c.col] + " " + line[c.col + len(c.text):end]
    return _FRAMING.search(stretch) is not None


def trace(claims: list[Claim], src: Sources, text: str = "") -> list[Claim]:
    """Fill ``traced_to`` and ``summed`` of each claim (in place; also returned); ``text`` is
    the prose the claims came from (for combination words)."""
    for c in claims:
        if c.kind == "latency":
            c.traced_to = _match(c, src.latency, 1000.0 if c.unit == "ms" else 1.0)
    by_line: dict[int, list[Claim]] = {}
    for c in claims:
        by_line.setdefault(c.line, []).append(c)
    lines = _mask(text).split("\n")
    for c in claims:
        if c.kind == "latency":
            continue
        pool = src.percent if c.kind == "percent" else src.ratio
        c.traced_to = _match(c, pool, settings=src.settings)
        line = lines[c.line - 1] if c.line <= len(lines) else ""
        if c.kind == "ratio" and src.device_count and c.value == src.device_count[0] \
                and src.device_count[2].match(line, c.col + len(c.text)):
            c.traced_to = src.device_count[1]
            continue
        if c.traced_to in src.settings:
            if not _framed_as_setting(c, line, by_line[c.line]):
                c.setting_as_result, c.traced_to = c.traced_to, None
            continue
        if c.traced_to:
            continue
        lat = [(x.value / (1000.0 if x.unit == "ms" else 1.0), x) for x in by_line[c.line]
               if x.kind == "latency" and x.traced_to]
        derived: list[tuple[float, str]] = []
        for a, ca in lat:
            for b, cb in lat:
                if ca is cb or a <= 0 or b <= 0:
                    continue
                label = f"{ca.text.strip()} and {cb.text.strip()} (line {c.line})"
                if c.kind == "percent":
                    derived.append((abs(a - b) / a * 100, label))
                else:
                    derived.append((a / b, label))
        c.traced_to = _match(c, derived)
    _mark_summed(claims, lines)
    return claims


def _mark_summed(claims: list[Claim], lines: list[str]) -> None:
    pcts = [c for c in claims if c.kind == "percent"]
    for c in pcts:
        if c.traced_to or c.setting_as_result:
            continue
        others = [o for o in pcts if o is not c]
        tol = _tol(c) + 0.01
        for i, a in enumerate(others):
            for b in others[i + 1:]:
                summed = a.value + b.value
                compounded = (1 - (1 - a.value / 100) * (1 - b.value / 100)) * 100
                if abs(summed - c.value) <= tol or abs(compounded - c.value) <= tol:
                    c.summed = True
        before = [o for o in others if o.line == c.line and o.col < c.col]
        if not c.summed and len(before) >= 2:
            # "A x% and B y%, together z%": the percentage after the combination word
            line = lines[c.line - 1] if c.line <= len(lines) else ""
            cue = _COMBINE.search(line, before[-1].col)
            c.summed = cue is not None and cue.start() < c.col



def check_claims(path: str, text: str, ev: Evidence,
                 verdicts: Sequence[TrackVerdict]) -> tuple[list[Claim], list[Finding]]:
    """Trace every claim of ``text`` (the file ``path``) and return the claims and the
    SUMMED_GAINS / CLAIM_CITES_TARGET_AS_RESULT / UNTRACEABLE_CLAIM findings, each at its
    line."""
    claims = trace(extract_claims(text), sources_from(ev, verdicts), text)
    out: list[Finding] = []
    for c in claims:
        if c.traced_to:
            continue
        if c.setting_as_result:
            out.append(Finding(
                rule="CLAIM_CITES_TARGET_AS_RESULT", severity="P1", path=path, line=c.line,
                message=f"{c.text.strip()!r} is stated as a result but equals "
                f"{c.setting_as_result.removeprefix('scope ')}, a setting of the scope, "
                "and no receipt or verdict shows it",
                resolution=SETTING_FIX))
        elif c.summed:
            out.append(Finding(
                rule="SUMMED_GAINS", severity="P0", path=path, line=c.line,
                message=f"{c.text.strip()!r} is a combined gain that no direct screen measured "
                "(it equals or is stated as the combination of separate gains)",
                resolution=SUMMED_FIX))
        else:
            out.append(Finding(
                rule="UNTRACEABLE_CLAIM", severity="P1", path=path, line=c.line,
                message=f"{c.kind} {c.text.strip()!r} traces to no receipt or computed "
                f"verdict at the stated precision (±{_tol(c):.{max(c.decimals, 1) + 1}f})",
                resolution=UNTRACEABLE_FIX))
    return claims, out
