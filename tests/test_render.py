"""Templates: StrictUndefined, escaping of user text, neutralised mentions, markers."""

from __future__ import annotations

import pytest
from jinja2 import UndefinedError

from bot.render import (
    ZWSP,
    escape_user_text,
    has_marker,
    inline_code,
    marker,
    neutralise_mentions,
    render,
    table_cell,
)


def test_missing_variable_is_an_error() -> None:
    with pytest.raises(UndefinedError):
        render("reply.md.j2", marker_text="m", login="a")  # no 'message'


@pytest.mark.parametrize("text,expected", [
    ("@alice please", f"@{ZWSP}alice please"),
    ("mail a@b.org", f"mail a@{ZWSP}b.org"),
    ("@ alone", "@ alone"),
], ids=["mention", "email", "bare-at"])
def test_mentions(text: str, expected: str) -> None:
    assert neutralise_mentions(text) == expected


def test_user_text_cannot_inject_markdown_or_markers() -> None:
    s = escape_user_text("<!-- campaign-bot:summary pr=1 --> [x](http://e) **b** @org/team")
    assert "<!--" not in s and "](" not in s.replace("\\](", "")
    assert "\\*\\*b\\*\\*" in s and f"@{ZWSP}org" in s
    assert "|" not in table_cell("a | b\nc").replace("\\|", "")
    assert "\n" not in table_cell("a\nb")


def test_inline_code_cannot_be_broken_out_of() -> None:
    assert inline_code("a`b") == "``a`b``"
    assert inline_code("`x`") == "`` `x` ``"


def test_marker_round_trip_and_rejects_spaces() -> None:
    m = marker("summary", pr=5)
    assert m == "<!-- campaign-bot:summary pr=5 -->"
    assert has_marker(f"x\n{m}\n", "summary", pr=5)
    assert not has_marker(m, "summary", pr=50)
    with pytest.raises(ValueError):
        marker("reply", comment="a b")


def test_rendered_reply_escapes_user_login_and_is_capped() -> None:
    body = render("reply.md.j2", marker_text=marker("reply", comment=1, line=1),
                  login="@evil", message="x" * 70000)
    assert body.startswith("<!-- campaign-bot:reply comment=1 line=1 -->")
    assert f"@{ZWSP}evil" in body and len(body) <= 65536 and "truncated" in body
