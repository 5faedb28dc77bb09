"""The campaign a screen is about, read from the default branch, and who may screen it:
``campaign.toml`` and the runner keys it trusts (:func:`load_campaign`,
:func:`find_campaign`), the requester's admission (:func:`authorise`, again just before the
dispatch: :func:`recheck`), the head a screen runs (:func:`pin_head`), and the runner labels
it is routed to (:func:`runner_labels`).  Raises :class:`~.runtime.UserError` for anything
the requester must fix.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from pydantic import ValidationError

from bot.commands import UserError
from bot.features.screen.bundle import TRUSTED_KEYS_FILE
from bot.features.screen.grammar import (
    FULL_SHA_RE,
    USAGE,
    ScreenContinue,
    ScreenRequest,
    command_text,
    continue_text,
)
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import (
    CAMPAIGN_FILE,
    WRITE_PERMISSIONS,
    ScreenConfig,
    user_error,
)
from bot.github import GitHubNotFound, GitHubPort, PullInfo
from evidence.hashing import git_blob_sha
from evidence.models import CampaignScope


def read_file(gh: GitHubPort, path: str, ref: str) -> bytes | None:
    """The bytes of ``path`` at ``ref``, None when absent."""
    try:
        return gh.get_file(path, ref)
    except GitHubNotFound:
        return None



@dataclass
class Campaign:
    """A campaign as read from the default branch: its directory, scope and trusted keys."""

    path: str
    scope: CampaignScope
    trusted_keys: bytes | None
    blob: str = ""
    """Git blob SHA of the ``campaign.toml`` read: the screen workflow's ``scope_blob``."""


def load_campaign(gh: GitHubPort, repo: str, ref: str, path: str) -> Campaign:
    """Read ``PATH/campaign.toml`` (and ``trusted-keys.json``) at ``ref``.

    Raises :class:`UserError` naming the file and the field when it is absent or invalid.
    """
    f = f"{path}/{CAMPAIGN_FILE}" if path else CAMPAIGN_FILE
    raw = read_file(gh, f, ref)
    if raw is None:
        raise user_error("message", message=f"no {f} on the default branch ({ref})")
    try:
        scope = CampaignScope.model_validate(tomllib.loads(raw.decode("utf-8")))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise user_error("message", message=f"{f} on {ref} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise user_error("message", message=f"{f} on {ref}: field {loc}: {e['msg']}") from None
    kf = f"{path}/{TRUSTED_KEYS_FILE}" if path else TRUSTED_KEYS_FILE
    return Campaign(path, scope, read_file(gh, kf, ref), git_blob_sha(raw))


def find_campaign(
    gh: GitHubPort, repo: str, ref: str, config: ScreenConfig, want: str | None
) -> Campaign:
    """The campaign a command is about, among ``config.campaign_dirs`` at ``ref``: the only
    one, or the one named ``campaign=ID`` (``want``).  Raises :class:`UserError` when there is
    none, or several and none named."""
    found: list[Campaign] = []
    errors: list[UserError] = []
    for d in config.campaign_dirs:
        try:
            found.append(load_campaign(gh, repo, ref, d))
        except UserError as exc:
            errors.append(exc)
    if want is not None:
        for c in found:
            if c.scope.id == want:
                return c
        raise user_error(
            "usage", message=f"no campaign {want!r} in this repository",
            valid=[c.scope.id for c in found], usage=USAGE,
        )
    if len(found) == 1:
        return found[0]
    if not found:
        raise errors[0] if errors else user_error("message", message="no campaign configured")
    raise user_error(
        "usage", message="this repository holds several campaigns; name one with campaign=ID",
        valid=[c.scope.id for c in found], usage=USAGE,
    )


# --------------------------------------------------------------------------- authorisation


def authorise(gh: GitHubPort, repo: str, login: str, scope: CampaignScope) -> str:
    """How ``login`` may screen: ``"write"`` (repository permission) or ``"requester"``.

    Raises :class:`UserError` (kind ``unauthorised``) otherwise.
    """
    perm = gh.get_permission(login)
    if perm in WRITE_PERMISSIONS:
        return "write"
    if login.lower() in {r.lower() for r in scope.requesters}:
        return "requester"
    raise user_error(
        "unauthorised", who_login=login, message=f"repository permission is {perm!r}",
        requesters=list(scope.requesters),
    )


def pin_head(pr: PullInfo, req: ScreenRequest | ScreenContinue) -> str:
    """The head SHA a screen runs.  Same-repository PRs: the head at authorisation.  Fork
    PRs: the command must name that head in full (``sha=`` and 40 hex digits) so the approval
    is bound to the exact commit the approver saw: a prefix could match a commit pushed after
    the review.  A ``sha=`` given on a same-repository PR is held to the same rule.

    Raises :class:`UserError` (kind ``approve``) when ``sha=`` is missing on a fork PR,
    shorter than 40 digits, or not the head; the reply gives the exact command naming the
    current head in full."""
    head = pr.head_sha.lower()
    approved = req.sha

    def refuse(message: str) -> UserError:
        again = (command_text(req, head) if isinstance(req, ScreenRequest)
                 else continue_text(req, head))
        return user_error("approve", message=message, approve_command=again)

    if approved is None:
        if not pr.is_fork:
            return pr.head_sha
        raise refuse("This PR comes from a fork: its code would run on a self-hosted runner, "
                     "so the approval must name the full SHA of the head commit you reviewed.")
    if not FULL_SHA_RE.match(approved):
        if head.startswith(approved):
            raise refuse(f"sha={approved} is {len(approved)} hex digits; an approval names the "
                         f"full 40-digit head commit (now {head}), never a prefix.")
        raise refuse(f"sha={approved} is not the PR head, which is now {head}: it moved; "
                     "look at the new commits.")
    if approved != head:
        raise refuse(f"sha={approved} is not the PR head, which is now {head}: a new push "
                     "needs a new approval.")
    return pr.head_sha


def recheck(gh: GitHubPort, s: Screen, ref: str) -> None:
    """Authorisation again, just before the dispatch (permissions change while a screen
    waits: a check at request time alone is a time-of-check/time-of-use gap): a requester by
    write permission must still have it, a campaign requester must still be listed on the
    default branch.  ``[screen] allowed`` logins are not re-read
    here.  Raises :class:`UserError` naming what changed."""
    if s.authorised_as == "write":
        perm = gh.get_permission(s.requested_by)
        if perm not in WRITE_PERMISSIONS:
            raise user_error("message", message=f"{s.requested_by} no longer has write "
                            f"permission (now {perm!r}); ask again")
    elif s.authorised_as == "requester":
        scope = load_campaign(gh, s.repo, ref, s.campaign_path).scope
        if s.requested_by.lower() not in {r.lower() for r in scope.requesters}:
            raise user_error("message", message=f"{s.requested_by} is no longer a requester "
                            f"of campaign {scope.id}; ask again")


def runner_labels(scope: CampaignScope, where: str) -> list[str]:
    """The self-hosted runner labels a screen of ``scope`` runs on: its ``[pool]
    runner_labels`` (the one place they are named; the workflow gets them as its ``runs_on``
    input).  Raises :class:`UserError` when the pool names none."""
    labels = [x for x in scope.pool.runner_labels if x.strip()]
    if not labels:
        raise user_error("message", message=f"{where}: [pool] runner_labels is empty; name the "
                        "self-hosted runner labels of the pool (e.g. [\"self-hosted\", "
                        "\"ascend910b1\", \"x4\"]) so the screen workflow can be routed")
    return labels

