"""The /screen flow's GitHub writes against the GitHub double: a comment carrying a marker is
posted once even when the delivery that posts it is retried or taken over by another replica
after GitHub stored the comment (:func:`bot.features.screen.writes.post_comment_once`)."""

from __future__ import annotations

import pytest
from github_helpers import BOT, REPO, port

from bot.features.screen.runtime import ScreenOptions
from bot.features.screen.writes import post_comment_once
from bot.render import marker

OPTIONS = ScreenOptions(write_retries=2, write_backoff_s=0.0)


@pytest.fixture
def pr(github_double):
    """The double serving PR #2 of :data:`REPO`."""
    github_double.add_repo(REPO, {"README.md": "hello\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hello\nworld\n"})
    return github_double


def _bot_comments(double, mark: str) -> list[str]:
    return [c["body"] for c in double.repo(REPO).comments.values() if mark in c["body"]]


def test_a_taken_over_delivery_finds_the_result_comment_before_posting(pr) -> None:
    """A replica posted S1's result, then died before its database commit stored the
    comment's id: the next replica's first write must find it, never post a second one."""
    mark = marker("screen-result", screen="S1")
    gh = port(pr)
    first = post_comment_once(OPTIONS, gh, 2, f"{mark}\nS1: SUPPORTED", mark)
    # the killed replica's database never saw first.id; the delivery runs again
    again = post_comment_once(OPTIONS, gh, 2, f"{mark}\nS1: SUPPORTED", mark)
    assert again.id == first.id
    assert _bot_comments(pr, mark) == [f"{mark}\nS1: SUPPORTED"]
    posts = [c for c in pr.calls
             if c.method == "POST" and c.path.endswith("/issues/2/comments")]
    assert len(posts) == 1


def test_a_found_comment_with_other_text_is_edited_not_doubled(pr) -> None:
    mark = marker("screen-result", screen="S2")
    gh = port(pr)
    first = post_comment_once(OPTIONS, gh, 2, f"{mark}\nS2: running", mark)
    again = post_comment_once(OPTIONS, gh, 2, f"{mark}\nS2: NOT SHOWN", mark)
    assert again.id == first.id
    assert _bot_comments(pr, mark) == [f"{mark}\nS2: NOT SHOWN"]


def test_a_user_quoting_the_marker_does_not_stop_the_post(pr) -> None:
    mark = marker("screen-result", screen="S3")
    pr.add_comment(REPO, 2, f"> {mark}\nquoted", user="mallory")
    post_comment_once(OPTIONS, port(pr), 2, f"{mark}\nS3: REFUSED", mark)
    bodies = _bot_comments(pr, mark)
    assert len(bodies) == 2 and f"{mark}\nS3: REFUSED" in bodies
    assert BOT in {c["user"] for c in pr.repo(REPO).comments.values()}
