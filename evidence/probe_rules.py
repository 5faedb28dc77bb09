"""The two review rules on operator probes (:mod:`evidence.operator_probe`):
``PROBE_GAIN_AS_MODEL_GAIN`` and ``PROBE_NONEXACT_LOSSLESS`` (:func:`probe_findings`), and
the values prose may quote from a probe (:func:`probe_values`).

Apart from the probe document model so that the model, which a campaign bundle loads, does
not depend on the claims reader, which depends on the verdicts.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence

from evidence.claims import Claim
from evidence.models import Finding, Receipt
from evidence.operator_probe import OperatorProbe

PROBE_FIX = (
    "quote a probe as an operator observation (\"operator observations, not model gains\"); "
    "an end-to-end or model gain comes only from a screen's receipts and verdict"
)
NONEXACT_FIX = (
    "do not offer the candidate as lossless: a lossless candidate must be bit-exact with "
    "finite outputs on every rank; keep it for a lossy track or fix the operator"
)
_CUE = re.compile(r"\b(end[- ]to[- ]end|e2e|model|whole[- ]model|overall|pipeline|request)\b"
                  r"(?:(?!\.\s)[^;\n]){0,40}?\b(gains?|speed[- ]?ups?|latency|"
                  r"improvements?|reductions?|faster|lower)\b", re.I)
_NEG = re.compile(r"\b(not|no|never|without|isn'?t|aren'?t)\b[^.;\n]{0,30}$", re.I)


def probe_values(p: OperatorProbe) -> list[tuple[str, float, str]]:
    """(kind, value, label) that prose may quote from a probe: each rank's and the overall
    median ms per arm, and the candidate's gain in percent and ratio per rank and overall."""
    out: list[tuple[str, float, str]] = []
    per = {arm: p.medians_ms(arm) for arm in ("control", "candidate")}
    for arm, meds in per.items():
        for rank, v in meds.items():
            out.append(("ms", v, f"probe {p.probe_id} rank {rank} {arm} median"))
        out.append(("ms", statistics.median(meds.values()),
                    f"probe {p.probe_id} {arm} median over ranks"))
    pairs = [(r, per["control"][r], per["candidate"][r]) for r in per["control"]]
    pairs.append((-1, statistics.median(per["control"].values()),
                  statistics.median(per["candidate"].values())))
    for rank, c, t in pairs:
        if c <= 0 or t <= 0:
            continue
        where = "over ranks" if rank < 0 else f"rank {rank}"
        out += [("%", (1 - t / c) * 100, f"probe {p.probe_id} {where} gain"),
                ("%", (t / c - 1) * 100, f"probe {p.probe_id} {where} change"),
                ("x", t / c, f"probe {p.probe_id} {where} ratio"),
                ("x", c / t, f"probe {p.probe_id} {where} speed-up")]
    return out


def _matches(kind: str, unit: str, value: float, decimals: int, src: float) -> bool:
    tol = 0.5 * 10 ** (-decimals) + 1e-9 * max(1.0, abs(value))
    if kind == "latency":
        if unit == "ms":
            return abs(src - value) <= tol
        return abs(src / 1000 - value) <= tol
    return abs(src - value) <= tol


def probe_findings(
    probes: Sequence[tuple[OperatorProbe, str, str | None]],
    *,
    lossless_tracks: Iterable[str] = (),
    receipts: Iterable[Receipt] = (),
    claims: Sequence[Claim] = (),
    claims_path: str | None = None,
    claims_text: str = "",
) -> tuple[list[Finding], set[tuple[int, str]]]:
    """The two probe rules.  ``probes``: (probe, bundle path, its text for line numbers);
    ``lossless_tracks``: track ids
    whose quality mode is lossless; ``receipts``: to find a candidate's tracks; ``claims``:
    the claims of ``claims_text`` (the file ``claims_path``), whose untraced numbers are
    matched against the probes' values (``traced_to`` is filled in place).

    Returns (findings, {(line, claim text)} of claims the probes now trace, whose
    UNTRACEABLE_CLAIM or SUMMED_GAINS findings the caller drops).
    """
    from evidence.lines import line_of

    lossless = set(lossless_tracks)
    cand_tracks: dict[str, set[str]] = {}
    for r in receipts:
        if r.arm == "candidate" and r.candidate:
            cand_tracks.setdefault(r.candidate, set()).add(r.track)
    out: list[Finding] = []
    for p, path, text in probes:
        reasons = []
        if p.claims_lossless:
            reasons.append("the probe offers it as lossless")
        if p.track in lossless:
            reasons.append(f"it targets lossless track {p.track}")
        if p.candidate_name:
            on = sorted(cand_tracks.get(p.candidate_name, set()) & lossless)
            if on:
                reasons.append(f"candidate {p.candidate_name} is screened on lossless "
                               f"track(s) {', '.join(on)}")
        bad = p.nonexact_ranks()
        if reasons and bad:
            worst = max((e.max_abs_diff or 0.0 for e in p.exactness), default=0.0)
            fin = [e.rank for e in p.exactness if not e.finite]
            what = f"not bit-exact on rank(s) {', '.join(map(str, bad))} of {p.device_count}"
            if fin:
                what += f" (non-finite on {', '.join(map(str, fin))})"
            out.append(Finding(
                rule="PROBE_NONEXACT_LOSSLESS", severity="P1", path=path,
                line=line_of(text, ("exactness",)) if text else None, field="exactness",
                message=f"probe {p.probe_id}: {p.candidate.operator} is {what}, max abs "
                f"difference {worst:g}, but {'; '.join(reasons)}", resolution=NONEXACT_FIX))
    explained: set[tuple[int, str]] = set()
    if not claims or not probes:
        return out, explained
    values = [v for p, _, _ in probes for v in probe_values(p)]
    lines = claims_text.split("\n")
    flagged: set[int] = set()
    for c in claims:
        if c.traced_to:
            continue
        want = {"latency": "ms", "percent": "%", "ratio": "x"}[c.kind]
        hit = next((label for k, v, label in values
                    if k == want and _matches(c.kind, c.unit, c.value, c.decimals, v)), None)
        if hit is None:
            continue
        c.traced_to = f"{hit} (operator observation)"
        c.summed = False
        c.setting_as_result = None
        explained.add((c.line, c.text.strip()))
        line = lines[c.line - 1] if c.line <= len(lines) else ""
        if c.line in flagged:
            continue
        for m in _CUE.finditer(line):
            if _NEG.search(line[: m.start()]):
                continue
            flagged.add(c.line)
            out.append(Finding(
                rule="PROBE_GAIN_AS_MODEL_GAIN", severity="P1", path=claims_path or "<claims>",
                line=c.line, message=f"{c.text.strip()!r} is {hit}, an operator observation, "
                f"but the line calls it {m.group(0)!r}", resolution=PROBE_FIX))
            break
    return out, explained


