"""HTML pages of the campaign dashboard: functions from the data model
(:class:`~bot.features.dashboard.views.Site`) to an HTML string, and :func:`write_site`,
which writes them all as a static site.

The page functions take a :class:`Links` that builds every URL, so the static site (relative
links between files) and a live server (links under its own prefix) render the same
templates: ``render_index(site, Links("/campaigns/x/"))`` is a page ready to serve.

Templates are ``templates/dashboard/*.html.j2`` (Jinja2 with autoescaping on and
``StrictUndefined``): every user-supplied string (screen and session ids, candidate names,
finding messages, ledger reasons) is escaped; the only markup inserted unescaped is pygal's
SVG, which escapes its own text.  Pages need no JavaScript, load nothing from the network
and are readable as plain tables.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing
import os
import queue
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from bot.features.dashboard import charts
from bot.features.dashboard.drift import change_points
from bot.features.dashboard.views import (
    SEVERITIES,
    SEVERITY_TEXT,
    ControlPoint,
    DocumentFile,
    PoolView,
    ScreenView,
    Site,
    TrackRow,
    slug,
)
from evidence.models import Finding
from templates import TEMPLATE_DIR

DASHBOARD_TEMPLATES = TEMPLATE_DIR / "dashboard"
STYLESHEET = "style.css"
MARKER = ".campaign-bot-report"
"""File written at the root of every generated site: a folder holding it may be replaced by
the next report; a non-empty folder without it is never overwritten."""


def safe_url(url: str | None) -> str | None:
    """``url`` when it is an absolute http(s) URL without credentials, else None (a
    ``javascript:`` or ``data:`` link is never written into a page)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        return None
    return url


ACCOUNT_SLOT = "<!-- campaign-bot:account -->"
"""Marks, in the header of every live page, where the live server puts the person's account
controls (the sign-out button on a private repository's pages): the rendered pages are
shared by everyone who may see them, the account part is not."""


@dataclass(frozen=True)
class Links:
    """URLs of the dashboard's pages under ``base`` (``""`` for the static site's relative
    links, e.g. ``"/dashboard/"`` for a live server).  Page names are stable:
    ``index.html``, ``track-SLUG.html``, ``screen-SLUG.html``, ``pool-SLUG.html``,
    ``budget.html``,
    ``findings.html``, ``style.css`` and copies of documents under ``evidence/``."""

    base: str = ""
    live: bool = False
    """True on the live pages of ``campaign-bot serve``: the navigation adds the queue page
    (the static site has none: it shows evidence, not the bot's current queue)."""

    def index(self) -> str:
        """The overview page."""
        return f"{self.base}index.html"

    def screen(self, s: ScreenView) -> str:
        """The page of screen ``s``."""
        return f"{self.base}screen-{s.slug}.html"

    def pool(self, p: PoolView) -> str:
        """The page of hardware pool ``p``."""
        return f"{self.base}pool-{p.slug}.html"

    def track(self, t: TrackRow) -> str:
        """The page of track ``t``."""
        return f"{self.base}track-{t.slug}.html"

    def budget(self) -> str:
        """The budget page."""
        return f"{self.base}budget.html"

    def findings(self) -> str:
        """The findings page."""
        return f"{self.base}findings.html"

    def queue(self, pool: str | None = None) -> str:
        """The live queue page (``queue.html``), at pool ``pool``'s section when given."""
        return f"{self.base}queue.html" + (f"#pool-{slug(pool)}" if pool else "")

    def asset(self, name: str) -> str:
        """A static asset (the stylesheet)."""
        return f"{self.base}{name}"

    def document(self, d: DocumentFile) -> str:
        """The site's copy of a campaign document (percent-encoded path)."""
        return self.base + quote(d.site_path)


# ------------------------------------------------------------------------------ filters


def _s(v: float | None, nd: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{nd}f}"


def _h(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.1f} %"


def _when(dt: datetime | None) -> str:
    return "—" if dt is None else dt.strftime("%Y-%m-%d %H:%M UTC")


def _ratio(v: Any) -> str:
    """``0.645x [0.631, 0.660]`` or ``0.645x (no exact bounds)`` or ``—``."""
    if v is None or v.ratio is None:
        return "—"
    text = f"{v.ratio:.3f}x"
    if v.lower is not None and v.upper is not None:
        return f"{text} [{v.lower:.3f}, {v.upper:.3f}]"
    return f"{text} (no exact bounds)"


def _duration(v: float | None) -> str:
    """Seconds as ``1 h 02 min``, ``12 min 05 s`` or ``40 s``; ``—`` when unknown."""
    if v is None or math.isnan(v):
        return "—"
    t = int(round(max(v, 0.0)))
    h, rest = divmod(t, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h} h {m:02d} min"
    return f"{m} min {sec:02d} s" if m else f"{sec} s"


def _amount(v: float, unit: str) -> str:
    return f"{v:.2f} {unit}" if unit else f"{v:g}"


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The Jinja2 environment of the dashboard templates (autoescape on, strict)."""
    env = Environment(loader=FileSystemLoader(DASHBOARD_TEMPLATES), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      keep_trailing_newline=True)
    env.filters.update(s=_s, h=_h, pct=_pct, when=_when, ratio=_ratio, amount=_amount,
                       duration=_duration)
    env.globals.update(severity_text=SEVERITY_TEXT, safe_url=safe_url, account_slot=ACCOUNT_SLOT)
    return env


def _page(name: str, site: Site, links: Links, **ctx: Any) -> str:
    tpl = environment().get_template(name)
    return tpl.render(site=site, links=links, scope=site.scope, **ctx)


def source_link(site: Site, links: Links) -> Callable[[str, int | None], str | None]:
    """``link(path, line)``: where a finding's file opens, ``{source_url}/{path}#L{line}``
    with a repository browser URL, else the site's copy of the document (None without)."""
    base = safe_url(site.source_url)

    def link(path: str, line: int | None) -> str | None:
        if base is not None:
            return f"{base.rstrip('/')}/{quote(path)}" + (f"#L{line}" if line else "")
        doc = site.document(path)
        return links.document(doc) if doc is not None else None

    return link


# -------------------------------------------------------------------------------- pages


def render_index(site: Site, links: Links) -> str:
    """The overview: the campaign status (Current state, Decision needed, Next action: the
    status header's sentences), one row per track (target, baseline, a forest plot of every
    candidate's ratio with exact bounds against the target line, best candidate, sessions,
    screening decisions), every verdict, the screening decisions apart from the verdicts,
    the budget, findings by severity, and every screen and pool."""
    screening = {d.screen_id: d for d in site.screening}
    forests = {t.track.id: Markup(charts.forest_plot(t, f"forest-{t.slug}"))  # noqa: S704
               for t in site.tracks}
    return _page("index.html.j2", site, links, screening_by_screen=screening,
                 forests=forests)


def drift_charts(site: Site, track: str | None = None, pool: PoolView | None = None
                 ) -> list[tuple[PoolView, str, list[ControlPoint], Markup]]:
    """``(pool, track, change points, chart)`` for every (pool, track) with control points,
    restricted to ``track`` and/or ``pool`` when given: one chart per track, each on its own
    axis; a change point is the first control session of a new level
    (:func:`~bot.features.dashboard.drift.change_points`)."""
    out = []
    for p in [pool] if pool is not None else site.pools:
        for tr in p.tracks:
            if track is not None and tr != track:
                continue
            key = ("drift", p.name, tr)
            hit: Any = site.charts.get(key)
            if hit is None:  # drawn once per site: the pool's page and the track's show it
                pts = [x for x in p.points if x.track == tr]
                cps = change_points([x.median_s for x in pts])
                hit = site.charts[key] = ([pts[k] for k in cps], Markup(  # noqa: S704
                    charts.drift_chart(p, tr, f"drift-{p.slug}-{slug(tr)}", cps)))
            out.append((p, tr, hit[0], hit[1]))
    return out


def render_track(site: Site, row: TrackRow, links: Links) -> str:
    """One track: the forest plot of its candidates, the distribution of session medians
    per arm per screen, and its control's drift over time on each pool (own axis, change
    points marked)."""
    screens = [s for s in site.screens if row.track.id in s.tracks]
    return _page("track.html.j2", site, links, row=row, screens=screens,
                 forest=Markup(charts.forest_plot(row, f"forest-{row.slug}")),  # noqa: S704
                 strip=Markup(charts.strip_chart(screens, row.track.id,  # noqa: S704
                                                 f"strip-{row.slug}")),
                 drifts=drift_charts(site, track=row.track.id))


def render_screen(site: Site, screen: ScreenView, links: Links) -> str:
    """One screen: measured client wall seconds per session in run order (chart and table,
    warmups apart), lifecycle per session, the quality-gate table, the verdicts' and the
    screening decision's reasons, and every receipt with its SHA-256."""
    chart = Markup(charts.screen_chart(screen, f"screen-{screen.slug}"))  # noqa: S704
    return _page("screen.html.j2", site, links, screen=screen, chart=chart,
                 source_link=source_link(site, links), reproduce=reproduce_lines(screen))


def reproduce_lines(screen: ScreenView) -> list[str]:
    """The screen page's commands (:func:`evidence.reproduce.campaign_commands`): the bundle
    directory is where its receipts' ``data/receipts/`` folder sits (None for receipts kept
    outside a bundle), the candidate the candidate sessions name."""
    from evidence.reproduce import campaign_commands

    paths = [s.receipt.path for s in screen.sessions if s.receipt is not None]
    roots = sorted({p.split("/data/receipts/", 1)[0] for p in paths if "/data/receipts/" in p})
    cands = [s.candidate for s in screen.sessions if s.arm == "candidate" and s.candidate]
    return campaign_commands(bundle_dir=(roots + [None])[0] if len(roots) < 2 else None,
                             track=screen.sessions[0].track if screen.sessions else "",
                             candidate=(cands + [None])[0], sessions=len(screen.sessions))


def render_pool(site: Site, pool: PoolView, links: Links) -> str:
    """One hardware pool: control session medians over time (drift), one chart per track on
    its own axis with change points marked, and the screens that used them."""
    screens = {s.screen_id: s for s in site.screens}
    return _page("pool.html.j2", site, links, pool=pool, drifts=drift_charts(site, pool=pool),
                 screens=screens)


def render_budget(site: Site, links: Links) -> str:
    """Budget used / reserved / allowed and its burn-down over time: candidate directions,
    wall-hours and device-hours (failures included), from receipts and, when read, from
    the bot's budget ledger."""
    b = site.budget
    reserved = {line.name: line.reserved for line in b.lines}
    chart_list = [(v[0], Markup(charts.budget_chart(  # noqa: S704
        k, b.from_receipts, b.from_ledger, f"budget-{k}", reserved.get(v[0]))))
        for k, v in charts.BUDGET_DIMENSIONS.items()]
    screens = {s.screen_id: s for s in site.screens}
    return _page("budget.html.j2", site, links, charts=chart_list, screens=screens)


@dataclass(frozen=True)
class FindingsFilter:
    """Which findings a findings page or the JSON API lists: severities ``levels`` (empty:
    every one), one ``rule`` id (None: any) and one ``file`` (a path, or a folder of paths;
    None: any).  Built from a request's query by :meth:`from_query`."""

    levels: frozenset[str] = frozenset()
    rule: str | None = None
    file: str | None = None

    @property
    def active(self) -> bool:
        """True when it leaves some finding out of the list."""
        return bool(self.levels) or self.rule is not None or self.file is not None

    def keeps(self, f: Finding) -> bool:
        """Whether finding ``f`` is listed."""
        return ((not self.levels or str(f.severity) in self.levels)
                and (self.rule is None or f.rule == self.rule)
                and (self.file is None or f.path == self.file
                     or f.path.startswith(self.file.rstrip("/") + "/")))

    @classmethod
    def from_query(cls, levels: Sequence[str] = (), rule: str | None = None,
                   file: str | None = None) -> FindingsFilter:
        """A filter from query parameters: each ``level`` value may list several severities
        (``P0,P1``; case ignored; a value that is no severity matches no finding); an
        empty ``rule`` or ``file`` (a form's "any") is no condition."""
        wanted = {x.strip().upper() for v in levels for x in v.split(",")} - {""}
        return cls(frozenset(wanted), rule or None, file or None)


def render_findings(site: Site, links: Links,
                    only: FindingsFilter | None = None) -> str:
    """Every finding of the review (as ``campaign-bot check`` lists them) with severity,
    rule, file:line (linked to the document when the site holds it), field and message;
    with ``only``, the findings it keeps.  On the live pages (``links.live``) the page
    carries the filter form: a plain GET form whose query the server applies
    (:class:`FindingsFilter`), so it works without JavaScript."""
    only = only or FindingsFilter()
    shown = [f for f in site.findings if only.keeps(f)]
    return _page("findings.html.j2", site, links, source_link=source_link(site, links),
                 shown=shown, only=only,
                 rules=sorted(Counter(f.rule for f in site.findings).items()),
                 files=sorted(Counter(f.path for f in site.findings).items()),
                 severities=SEVERITIES)


def render_page(name: str, site: Site, links: Links, **ctx: Any) -> str:
    """Any dashboard template ``name`` with the site, links and ``ctx`` (the live queue page
    uses it)."""
    return _page(name, site, links, **ctx)


def stylesheet() -> str:
    """The dashboard's stylesheet (one file, no web font, no import)."""
    return (DASHBOARD_TEMPLATES / STYLESHEET).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- the site


class OutputRefused(ValueError):
    """The output folder cannot be (re)written: it is inside the campaign, or it is a
    non-empty folder that no earlier report wrote (never deleted)."""


@dataclass(frozen=True)
class WrittenSite:
    """What :func:`write_site` wrote: ``pages`` (site-relative HTML paths) and ``documents``
    (copies of campaign documents), and the total ``bytes``."""

    root: Path
    pages: list[str]
    documents: list[str]
    bytes: int


def _check_out(out: Path, campaign_root: Path) -> None:
    o, c = out.resolve(), campaign_root.resolve()
    if o == c or c in o.parents:
        raise OutputRefused(f"{out}: inside the campaign directory {campaign_root}; the copies "
                            "of its receipts would be read as evidence next time: write the "
                            "site elsewhere")
    if o in c.parents:
        raise OutputRefused(f"{out}: holds the campaign directory {campaign_root}: "
                            "replacing it would delete the campaign")
    if out.exists():
        if not out.is_dir():
            raise OutputRefused(f"{out}: exists and is not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise OutputRefused(f"{out}: a non-empty folder that campaign-bot report did not "
                                f"write (no {MARKER}); not overwritten: pick a new or empty "
                                "folder")


def page_jobs(site: Site, links: Links) -> list[tuple[str, Callable[[], str]]]:
    """Every page of the site as (file name, render function), in a fixed order: index,
    budget, findings, tracks, pools, screens."""
    jobs: list[tuple[str, Callable[[], str]]] = [
        ("index.html", lambda: render_index(site, links)),
        ("budget.html", lambda: render_budget(site, links)),
        ("findings.html", lambda: render_findings(site, links)),
    ]
    jobs += [(links.track(t), partial(render_track, site, t, links)) for t in site.tracks]
    jobs += [(links.pool(p), partial(render_pool, site, p, links)) for p in site.pools]
    jobs += [(links.screen(s), partial(render_screen, site, s, links)) for s in site.screens]
    return jobs


def _render_pages(site: Site, tmp: Path, indices: list[int], results: Any) -> None:
    """In a forked worker (``site`` and ``tmp`` are inherited, never pickled): render and
    write pages ``indices``, putting ``("page", size in bytes)`` on ``results`` for each, and
    ``("error", text)`` if one fails."""
    try:
        jobs = page_jobs(site, Links())
        for i in indices:
            name, fn = jobs[i]
            data = fn().encode("utf-8")
            (tmp / name).write_bytes(data)
            results.put(("page", len(data)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def _workers(requested: int | None, pages: int) -> int:
    if requested is None:
        requested = min(4, os.cpu_count() or 1)
    if pages < PARALLEL_MIN_PAGES or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, requested)


PARALLEL_MIN_PAGES = 40
"""Below this many pages one process renders them all (starting workers costs more)."""


def write_site(site: Site, out: Path, campaign_root: Path,
               progress: Callable[[int, int], None] | None = None,
               jobs: int | None = None) -> WrittenSite:
    """Write every page of ``site`` and a copy of each campaign document under ``out``.

    The site is written into a new sibling folder and then moved into place, so a reader
    (or a failed run) never sees half a site; an earlier report at ``out`` is replaced.
    ``progress(done, total)`` is called as pages are written.  ``jobs``: processes that
    render pages (default: the CPU count, at most 4; forked, on systems that fork, for
    sites of at least :data:`PARALLEL_MIN_PAGES` pages).  Raises :class:`OutputRefused`
    (see there) and ``OSError`` when ``out`` cannot be written.
    """
    out = Path(out)
    _check_out(out, campaign_root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    links = Links()
    copier = ThreadPoolExecutor(1)  # file copies wait on I/O while pages render

    def start_copy() -> Future[list[str]]:
        return copier.submit(_copy_documents, site.documents, campaign_root, tmp)

    try:
        todo = page_jobs(site, links)
        total = len(todo)
        workers = _workers(jobs, total)
        if workers == 1:
            copied = start_copy()
            size = _render_serial(todo, tmp, progress)
        else:
            size, copied = _render_forked(site, tmp, total, workers, progress, start_copy)
        css = stylesheet().encode("utf-8")
        (tmp / STYLESHEET).write_bytes(css)
        (tmp / MARKER).write_text("written by campaign-bot report; the next report replaces "
                                  "this folder\n", encoding="utf-8")
        (tmp / ".nojekyll").write_bytes(b"")  # GitHub Pages: serve files as they are
        size += len(css)
        docs = copied.result()
        in_site = set(docs)
        size += sum(d.size for d in site.documents if d.path in in_site)
        os.chmod(tmp, 0o755)
        _move_into_place(tmp, out)
    except BaseException:
        copier.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        copier.shutdown(wait=True)
    return WrittenSite(out, [name for name, _ in todo], docs, size)


def _render_serial(todo: Sequence[tuple[str, Callable[[], str]]], tmp: Path,
                   progress: Callable[[int, int], None] | None) -> int:
    """Render and write each page of ``todo`` in this process; the bytes written."""
    size = 0
    for i, (name, fn) in enumerate(todo, 1):
        data = fn().encode("utf-8")
        (tmp / name).write_bytes(data)
        size += len(data)
        if progress:
            progress(i, len(todo))
    return size


def _render_forked(site: Site, tmp: Path, total: int, workers: int,
                   progress: Callable[[int, int], None] | None,
                   start_copy: Callable[[], Future[list[str]]]
                   ) -> tuple[int, Future[list[str]]]:
    """Render the ``total`` pages in ``workers`` forked processes (forked before the
    document copier's thread starts: ``start_copy`` is called after); ``(bytes written,
    the copier's future)``.  Raises ``RuntimeError`` when a page fails or a worker dies;
    the workers are stopped then."""
    chunks = [list(range(total))[k::workers] for k in range(workers)]
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_render_pages, args=(site, tmp, c, results)) for c in chunks]
    for proc in procs:
        proc.start()  # forked here,
    copied = start_copy()  # before the copying thread starts
    try:
        return _collect(results, procs, total, progress), copied
    except BaseException:
        for proc in procs:
            proc.terminate()
        raise
    finally:
        for proc in procs:
            proc.join()


def _collect(results: Any, procs: Sequence[Any], total: int,
             progress: Callable[[int, int], None] | None) -> int:
    """Wait for ``total`` page results from the workers ``procs``; the bytes written."""
    size = done = 0
    while done < total:
        try:
            kind, value = results.get(timeout=1.0)
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a page worker died (exit {dead[0]})") from None
            continue
        if kind == "error":
            raise RuntimeError(f"a page failed to render: {value}")
        done += 1
        size += value
        if progress:
            progress(done, total)
    return size


def _move_into_place(tmp: Path, out: Path) -> None:
    """Replace ``out`` (if any) with the folder ``tmp`` written beside it."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.replace(out, old / "site")
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


def _copy_documents(docs: Iterable[DocumentFile], campaign_root: Path, dest: Path) -> list[str]:
    """Copy each document to ``dest``/evidence/PATH when its bytes still have the digest the
    pages show; the paths copied."""
    done = []
    made: set[str] = set()
    for d in docs:
        try:
            with open(campaign_root / d.path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() != d.sha256:
            continue  # changed since it was read: the page's digest would not match the copy
        dst = os.path.join(dest, d.site_path)
        parent = os.path.dirname(dst)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        with open(dst, "wb") as f:
            f.write(data)
        done.append(d.path)
    return done
