"""Server-side SVG charts for the dashboard, drawn by pygal.

Why pygal: it is a small, pure-Python SVG charting library (no browser engine, no native
code, one dependency), so the report renders offline in CI and on a laptop alike; its SVG is
plain elements (one ``<circle>`` per data point) that we can label for screen readers and
count in tests; and a chart takes milliseconds, which keeps a 200-screen site within seconds.
Matplotlib's SVG backend would be heavier and draw each point as an anonymous path;
Vega-Lite through vl-convert ships a JavaScript engine in a 50 MB wheel.

Every chart here:

- is an inline ``<svg role="img">`` with a ``<title>`` (and ``aria-labelledby`` pointing at
  it) and a ``<desc>`` saying what the points are;
- draws each data point as one element with class ``mark`` and ``data-series`` naming its
  series (plus ``data-session``/``data-screen`` where there is one), with a ``<title>``
  tooltip that shows without JavaScript;
- loads nothing: no script (pygal's tooltip script is turned off), no web font, no remote
  stylesheet; and has a deterministic id, so the same evidence renders the same bytes.

The numbers behind every chart are also in a table on the same page (readable without the
chart and with JavaScript off).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

import pygal
from markupsafe import escape
from pygal.style import Style

from bot.features.dashboard.views import BudgetPoint, PoolView, ScreenView, TrackRow
from evidence.verdicts import TrackVerdict

ARM_COLORS = ("#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#a16207", "#0e7490")
"""Series colours (control first): distinct hues, each with at least 4.5:1 contrast on white."""
STYLE: Mapping[str, Any] = MappingProxyType(dict(
    background="#ffffff",
    plot_background="#ffffff",
    foreground="#1f2328",
    foreground_strong="#1f2328",
    foreground_subtle="#57606a",
    font_family="system-ui, -apple-system, 'Segoe UI', sans-serif",
    label_font_size=17,
    major_label_font_size=17,
    legend_font_size=18,
    title_font_size=19,
    tooltip_font_size=16,
    colors=ARM_COLORS,
))
"""The charts' pygal style (each chart gets its own ``Style``: pygal objects are mutable).
Text sizes are in units of the 760-wide drawing: the page never shows a chart narrower than
560 px (a narrower screen scrolls the chart's box instead), so 17 is at least 12.5 px on
screen."""


def css_id(chart_id: str) -> str:
    """A chart's element id: ``c`` and 16 hex digits of the SHA-256 of ``chart_id``.

    pygal scopes every style rule of a chart with ``#chart-ID``; an id taken from user data
    (a screen id such as ``resident-layers.v2``) put a ``.`` into those CSS selectors, which
    then matched nothing and the chart rendered black.  A hex id is a valid CSS identifier
    for any input and stays deterministic."""
    return "c" + hashlib.sha256(chart_id.encode("utf-8")).hexdigest()[:16]


def _when(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M")


def _chart(kind: type, chart_id: str, title: str, desc: str, **kw: Any) -> Any:
    c = kind(
        js=[], disable_xml_declaration=True, style=Style(**STYLE), width=760, height=340,
        explicit_size=False, legend_at_bottom=True, truncate_legend=-1,
        truncate_label=-1, dots_size=4, print_values=False, **kw)
    chart_id = css_id(chart_id)
    c.uuid = chart_id

    def accessible(svg: Any) -> Any:
        svg.attrib["role"] = "img"
        svg.attrib["aria-labelledby"] = f"{chart_id}-title {chart_id}-desc"
        svg.attrib["class"] = "pygal-chart chart"
        for node in list(svg):
            if not isinstance(node.tag, str):  # pygal's comments (one carries today's date)
                svg.remove(node)
        for parent in list(svg.iter()):
            for node in list(parent):  # pygal's config script: no script in a static page
                if isinstance(node.tag, str) and node.tag.endswith("script"):
                    parent.remove(node)
        title_node = next((n for n in svg if n.tag.endswith("title")), None)
        if title_node is None:  # pygal always writes one; be safe if a release does not
            title_node = svg.makeelement("title", {})
        else:
            svg.remove(title_node)
        title_node.text = title
        title_node.attrib["id"] = f"{chart_id}-title"
        svg.insert(0, title_node)
        d = svg.makeelement("desc", {"id": f"{chart_id}-desc"})
        d.text = desc
        svg.insert(1, d)
        return svg

    c.add_xml_filter(accessible)
    return c


def _point(x: Any, y: float, series: str, tooltip: str, **data: str) -> dict[str, Any]:
    node = {"class": "dot mark", "data-series": series}
    node.update({f"data-{k}": v for k, v in data.items()})
    return {"value": (x, y), "node": node, "tooltip": tooltip}


def _render(c: Any) -> str:
    out: str = c.render(is_unicode=True)
    return out


def screen_chart(screen: ScreenView, chart_id: str) -> str:
    """Client wall seconds of every timed measured request of ``screen``, by session in run
    order (x: slot), one series per arm.  Warmups are not drawn (they are never counted;
    the table beside the chart lists them apart).  One mark per timed measured request."""
    series: dict[str, list[dict[str, Any]]] = {}
    for s in screen.sessions:
        series.setdefault(s.arm_label, [])
    for s in screen.sessions:
        for q in s.measured:
            if q.client_wall_s is None or not q.ok:
                continue
            series[s.arm_label].append(_point(
                s.slot, q.client_wall_s, s.arm_label,
                f"{s.session_id} (slot {s.slot}, {s.arm_label}), measured request "
                f"{q.index}: {q.client_wall_s:.3f} s", session=s.session_id))
    labels = sorted(series, key=lambda a: (a != "control", a))
    c = _chart(
        pygal.XY, chart_id,
        f"Screen {screen.screen_id}: measured client wall seconds by session, in run order",
        "Each point is one measured request (warmups excluded) of the session in that slot; "
        "x is the slot in the screen's order, y the client wall time in seconds.",
        stroke=False, x_title="slot (run order)", y_title="client wall s",
        x_labels=[s.slot for s in screen.sessions], xrange=(
            min((s.slot for s in screen.sessions), default=0) - 0.5,
            max((s.slot for s in screen.sessions), default=0) + 0.5),
        include_x_axis=True, x_value_formatter=lambda x: f"slot {x:g}",
        value_formatter=lambda y: f"{y:g}")
    for a in labels:
        c.add(a, series[a])
    return _render(c)


def drift_chart(pool: PoolView, track: str, chart_id: str,
                changes: Sequence[int] = ()) -> str:
    """Control session medians of ``track`` on ``pool`` over time (drift): one mark per
    qualifying control session (clean lifecycle, every request timed), on an axis of its
    own (a 15 s track's 2,400 s and a 5 s track's 170 s never share one).  ``changes``:
    indices into the track's points (time order) where a new level starts (see
    :func:`bot.features.dashboard.drift.change_points`); each is drawn as a vertical line
    of class ``change``."""
    pts = [p for p in pool.points if p.track == track]
    c = _chart(
        pygal.DateTimeLine, chart_id,
        f"Pool {pool.name}, track {track}: control session medians over time",
        "Each point is one control session's median measured client wall time in seconds, "
        "at the session's start" + (f"; {len(changes)} change point(s) in the level, drawn "
                                    "as vertical lines." if changes else
                                    "; no change point in the level."),
        x_title="session start (UTC)", y_title="control median s",
        x_value_formatter=_when, value_formatter=lambda y: f"{y:g}",
        x_label_rotation=20, show_legend=bool(changes))
    c.add(track, [_point(p.at, p.median_s, track,
                         f"{p.session_id} ({p.screen_id}) at {_when(p.at)}: "
                         f"{p.median_s:.3f} s", session=p.session_id, screen=p.screen_id)
                  for p in pts])
    if changes and pts:
        lo = min(p.median_s for p in pts)
        hi = max(p.median_s for p in pts)
        for k in changes:
            at = pts[k].at
            c.add(f"change point {_when(at)}", [
                {"value": (at, lo), "node": {"class": "change", "data-at": at.isoformat()}},
                {"value": (at, hi), "node": {"class": "change", "data-at": at.isoformat()}}],
                  stroke=True, show_dots=False, stroke_style={"dasharray": "6, 4"})
    return _render(c)


def strip_chart(screens: Sequence[ScreenView], track: str, chart_id: str) -> str:
    """The distribution of session medians per arm per screen on ``track``: x is the
    screen's number (1 = oldest; screen ids are long and in the table), control left of it,
    candidates a little right; one mark per session with a median (failed requests give
    none); sessions that do not qualify (:mod:`evidence.sessions`) are drawn too, as the
    screen page lists them, with ``data-qualifies="false"``."""
    shown = [s for s in screens if track in s.tracks]
    series: dict[str, list[dict[str, Any]]] = {"control": []}
    for i, sc in enumerate(shown):
        for s in sc.sessions:
            if s.track != track or s.median_s is None:
                continue
            x = i + 1 + (-0.15 if s.arm == "control" else 0.15)
            pt = _point(x, s.median_s, s.arm_label,
                        f"{sc.screen_id}: {s.session_id} ({s.arm_label}), median "
                        f"{s.median_s:.3f} s" + ("" if s.qualifies else " (does not qualify)"),
                        session=s.session_id, screen=sc.screen_id)
            if not s.qualifies:
                pt["node"]["data-qualifies"] = "false"
            series.setdefault(s.arm_label, []).append(pt)
    step = max(1, math.ceil(len(shown) / 12))  # at most about 12 numbered ticks
    c = _chart(
        pygal.XY, chart_id,
        f"Track {track}: session medians per arm, per screen",
        "Each point is one session's median measured client wall time in seconds; x is the "
        "screen's number (1 = oldest, as in the table beside), control sessions left of it, "
        "candidate sessions right.",
        stroke=False, x_title="screen number (oldest first)", y_title="session median s",
        xrange=(0.5, max(len(shown), 1) + 0.5),
        x_labels=list(range(1, len(shown) + 1, step)),
        x_value_formatter=lambda x: f"screen {x:g}",
        value_formatter=lambda y: f"{y:g}")
    for a in sorted(series, key=lambda a: (a != "control", a)):
        c.add(a, series[a])
    return _render(c)


FOREST_ROW_PX = 34
FOREST_WIDTH = 760


SETTLED = frozenset({"FAILED", "EQUIVALENT"})
"""Verdicts that more sessions of the same screens do not reopen."""


def verdict_status(v: Any) -> str:
    """How settled a verdict is: for SUPPORTED the engine's own confirmation state
    (``provisional`` until its confirmation screen says SUPPORTED, then ``confirmed``, or
    ``not confirmed``: :func:`evidence.verdicts.confirmation_state`); ``confirmed`` for
    FAILED and EQUIVALENT; ``provisional`` for INCONCLUSIVE and NOT SHOWN (more sessions
    may decide them)."""
    if v.verdict == "SUPPORTED":
        return getattr(v, "confirmation", None) or "provisional"
    return "confirmed" if v.verdict in SETTLED else "provisional"


def forest_plot(row: TrackRow, chart_id: str) -> str:
    """Every candidate's ratio (candidate / control latency) on track ``row`` with its exact
    lower and upper bounds, against the target line (``1 - target_reduction``) and the
    no-change line (1).  One ``<g class="mark">`` per candidate verdict with ``data-candidate``,
    ``data-ratio``, ``data-lower``, ``data-upper``, ``data-verdict`` and ``data-status``
    (:func:`verdict_status`): filled when ``confirmed``, open markers and a dashed interval
    otherwise.

    Drawn here rather than by pygal: pygal has no interval (forest) chart.  The SVG follows
    the same rules as the other charts (role ``img``, title and description, no script,
    deterministic ids); every string is escaped."""
    cid = css_id(chart_id)
    vs = [v for v in row.verdicts if v.ratio is not None]
    theta0 = row.theta0
    lo, hi = _forest_range(theta0, vs)
    left, right = 230, FOREST_WIDTH - 20
    top = 30
    height = top + FOREST_ROW_PX * max(len(vs), 1) + 48

    def x(v: float) -> float:
        return round(left + (v - lo) / (hi - lo) * (right - left), 1)

    title = (f"Track {row.track.id}: every candidate's ratio with exact bounds against the "
             f"target ratio {theta0:.2f}")
    desc = ("Ratio of candidate to control latency (below 1 is faster), one row per "
            "candidate; the line spans the exact distribution-free bounds; the dashed "
            "vertical line is the target, the grey one no change (1). Filled: settled "
            "verdict; open: provisional (not yet confirmed, or undecided).")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="chart-{cid}" class="chart forest" '
           f'role="img" viewBox="0 0 {FOREST_WIDTH} {height}" '
           f'aria-labelledby="{cid}-title {cid}-desc">',
           f'<title id="{cid}-title">{escape(title)}</title>',
           f'<desc id="{cid}-desc">{escape(desc)}</desc>',
           f'<rect width="{FOREST_WIDTH}" height="{height}" fill="#ffffff"/>']
    axis_y = top + FOREST_ROW_PX * max(len(vs), 1)
    out += [_forest_line(x, val, cls, label, top, axis_y, theta0)
            for val, cls, label in ((theta0, "target", f"target {theta0:.2f}"),
                                    (1.0, "no-change", "no change (1)"))]
    for tick in _ticks(lo, hi):
        out.append(f'<text x="{x(tick)}" y="{axis_y + 20}" font-size="15" '
                   f'text-anchor="middle" fill="#57606a">{tick:g}</text>')
    out.append(f'<line x1="{left}" y1="{axis_y}" x2="{right}" y2="{axis_y}" '
               'stroke="#57606a"/>')
    out.append(f'<text x="{(left + right) / 2}" y="{axis_y + 42}" font-size="15" '
               'text-anchor="middle" fill="#57606a">ratio candidate / control</text>')
    if not vs:
        out.append(f'<text x="{left}" y="{top + 20}" font-size="16" fill="#1f2328">'
                   'no candidate ratio yet</text>')
    out += [_forest_mark(x, v, top + FOREST_ROW_PX * i + FOREST_ROW_PX / 2, left)
            for i, v in enumerate(vs)]
    out.append("</svg>")
    return "".join(out)


_VERDICT_COLOUR = MappingProxyType({"SUPPORTED": "#116329", "EQUIVALENT": "#116329",
                                    "FAILED": "#a40e26"})
"""Colour of a verdict's mark in the forest plot (any other verdict: amber, ``#7d4e00``)."""


def _forest_range(theta0: float, vs: Sequence[TrackVerdict]) -> tuple[float, float]:
    """The plot's ratio axis: the target, 1 and every ratio and bound, padded by 8 %
    (0.1 when all are one value), never below 0."""
    values = [theta0, 1.0] + [x for v in vs for x in (v.ratio, v.lower, v.upper)
                              if x is not None]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 0.1
    return max(0.0, lo - pad), hi + pad


def _forest_tip(v: TrackVerdict, status: str) -> str:
    """The tooltip of a candidate's mark: verdict, ratio, exact bounds and sessions."""
    bounds = (f" [{v.lower:.3f}, {v.upper:.3f}]" if v.lower is not None and v.upper is not None
              else " (no exact bounds)")
    return f"{v.candidate}: {v.verdict} ({status}), ratio {v.ratio:.3f}{bounds}, " \
        f"{v.m} vs {v.n} sessions"


def _forest_attrs(v: TrackVerdict, status: str) -> str:
    """The ``data-*`` attributes of a candidate's mark (bounds only when both are known)."""
    bounds = (f' data-lower="{v.lower:.6g}" data-upper="{v.upper:.6g}"'
              if v.lower is not None and v.upper is not None else "")
    return (f'class="mark" data-series="{escape(v.candidate or "")}" '
            f'data-candidate="{escape(v.candidate or "")}" '
            f'data-verdict="{v.verdict}" data-status="{status}" '
            f'data-ratio="{v.ratio:.6g}"{bounds}')


def _forest_line(x: Callable[[float], float], val: float, cls: str, label: str, top: int,
                 axis_y: float, theta0: float) -> str:
    """A vertical reference line of the forest plot at ratio ``val`` (the target, dashed
    red, or no change, grey) with its label."""
    dash = ' stroke-dasharray="6 4"' if cls == "target" else ""
    colour = "#a40e26" if cls == "target" else "#57606a"
    # labels lean away from each other: the target's to the left of its line when it
    # is below 1 (a lower-latency target), the no-change label to the right
    away = (cls == "target") == (theta0 <= 1.0)
    anchor, dx = ("end", -4) if away else ("start", 4)
    return (f'<g class="{cls}" data-ratio="{val:.6g}"><line x1="{x(val)}" '
            f'y1="{top - 8}" x2="{x(val)}" y2="{axis_y}" stroke="{colour}" '
            f'stroke-width="2"{dash}/><text x="{x(val) + dx}" y="{top - 12}" '
            f'font-size="15" text-anchor="{anchor}" fill="{colour}">'
            f'{escape(label)}</text></g>')


def _forest_mark(x: Callable[[float], float], v: TrackVerdict, y: float, left: int) -> str:
    """One candidate's row of the forest plot at height ``y``: its name, its exact interval
    (dashed unless confirmed) and its ratio (filled when confirmed), with a tooltip."""
    status = verdict_status(v)
    colour = _VERDICT_COLOUR.get(v.verdict, "#7d4e00")
    name = v.candidate or ""
    out = [f'<g {_forest_attrs(v, status)}><title>{escape(_forest_tip(v, status))}</title>',
           f'<text x="{left - 10}" y="{y + 5}" font-size="15" text-anchor="end" '
           f'fill="#1f2328">{escape(name if len(name) <= 26 else name[:25] + "…")}</text>']
    if v.lower is not None and v.upper is not None:
        dash = ' stroke-dasharray="5 3"' if status != "confirmed" else ""
        out.append(f'<line x1="{x(v.lower)}" y1="{y}" x2="{x(v.upper)}" y2="{y}" '
                   f'stroke="{colour}" stroke-width="3"{dash}/>')
    fill = colour if status == "confirmed" else "#ffffff"
    out.append(f'<circle cx="{x(v.ratio or 0.0)}" cy="{y}" r="7" fill="{fill}" '
               f'stroke="{colour}" stroke-width="3"/></g>')
    return "".join(out)


def _ticks(lo: float, hi: float) -> list[float]:
    """About five round tick values between ``lo`` and ``hi``."""
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / 5)) if span > 0 else 0.1
    for m in (1, 2, 5, 10):
        if span / (step * m) <= 6:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [round(first + k * step, 10) for k in range(int((hi - first) / step) + 1)]


BUDGET_DIMENSIONS: Mapping[str, tuple[str, str, Callable[[BudgetPoint], float],
                                      Callable[[BudgetPoint], float]]] = MappingProxyType({
    "directions": ("candidate directions", "", lambda p: float(p.directions),
                   lambda p: p.directions_allowed),
    "wall": ("wall-hours", "h", lambda p: p.wall_h, lambda p: p.wall_allowed_h),
    "device": ("device-hours", "h", lambda p: p.device_h, lambda p: p.device_allowed_h),
})
"""Chart key -> (name, unit, used, allowed) of one budget dimension."""


def budget_chart(dimension: str, from_receipts: Sequence[BudgetPoint],
                 from_ledger: Sequence[BudgetPoint] | None, chart_id: str,
                 reserved: float | None = None) -> str:
    """Burn-down of one budget ``dimension`` (``directions``, ``wall`` or ``device``): what
    is left (allowed - used) after each screen (from receipts, failed sessions included) and,
    with the bot's database, after each ledger entry.  One mark per point.  ``reserved``
    (the estimates of queued and running screens, from the ledger) adds the forecast: one
    mark of series ``forecast``, what will be left once the queued work is charged, at the
    last ledger entry's time."""
    name, unit, used, allowed = BUDGET_DIMENSIONS[dimension]
    fmt = (lambda y: f"{y:.2f} h") if unit == "h" else (lambda y: f"{y:g}")
    pts = [*from_receipts, *(from_ledger or [])]
    lefts = [allowed(p) - used(p) for p in pts] or [0.0]
    top = max([allowed(p) for p in pts] or [1.0])
    c = _chart(
        pygal.DateTimeLine, chart_id, f"Budget burn-down: {name} left",
        f"{name} left (allowed minus used) over time; failures and retries are charged. "
        "One point per screen from receipts" + (" and one per budget ledger entry."
                                                if from_ledger is not None else "."),
        x_title="time (UTC)", y_title=f"{name} left", x_value_formatter=_when,
        value_formatter=fmt, x_label_rotation=20,
        range=(min(0.0, min(lefts)), max(top, max(lefts), 1.0)))
    c.add("left, from receipts", [
        _point(p.at, allowed(p) - used(p), "receipts",
               f"after {p.label} ({_when(p.at)}): {fmt(allowed(p) - used(p))} left of "
               f"{fmt(allowed(p))}", screen=p.label) for p in from_receipts])
    if from_ledger and reserved:
        last = from_ledger[-1]
        after = allowed(last) - used(last) - reserved
        lefts.append(after)
        c.range = (min(0.0, min(lefts)), max(top, max(lefts), 1.0))
        c.add("forecast: left after the queued and running screens", [
            _point(last.at, after, "forecast",
                   f"once the queued and running screens are charged ({fmt(reserved)} "
                   f"estimated): {fmt(after)} left of {fmt(allowed(last))}")])
    if from_ledger is not None:
        c.add("left, from the budget ledger", [
            _point(p.at, allowed(p) - used(p), "ledger",
                   f"after {p.label} ({_when(p.at)}): {fmt(allowed(p) - used(p))} left of "
                   f"{fmt(allowed(p))}") for p in from_ledger])
    return _render(c)
