"""Which ``campaign.toml`` a signed screen bundle measured under, and whether that is the
campaign's frozen scope.

A screen's control, protocol, pool and serving settings must come from the default branch's
``campaign.toml`` (the *frozen scope*): a pull request that could redefine its own control
could slow the control down and call its candidate fast (a slow-down flag added to
``[serving] flags`` with a fast flag on candidate ``noop``, identical to control on the default
branch, read as "SUPPORTED, 86.7 % lower latency").  The runner records in the signed
statement the git blob SHA of the file its control came from (``scope_blob``), whether the bot
pinned it at dispatch (``scope_frozen``), the candidate (``candidate``) and that candidate's
definition (``candidate_config``), and keeps the file itself in the bundle
(:data:`SCOPE_FILE`).  :func:`binding_findings` compares those with the frozen scope the
caller knows (the default branch's ``campaign.toml``: ``check --base REF`` or the clone's
``origin/HEAD``, the bot's default branch; else the ``campaign.toml`` being checked):

* ``CONTROL_REDEFINED`` (P0): the bundle's scope differs from the frozen one in a section of
  :data:`FROZEN_SECTIONS`, or its candidate is one the frozen scope defines, defined
  otherwise;
* ``SCOPE_UNKNOWN`` (P0): the signed statement names a scope file that can be read nowhere
  (not in the bundle, not the file checked, not in git), so nothing ties the control to the
  frozen scope.

A bundle with either finding gives no verdict: its documents are not read (like a bundle
whose signature is refused).  Bundles whose statement names no scope (runners before
``scope_blob``) are left to the other rules.  The rules are pure; :func:`frozen_from_git`
is how ``campaign-bot check`` learns the default branch's file offline (read-only git).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evidence.hashing import git_blob_sha
from evidence.models import CampaignScope, Candidate, Finding

FROZEN_SECTIONS = ("id", "engine", "image_digest", "checkpoint", "pool", "inputs", "workload",
                   "serving", "tracks", "protocol", "quality_gates")
"""``campaign.toml`` fields a pull request may not change for its own screen: everything that
defines the control, the measurement and the judgement.  Only ``[[candidates]]`` it adds (and
the campaign's prose, budget and requesters, which the runner does not use) come from the
PR; a candidate the frozen scope already defines keeps that definition."""

SCOPE_FILE = "data/scope.toml"
"""Bundle-relative path of the copy of the ``campaign.toml`` the runner took the control from
(its git blob SHA is the signed statement's ``scope_blob``)."""

RESOLUTION = ("merge the scope change on the default branch first, then screen again "
              "(/screen); a pull request defines only new candidates, as add_flags, "
              "remove_flags or env against the frozen control")


@dataclass(frozen=True)
class FrozenScope:
    """The campaign's frozen scope as the caller knows it: ``label`` says where it came from
    (``campaign.toml at origin/main``), ``data`` the file's bytes."""

    label: str
    data: bytes

    @property
    def blob(self) -> str:
        """Git blob SHA of :attr:`data`."""
        return git_blob_sha(self.data)


def parse_scope(data: bytes) -> CampaignScope | None:
    """``data`` (a ``campaign.toml``) as a scope, or None when it is not valid UTF-8 TOML or
    not a valid scope."""
    try:
        return CampaignScope.model_validate(tomllib.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, ValidationError, RecursionError):
        return None


def _attr(field_name: str) -> str:
    return next((n for n, f in CampaignScope.model_fields.items()
                 if (f.alias or n) == field_name), field_name)


def section_differences(frozen: CampaignScope, other: CampaignScope) -> list[str]:
    """Names of :data:`FROZEN_SECTIONS` in which ``other`` differs from ``frozen`` (in that
    order; empty when it defines the same control, protocol, pool and judgement)."""
    return [k for k in FROZEN_SECTIONS
            if getattr(frozen, _attr(k)) != getattr(other, _attr(k))]


def _definition(c: Candidate) -> dict[str, Any]:
    """What a candidate changes on the server (its prose and attribution aside)."""
    return {"add_flags": c.add_flags, "remove_flags": c.remove_flags, "env": c.env}


def redefined_candidates(frozen: CampaignScope, other: CampaignScope) -> list[str]:
    """Names of candidates that ``frozen`` defines and ``other`` defines differently (flags or
    env): a pull request may add candidates, never change one the default branch defines."""
    mine = {c.name: _definition(c) for c in other.candidates}
    return [c.name for c in frozen.candidates
            if c.name in mine and mine[c.name] != _definition(c)]


def binding_findings(bundle: str, predicate: dict[str, Any], frozen: FrozenScope,
                     read: Callable[[str], bytes | None]) -> list[Finding]:
    """P0 findings for the signed bundle at ``bundle`` (root-relative folder, ``.`` for the
    root) whose verified statement is ``predicate``, against the frozen scope ``frozen``.

    ``read(sha)`` returns the bytes of a scope file whose git blob SHA is ``sha`` from
    wherever the caller can find one (the bundle's :data:`SCOPE_FILE`, the ``campaign.toml``
    checked, git objects), or None.  Empty when the statement names no scope, or when the
    scope it names defines the frozen control, protocol and pool and the candidate it ran is
    the one the frozen scope defines under that name (or one the frozen scope lacks)."""
    sha = predicate.get("scope_blob")
    if not isinstance(sha, str) or not sha:
        return []
    where = "attestation.dsse.json" if bundle == "." else f"{bundle}/attestation.dsse.json"
    ref = frozen.blob
    data = frozen.data if sha == ref else read(sha)
    if data is None or git_blob_sha(data) != sha:
        return [Finding(
            rule="SCOPE_UNKNOWN", severity="P0", path=where,
            message=f"the signed statement says the control came from campaign.toml git blob "
                    f"{sha[:12]}, which is neither in the bundle ({SCOPE_FILE}) nor the "
                    f"campaign's frozen scope ({frozen.label}, blob {ref[:12]}) nor in git: "
                    "nothing ties its control to the frozen scope, so its sessions are not "
                    "judged",
            resolution="check inside the campaign's git clone (the blob is then read from "
                       f"git) or screen again with a runner that writes {SCOPE_FILE}")]
    frozen_scope, used = parse_scope(frozen.data), parse_scope(data)
    if frozen_scope is None or used is None:
        bad = frozen.label if frozen_scope is None else f"scope blob {sha[:12]}"
        return [Finding(rule="SCOPE_UNKNOWN", severity="P0", path=where,
                        message=f"{bad} is not a valid campaign.toml: the bundle's control "
                                "cannot be compared with the frozen scope; its sessions are "
                                "not judged",
                        resolution=RESOLUTION)]
    what = section_differences(frozen_scope, used)
    cand = predicate.get("candidate")
    mine = next((c for c in frozen_scope.candidates if c.name == cand), None)
    ran: dict[str, Any] | None = None
    if isinstance(predicate.get("candidate_config"), dict):
        ran = {k: predicate["candidate_config"].get(k) for k in ("add_flags", "remove_flags",
                                                                  "env")}
    elif predicate.get("scope_frozen") is not True:
        # a runner given no frozen scope took its candidate from the same file as its control
        ran = next((_definition(c) for c in used.candidates if c.name == cand), None)
    if mine is not None and ran is not None and ran != _definition(mine):
        what.append(f"candidate {cand}")
    if not what:
        return []
    pinned = ("pinned at dispatch" if predicate.get("scope_frozen") is True
              else "not pinned at dispatch: the runner's own checkout")
    return [Finding(
        rule="CONTROL_REDEFINED", severity="P0", path=where,
        message=f"the screen ran under campaign.toml git blob {sha[:12]} ({pinned}), which "
                f"differs from the campaign's frozen scope ({frozen.label}, blob {ref[:12]}) "
                f"in {', '.join(what)}: a screen may not redefine its own control, protocol "
                "or an existing candidate, so its sessions are not judged",
        resolution=RESOLUTION)]


_OID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
DEFAULT_BRANCH_REF = "refs/remotes/origin/HEAD"
"""What ``git clone`` (and ``gh pr checkout``'s clone) records as the remote's default
branch: ``campaign-bot check`` takes the frozen scope from there when no ``--base`` is given."""


def _git(top: Path, *args: str) -> bytes | None:
    try:
        res = subprocess.run(["git", "-C", str(top), *args], capture_output=True, check=False,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


def frozen_from_git(campaign: Path, base: str | None
                    ) -> tuple[FrozenScope | None, Callable[[str], bytes | None] | None]:
    """The frozen scope of the campaign folder ``campaign`` from its git clone, and a reader
    of git blobs by SHA (``git cat-file``); ``(None, None)`` outside a git work tree.

    The frozen scope is ``campaign.toml`` at ``base`` (``check --base REF``), else at
    :data:`DEFAULT_BRANCH_REF` when the clone has one; None when neither names a commit
    holding the file (a campaign the checked branch adds: its own file stands in)."""
    where = campaign.resolve()
    out = _git(where, "rev-parse", "--show-toplevel")
    if out is None:
        return None, None
    top = Path(out.decode().strip())

    def read_blob(sha: str) -> bytes | None:
        if not _OID.match(sha):
            return None
        return _git(top, "cat-file", "blob", sha)

    found = _default_branch(top, where, base)
    if found is None:
        return None, read_blob
    ref, folder = found
    data = _git(top, "cat-file", "blob", f"{ref}:{folder}campaign.toml")
    if data is None:
        return None, read_blob
    return FrozenScope(label=f"campaign.toml at {ref}", data=data), read_blob


def _default_branch(top: Path, where: Path, base: str | None) -> tuple[str, str] | None:
    """``(REF, folder prefix)``: the revision standing for the default branch (``base``, else
    :data:`DEFAULT_BRANCH_REF`'s target) and ``where``'s path in the tree (``""`` at the
    top, else ending in ``/``); None when there is no such revision."""
    ref = base
    if ref is None:
        head = _git(top, "symbolic-ref", "--short", "-q", DEFAULT_BRANCH_REF)
        ref = head.decode().strip() if head else None
    if not ref:
        return None
    try:
        rel = where.relative_to(top.resolve()).as_posix()
    except ValueError:
        return None
    folder = "" if rel == "." else f"{rel}/"
    if _git(top, "cat-file", "-e", f"{ref}:{folder}campaign.toml") is None:
        # not there: a campaign moved to another folder is still the same campaign (its id)
        folder = _folder_of_id(top, ref, where / "campaign.toml") or folder
    return ref, folder


MAX_CAMPAIGNS_SEARCHED = 200
"""At most this many ``campaign.toml`` files at the default branch are read to find a moved
campaign by its id (a repository holds a few campaigns; this bounds a hostile tree)."""


def _campaign_id(data: bytes | None) -> str | None:
    try:
        got = tomllib.loads((data or b"").decode("utf-8")).get("id")
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None
    return got if isinstance(got, str) and got else None


def _folder_of_id(top: Path, ref: str, own: Path) -> str | None:
    """The folder prefix (``""`` or ending in ``/``) of the ``campaign.toml`` at ``ref``
    whose ``id`` is that of the file ``own`` (the checked campaign's), None when none is
    (a new campaign) or ``own`` has no readable id."""
    try:
        want = _campaign_id(own.read_bytes() if own.stat().st_size <= 1 << 20 else None)
    except OSError:
        return None
    listing = _git(top, "ls-tree", "-r", "-z", "--name-only", ref) if want else None
    names = [n.decode("utf-8", "replace") for n in (listing or b"").split(b"\0")
             if n == b"campaign.toml" or n.endswith(b"/campaign.toml")]
    for name in names[:MAX_CAMPAIGNS_SEARCHED]:
        if _campaign_id(_git(top, "cat-file", "blob", f"{ref}:{name}")) == want:
            return name[: -len("campaign.toml")]
    return None


def default_branch_keys(campaign: Path, base: str | None) -> tuple[str, bytes | None] | None:
    """The campaign folder ``campaign``'s trusted keys file on the default branch, the only
    keys the bot trusts (docs/security.md: keys in a pull request are never trusted):
    ``("trusted-keys.pem at REF", its bytes, or None when the default branch has none)``.
    REF is ``base`` (``check --base``), else :data:`DEFAULT_BRANCH_REF`'s target.  None when
    that is unknown (outside a git work tree, no ``--base`` and no ``origin/HEAD``) or the
    default branch has no ``campaign.toml`` in that folder (a campaign the checked branch
    adds): then the checkout's own file stands in, as its ``campaign.toml`` does for the
    scope.  Raises nothing; a file over 1 MiB reads as None (git's own limit here)."""
    from evidence.keyfile import TRUSTED_KEYS_FILE

    where = campaign.resolve()
    out = _git(where, "rev-parse", "--show-toplevel")
    if out is None:
        return None
    top = Path(out.decode().strip())
    found = _default_branch(top, where, base)
    if found is None:
        return None
    ref, folder = found
    if _git(top, "cat-file", "-e", f"{ref}:{folder}campaign.toml") is None:
        return None
    size = _git(top, "cat-file", "-s", f"{ref}:{folder}{TRUSTED_KEYS_FILE}")
    data = None
    if size is not None and int(size.decode().strip() or 0) <= 1 << 20:
        data = _git(top, "cat-file", "blob", f"{ref}:{folder}{TRUSTED_KEYS_FILE}")
    return f"{TRUSTED_KEYS_FILE} at {ref}", data
