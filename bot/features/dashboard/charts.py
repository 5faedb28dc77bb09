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

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

import pygal
from pygal.style import Style

from bot.features.dashboard.model import BudgetPoint, PoolView, ScreenView

ARM_COLORS = ("#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#a16207", "#0e7490")
"""Series colours (control first): distinct hues, each with at least 4.5:1 contrast on white."""
STYLE: Mapping[str, Any] = MappingProxyType(dict(
    background="#ffffff",
    plot_background="#ffffff",
    foreground="#1f2328",
    foreground_strong="#1f2328",
    foreground_subtle="#57606a",
    font_family="system-ui, -apple-system, 'Segoe UI', sans-serif",
    label_font_size=12,
    major_label_font_size=12,
    legend_font_size=13,
    title_font_size=15,
    tooltip_font_size=13,
    colors=ARM_COLORS,
))
"""The charts' pygal style (each chart gets its own ``Style``: pygal objects are mutable)."""


def _when(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M")


def _chart(kind: type, chart_id: str, title: str, desc: str, **kw: Any) -> Any:
    c = kind(
        js=[], disable_xml_declaration=True, style=Style(**STYLE), width=760, height=340,
        explicit_size=False, legend_at_bottom=True, truncate_legend=-1,
        truncate_label=-1, dots_size=4, print_values=False, **kw)
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


def pool_chart(pool: PoolView, chart_id: str) -> str:
    """Control session medians on ``pool`` over time (drift), one series per track: one mark
    per qualifying control session (clean lifecycle, every request timed)."""
    c = _chart(
        pygal.DateTimeLine, chart_id,
        f"Pool {pool.name}: control session medians over time",
        "Each point is one control session's median measured client wall time in seconds, "
        "at the session's start; one series per track.",
        x_title="session start (UTC)", y_title="control median s",
        include_x_axis=True, x_value_formatter=_when, value_formatter=lambda y: f"{y:g}",
        x_label_rotation=20)
    for tr in pool.tracks:
        c.add(tr, [_point(p.at, p.median_s, tr,
                          f"{p.session_id} ({p.screen_id}) at {_when(p.at)}: "
                          f"{p.median_s:.3f} s", session=p.session_id, screen=p.screen_id)
                   for p in pool.points if p.track == tr])
    return _render(c)


BUDGET_DIMENSIONS: Mapping[str, tuple[str, str, Callable[[BudgetPoint], float],
                                      Callable[[BudgetPoint], float]]] = MappingProxyType({
    "directions": ("candidate directions", "", lambda p: float(p.directions),
                   lambda p: p.directions_allowed),
    "wall": ("wall-hours", "h", lambda p: p.wall_h, lambda p: p.wall_allowed_h),
    "device": ("device-hours", "h", lambda p: p.device_h, lambda p: p.device_allowed_h),
})
"""Chart key -> (name, unit, used, allowed) of one budget dimension."""


def budget_chart(dimension: str, from_receipts: Sequence[BudgetPoint],
                 from_ledger: Sequence[BudgetPoint] | None, chart_id: str) -> str:
    """Burn-down of one budget ``dimension`` (``directions``, ``wall`` or ``device``): what
    is left (allowed - used) after each screen (from receipts, failed sessions included) and,
    with the bot's database, after each ledger entry.  One mark per point."""
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
    if from_ledger is not None:
        c.add("left, from the budget ledger", [
            _point(p.at, allowed(p) - used(p), "ledger",
                   f"after {p.label} ({_when(p.at)}): {fmt(allowed(p) - used(p))} left of "
                   f"{fmt(allowed(p))}") for p in from_ledger])
    return _render(c)
