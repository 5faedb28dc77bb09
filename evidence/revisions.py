"""Revision screens: the campaign's control config at two engine revisions, one per arm.

``/compare REV_A REV_B`` and each step of ``/bisect`` screen the *same* frozen protocol,
serving config, inputs and pool with only the engine revision changed: arm A runs the control
config at ``REV_A``, arm B the control config at ``REV_B``.  The verdict engine judges a
screen against a scope whose control is the scope's engine commit and whose candidates are
declared; a revision screen is judged against :func:`revision_scope`, the frozen scope with
the control's engine commit replaced by ``REV_A`` and one candidate declared, named
:func:`revision_candidate` (``rev-`` and the first 12 hex digits of ``REV_B``), with no flag
and no env of its own.  Nothing else of the scope changes, so every validity rule (inputs,
pool, order, lifecycle, quality gates) holds as for any screen, and the candidate's receipts
must record ``REV_B`` (a session that ran ``REV_A`` twice is CANDIDATE_IS_CONTROL).

Pure: no I/O.
"""

from __future__ import annotations

import re

from evidence.models import CampaignScope, Candidate

REVISION_RE = re.compile(r"^[0-9a-f]{7,40}$")
"""An engine revision as commands and the runner accept it: 7 to 40 lower-case hex digits."""
PREFIX = "rev-"


def revision_candidate(revision: str) -> str:
    """The candidate name of the arm that runs ``revision``: ``rev-`` + 12 hex digits.
    Raises ValueError for a revision that is not hex."""
    rev = revision.lower()
    if not REVISION_RE.match(rev):
        raise ValueError(f"engine revision {revision!r} is not 7 to 40 hex digits")
    return PREFIX + rev[:12]


def revision_scope(scope: CampaignScope, control_revision: str | None,
                   candidate_revision: str) -> CampaignScope:
    """``scope`` with the control at ``control_revision`` (None: the scope's own commit) and
    the candidates replaced by one, :func:`revision_candidate` of ``candidate_revision``:
    the control config (no flags, no env) at that revision.  Raises ValueError for a
    revision that is not hex."""
    cand = Candidate(name=revision_candidate(candidate_revision),
                     description=f"the control config at engine revision "
                                 f"{candidate_revision.lower()}")
    engine = scope.engine
    if control_revision is not None:
        revision_candidate(control_revision)  # the same check
        engine = engine.model_copy(update={"commit": control_revision.lower()})
    return scope.model_copy(update={"engine": engine, "candidates": [cand]})
