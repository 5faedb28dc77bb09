"""Committing verified screen bundles where the campaign keeps its evidence.

When a screen's bundle verifies (manifests and signature,
:func:`bot.features.screen.bundle.verify_bundle`: the signature covers every file present, so
everything committed is signed), the bot commits it under
``<campaign>/<[screen] evidence_path>/<screen label>/`` (default ``campaigns/NAME/screens/S12/``)
in one commit whose message names the screen, the track and the verdict:

* a pull request from this repository: on the PR's head branch, over its current tip, unless
  that branch is the default branch, the PR's base or a ``campaign-bot/`` branch
  (:func:`own_branch_reason`), or a protected branch, another open PR's head or an open
  PR's base (:func:`shared_branch_reason`): then as for a fork;
* a pull request from a fork: the bot cannot push to a fork, so on the bot's own branch
  ``campaign-bot/screens/PR-N`` of this repository, made from the base branch (never from the
  fork's commits: a branch of this repository holding a fork's code would run that code's
  ``push`` workflows with this repository's secrets), and the result comment says how to
  bring the files into the PR.

Rules:

* **No force, no lost update.** The commit is built on the branch tip just fetched and pushed
  as a fast-forward; when the branch moved meanwhile the push is rejected and the commit is
  rebuilt on the new tip (up to :data:`ATTEMPTS` times), else the screen is reported with the
  bundle left as the run's artifact.  A push whose answer is lost is looked up (``git
  ls-remote``) before it is called failed.
* **Frozen stays frozen.** A screen's directory is written once: when it already exists on the
  branch with the same files (a redelivery) nothing is committed; with other content (another
  screen under the same label) the commit is refused and nothing is rewritten.
* **Large files stay outside.** Files larger than ``[screen] max_committed_file_bytes``
  (default 10 MiB: the output MP4s) are not committed; their SHA-256, size and the workflow run
  and artifact they came from go into the bundle's ``external-artifacts.json``
  (:data:`evidence.manifest.EXTERNAL_ARTIFACTS_FILE`), which ``campaign-bot check`` and the
  bot's review list as external.  JSON documents (receipts, reports) are always committed.
* **No loop.** Only a finished screen (``workflow_run`` completed, once per screen) commits.
  The push it makes comes back as ``push`` and ``pull_request`` synchronize deliveries sent by
  the bot itself; those run the PR's evidence review and the status header, which only read
  and write comments, and nothing triggered by a push ever commits.  Each commit needs a
  human's ``/screen``.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.github import GitHubPort, PullInfo
from bot.github.git import GitError, GitMirrors, PushRejected, sha256_file
from bot.github.tree import twin_paths, unsafe_path
from bot.render import render
from bot.repo_config import DEFAULT_MAX_COMMITTED_BYTES, DEFAULT_MAX_COMMITTED_FILES
from evidence.manifest import EXTERNAL_ARTIFACTS_FILE

log = logging.getLogger(__name__)

ATTEMPTS = 3
"""Times a commit is rebuilt on a branch that moved before the screen is reported instead."""
FORK_BRANCH = "campaign-bot/screens/PR-{number}"
"""The bot's branch for the screens of a fork's pull request."""


@dataclass
class CommitOutcome:
    """What happened to a verified bundle: ``state`` is ``committed``, ``already`` (the same
    files were committed before), ``refused`` (the directory holds other content), ``failed``
    (git or GitHub failed), ``dry-run`` (nothing may be written) or ``off`` (``[screen]
    commit_bundles = false``); ``message`` is one sentence for people.  ``fork``: the bundle
    goes to the bot's own branch, for the reason ``own_reason`` (:func:`own_branch_reason`)."""

    state: str
    message: str
    path: str
    branch: str | None = None
    sha: str | None = None
    fork: bool = False
    own_reason: str | None = None
    files: int = 0
    external: list[str] = field(default_factory=list)
    web: str = ""

    def record(self) -> dict[str, Any]:
        """The outcome as stored with the screen (``Screen.summary["evidence"]``)."""
        return {"state": self.state, "path": self.path, "branch": self.branch, "sha": self.sha,
                "files": self.files, "external": len(self.external), "message": self.message}


def target_dir(campaign_path: str, evidence_path: str, label: str) -> str:
    """``<campaign>/<evidence_path>/<label>`` as a repository path."""
    parts = [p for p in (campaign_path.strip("/"), evidence_path.strip("/"), label) if p
             and p != "."]
    return posixpath.join(*parts)


def split_bundle(root: Path, max_file_bytes: int) -> tuple[dict[str, Path], dict[str, Any]]:
    """The bundle's regular files: ``(committed: rel -> path, external: rel -> {sha256,
    size})``; a file over ``max_file_bytes`` is external unless it is a JSON document.
    Raises ValueError for a link or special file (a verified bundle has none) and for a name
    git must not be given (:func:`bot.github.tree.unsafe_path`: CR/LF and other control or
    bidirectional characters, over-long names) or for two names that are one on a
    case-insensitive or normalising file system (:func:`bot.github.tree.twin_paths`:
    ``x.log`` beside ``X.LOG``, NFC beside NFD), before any git call."""
    committed: dict[str, Path] = {}
    external: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames
                                         if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink() or not p.is_file():
                raise ValueError(f"{rel}: not a regular file")
            why = unsafe_path(rel)
            if why is not None:
                raise ValueError(f"{rel!r}: {why}")
            size = p.stat().st_size
            if size > max_file_bytes and not rel.endswith(".json"):
                external[rel] = {"sha256": sha256_file(p), "size": size}
            else:
                committed[rel] = p
    twins = twin_paths([*committed, *external])
    if twins is not None:
        raise ValueError(twins)
    return committed, external


def external_map(external: dict[str, Any], *, run_url: str, run_id: int | None,
                 artifact: str | None, threshold: int) -> bytes:
    """The bundle's ``external-artifacts.json`` for files kept in the run's artifact."""
    entries = {rel: {"sha256": v["sha256"], "size": v["size"], "external": True,
                     "url": run_url, "run_id": run_id, "artifact": artifact}
               for rel, v in sorted(external.items())}
    doc = {"schema": "campaign-bot/integrity@1",
           "note": f"Payload files of this signed bundle larger than {threshold} bytes, kept "
                   "in the workflow run's artifact instead of the repository; their SHA-256 "
                   "is the one the signed manifest lists.",
           "external": entries}
    return (json.dumps(doc, indent=2) + "\n").encode()


def commit_message(s: Any, verdict: str, run_url: str, n_files: int, n_external: int,
                   threshold: int, path: str) -> str:
    """The commit message: the screen, the track and the verdict on the first line."""
    kept = (f"; {n_external} file(s) over {threshold} bytes stay in the run's artifact, "
            f"listed in {EXTERNAL_ARTIFACTS_FILE}" if n_external else "")
    return (f"Screen {s.label}: {s.name} on track {s.track}: {verdict}\n\n"
            f"The verified bundle of screen {s.label} of campaign {s.campaign} "
            f"({s.kind} {s.name}, track {s.track}, head {s.head_sha[:12]}, verdict {verdict}),"
            f" from {run_url or 'its workflow run'}: {n_files} file(s) under {path}{kept}.\n\n"
            f"Campaign-Bot-Screen: {s.label}\nCampaign-Bot-Request: {s.request_id}\n")


def own_branch_reason(pr: PullInfo, default_branch: str) -> str | None:
    """Why the screen's evidence goes to the bot's own ``campaign-bot/screens/PR-N`` branch
    (made from the base branch) instead of the PR's head branch, or None when the head branch
    may take it.  The head branch is never used when the PR comes from a fork (the bot cannot
    push there), when it is the repository's default branch or the PR's own base (anyone who
    can open a PR could otherwise make the bot commit onto ``main``), or when it is one of the
    bot's own ``campaign-bot/`` branches."""
    if pr.is_fork:
        return "the pull request comes from a fork"
    if pr.head_ref == default_branch:
        return f"the pull request's head is the default branch {default_branch}"
    if pr.head_ref == pr.base_ref:
        return f"the pull request's head is its base branch {pr.base_ref}"
    if pr.head_ref.startswith("campaign-bot/"):
        return f"the pull request's head {pr.head_ref} is one of the bot's own branches"
    return None


def shared_branch_reason(gh: GitHubPort, pr: PullInfo) -> str | None:
    """Why a same-repository PR's head branch, which :func:`own_branch_reason` allows, is
    still not one the bot commits to, asked of GitHub; None when it may take the evidence.

    The bot commits to a head branch only when it is that PR's own working branch: not a
    protected branch (a release branch: GitHub's "Get a branch" ``protected`` flag), not
    the head of another open PR of this repository (someone else's work), not the base of
    an open PR (a branch others build on).  Anyone who can open a PR can name such a branch
    as its head; the evidence then goes to ``campaign-bot/screens/PR-N`` as for a fork.
    When GitHub cannot answer, the bot's own branch is used (never the doubtful one)."""
    branch = pr.head_ref
    try:
        if gh.branch_protected(branch):
            return f"the pull request's head branch {branch} is protected"
        others = sorted(p.number for p in gh.list_open_pulls(head=branch)
                        if p.number != pr.number and not p.is_fork)
        if others:
            return (f"the pull request's head branch {branch} is also the head of "
                    + ", ".join(f"#{n}" for n in others))
        based = sorted(p.number for p in gh.list_open_pulls(base=branch))
        if based:
            return (f"the pull request's head branch {branch} is the base of "
                    + ", ".join(f"#{n}" for n in based))
    except Exception as exc:  # noqa: BLE001 - doubt means the bot's own branch
        return f"whether the head branch {branch} is shared could not be read ({exc})"
    return None


def commit_screen(git: GitMirrors, gh: GitHubPort, s: Any, bundle: Path, verdict: str, *,
                  pr: PullInfo, evidence_path: str, max_file_bytes: int, run_url: str,
                  artifact: str | None, max_files: int = DEFAULT_MAX_COMMITTED_FILES,
                  max_bytes: int = DEFAULT_MAX_COMMITTED_BYTES) -> CommitOutcome:
    """Commit the verified bundle at ``bundle`` of screen ``s`` (see the module docstring).
    Blocking (the flow's thread).  A bundle with more than ``max_files`` files or
    ``max_bytes`` bytes to commit (after the large files went external) is ``refused``,
    nothing written.  Never raises for git or GitHub failures: they come back as ``failed``
    with the reason."""
    path = target_dir(s.campaign_path or "", evidence_path, s.label)
    try:
        default = gh.get_default_branch()
    except Exception as exc:  # noqa: BLE001 - reported, the artifact stays
        return CommitOutcome("failed", f"the default branch cannot be read: {exc}", path)
    why_own = own_branch_reason(pr, default) or shared_branch_reason(gh, pr)
    fork = why_own is not None
    branch = FORK_BRANCH.format(number=pr.number) if fork else pr.head_ref
    out = CommitOutcome("failed", "", path, branch, fork=fork, own_reason=why_own)
    try:
        committed, external = split_bundle(bundle, max_file_bytes)
    except (OSError, ValueError) as exc:
        out.message = f"the bundle cannot be committed: {exc}"
        return out
    out.external = sorted(external)
    size = sum(p.stat().st_size for p in committed.values())
    if len(committed) > max_files or size > max_bytes:
        out.state = "refused"
        out.message = (f"the bundle holds {len(committed)} file(s) of {size:,} bytes to commit, "
                       f"over the caps of {max_files:,} files and {max_bytes:,} bytes "
                       "([screen] max_committed_files, max_committed_bytes)")
        return out
    with tempfile.TemporaryDirectory(prefix="campaign-bot-commit-") as tmp:
        if external:
            if EXTERNAL_ARTIFACTS_FILE in committed:
                out.message = (f"the bundle already holds a file named {EXTERNAL_ARTIFACTS_FILE}; "
                               "its large files cannot be listed beside it")
                return out
            mp = Path(tmp) / EXTERNAL_ARTIFACTS_FILE
            mp.write_bytes(external_map(external, run_url=run_url, run_id=s.run_id,
                                        artifact=artifact, threshold=max_file_bytes))
            committed[EXTERNAL_ARTIFACTS_FILE] = mp
        files = {f"{path}/{rel}": p for rel, p in committed.items()}
        out.files = len(files)
        try:
            remote = gh.git_remote(push=True)
        except Exception as exc:  # noqa: BLE001 - reported, the artifact stays
            out.message = f"no git access: {exc}"
            return out
        if remote is None:
            out.state, out.message = "dry-run", "a dry run commits nothing"
            return out
        out.web = remote.url.removesuffix(".git")
        message = commit_message(s, verdict, run_url, len(committed), len(external),
                                 max_file_bytes, path)
        try:
            return _commit(git, remote, gh.repo, pr, files, message, out)
        except GitError as exc:
            out.message = str(exc)
            return out


def _commit(git: GitMirrors, remote: Any, repo: str, pr: PullInfo, files: dict[str, Path],
            message: str, out: CommitOutcome) -> CommitOutcome:
    assert out.branch is not None
    ref = f"refs/heads/{out.branch}"
    ours = dict(zip(files, git.blob_shas(repo, list(files.values())), strict=True))
    for _attempt in range(ATTEMPTS):
        tip: str | None
        if out.fork:
            tip = git.remote_ref(remote, repo, ref)
            base_ref = f"refs/heads/{pr.base_ref}"
            # trees only are read here (a huge file beside the campaign stays on the server)
            got = git.fetch(remote, repo, [ref] if tip else [base_ref], backfill=False)
            parent = got[ref] if tip else got[base_ref]
            tip = got.get(ref)
        else:
            try:
                tip = git.fetch(remote, repo, [ref], backfill=False)[ref]
            except GitError as exc:
                out.message = (f"the pull request's head branch {out.branch} cannot be read "
                               f"({exc})")
                return out
            parent = tip
        existing = {f"{out.path}/{e.path}": e.sha for e in git.ls_tree(repo, parent, out.path)}
        if existing:
            if existing == ours:
                out.state, out.sha = "already", parent
                out.message = f"{out.path} already holds exactly this bundle on {out.branch}"
                return out
            changed = sorted(p for p in existing if ours.get(p) != existing[p])
            example = changed[0] if changed else "-"
            out.state = "refused"
            out.message = (f"{out.path} already exists on {out.branch} with other content "
                           f"({len(changed)} file(s) differ, e.g. {example}); committed screen "
                           "evidence is never rewritten")
            return out
        sha = git.commit_files(repo, parent, files, message)
        try:
            pushed = git.push(remote, repo, sha, out.branch, expect=tip)
        except PushRejected as exc:
            log.info("screen evidence push to %s rejected (%s); rebuilding on the new tip",
                     out.branch, exc)
            continue
        out.state, out.sha = "committed", pushed.sha
        out.message = f"committed to {out.branch} as {pushed.sha[:12]}"
        return out
    out.message = (f"the branch {out.branch} moved {ATTEMPTS} times while the bundle was being "
                   "committed")
    return out


def evidence_note(o: CommitOutcome, *, max_file_bytes: int) -> str:
    """The paragraph the result comment gets about where the bundle went."""
    return render("screen_evidence.md.j2", o=o, limit_mib=max_file_bytes / (1 << 20),
                  external_file=EXTERNAL_ARTIFACTS_FILE)
