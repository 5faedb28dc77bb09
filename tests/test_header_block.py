"""bot.features.header.block: only the marked block changes, human text survives byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.features.header.block import (
    END,
    START,
    BlockState,
    MarkersMissing,
    current_block,
    locate,
    normalise,
    splice,
)

HUMAN = "Goal and scope\r\n\r\nOptimize MiniMax-H3 Ref2VA on 4 devices.\r\n- keep this line\r\n"


def test_first_insert_goes_on_top_and_keeps_the_body() -> None:
    out = splice(HUMAN, "Current state: x", inserted_before=False)
    assert out is not None
    assert out.startswith(START + "\nCurrent state: x\n" + END + "\n\n")
    assert out.endswith(HUMAN)


def test_empty_body_gets_only_the_block() -> None:
    assert splice(None, "h", inserted_before=False) == f"{START}\nh\n{END}\n"
    assert splice("", "h", inserted_before=False) == f"{START}\nh\n{END}\n"


def test_replace_touches_only_the_block() -> None:
    above = "Human note above.\r\n"
    below = "\r\nHuman text below, with CRLF.\r\n"
    body = above + START + "\nold header\n" + END + below
    out = splice(body, "new header", inserted_before=True)
    assert out == above + START + "\nnew header\n" + END + below


def test_unchanged_block_returns_none_even_with_crlf() -> None:
    body = "top\r\n" + START + "\r\nline one\r\nline two\r\n" + END + "\r\nbottom"
    assert splice(body, "line one\nline two", inserted_before=True) is None
    assert splice(body, "line one\r\nline two\r\n\r\n", inserted_before=True) is None


def test_ten_refreshes_keep_human_text() -> None:
    above, below = "Intro by a human.\n\n", "\n\nDesign history\r\n- a\r\n- b\r\n"
    body = splice(above + below, "v0", inserted_before=False)
    assert body is not None
    for i in range(10):
        new = splice(body, f"v{i % 3}", inserted_before=True)
        body = new if new is not None else body
        assert body.endswith(above + below)
        assert current_block(body) == f"v{i % 3}"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(f"{START}\nx\n", id="end-deleted"),
        pytest.param(f"x\n{END}", id="start-deleted"),
        pytest.param(f"{END}\nx\n{START}", id="reversed"),
        pytest.param(f"{START}\na\n{END}\n{START}\nb\n{END}", id="duplicated"),
    ],
)
def test_broken_markers_refuse(body: str) -> None:
    assert locate(body).state is BlockState.BROKEN
    with pytest.raises(MarkersMissing):
        splice(body, "h", inserted_before=False)


def test_deleted_markers_are_not_reinserted() -> None:
    with pytest.raises(MarkersMissing, match="removed"):
        splice("a human rewrote the whole body", "h", inserted_before=True)


def test_normalise() -> None:
    assert normalise("a\r\nb\rc\n") == "a\nb\nc\n"


_human = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200).filter(
    lambda s: "<!--" not in s
)


@given(above=_human, below=_human, old=_human, new=_human)
def test_property_only_block_changes(above: str, below: str, old: str, new: str) -> None:
    body = above + START + "\n" + old + "\n" + END + below
    out = splice(body, new, inserted_before=True)
    result = body if out is None else out
    assert result.startswith(above + START)
    assert result.endswith(END + below)
    assert current_block(result) == normalise(new).strip("\n")
    if out is not None:
        assert splice(out, new, inserted_before=True) is None


def test_outside_drops_only_the_block_text() -> None:
    from bot.features.header.block import outside

    body = f"top\r\n{START}\nheader v1\n{END}\nbottom"
    assert outside(body) == f"top\n{START}{END}\nbottom"
    assert outside(body.replace("v1", "v2")) == outside(body)
    assert outside("no markers\r\n") == "no markers\n"
