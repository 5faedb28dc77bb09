"""The last lines of ``campaign-bot screen``: what the bundle just written says, judged by
the same code as ``campaign-bot check`` and the bot (:func:`evidence.check.check_campaign`
with the campaign's scope): the ratio of candidate to control (Hodges-Lehmann estimate of
per-session medians), the screening decision and the verdict of the track, with the first
reason.  The runner's own summary lists what happened; this says what it means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def judgement_lines(bundle: Path, campaign_dir: Path, track: str,
                    candidate: str | None) -> list[str]:
    """Three lines for ``candidate`` (None: a control-only screen) on ``track`` of the bundle
    at ``bundle``, judged under ``campaign_dir``'s campaign.toml: ``ratio ...``,
    ``screening decision ...``, ``verdict ...``.  A bundle that cannot be judged gives one
    line saying why (never raises for bad evidence; the bundle is already written)."""
    from evidence.check import check_campaign

    try:
        rep = check_campaign(bundle, campaign_dir=campaign_dir, trusted_keys=None,
                             require_signed=False)
    except (OSError, ValueError) as exc:
        return [f"verdict: not judged ({exc})"]
    name = candidate or None
    v = next((x for x in rep.verdicts if x.track == track and x.candidate == name), None)
    s = next((x for x in rep.screening if x.track == track and x.candidate == name), None)
    out = []
    ratio = v.ratio if v is not None and v.ratio is not None else (s.ratio if s else None)
    if ratio is not None:
        out.append(f"ratio candidate/control: {ratio:.4f} ({(ratio - 1) * 100:+.1f} % latency; "
                   "Hodges-Lehmann estimate of the session medians)")
    else:
        out.append("ratio candidate/control: none (no qualified pair of sessions)")
    out.append(f"screening decision: {s.decision} ({s.reason})" if s is not None else
               "screening decision: none (a control-only screen has no candidate to screen)"
               if name is None else "screening decision: none")
    if v is not None:
        why = _reason(v.reasons[0]) if v.reasons else ""
        more = f" (+{len(v.reasons) - 1} more)" if len(v.reasons) > 1 else ""
        out.append(f"verdict on {track}: {v.verdict}" + (f": {why}{more}" if why else ""))
    else:
        out.append(f"verdict on {track}: none")
    out.append(f"every finding: campaign-bot check {bundle} --campaign {campaign_dir}")
    return out


def _reason(r: Any) -> str:
    """``CODE: text`` of a :class:`evidence.verdicts.Reason`."""
    return f"{r.code}: {r.text}"
