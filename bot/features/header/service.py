"""The campaign status header's service: computes, writes and records the header of each
campaign issue (:class:`HeaderService`).  The handlers and commands that call it are in
:mod:`bot.features.header.handlers`.

The header sits between hidden markers at the top of the campaign issue body
(:mod:`bot.features.header.block`); its content is computed from evidence by
:func:`evidence.header.build_header` and rendered by ``templates/campaign_header.md.j2``.

Grammar (comments on a campaign issue, parsed by :mod:`bot.commands.parser`)::

    /campaign refresh          re-read the evidence now and rewrite the header if it changed
    /campaign history [N]      reply with the last N header changes (default 5, at most 20)

Examples: ``/campaign refresh``, ``/campaign history 10``.  Anyone who may comment may ask;
both commands only read evidence and write the bot's own text.

Triggers of a refresh:

- ``push`` to the default branch whose commits touch a campaign directory (the commit SHA and
  time of the last such commit become the header's "Updated from evidence at ...");
- ``pull_request`` opened / synchronize / reopened / closed / edited on a PR whose files touch
  the campaign's evidence paths (``evidence_paths`` of campaign.toml; such a PR is a
  *candidate PR* of that campaign);
- ``workflow_run`` completed (a screen result: the screen workflow finished);
- ``/campaign refresh`` and, as a safety net, a scheduler job every 30 minutes that skips a
  campaign whose input key (content hash of everything the header reads) has not changed.

Economy: evidence is read through git (:class:`bot.github.git.GitMirrors`: the repository's
bare mirror, fetched with the installation token).  The input key needs one ``git fetch`` of
the default branch (the campaign directory's git tree SHA is then read from the mirror);
candidate PRs and the screen queue come from the database.  With nothing changed a refresh
makes one git round trip, one REST read (the issue, re-read before a write) and no write;
the scheduler makes the git round trip only.  When something changed, the campaign's text
files are written from git objects into a temporary directory (no checkout, no per-file size
cap) for the loader; candidate PR heads are fetched together in one more ``git fetch``.

Safety of the body: the body is read right before the write and only the marked block is
replaced; an unchanged block is not written.  Deleted or broken markers are never re-inserted
silently: the bot says so once in a comment (again only after the markers came back and went
missing anew).  The bot's own ``issues.edited`` events are ignored.

GitHub access goes through the repository-scoped port :class:`bot.github.GitHubPort` (methods
used: ``git_remote``, ``list_dir`` and ``get_file`` to discover campaigns, ``list_pull_files``,
``get_issue``, ``edit_issue_body``, ``create_issue_comment``) and the mirrors.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import posixpath
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.features.header.block import (
    END,
    START,
    MarkersMissing,
    current_block,
    normalise,
    outside,
    splice,
)
from bot.features.header.changes import HISTORY_DEFAULT, previous_header, summarise_change
from bot.features.header.render import TEMPLATE, render_header
from bot.features.header.sources import (
    CAMPAIGN_FILE,
    SOURCE_CACHE_ENTRIES,
    TEXT_SUFFIXES,
    Evaluator,
    Loader,
    QueueProvider,
    config_or_default,
    default_evaluator,
    default_loader,
    last_commit_touching,
    no_queue,
    parse_scope,
    pull_fields,
    scope_of,
    state_digest,
    touches_evidence,
)
from bot.features.header.store import CampaignHeader, CandidatePR, HeaderChange
from bot.github import parse_timestamp
from bot.github.git import GitError, GitMirrors
from bot.links import campaign_page
from bot.repo_config import find_campaign_dirs
from evidence.header import (
    EvidenceRef,
    EvidenceSource,
    HeaderContent,
    build_header,
)
from evidence.models import DEFAULT_EVIDENCE_PATHS, CampaignScope

log = logging.getLogger(__name__)

MAX_BODY_CHARS = 65536
"""GitHub refuses issue bodies longer than this with 422 (PyGithub/PyGithub#1906)."""
SCHEDULE_MINUTES = 30
"""Safety-net refresh interval (minutes)."""

MARKERS_NOTICE = (
    "<!-- campaign-bot:header-notice -->\n"
    "campaign-bot keeps this campaign's status header between the hidden markers "
    f"`{START}` and `{END}` at the top of the issue body, but {{reason}}. "
    "I will not put them back by myself, so the header is no longer updated. To get it back, "
    "paste the two marker lines where the header should go (the next refresh fills them), "
    "or leave them out if this issue should have no header."
)


def utcnow() -> dt.datetime:
    """Timezone-aware UTC now."""
    return dt.datetime.now(dt.UTC)


def _aware(t: dt.datetime | None) -> dt.datetime | None:
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=dt.UTC)


@dataclass
class RefreshResult:
    """What one refresh did: ``outcome`` is ``written``, ``unchanged``, ``skipped`` (input
    key unchanged, scheduler), ``markers-missing``, ``notice-posted``, ``too-long`` (the
    body would exceed GitHub's limit: not written, logged) or ``campaign-missing``;
    ``reads``/``writes`` count the GitHub REST calls this refresh made through the port,
    ``fetches`` its ``git fetch`` round trips."""

    outcome: str
    reads: int = 0
    writes: int = 0
    header: str | None = None
    fetches: int = 0


class _Counting:
    """Wraps a port and counts calls, reads and writes, per refresh."""

    READS = ("get_issue", "list_dir", "get_file", "list_pull_files")

    def __init__(self, gh: Any) -> None:
        self.gh = gh
        self.reads = 0
        self.writes = 0
        self.fetches = 0

    def call(self, name: str, *args: Any) -> Any:
        if name in self.READS:
            self.reads += 1
        else:
            self.writes += 1
        return getattr(self.gh, name)(*args)


@dataclass
class HeaderService:
    """Computes, writes and records campaign status headers.

    ``engine``: the bot database (tables of :mod:`bot.features.header.store`, migrated).
    ``bot_login``: the bot's own login (its ``issues.edited`` events are ignored).
    ``html_base``: GitHub's web base URL for evidence links.
    ``loader``/``evaluator``/``queue``: the evidence loader, verdict engine adapter and
    queue/budget provider (defaults: :func:`evidence.bundle.load_campaign`,
    :func:`evidence.header.source_from_campaign`, and no queue known).  ``git``: the bare
    mirrors evidence is read from (the feature's ``register`` sets the application's).
    """

    engine: Engine
    bot_login: str = "campaign-bot[bot]"
    html_base: str = "https://github.com"
    loader: Loader = default_loader
    evaluator: Evaluator = default_evaluator
    queue: QueueProvider = no_queue
    public_url: str | None = None
    """``CAMPAIGN_BOT_PUBLIC_URL``: the header links to the campaign's live pages when set."""
    git: GitMirrors | None = None
    source_cache: dict[tuple[Any, ...], tuple[CampaignScope, EvidenceSource]] = field(
        default_factory=dict
    )
    _locks: dict[tuple[str, int], threading.Lock] = field(default_factory=dict)
    _scopes: dict[tuple[str, str, str], CampaignScope] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.template_digest = _template_digest()

    # ---------------------------------------------------------------- registry

    def register(
        self, repo: str, path: str, campaign_id: str, issue: int, default_branch: str = "main",
        evidence_paths: Sequence[str] = DEFAULT_EVIDENCE_PATHS,
    ) -> CampaignHeader:
        """Record (or update) that ``repo``'s campaign at ``path`` lives in ``issue``, with
        its ``evidence_paths`` (relative to ``path``; PRs touching them are candidates)."""
        path = path.strip("/")
        eps = sorted({e.strip("/") for e in evidence_paths if e.strip("/")})
        with self.sessions.begin() as db:
            row = db.scalar(
                select(CampaignHeader).where(
                    CampaignHeader.repo == repo, CampaignHeader.path == path
                )
            )
            if row is None:
                row = CampaignHeader(
                    repo=repo, path=path, campaign_id=campaign_id, issue=issue,
                    default_branch=default_branch, inserted=False, evidence_paths=eps,
                )
                db.add(row)
            else:
                if row.issue != issue:
                    row.inserted = False
                    row.markers_notice_at = None
                    row.input_key = None
                row.campaign_id, row.issue, row.default_branch = campaign_id, issue, default_branch
                row.evidence_paths = eps
            db.flush()
            db.expunge(row)
            return row

    def campaigns(self, repo: str | None = None) -> list[CampaignHeader]:
        """Known campaigns (of ``repo``, or all)."""
        with self.sessions() as db:
            q = select(CampaignHeader)
            if repo is not None:
                q = q.where(CampaignHeader.repo == repo)
            return list(db.scalars(q.order_by(CampaignHeader.id)))

    def campaigns_of_issue(self, repo: str, issue: int) -> list[CampaignHeader]:
        """Campaigns whose header lives in ``issue``."""
        return [c for c in self.campaigns(repo) if c.issue == issue]

    def discover(self, gh: Any, config: Any, ref: str) -> list[str]:
        """Find campaign directories at ``ref`` (the repo config's ``[campaigns] paths``
        globs, defaults when ``config`` is None), read each ``campaign.toml`` and register
        those with an ``issue`` number.  Returns the paths registered.  Unreadable scopes are
        logged and skipped (the PR review reports them)."""
        repo = gh.repo
        found: list[str] = []
        for d in find_campaign_dirs(gh, config_or_default(config), ref):
            raw = gh.get_file(posixpath.join(d, CAMPAIGN_FILE), ref)
            if raw is None:
                continue
            scope = parse_scope(raw, posixpath.join(d, CAMPAIGN_FILE))
            if scope is None or scope.issue is None:
                continue
            self.register(repo, d, scope.id, scope.issue, ref, scope.evidence_paths)
            found.append(d)
        return found

    # ---------------------------------------------------------------- events

    def record_push(self, repo: str, payload: dict[str, Any]) -> list[CampaignHeader]:
        """Note a push to the default branch; returns the campaigns whose directory one of
        its commits touched, with their evidence SHA/time set to the last such commit."""
        touched: list[CampaignHeader] = []
        commits = payload.get("commits") or []
        for c in self.campaigns(repo):
            last = last_commit_touching(commits, c.path)
            if last is None:
                continue
            when = parse_timestamp(last.get("timestamp"))
            with self.sessions.begin() as db:
                row = db.get(CampaignHeader, c.id)
                assert row is not None
                row.evidence_sha = str(last.get("id") or payload.get("after") or "")
                row.evidence_at = when or utcnow()
                row.evidence_tree = None  # the next tree read belongs to this commit
            touched.append(c)
        return touched

    def record_pull(self, gh: Any, pr: dict[str, Any],
                    also: Sequence[str] = ()) -> list[CampaignHeader]:
        """Note a PR's head and state; reads its files once per head SHA.  A PR touching a
        campaign's evidence paths, or ``also`` (directories relative to a campaign: where the
        bot commits screen bundles), is one of its candidates.  Returns the campaigns it
        touches now or touched before (both need a refresh)."""
        repo = gh.repo
        if not self.campaigns(repo):
            return []  # no campaign registered here: nothing to track, no read
        number, head, state, title = pull_fields(pr)
        with self.sessions() as db:
            row = db.scalar(
                select(CandidatePR).where(CandidatePR.repo == repo, CandidatePR.number == number)
            )
            before, known_sha = (list(row.touches), row.files_sha) if row else ([], None)
        touches = before
        if state == "open" and head and head != known_sha:
            touches = self._touched(repo, [f.filename for f in gh.list_pull_files(number)],
                                    also)
        with self.sessions.begin() as db:
            row = db.scalar(
                select(CandidatePR).where(CandidatePR.repo == repo, CandidatePR.number == number)
            )
            if row is None:
                row = CandidatePR(repo=repo, number=number, touches=[])
                db.add(row)
            row.title, row.head_sha, row.state = title, head, state
            row.touches, row.files_sha, row.updated_at = touches, head, utcnow()
        paths = set(touches) | set(before)
        return [c for c in self.campaigns(repo) if c.path in paths]

    def _touched(self, repo: str, files: Sequence[str], also: Sequence[str]) -> list[str]:
        """Paths of ``repo``'s campaigns whose evidence (or ``also``) one of ``files`` is in."""
        return sorted(c.path for c in self.campaigns(repo)
                      if any(touches_evidence(f, c, also) for f in files))

    def candidate_prs(self, repo: str, path: str) -> list[CandidatePR]:
        """Open PRs whose files touch the campaign at ``path``, by number."""
        with self.sessions() as db:
            rows = db.scalars(
                select(CandidatePR)
                .where(CandidatePR.repo == repo, CandidatePR.state == "open")
                .order_by(CandidatePR.number)
            )
            return [r for r in rows if path in (r.touches or [])]

    # ---------------------------------------------------------------- refresh

    def refresh(
        self,
        gh: Any,
        campaign: CampaignHeader,
        *,
        trigger: str,
        delivery_id: str | None = None,
        skip_if_unchanged: bool = False,
    ) -> RefreshResult:
        """Recompute the header of ``campaign`` and write it if the block changed.

        ``skip_if_unchanged`` (the scheduler): stop after the input key when it equals the
        last one, without reading the issue.  Writes are serialised per issue in this process
        and across threads (the worker's loop and the scheduler's).
        """
        # a thread lock: the worker's event loop and the scheduler's may refresh one issue
        lock = self._locks.setdefault((campaign.repo, campaign.issue), threading.Lock())
        lock.acquire()
        try:
            return self._refresh(gh, campaign, trigger, delivery_id, skip_if_unchanged)
        finally:
            lock.release()

    def _refresh(
        self,
        gh: Any,
        campaign: CampaignHeader,
        trigger: str,
        delivery_id: str | None,
        skip_if_unchanged: bool,
    ) -> RefreshResult:
        port = _Counting(gh)
        with self.sessions() as db:
            row = db.get(CampaignHeader, campaign.id)
            assert row is not None, f"campaign {campaign.path} is not registered"
        repo, path = row.repo, row.path
        if getattr(gh, "repo", repo) != repo:
            raise ValueError(f"port is for {gh.repo}, campaign {path} is in {repo}")
        tip, tree = self._tip_and_tree(port, row)
        if tree is None:
            return RefreshResult("campaign-missing", port.reads, port.writes,
                                 fetches=port.fetches)
        if row.evidence_tree is None or row.evidence_tree != tree:
            row = self._note_tree(row, tree)
        prs = self.candidate_prs(repo, path)
        key_parts = self._key_parts(row, tree, prs)
        key = self._input_key(key_parts, repo, self._scopes.get((repo, path, tree)))
        if row.input_key == key and row.header_text is not None:
            if skip_if_unchanged:
                return RefreshResult("skipped", port.reads, port.writes, row.header_text,
                                     port.fetches)
            header = row.header_text
        else:
            content = self._compute(port, row, tree, tip, prs)
            header = render_header(
                content, dashboard=campaign_page(self.public_url, repo, row.campaign_id))
            key = self._input_key(key_parts, repo, self._scopes.get((repo, path, tree)))
        with self.sessions.begin() as db:
            r = db.get(CampaignHeader, row.id)
            assert r is not None
            r.input_key, r.header_text, r.refreshed_at = key, header, utcnow()
        return self._write(port, row, header, trigger, delivery_id)

    def _write(
        self,
        port: _Counting,
        row: CampaignHeader,
        header: str,
        trigger: str,
        delivery_id: str | None,
    ) -> RefreshResult:
        # re-read right before writing: a human edit made meanwhile is in this body
        body = (port.call("get_issue", row.issue)).body
        try:
            new = splice(body, header, inserted_before=row.inserted)
        except MarkersMissing as exc:
            return self._markers_missing(port, row, exc.reason, trigger, delivery_id)
        if new is not None and len(new) > MAX_BODY_CHARS:
            log.error("issue %s#%s: body with header would be %d characters (GitHub allows "
                      "%d); not written", row.repo, row.issue, len(new), MAX_BODY_CHARS)
            return RefreshResult("too-long", port.reads, port.writes, header, fetches=port.fetches)
        if new is None:
            with self.sessions.begin() as db:
                r = db.get(CampaignHeader, row.id)
                assert r is not None
                r.inserted = True
                r.markers_notice_at = None
            return RefreshResult("unchanged", port.reads, port.writes, header, fetches=port.fetches)
        port.call("edit_issue_body", row.issue, new)
        now = utcnow()
        with self.sessions.begin() as db:
            r = db.get(CampaignHeader, row.id)
            assert r is not None
            previous = previous_header(db, row)
            r.inserted, r.written_at, r.markers_notice_at = True, now, None
            db.add(
                HeaderChange(
                    repo=row.repo, issue=row.issue, campaign_id=row.campaign_id, at=now,
                    kind="write", trigger=trigger, delivery_id=delivery_id,
                    evidence_sha=row.evidence_sha or row.evidence_tree,
                    summary=summarise_change(previous, header), header_text=header,
                )
            )
        return RefreshResult("written", port.reads, port.writes, header, fetches=port.fetches)

    def _markers_missing(
        self,
        port: _Counting,
        row: CampaignHeader,
        reason: str,
        trigger: str,
        delivery_id: str | None,
    ) -> RefreshResult:
        with self.sessions() as db:
            r = db.get(CampaignHeader, row.id)
            assert r is not None
            already = r.markers_notice_at is not None
        if already:
            return RefreshResult("markers-missing", port.reads, port.writes, fetches=port.fetches)
        port.call("create_issue_comment", row.issue, MARKERS_NOTICE.format(reason=reason))
        now = utcnow()
        with self.sessions.begin() as db:
            r = db.get(CampaignHeader, row.id)
            assert r is not None
            r.markers_notice_at = now
            db.add(
                HeaderChange(
                    repo=row.repo, issue=row.issue, campaign_id=row.campaign_id, at=now,
                    kind="markers-missing", trigger=trigger, delivery_id=delivery_id,
                    evidence_sha=row.evidence_sha, summary=reason, header_text=None,
                )
            )
        return RefreshResult("notice-posted", port.reads, port.writes, fetches=port.fetches)

    def _tip_and_tree(self, port: _Counting, row: CampaignHeader) -> tuple[str, str | None]:
        """One git round trip: the default branch's tip, then the campaign directory's tree
        SHA from the mirror (no REST call); None for a directory not there (logged)."""
        ref = row.default_branch
        tip = (self._fetch(port, row.repo, [f"refs/heads/{ref}"]))[f"refs/heads/{ref}"]
        tree = self._git().tree_sha(row.repo, tip, row.path)
        if tree is None:
            log.warning("campaign directory %s not found in %s at %s", row.path, row.repo, ref)
        return tip, tree

    def _note_tree(self, row: CampaignHeader, tree: str) -> CampaignHeader:
        """Record that the campaign's directory is git tree ``tree`` now; returns the row."""
        with self.sessions.begin() as db:
            r = db.get(CampaignHeader, row.id)
            assert r is not None
            if r.evidence_tree is not None or r.evidence_sha is None:
                # the tree changed without a push we saw (or no push seen yet): the
                # tree SHA identifies the evidence, dated when the bot first read it
                r.evidence_sha, r.evidence_at = None, utcnow()
            r.evidence_tree = tree
            return _detached(r, db)

    def _key_parts(self, row: CampaignHeader, tree: str, prs: Sequence[CandidatePR]
                   ) -> dict[str, Any]:
        """What the header reads, but the queue: see :meth:`_input_key`."""
        return {"tree": tree, "evidence": [row.evidence_sha, _iso(row.evidence_at)],
                "prs": [[p.number, p.head_sha, p.title] for p in prs],
                "template": self.template_digest,
                "dashboard": campaign_page(self.public_url, row.repo, row.campaign_id)}

    def _input_key(self, parts: dict[str, Any], repo: str, scope: CampaignScope | None) -> str:
        """Content hash of everything the header reads: ``parts``, and the bot's queue state
        when the campaign's ``scope`` is known (sets ``parts["queue"]``)."""
        if scope is not None:
            parts["queue"] = self._queue_digest(repo, scope)
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def _queue_digest(self, repo: str, scope: CampaignScope) -> str:
        with self.sessions() as db:
            return state_digest(self.queue(db, repo, scope))

    def _git(self) -> GitMirrors:
        if self.git is None:
            raise RuntimeError("HeaderService has no git mirrors (set .git, or register it)")
        return self.git

    def _fetch(self, port: _Counting, repo: str, refs: list[str]) -> dict[str, str]:
        """One ``git fetch`` of ``refs`` into the mirror (counted); raises
        :class:`bot.github.git.GitError` naming what failed."""
        remote = port.gh.git_remote()
        if remote is None:
            raise GitError(f"no git access to {repo}")
        port.fetches += 1
        got = self._git().fetch(remote, repo, refs)
        missing = [r for r in refs if r not in got]
        if missing:
            raise GitError(f"git fetch of {repo} did not bring {', '.join(missing)}")
        return got

    def _compute(
        self, port: _Counting, row: CampaignHeader, tree: str, tip: str,
        prs: Sequence[CandidatePR],
    ) -> HeaderContent:
        repo, path = row.repo, row.path
        base_sha = row.evidence_sha or tree
        scope, base = self._source(port, path, tip, (tree, base_sha), None)
        self._scopes[(repo, path, tree)] = scope
        sources = [base, *self._pull_sources(port, repo, path, prs)]
        with self.sessions() as db:
            state = self.queue(db, repo, scope)
        at = _aware(row.evidence_at) or utcnow()
        # a commit seen in a push is linked by its SHA; a tree read without one, by branch
        sha, ref = (row.evidence_sha, row.evidence_sha) if row.evidence_sha else (
            tree, row.default_branch)
        ev = EvidenceRef(sha, at, f"{self.html_base}/{repo}/tree/{ref}/{path}")
        return build_header(
            scope, sources, ev, budget=state.budget, queue=state.queue, finished=state.finished
        )

    def _pull_sources(self, port: _Counting, repo: str, path: str,
                      prs: Sequence[CandidatePR]) -> list[EvidenceSource]:
        """The judged evidence of each candidate PR's head; a PR that cannot be read is
        logged and left out (it never hides the base or the others)."""
        # candidate PR heads not judged yet and not in the mirror: one fetch for all of them
        need = [pr for pr in prs if (repo, path, pr.number, pr.head_sha) not in self.source_cache
                and not self._git().has_commit(repo, pr.head_sha)]
        if need:
            try:
                self._fetch(port, repo, [f"refs/pull/{pr.number}/head" for pr in need])
            except GitError as exc:  # one unreadable PR never hides the base or the others
                log.warning("candidate PR heads of %s not fetched: %s", repo, exc)
        sources = []
        for pr in prs:
            try:
                _, src = self._source(port, path, pr.head_sha, (pr.head_sha,), pr.number)
            except Exception as exc:  # noqa: BLE001 - one broken PR never hides the others
                log.warning("PR #%s evidence unreadable: %s", pr.number, exc)
                continue
            src.pr_title = pr.title
            sources.append(src)
        return sources

    def _source(
        self, port: _Counting, path: str, ref: str, ident: tuple[str, ...], pr: int | None
    ) -> tuple[CampaignScope, EvidenceSource]:
        """Load and judge the campaign at commit ``ref`` (cached by ``ident``: the tree SHA for
        the default branch, the head SHA for a PR, so unchanged evidence is never re-read)."""
        key = (port.gh.repo, path, pr, *ident)
        hit = self.source_cache.get(key)
        if hit is not None:
            return hit
        with tempfile.TemporaryDirectory(prefix="campaign-header-") as tmp:
            self._git().materialise(port.gh.repo, ref, path,
                                    Path(tmp), suffixes=TEXT_SUFFIXES)
            loaded = self.loader(Path(tmp))
            scope = scope_of(loaded, path)
            src = self.evaluator(loaded, ident[-1], pr)
        if len(self.source_cache) >= SOURCE_CACHE_ENTRIES:
            self.source_cache.pop(next(iter(self.source_cache)))
        self.source_cache[key] = (scope, src)
        return scope, src

    def restore_human_edit(
        self, gh: Any, campaign: CampaignHeader, before: str, after: str,
        delivery_id: str | None,
    ) -> RefreshResult:
        """Put a human's edit back if a bot write overwrote it (see :func:`on_issue_edited`):
        when the body's human part equals ``before`` (the text the edit changed), write
        ``after`` with the body's current header block.  Returns ``restored`` or
        ``unchanged``."""
        lock = self._locks.setdefault((campaign.repo, campaign.issue), threading.Lock())
        lock.acquire()
        try:
            port = _Counting(gh)
            body = (port.call("get_issue", campaign.issue)).body
            if outside(body) != outside(before) or outside(body) == outside(after):
                return RefreshResult("unchanged", port.reads, port.writes)
            header = current_block(body)
            new = after if header is None else splice(after, header, inserted_before=True)
            if new is None or normalise(new) == normalise(body):
                return RefreshResult("unchanged", port.reads, port.writes)
            port.call("edit_issue_body", campaign.issue, new)
            with self.sessions.begin() as db:
                db.add(HeaderChange(
                    repo=campaign.repo, issue=campaign.issue, campaign_id=campaign.campaign_id,
                    at=utcnow(), kind="restore", trigger="lost human edit restored",
                    delivery_id=delivery_id, evidence_sha=None,
                    summary="a human edit overwritten by a concurrent header write was put back",
                    header_text=None,
                ))
            return RefreshResult("restored", port.reads, port.writes)
        except MarkersMissing:
            return RefreshResult("markers-missing", port.reads, port.writes)
        finally:
            lock.release()

    # ---------------------------------------------------------------- history

    def history(self, repo: str, issue: int, limit: int = HISTORY_DEFAULT) -> list[HeaderChange]:
        """The last ``limit`` header changes of ``issue``, newest first."""
        with self.sessions() as db:
            return list(
                db.scalars(
                    select(HeaderChange)
                    .where(HeaderChange.repo == repo, HeaderChange.issue == issue)
                    .order_by(HeaderChange.id.desc())
                    .limit(limit)
                )
            )


# ------------------------------------------------------------------------------ helpers


def _detached(row: CampaignHeader, db: Session) -> CampaignHeader:
    db.flush()
    db.expunge(row)
    return row


def _template_digest() -> str:
    """Short hash of the header template (a changed template changes every input key)."""
    import templates

    p = Path(templates.__file__).parent / TEMPLATE
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def _iso(t: dt.datetime | None) -> str | None:
    t = _aware(t)
    return t.isoformat() if t else None


GhFactory = Callable[[str], Any]
"""``(repo) -> port`` for the scheduler (an installation client per repository)."""


def scheduled_refresh(svc: HeaderService, gh_for: GhFactory) -> dict[str, int]:
    """The 30-minute safety net: refresh every known campaign, skipping those whose input key
    did not change (one read each).  Returns counts per outcome."""
    counts: dict[str, int] = {}
    for c in svc.campaigns():
        try:
            gh = gh_for(c.repo)
            res = svc.refresh(gh, c, trigger="schedule", skip_if_unchanged=True)
            counts[res.outcome] = counts.get(res.outcome, 0) + 1
        except Exception:  # noqa: BLE001 - one campaign never stops the others
            log.exception("scheduled header refresh of %s#%s failed", c.repo, c.issue)
            counts["failed"] = counts.get("failed", 0) + 1
    return counts
