"""The slash-command grammar (bot.commands.parser), as a table."""

from __future__ import annotations

import pytest

from bot.commands.parser import new_commands, parse

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
    ("<!-- note --> /campaign help", ["/campaign help"]),
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
    assert [c.text for c in parse(body)] == expected


def test_command_fields() -> None:
    (c,) = parse("hello\n/campaign verify --fast")
    assert (c.name, c.verb, c.verb_args, c.line, c.error) == (
        "campaign", "campaign verify", ("--fast",), 2, None)
    (s,) = parse("/screen candidate x")
    assert (s.verb, s.verb_args) == ("screen", ("candidate", "x"))


def test_unbalanced_quote_is_reported_not_dropped() -> None:
    (c,) = parse('/screen candidate "oops')
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
    assert [c.text for c in new_commands(after, before)] == expected
