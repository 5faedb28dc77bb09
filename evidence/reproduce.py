"""The exact commands that reproduce a screen on a runner and re-check its evidence offline.

Every result the bot shows (the result comment, the check run, the campaign's live pages)
carries two blocks of shell commands built here, so that anyone can redo what the bot did
without the bot:

* **on a runner** (:func:`runner_commands`): clone the repository, check out the head the
  screen was approved for (fetched through ``refs/pull/N/head``, which holds a fork's commits
  too), write the frozen ``campaign.toml`` the screen ran under from its git blob (the
  ``scope_blob`` the bot pinned at dispatch: a later change of the default branch cannot
  change what is reproduced), and run ``campaign-bot screen`` with the same candidate, track,
  sessions and engine revisions.  The host's runner config (signing key, server command)
  supplies the rest, as in the screen workflow.
* **offline** (:func:`check_commands`): fetch the verified bundle where the bot committed it
  (branch and commit), or the workflow run's artifact when it was not committed, and run
  ``campaign-bot check`` on it with the default branch's ``trusted-keys.pem`` (never the one
  of the pull request, which its author controls).

Pure: no I/O; every value is quoted with :func:`shlex.quote`, so a name that passed the
command grammar cannot become shell syntax.  ``tests/test_screen_service_e2e.py`` runs the
printed commands as they are printed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class ScreenRecipe:
    """What a screen ran, as the bot recorded it at dispatch.

    ``clone_url``: the repository's HTTPS git URL (no credentials); ``campaign_path``: the
    campaign directory in the repository (``.`` for the root); ``candidate``: the candidate
    name, None for a control-vs-control screen; ``sessions``: sessions of both arms;
    ``head_sha``: the 40-digit commit approved; ``scope_blob``: git blob SHA of the default
    branch's ``campaign.toml`` the screen ran under; ``label``: the screen's label (``S12``),
    used to name the working folders; ``pr_number``: the pull request (its ``refs/pull/N/head``
    is fetched); ``default_branch``: where ``trusted-keys.pem`` is read for the re-check;
    ``control_revision``/``candidate_revision``: engine revisions of the arms when they differ
    from the scope's (``/compare``, ``/bisect``), else None.
    """

    clone_url: str
    campaign_path: str
    track: str
    candidate: str | None
    sessions: int
    head_sha: str
    scope_blob: str
    label: str
    pr_number: int | None
    default_branch: str
    control_revision: str | None = None
    candidate_revision: str | None = None


def _q(*parts: str) -> str:
    return " ".join(shlex.quote(p) for p in parts)


def _camp(r: ScreenRecipe) -> str:
    return r.campaign_path.strip("/") or "."


def runner_commands(r: ScreenRecipe) -> list[str]:
    """Shell lines, run in an empty folder on a runner host, that run the screen again and
    leave its signed bundle in ``LABEL-repro/bundle``.  Shape: ``git clone``, ``git fetch``
    of the PR head, ``git checkout``, ``git cat-file`` of the frozen scope, ``campaign-bot
    screen``; the last line exits 0 (clean) or 1 (the bundle records problems)."""
    work = f"{r.label}-repro"
    camp = _camp(r)
    lines = [_q("git", "clone", "--quiet", r.clone_url, work) + f" && cd {shlex.quote(work)}"]
    if r.pr_number is not None:
        lines.append(_q("git", "fetch", "--quiet", "origin", f"refs/pull/{r.pr_number}/head"))
    lines.append(_q("git", "checkout", "--quiet", "--detach", r.head_sha))
    lines.append(_q("git", "cat-file", "blob", r.scope_blob) + " > frozen-campaign.toml")
    args = ["campaign-bot", "screen", "--campaign", camp, "--track", r.track]
    if r.candidate_revision is None:  # a revision screen names no candidate
        args += ["--control-only"] if r.candidate is None else ["--candidate", r.candidate]
    args += ["--sessions", str(r.sessions), "--frozen-scope", "frozen-campaign.toml",
             "--frozen-scope-blob", r.scope_blob]
    if r.control_revision is not None:
        args += ["--control-revision", r.control_revision]
    if r.candidate_revision is not None:
        args += ["--candidate-revision", r.candidate_revision]
    args += ["--out", "bundle"]
    lines.append(_q(*args))
    return lines


def check_commands(r: ScreenRecipe, *, bundle_path: str | None, commit: str | None,
                   run_id: int | None = None, artifact: str | None = None,
                   repo: str | None = None) -> list[str]:
    """Shell lines, run in an empty folder anywhere, that verify the screen's bundle and
    judge it again with ``campaign-bot check`` (exit 0 clean, 1 findings, as ``check``).

    ``bundle_path``/``commit``: where the bot committed the verified bundle (repository path
    and commit SHA); both None: the bundle is only the workflow run's artifact, fetched with
    ``gh run download RUN_ID --name ARTIFACT --repo REPO`` (GitHub's CLI; needs ``run_id``,
    ``artifact`` and ``repo``).  Raises ValueError when neither location is given."""
    work = f"{r.label}-check"
    camp = _camp(r)
    keys = f"origin/{r.default_branch}:{camp}/trusted-keys.pem" if camp != "." else \
        f"origin/{r.default_branch}:trusted-keys.pem"
    lines = [_q("git", "clone", "--quiet", r.clone_url, work) + f" && cd {shlex.quote(work)}"]
    if bundle_path is not None and commit is not None:
        lines.append(_q("git", "checkout", "--quiet", "--detach", commit))
        target = bundle_path
    elif run_id is not None and artifact is not None and repo is not None:
        if r.pr_number is not None:
            lines.append(_q("git", "fetch", "--quiet", "origin", f"refs/pull/{r.pr_number}/head"))
        lines.append(_q("git", "checkout", "--quiet", "--detach", r.head_sha))
        lines.append(_q("gh", "run", "download", str(run_id), "--repo", repo, "--name",
                        artifact, "--dir", "bundle"))
        target = "bundle"
    else:
        raise ValueError("check_commands needs bundle_path and commit, or run_id, artifact "
                         "and repo")
    lines.append(_q("git", "show", keys) + " > trusted-keys.pem")
    lines.append(_q("campaign-bot", "check", target, "--campaign", camp, "--trusted-keys",
                    "trusted-keys.pem"))
    return lines


def campaign_commands(*, bundle_dir: str | None, track: str, candidate: str | None,
                      sessions: int) -> list[str]:
    """Shell lines, run in the campaign's directory of a checkout of the default branch,
    that re-check a committed screen (``campaign-bot check BUNDLE_DIR --campaign .``, when
    its receipts are in a bundle directory) and run it again on a runner host with the
    campaign.toml checked out (``campaign-bot screen``): what the campaign's pages show,
    which know the committed evidence but not the pull request a screen came from."""
    lines = []
    if bundle_dir is not None:
        lines.append(_q("campaign-bot", "check", bundle_dir, "--campaign", "."))
    args = ["campaign-bot", "screen", "--campaign", ".", "--track", track]
    args += ["--control-only"] if candidate is None else ["--candidate", candidate]
    args += ["--sessions", str(sessions), "--out", "bundle"]
    lines.append(_q(*args))
    return lines
