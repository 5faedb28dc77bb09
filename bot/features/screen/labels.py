"""Labels on a pull request from its screens (``[labels]`` of the repository config).

What a PR should carry is computed from the database (:func:`wanted`), never from what
happened last, so every call converges on the same set whatever order events came in:

* ``supported`` / ``inconclusive`` / ``failed``: for each candidate (or control) and track
  screened on the PR, the verdict of its latest *judged* screen (one that ended with a
  verdict: a failed or refused run judges nothing and leaves the earlier verdict standing):
  SUPPORTED and EQUIVALENT give ``supported``, INCONCLUSIVE ``inconclusive``, FAILED and
  REJECTED ``failed``.  One PR may carry several (one track supported, another
  inconclusive);
* ``awaiting-approval``: a fork pushed after its screen was approved, the queued screen
  was cancelled, and nobody has requested that candidate and track again since.

:func:`sync_labels` then adds what is missing (creating a label in the repository the first
time it is used, with its colour and description) and removes the bot's labels that no
longer hold; labels the bot does not manage are never touched.  It runs when a screen is
queued, when it ends, and when a fork's push cancels screens.  A label GitHub refuses is
logged and never fails the screen flow: the status and result comments say the same.
"""

from __future__ import annotations

import logging
import re
from types import MappingProxyType

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import Runtime
from bot.github import GitHubError, GitHubPort
from bot.repo_config import LabelsSection

log = logging.getLogger(__name__)

VERDICT_LABEL = MappingProxyType({
    "SUPPORTED": "supported", "EQUIVALENT": "supported", "INCONCLUSIVE": "inconclusive",
    "FAILED": "failed", "REJECTED": "failed",
})
"""Verdict of a judged screen -> the ``[labels]`` key it sets."""
STYLE = MappingProxyType({
    "supported": ("0e8a16", "campaign-bot: the latest screen of a track is SUPPORTED"),
    "inconclusive": ("fbca04", "campaign-bot: the latest screen of a track is INCONCLUSIVE"),
    "failed": ("b60205", "campaign-bot: the latest screen of a track FAILED or was REJECTED"),
    "awaiting_approval": ("d93f0b", "campaign-bot: a fork's new head awaits a screen approval"),
})
"""``[labels]`` key -> (colour, description) a label is created with (GitHub allows 100
characters of description)."""
_NEW_HEAD = re.compile(r"new head ([0-9a-f]{7,40})")


def _verdict_keys(rows: list[Screen]) -> set[str]:
    """Label keys of the latest judged screen of each (kind, candidate, track) in ``rows``
    (oldest first)."""
    latest: dict[tuple[str, str, str], str] = {}
    for s in rows:
        label = VERDICT_LABEL.get(s.verdict or "")
        if s.state == screens.FINISHED and label is not None:
            latest[(s.kind, s.candidate, s.track)] = label
    return set(latest.values())


def _awaits_approval(rows: list[Screen]) -> bool:
    """True when a screen in ``rows`` was cancelled by a fork's new head and its candidate
    and track were not requested again since."""
    for s in rows:
        if s.state != screens.CANCELLED or not _NEW_HEAD.search(s.detail or ""):
            continue
        key = (s.kind, s.candidate, s.track)
        if not any(t.id > s.id and (t.kind, t.candidate, t.track) == key for t in rows):
            return True
    return False


def wanted(db: Session, repo: str, pr_number: int) -> set[str]:
    """The ``[labels]`` keys PR ``pr_number`` of ``repo`` should carry now (see the module
    docstring)."""
    rows = list(db.scalars(select(Screen).where(Screen.repo == repo,
                                                Screen.pr_number == pr_number)
                           .order_by(Screen.id)))
    keys = _verdict_keys(rows)
    if _awaits_approval(rows):
        keys.add("awaiting_approval")
    return keys


def label_names(section: LabelsSection) -> dict[str, str]:
    """``[labels]`` key -> label name, for the labels turned on (none when disabled)."""
    if not section.enabled:
        return {}
    return {k: getattr(section, k) for k in STYLE if getattr(section, k)}


def sync_labels(rt: Runtime, gh: GitHubPort, pr_number: int) -> tuple[list[str], list[str]]:
    """Make PR ``pr_number``'s bot labels what :func:`wanted` says, as ``gh``'s repository
    config (``[labels]``, cached; its defaults when the file is absent or broken) names
    them.  Returns ``(added, removed)`` label names.  Never raises for GitHub: a refusal is
    logged (the labels are a view of the results, which stand without them)."""
    try:
        cfg = rt.configs.load(gh).config
        names = label_names(cfg.labels if cfg is not None else LabelsSection())
        if not names:
            return [], []
        with rt.db() as db:
            keys = wanted(db, gh.repo, pr_number)
        return _apply(gh, pr_number, names, {names[k] for k in keys if k in names})
    except GitHubError:
        log.exception("labels of %s#%s not updated", gh.repo, pr_number)
        return [], []


def label_diff(have: list[str] | tuple[str, ...], managed: set[str],
               want: set[str]) -> tuple[list[str], list[str]]:
    """``(to add, to remove)``: the ``want`` labels not in ``have``, and the ``managed``
    labels in ``have`` not wanted (names compared without case, as GitHub does)."""
    present = {n.lower(): n for n in have}
    wanted_lower = {w.lower() for w in want}
    ours = {m.lower() for m in managed}
    add = sorted(n for n in want if n.lower() not in present)
    remove = sorted(n for low, n in present.items() if low in ours - wanted_lower)
    return add, remove


def _apply(gh: GitHubPort, pr_number: int, names: dict[str, str],
           want: set[str]) -> tuple[list[str], list[str]]:
    """Add the ``want`` labels PR ``pr_number`` lacks (created in the repository on first
    use), remove the managed ``names`` it has but should not; ``(added, removed)``."""
    add, remove = label_diff(gh.get_issue(pr_number).labels, set(names.values()), want)
    key_of = {v: k for k, v in names.items()}
    for n in add:
        color, description = STYLE[key_of[n]]
        if gh.ensure_label(n, color, description):
            log.info("label %r created in %s", n, gh.repo)
    if add:
        gh.add_labels(pr_number, add)
    for n in remove:
        gh.remove_label(pr_number, n)
    return add, remove
