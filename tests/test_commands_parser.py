"""The slash-command grammar (bot.commands.parser), as a table."""

from __future__ import annotations

import pytest
from hostile.comments import HIDDEN, SLOW

from bot.commands.parser import new_commands, parse

PREFIXES = {"screen": False, "campaign": True}
"""The bot's own commands' prefixes (``/campaign`` groups sub-commands)."""

CASES = [
    ("/campaign help", ["/campaign help"]),
    ("/screen candidate foo --track 5s-lossless", ["/screen candidate foo --track 5s-lossless"]),
    ("please run\r\n/campaign verify\r\nthanks", ["/campaign verify"]),
    ("/campaign help\n/campaign verify\n/screen candidate a", [
        "/campaign help", "/campaign verify", "/screen candidate a"]),
    ("   /campaign help", ["/campaign help"]),
    ("    /campaign help", []),
    ("\t/campaign help", []),
    ("```\n/screen candidate x\n```", []),
    ("~~~~\n/screen candidate x\n~~~\n/screen y\n~~~~\n/campaign help", ["/campaign help"]),
    ("```sh\n/screen candidate x", []),
    ("> /screen candidate x", []),
    ("> quoted\n>\n> /campaign verify", []),
    ("<!-- /screen candidate x -->", []),
    ("<!--\n/screen candidate x\n-->\n/campaign help", ["/campaign help"]),
    # CommonMark: a line starting with "<!--" opens an HTML block that ends with its line
    # holding "-->"; the text after the comment is HTML, not running text
    ("<!-- note --> /campaign help", []),
    ("`/screen candidate x`", []),
    ("use `/campaign verify` to re-run", []),
    ("/campaign verify `ignored code`", ["/campaign verify"]),
    ('/screen candidate "two words"', ["/screen candidate two words"]),
    ("text /campaign help", []),
    ("/screenx foo", []),
    ("/Campaign help", []),
    ("/deploy prod", []),
    ("", []),
]


@pytest.mark.parametrize("body,expected", CASES, ids=[
    "help", "screen-args", "crlf", "several", "indent-3", "indent-4-code", "tab-code",
    "fence", "tilde-fence-nesting", "unclosed-fence", "quote", "multi-line-quote",
    "html-comment", "multi-line-html-comment", "after-html-comment", "inline-code-line",
    "inline-code-prose", "inline-code-in-args", "quoted-arg", "mid-line", "prefix-only",
    "case", "other-bot", "empty"])
def test_grammar(body: str, expected: list[str]) -> None:
    assert [c.text for c in parse(body, PREFIXES)] == expected


HTML_AND_QUOTES = [
    ("<pre>\n/screen candidate x\n</pre>", []),
    ("<code>\n/screen candidate x\n</code>", []),
    ("<blockquote>\n/screen candidate x\n</blockquote>", []),
    ("<details>\n/screen candidate x\n</details>\n\n/campaign help", ["/campaign help"]),
    ("<span>\n/screen candidate x\n</span>", []),
    ("> quoted\n/screen candidate x", []),
    ("> /screen candidate x\n/screen candidate x", []),
    (">" * 30 + " a\n/screen candidate x", []),
    ("text `code\n/screen candidate x` more", []),
    ("text ``a ` b\n/screen candidate x``\n/campaign help", ["/campaign help"]),
    ("text <code>\n/screen candidate x\n</code>", []),
    ("text <pre>x\n/screen candidate x</pre>\n/campaign help", ["/campaign help"]),
    ("text <!--\n/screen candidate x\n-->", []),
    ("text <code>unclosed\n/screen candidate x", []),
    ("text <kbd>a</kbd>\n/screen candidate x", ["/screen candidate x"]),
    ("<b>bold</b>\n/screen candidate x", ["/screen candidate x"]),
    ("/screen candidate x <!-- note -->", ["/screen candidate x"]),
    ("/screen candidate x `note\nmore`", ["/screen candidate x"]),
    ("- item\n\n  /screen candidate x", ["/screen candidate x"]),
    ("/screen candidate x\n---", ["/screen candidate x"]),
]


@pytest.mark.parametrize("body,expected", HTML_AND_QUOTES, ids=[
    "pre-block", "code-block-tag", "blockquote-tag", "details-then-blank", "tag-alone-block",
    "lazy-quote", "quote-then-lazy-copy", "deep-quote-lazy", "code-span-across-lines",
    "double-backtick-span", "inline-code-element", "inline-pre-element",
    "inline-comment-across-lines", "unclosed-inline-code", "kbd-closed", "bold-tag-prose",
    "trailing-comment", "code-span-to-next-line", "list-item-paragraph", "setext-heading"])
def test_html_code_and_quotes_hold_no_command(body: str, expected: list[str]) -> None:
    """CommonMark ranges (markdown-it-py) that hide commands: HTML blocks, inline code
    and quotation elements, code spans across lines, block quotes with lazy lines."""
    assert [c.text for c in parse(body, PREFIXES)] == expected


def test_command_fields() -> None:
    (c,) = parse("hello\n/campaign verify --fast", PREFIXES)
    assert (c.name, c.verb, c.verb_args, c.line, c.error) == (
        "campaign", "campaign verify", ("--fast",), 2, None)
    (s,) = parse("/screen candidate x", PREFIXES)
    assert (s.verb, s.verb_args) == ("screen", ("candidate", "x"))


def test_unbalanced_quote_is_reported_not_dropped() -> None:
    (c,) = parse('/screen candidate "oops', PREFIXES)
    assert c.error and "quotation" in c.error


@pytest.mark.parametrize("before,after,expected", [
    ("/screen a", "/screen a\n/screen b", ["/screen b"]),
    ("/screen a", "/screen a", []),
    ("/screen a", "/screen a\n/screen a", ["/screen a"]),
    ("typo /screen", "/screen a", ["/screen a"]),
    ("/screen a\n/campaign help", "/campaign help", []),
    ("```\n/screen a\n```", "/screen a", ["/screen a"]),
], ids=["added", "unchanged", "repeated", "fixed-typo", "removed", "unfenced"])
def test_edit_runs_only_new_commands(before: str, after: str, expected: list[str]) -> None:
    assert [c.text for c in new_commands(after, before, PREFIXES)] == expected


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_hostile_corpus_hidden_commands_do_not_parse(name: str) -> None:
    assert parse(HIDDEN[name], PREFIXES) == []
    # running text after the hiding construct and a blank line is read again (an unclosed
    # fence is code to the end of the comment)
    after = [c.text for c in parse(HIDDEN[name] + "\n\n\n/campaign help", PREFIXES)]
    assert after == ([] if name == "fenced-code-unclosed" else ["/campaign help"])


@pytest.mark.parametrize("name", sorted(SLOW))
def test_hostile_corpus_slow_bodies_parse(name: str) -> None:
    cmds = parse(SLOW[name], PREFIXES)
    assert all(c.text == "/screen candidate noop" for c in cmds)
