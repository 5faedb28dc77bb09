"""PR review of campaign evidence: findings posted inline, one summary comment, one check run.

On ``pull_request`` opened / synchronize / reopened (and ``/campaign verify``):

1. read the PR (head SHA, base branch: one REST call) and GitHub's list of its changed
   files; when that list (complete: under 3,000 files) names no campaign, stop there:
   nothing is fetched, whatever the size of the push.  Otherwise fetch its head
   (``refs/pull/N/head``) and base branch into the repository's bare mirror with one ``git
   fetch`` (:class:`bot.github.git.GitMirrors`); its changed files are the diff from the
   merge base, as GitHub shows them; the campaigns it touches are the directories matching
   ``[campaigns] paths`` of the repo config that contain a changed file;
2. create (or reuse) the check run ``campaign-bot/evidence`` on the head SHA, in progress;
3. write each touched campaign directory at the head SHA from git objects into a temporary
   directory (no checkout; no per-file size cap, one per-campaign limit; Git LFS pointers
   reported as external with their recorded SHA-256; symbolic links and submodules listed as
   not verified) and run the foundation check (``evidence.check.check_campaign``: documents,
   manifests, hashes; signed bundles against the campaign's ``trusted-keys.pem`` on the
   default branch when it has one) and the verdict engine and findings rules
   (``evidence.review.review``);
4. post ONE review (``event=COMMENT``, ``commit_id`` = the head SHA analysed) holding the
   findings not yet posted for this SHA: inline on the exact line when that line is inside
   the PR's diff hunks (GitHub rejects others with 422), in the review body otherwise.  Each
   finding carries a hidden marker ``finding key=K sha=S`` (K hashes rule, file, line and
   message); keys already present in the bot's reviews and review comments on this PR are
   skipped, so a retry, a redelivery or ``/campaign verify`` never posts a finding twice for
   one SHA, and a later push re-posts nothing it already said (only new findings; the
   summary always lists all current ones);
5. create or edit the one summary comment ``<!-- campaign-bot:summary pr=N -->`` (found by
   marker AND the bot's login; not rewritten when unchanged): "checked N hashes, K
   problems", counts per severity, the verdict table and the findings;
6. complete the check run: ``failure`` when any P0-P2 finding exists (the severities that make
   ``campaign-bot check`` exit 1), ``success`` otherwise.  Every finding is also an
   annotation of the check run on its evidence file's line (:func:`annotations_for`: level
   from the severity, title the rule, message with the fix), sent 50 per request as the
   Checks API requires (:func:`_complete`); a hidden marker in the run's summary records
   how many were sent, so a retried delivery appends only the rest and a redelivery none.

PR code is never executed: files are read as data from git objects (see
:mod:`bot.github.git` for what git is allowed to do).  When the fetch fails, times out, or a
campaign is over the per-campaign limit, the check run and the summary say so in one sentence
and nothing is guessed.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from bot.comments import upsert_comment
from bot.github import (
    Annotation,
    FileChange,
    GitHubError,
    GitHubPort,
    GitHubValidationError,
    InlineComment,
    PullInfo,
)
from bot.github.git import GitError, GitMirrors
from bot.inbox.router import Event
from bot.links import campaign_page
from bot.render import marker, render
from bot.repo_config import RepoConfig
from evidence.models import Finding
from evidence.scope_binding import FrozenScope

log = logging.getLogger(__name__)

CHECK_NAME = "campaign-bot/evidence"
TRUSTED_KEYS_FILE = "trusted-keys.pem"
"""Runner public keys a campaign trusts, beside its campaign.toml, read from the default
branch only (keys in a PR are never trusted)."""
FAILING = frozenset({"P0", "P1", "P2"})
"""Severities that fail the check run (same as ``campaign-bot check`` exit 1)."""
SEVERITY_ORDER = MappingProxyType({"P0": 0, "P1": 1, "P2": 2, "P3": 3})
FINDING_MARKER = re.compile(r"<!-- campaign-bot:finding key=([0-9a-f]+) sha=([0-9a-f]+) -->")
HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
MAX_BODY_FINDINGS = 100
"""Findings listed in one review body (the rest wait for the next review)."""
MAX_TABLE_FINDINGS = 100
"""Findings listed in the summary comment; the rest are counted."""
ANNOTATIONS_PER_REQUEST = 50
"""The Checks API takes at most 50 annotations per request and appends each request's to
those already there (GitHub REST, "Update a check run", ``output.annotations``)."""
MAX_ANNOTATIONS = 1000
"""Annotations sent per check run (20 requests); further findings are in the summary
comment only."""
ANNOTATION_LEVELS = MappingProxyType({"P0": "failure", "P1": "failure", "P2": "warning",
                                      "P3": "notice"})
"""Annotation level per severity: P0-P1 (blocking, wrong evidence) ``failure``, P2
(ambiguous evidence) ``warning``, P3 (a note) ``notice``: the three levels GitHub has."""
ANNOTATIONS_MARKER = re.compile(r"<!-- campaign-bot:annotations digest=([0-9a-f]+) "
                                r"sent=(\d+) -->")


@dataclass(frozen=True)
class VerdictRow:
    """One verdict as the summary shows it."""

    campaign: str
    track: str
    candidate: str
    verdict: str
    reasons: str


@dataclass
class PlacedFinding:
    """A finding with its repository path (``repo_path``) and dedupe ``key``."""

    finding: Finding
    repo_path: str
    key: str

    @property
    def line(self) -> int | None:
        """1-based line, when the finding names one."""
        return self.finding.line


@dataclass
class CampaignAnalysis:
    """What the checks said about one campaign directory (``dir``, repo-relative)."""

    dir: str
    hashes_checked: int = 0
    findings: list[PlacedFinding] = field(default_factory=list)
    verdicts: list[VerdictRow] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """``path (why)`` of files not written, so not verified (links, submodules)."""
    external: list[str] = field(default_factory=list)
    """``path (sha256:..., N bytes)`` of Git LFS pointer files: kept outside the
    repository, their recorded digest listed, not verifiable here."""
    error: str | None = None


@dataclass
class ReviewOutcome:
    """Result of :func:`review_pull`; ``summary`` is ``created``/``edited``/``unchanged``
    (or ``skipped`` when the PR touches no campaign)."""

    head_sha: str
    campaigns: list[str]
    hashes_checked: int = 0
    problem_count: int = 0
    finding_count: int = 0
    new_findings: int = 0
    inline: int = 0
    in_body: int = 0
    conclusion: str | None = None
    summary: str = "skipped"
    unread: str | None = None
    """Why the evidence could not be read through git (nothing was checked), if so."""


# ----------------------------------------------------------------------- pure helpers


def diff_lines(patch: str | None) -> set[int]:
    """Lines of the new file (side RIGHT) inside the hunks of a unified-diff ``patch``:
    the only lines GitHub accepts a review comment on (others get 422 "line must be part of
    the diff": GitHub REST, "Create a review for a pull request")."""
    out: set[int] = set()
    for line in (patch or "").splitlines():
        m = HUNK_RE.match(line)
        if m:
            start = int(m.group(1))
            count = int(m.group(2)) if m.group(2) is not None else 1
            out.update(range(start, start + count))
    return out


def campaign_dir_of(path: str, patterns: list[str]) -> str | None:
    """The campaign directory holding repo path ``path``, by ``[campaigns] paths`` globs
    (matched per path level), or None."""
    parts = PurePosixPath(path).parts[:-1]
    for pattern in patterns:
        if pattern == ".":
            return "."
        pp = pattern.split("/")
        if len(parts) >= len(pp) and all(fnmatch(a, b) for a, b in zip(parts, pp,
                                                                         strict=False)):
            return "/".join(parts[: len(pp)])
    return None


def finding_key(rule: str, repo_path: str, line: int | None, message: str) -> str:
    """Stable 16-hex id of a finding (rule, file, line, message)."""
    raw = f"{rule}\x00{repo_path}\x00{line or 0}\x00{message}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _repo_path(campaign_dir: str, path: str) -> str:
    p = path.strip()
    while p.startswith("./"):
        p = p[2:]
    p = "" if p == "." else p
    if campaign_dir in (".", ""):
        return p or "."
    return f"{campaign_dir}/{p}" if p else campaign_dir


def place(campaign_dir: str, findings: list[Finding]) -> list[PlacedFinding]:
    """Findings with repo paths and keys, sorted by severity, path, line; duplicates
    (same key) dropped."""
    out: dict[str, PlacedFinding] = {}
    for f in findings:
        rp = _repo_path(campaign_dir, f.path)
        k = finding_key(f.rule, rp, f.line, f.message)
        out.setdefault(k, PlacedFinding(f, rp, k))
    return sorted(out.values(), key=lambda p: (SEVERITY_ORDER.get(p.finding.severity, 9),
                                              p.repo_path, p.line or 0, p.finding.rule))


def annotations_for(placed: list[PlacedFinding]) -> list[Annotation]:
    """One check-run annotation per finding (at most :data:`MAX_ANNOTATIONS`), on the
    finding's file and line (line 1 when it names none): level from the severity
    (:data:`ANNOTATION_LEVELS`), title ``P1 RULE``, message what is wrong and how to fix
    it, raw details the field it concerns.  Texts are cut to GitHub's limits (title 255
    characters, message 64 KB)."""
    out: list[Annotation] = []
    for p in placed[:MAX_ANNOTATIONS]:
        f = p.finding
        message = f.message if not f.resolution else f"{f.message}\n\nFix: {f.resolution}"
        out.append(Annotation(
            path=p.repo_path, start_line=p.line or 1, end_line=p.line or 1,
            level=ANNOTATION_LEVELS.get(f.severity, "notice"),  # type: ignore[arg-type]
            message=message.encode()[:60000].decode("utf-8", "ignore"),
            title=f"{f.severity} {f.rule}"[:255],
            raw_details=f"field: {f.field}" if f.field else None))
    return out


def annotations_digest(annotations: list[Annotation]) -> str:
    """16 hex digits identifying one list of annotations (the marker compares it: a run
    annotated for other findings is not continued)."""
    h = hashlib.sha256()
    for a in annotations:
        h.update(repr(a).encode())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------- analysis


def analyse_directory(root: Path, *, external_files: dict[str, Any] | None = None,
                      trusted_keys: dict[str, Any] | None = None,
                      frozen_scope: FrozenScope | None = None,
                      ) -> tuple[int, list[Finding], list[VerdictRow]]:
    """Run the foundation check and the verdict/findings rules on a campaign directory:
    ``(hashes checked, findings, verdict rows)``.  ``external_files`` (root-relative path ->
    :class:`evidence.manifest.ExternalFile`) are files kept outside ``root``; with
    ``trusted_keys`` signed bundles are verified, and held against ``frozen_scope`` (the
    default branch's campaign.toml; see :func:`evidence.check.check_campaign`): the verdicts
    are the check's own, so a refused bundle, or one that redefined its control, gives none.
    Synchronous and CPU-bound."""
    from evidence.check import check_campaign

    rep = check_campaign(root, external_files=external_files, trusted_keys=trusted_keys,
                         frozen_scope=frozen_scope)
    rows = [VerdictRow(rep.campaign or "-", v.track, v.candidate or "-", v.shown,
                       "; ".join(r.text for r in v.reasons) or "-") for v in rep.verdicts]
    return rep.hashes_checked, list(rep.findings), rows


def _trusted_keys(pem: bytes | None) -> tuple[dict[str, Any] | None, str | None]:
    """The campaign's trusted keys from ``trusted-keys.pem`` bytes: ``(keys, problem)``."""
    if pem is None:
        return None, None
    from evidence.signing import KeyFileError, load_trusted_keys

    with tempfile.TemporaryDirectory(prefix="campaign-bot-keys-") as tmp:
        kf = Path(tmp) / TRUSTED_KEYS_FILE
        kf.write_bytes(pem)
        try:
            return load_trusted_keys(kf), None
        except KeyFileError as exc:
            return None, f"{TRUSTED_KEYS_FILE} on the default branch: {str(exc).split(': ', 1)[-1]}"


def analyse_campaign(git: GitMirrors, repo: str, directory: str, commit: str, *,
                     keys_commit: str | None = None) -> CampaignAnalysis:
    """Write ``directory`` at ``commit`` from ``repo``'s mirror into a temporary directory
    and analyse it (see :func:`analyse_directory`); the trusted keys come from
    ``keys_commit`` (the default branch).  A git failure or the per-campaign limit is
    reported as ``error``, as is an exception inside the evidence code (logged, never raw)."""
    from evidence.manifest import ExternalFile

    out = CampaignAnalysis(directory)
    with tempfile.TemporaryDirectory(prefix="campaign-bot-review-") as tmp:
        root = Path(tmp) / "campaign"
        try:
            mat = git.materialise(repo, commit, directory, root)
            pem, frozen = None, None
            if keys_commit is not None:
                kf = TRUSTED_KEYS_FILE if directory in (".", "") else \
                    f"{directory}/{TRUSTED_KEYS_FILE}"
                pem = git.read_file(repo, keys_commit, kf)
                # the frozen scope: the control, protocol and pool every bundle must have
                # run under come from the default branch's campaign.toml
                toml = _repo_path(directory, "campaign.toml")
                scope_bytes = git.read_file(repo, keys_commit, toml, max_bytes=1 << 20)
                if scope_bytes is not None:
                    frozen = FrozenScope(label=f"campaign.toml at {keys_commit[:12]}, the "
                                         "default branch", data=scope_bytes)
        except GitError as exc:
            out.error = str(exc)
            return out
        out.skipped = [f"{_repo_path(directory, p)} ({why})" for p, why in mat.skipped]
        out.external = [f"{_repo_path(directory, p.path)} (sha256:{p.sha256[:12]}..., "
                        f"{p.size} bytes, Git LFS)" for p in mat.lfs]
        external = {p.path: ExternalFile(p.sha256, p.size, "Git LFS pointer")
                    for p in mat.lfs}
        keys, key_problem = _trusted_keys(pem)
        try:
            hashes, findings, rows = analyse_directory(root, external_files=external,
                                                       trusted_keys=keys, frozen_scope=frozen)
        except Exception:  # noqa: BLE001 - logged; the PR gets a short note, not a traceback
            log.exception("evidence check failed on %s@%s", directory, commit)
            out.error = "the evidence checker failed on this directory (logged for the "\
                "maintainers of this bot)"
            return out
    if key_problem:
        findings.append(Finding(rule="SIGNATURE_INVALID", severity="P1", path=TRUSTED_KEYS_FILE,
                                message=key_problem, resolution="fix the key file on the "
                                "default branch"))
    not_written = {p for p, _why in mat.skipped}
    # a file that was not written is "not verified", not "missing": drop findings about it
    findings = [f for f in findings if f.path not in not_written]
    out.hashes_checked = hashes
    out.findings = place(directory, findings)
    out.verdicts = rows
    return out


def read_pull(git: GitMirrors, gh: GitHubPort, pr: PullInfo,
              patterns: Any) -> tuple[str, list[FileChange], str]:
    """Fetch PR ``pr``'s base branch and the default branch, then its head without file
    contents (a partial fetch: commits and trees); list the changed files from the trees,
    and fetch the contents of the campaign folders (``[campaigns] paths`` ``patterns``) among
    them only.  A file the PR changes outside every campaign (a huge one, say) is listed,
    never fetched or diffed.  Returns ``(base branch tip, changed files, default branch
    tip)``, with patches for campaign files only: the trusted keys and the frozen scope come
    from the default branch, never the base, which a pull request chooses (an old branch
    may still trust a runner key the default branch removed).
    Raises :class:`bot.github.git.GitError`."""
    remote = gh.git_remote()
    if remote is None:
        raise GitError("no git access for this repository")
    head_ref, base_ref = f"refs/pull/{pr.number}/head", f"refs/heads/{pr.base_ref}"
    default_ref = f"refs/heads/{gh.get_default_branch()}"
    refs = git.fetch(remote, gh.repo, sorted({base_ref, default_ref}))
    if default_ref not in refs:
        raise GitError(f"the default branch ({default_ref}) was not fetched")
    refs.update(git.fetch(remote, gh.repo, [head_ref], blobs=False))
    if pr.head_sha != refs.get(head_ref) and not git.has_commit(gh.repo, pr.head_sha):
        # the PR moved between the REST read and the fetch: fetch the SHA GitHub named
        git.fetch(remote, gh.repo, [], [pr.head_sha], blobs=False)
    base = refs.get(base_ref) or pr.base_sha
    names = git.changed_files(gh.repo, base, pr.head_sha, patch_dirs=[])
    dirs = _campaign_dirs(names, patterns)
    git.fetch_blobs(remote, gh.repo, pr.head_sha, dirs)
    files = git.changed_files(gh.repo, base, pr.head_sha, patch_dirs=dirs) if dirs else names
    return base, files, refs[default_ref]


# --------------------------------------------------------------------- GitHub writes


def _posted_keys(gh: GitHubPort, number: int) -> set[str]:
    """Finding keys the bot already posted on PR ``number`` (any commit), read from the
    hidden markers of its own reviews and review comments."""
    keys: set[str] = set()
    for r in gh.list_reviews(number):
        if r.user == gh.bot_login:
            keys.update(k for k, _sha in FINDING_MARKER.findall(r.body))
    for c in gh.list_review_comments(number):
        if c.user == gh.bot_login:
            keys.update(k for k, _sha in FINDING_MARKER.findall(c.body))
    return keys


def _post_review(gh: GitHubPort, number: int, sha: str, new: list[PlacedFinding],
                 files: list[FileChange], max_inline: int) -> tuple[int, int]:
    """One review with ``new`` findings; returns ``(inline, in body)`` counts."""
    lines = {f.filename: diff_lines(f.patch) for f in files if f.status != "removed"}
    inline: list[PlacedFinding] = []
    body: list[PlacedFinding] = []
    # a review body stays well under GitHub's 65,536 characters; findings beyond the cap are
    # listed in the summary and posted by a later review
    new = new[: max_inline + MAX_BODY_FINDINGS]
    for p in new:
        if p.line is not None and p.line in lines.get(p.repo_path, set()) and \
                len(inline) < max_inline:
            inline.append(p)
        else:
            body.append(p)

    def comments(items: list[PlacedFinding]) -> list[InlineComment]:
        return [InlineComment(p.repo_path, p.line or 1, render(
            "finding.md.j2", f=p.finding, marker_text=marker("finding", key=p.key, sha=sha)))
            for p in items]

    def review_body(in_body: list[PlacedFinding], n_inline: int) -> str:
        return render("review.md.j2", sha=sha, n_inline=n_inline, findings=[
            {"f": p.finding, "path": p.repo_path,
             "marker_text": marker("finding", key=p.key, sha=sha)} for p in in_body],
            marker_text=marker("review", pr=number, sha=sha))

    try:
        gh.create_review(number, sha, review_body(body, len(inline)), comments(inline))
    except GitHubValidationError as exc:
        # GitHub refused a line (e.g. the diff changed under us): everything in the body
        log.warning("review on PR #%s refused (%s); posting all findings in the body",
                    number, exc)
        gh.create_review(number, sha, review_body(inline + body, 0), [])
        return 0, len(new)
    return len(inline), len(body)


def pull_external_id(number: int) -> str:
    """The ``external_id`` of the evidence check run of PR ``number``: GitHub's Re-run link
    (``check_run.rerequested``) and "Re-run all checks" (``check_suite.rerequested``) name
    only the commit, and a fork PR's payloads list no pull request."""
    return f"pull/{number}"


def pull_of_check_run(external_id: str | None) -> int | None:
    """The PR number an evidence check run's ``external_id`` names; None for any other."""
    m = re.fullmatch(r"pull/(\d+)", external_id or "")
    return int(m.group(1)) if m else None


def _check_run(gh: GitHubPort, sha: str, number: int) -> Any:
    """The ``campaign-bot/evidence`` run on ``sha`` (found, or created in progress); None when
    GitHub refuses check runs to these credentials (only Apps with checks:write may create
    them; a token gets 403), so the review still happens without one."""
    runs = gh.list_check_runs(sha, CHECK_NAME)
    if runs:
        return max(runs, key=lambda r: r.id)  # the newest: the one GitHub shows
    try:
        return gh.create_check_run(CHECK_NAME, sha, status="in_progress",
                                   external_id=pull_external_id(number),
                                   title="Checking campaign evidence",
                                   summary="campaign-bot is checking the evidence files.")
    except GitHubError as exc:
        if exc.retryable or exc.status != 403:
            raise
        log.warning("no check run on %s: %s (check runs need a GitHub App with checks:write)",
                    sha[:12], exc)
        return None


MAX_LISTED_FILES = 3000
"""GitHub's "List pull requests files" answers at most 3,000 files (GitHub Docs, REST API,
"List pull requests files"): a list that long may be cut, so the mirror's diff decides."""


def _campaign_dirs(files: list[FileChange], patterns: Any) -> list[str]:
    """The campaign directories (``[campaigns] paths`` patterns) holding a changed file
    that is not removed, sorted."""
    return sorted({d for f in files if f.status != "removed"
                   for d in [campaign_dir_of(f.filename, patterns)] if d})


def review_pull(gh: GitHubPort, config: RepoConfig, number: int, *, git: GitMirrors,
                trigger: str = "pull_request", pull: PullInfo | None = None,
                public_url: str | None = None) -> ReviewOutcome:
    """Review PR ``number`` (see the module docstring), reading evidence through ``git``;
    returns what was found and done.  ``pull``: the PR as a ``pull_request`` delivery
    described it (saves one REST read; when git cannot read that head, the PR is read again
    from GitHub).  With ``public_url`` (``CAMPAIGN_BOT_PUBLIC_URL``) the check run links to
    each campaign's live findings page (the default branch's; the check run itself is the PR
    head's).

    Raises :class:`bot.github.GitHubRetryableError` on transient GitHub failures: every
    step is idempotent, so the retried delivery completes without duplicates.  A git failure
    is not raised: the check run and the summary say that the evidence was not read."""
    pr = pull if pull is not None else gh.get_pull(number)
    listed = gh.list_pull_files(number)
    if len(listed) < MAX_LISTED_FILES and not _campaign_dirs(listed, config.campaigns.paths):
        # GitHub's own list of the changed paths names no campaign: nothing is fetched, so
        # a fork push of any size that touches no campaign costs the mirror no bytes
        log.info("PR #%s (%s) touches no campaign under %s (listed by GitHub; not fetched)",
                 number, trigger, config.campaigns.paths)
        return ReviewOutcome(pr.head_sha, [])
    try:
        try:
            base, files, trusted = read_pull(git, gh, pr, config.campaigns.paths)
        except GitError:
            if pull is None:
                raise
            pr = gh.get_pull(number)  # the delivery's view may be stale: ask GitHub
            base, files, trusted = read_pull(git, gh, pr, config.campaigns.paths)
    except GitError as exc:
        log.warning("PR #%s: evidence not read through git: %s", number, exc)
        return _report_unread(gh, config, number, pr.head_sha, str(exc))
    sha = pr.head_sha
    dirs = _campaign_dirs(files, config.campaigns.paths)
    outcome = ReviewOutcome(sha, dirs)
    if not dirs:
        log.info("PR #%s (%s) touches no campaign under %s", number, trigger,
                 config.campaigns.paths)
        return outcome
    run = _check_run(gh, sha, number) if config.review.check_run else None
    analyses = [analyse_campaign(git, gh.repo, d, sha, keys_commit=trusted) for d in dirs]
    placed = [p for a in analyses for p in a.findings]
    outcome.hashes_checked = sum(a.hashes_checked for a in analyses)
    outcome.finding_count = len(placed)
    outcome.problem_count = sum(1 for p in placed if p.finding.severity in FAILING)

    if placed:
        posted = _posted_keys(gh, number)
        new = [p for p in placed if p.key not in posted]
    else:
        new = []  # nothing to post: the bot's earlier reviews need not be read
    outcome.new_findings = len(new)
    if new:
        outcome.inline, outcome.in_body = _post_review(
            gh, number, sha, new, files, config.review.max_inline_comments)

    counts = {s: sum(1 for p in placed if p.finding.severity == s) for s in SEVERITY_ORDER}
    errors = [a for a in analyses if a.error]
    summary = render(
        "summary.md.j2", marker_text=marker("summary", pr=number), sha=sha, analyses=analyses,
        hashes=outcome.hashes_checked, problems=outcome.problem_count, counts=counts,
        verdicts=[v for a in analyses for v in a.verdicts],
        findings=placed[:MAX_TABLE_FINDINGS], more=max(0, len(placed) - MAX_TABLE_FINDINGS),
        skipped=[s for a in analyses for s in a.skipped],
        external=[x for a in analyses for x in a.external], errors=errors, unread=None)
    outcome.summary = upsert_comment(gh, number, summary, "summary", pr=number)

    conclusion = "failure" if outcome.problem_count or errors else "success"
    outcome.conclusion = conclusion
    if run is not None:
        title = (f"{outcome.problem_count} problem(s) in {outcome.hashes_checked} hashes "
                 f"checked" if outcome.problem_count else
                 f"Evidence not checked in {len(errors)} campaign(s)" if errors else
                 f"Evidence consistent: {outcome.hashes_checked} hashes checked")
        found = {a.verdicts[0].campaign: campaign_page(public_url, gh.repo,
                                                      a.verdicts[0].campaign, "findings.html")
                 for a in analyses if a.verdicts}
        pages = {c: u for c, u in found.items() if u}
        text = render("check_run.md.j2", hashes=outcome.hashes_checked,
                      problems=outcome.problem_count, counts=counts, campaigns=dirs,
                      errors=errors, unread=None, dashboards=pages)
        _complete(gh, run, conclusion, title, text, annotations_for(placed), sha)
    return outcome


def _complete(gh: GitHubPort, run: Any, conclusion: str, title: str, text: str,
              annotations: list[Annotation] | None = None, sha: str | None = None) -> None:
    """Complete check run ``run`` with ``conclusion``, ``title`` and summary ``text``, and
    add ``annotations`` to it, :data:`ANNOTATIONS_PER_REQUEST` per request (the last batch
    goes with the completion).

    The summary carries a hidden marker ``annotations digest=D sent=N``, written with each
    batch in the same request: a delivery retried after a failure resumes at annotation N
    (GitHub appends, so nothing is sent twice); a run already complete with this text is
    left alone.  A run annotated for another list of findings (same head, findings changed,
    e.g. new trusted keys on the default branch) cannot lose its annotations: a new check
    run is created on ``sha`` (GitHub shows the newest run of a name)."""
    annotations = annotations or []
    digest = annotations_digest(annotations)

    def summary(sent: int, body: str) -> str:
        return body if not annotations else \
            f"{body}\n{marker('annotations', digest=digest, sent=sent)}\n"

    final = summary(len(annotations), text)
    if run.status == "completed" and run.conclusion == conclusion and run.title == title \
            and run.summary == final:
        return
    run, sent = _resume(gh, run, digest, len(annotations), title, sha)
    left = annotations[sent:]
    while len(left) > ANNOTATIONS_PER_REQUEST:
        batch, left = left[:ANNOTATIONS_PER_REQUEST], left[ANNOTATIONS_PER_REQUEST:]
        sent += len(batch)
        gh.update_check_run(run.id, title=title,
                            summary=summary(sent, f"Annotating findings: {sent} of "
                                            f"{len(annotations)} sent."),
                            annotations=batch)
    gh.update_check_run(run.id, status="completed", conclusion=conclusion,
                        title=title, summary=final, annotations=left or None)


def _resume(gh: GitHubPort, run: Any, digest: str, total: int, title: str,
            sha: str | None) -> tuple[Any, int]:
    """Where :func:`_complete` goes on: ``(run, annotations already sent)`` from the marker in
    ``run``'s summary: the count sent when it is for the same list (``digest``, at most
    ``total``); a new run on ``sha`` and 0 when ``run`` holds annotations of another list."""
    m = ANNOTATIONS_MARKER.search(run.summary or "")
    if m is None:
        return run, 0
    if m.group(1) == digest:
        return run, min(int(m.group(2)), total)
    if int(m.group(2)) > 0 and sha is not None:
        run = gh.create_check_run(CHECK_NAME, sha, status="in_progress", title=title,
                                  external_id=run.external_id,
                                  summary="campaign-bot is checking the evidence files.")
    return run, 0


def _report_unread(gh: GitHubPort, config: RepoConfig, number: int, sha: str,
                   why: str) -> ReviewOutcome:
    """The evidence of PR ``number`` could not be read through git: say so in the check run
    (``failure``: nothing was verified) and the summary comment."""
    outcome = ReviewOutcome(sha, [], conclusion="failure", unread=why)
    run = _check_run(gh, sha, number) if config.review.check_run else None
    counts = dict.fromkeys(SEVERITY_ORDER, 0)
    summary = render(
        "summary.md.j2", marker_text=marker("summary", pr=number), sha=sha, analyses=[],
        hashes=0, problems=0, counts=counts, verdicts=[], findings=[], more=0, skipped=[],
        external=[], errors=[], unread=why)
    outcome.summary = upsert_comment(gh, number, summary, "summary", pr=number)
    if run is not None:
        text = render("check_run.md.j2", hashes=0, problems=0, counts=counts, campaigns=[],
                      errors=[], unread=why, dashboards={})
        _complete(gh, run, "failure", "Evidence not read", text)
    return outcome


def review_on_push(event: Event, gh: GitHubPort, config: RepoConfig | None, *,
                   git: GitMirrors, public_url: str | None = None) -> None:
    """Review the PR's evidence when it is opened, pushed to or reopened (also when the push
    was the bot's own evidence commit: the review only reads and reports); ``public_url``:
    see :func:`review_pull`."""
    number = event.payload.get("number") or (event.payload.get("pull_request") or {}).get(
        "number")
    if not isinstance(number, int):
        return
    if config is None:
        log.info("delivery %s: repo config broken; PR #%s not reviewed", event.delivery_id,
                 number)
        return
    if not config.review.enabled:
        return
    review_pull(gh, config, number, git=git, trigger=event.action or "pull_request",
                pull=pull_of(event.payload, gh.repo), public_url=public_url)


def pull_of(payload: dict[str, Any], repo: str) -> PullInfo | None:
    """The PR a ``pull_request`` delivery describes, when it is complete and about ``repo``
    (else None: the review reads it from GitHub)."""
    pr = payload.get("pull_request")
    if not isinstance(pr, dict):
        return None
    head, base = pr.get("head") or {}, pr.get("base") or {}
    base_repo = (base.get("repo") or {}).get("full_name")
    head_repo = (head.get("repo") or {}).get("full_name")
    fields = (pr.get("number"), head.get("sha"), head.get("ref"), base.get("ref"),
              base.get("sha"))
    if base_repo != repo or not all(isinstance(f, (int, str)) and f for f in fields):
        return None
    return PullInfo(number=int(pr["number"]), title=str(pr.get("title") or ""),
                    author=str((pr.get("user") or {}).get("login") or ""),
                    state=str(pr.get("state") or "open"), head_sha=str(head["sha"]),
                    head_ref=str(head["ref"]), head_repo=head_repo, base_ref=str(base["ref"]),
                    base_sha=str(base["sha"]), base_repo=repo, is_fork=head_repo != repo)
