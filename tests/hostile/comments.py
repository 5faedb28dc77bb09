"""Hostile comment bodies: a ``/screen`` command hidden where the rendered comment shows
code or a quotation (GitHub renders comments as CommonMark plus extensions), which must run
nothing, and bodies built to make a Markdown parser slow.

``tests/test_trust_boundary_e2e.py`` delivers the hidden ones to a running
``campaign-bot serve`` (no screen may be queued); ``tests/test_commands_parser.py`` parses
them all.  Sizes stay within GitHub's 65,536-character limit on a comment body.
"""

from __future__ import annotations

CMD = "/screen candidate noop"

HIDDEN: dict[str, str] = {
    "html-pre-block": f"<pre>\n{CMD}\n</pre>",
    "html-code-block": f"<code>\n{CMD}\n</code>",
    "html-blockquote-block": f"<blockquote>\n{CMD}\n</blockquote>",
    "html-details-block": f"<details>\n<summary>log</summary>\n{CMD}\n</details>",
    "inline-code-element": f"see <code>\n{CMD}\n</code>",
    "inline-pre-element": f"see <pre>\n{CMD}</pre>",
    "inline-code-unclosed": f"see <code>\n{CMD}",
    "code-span-across-lines": f"see `the command\n{CMD}` above",
    "quote": f"> {CMD}",
    "quote-lazy-continuation": f"> as asked above:\n{CMD}",
    "quote-nested-30": ">" * 30 + f" quoted\n{CMD}",
    "html-comment-block": f"<!--\n{CMD}\n-->",
    "html-comment-inline-across-lines": f"note <!--\n{CMD}\n-->",
    "fenced-code": f"```\n{CMD}\n```",
    "fenced-code-unclosed": f"~~~\n{CMD}",
    "indented-code": f"    {CMD}",
    "tab-indented-code": f"\t{CMD}",
}
"""Bodies whose only ``/screen`` line is code, a quotation or an HTML comment."""

SLOW: dict[str, str] = {
    "brackets": f"{CMD}\n" + "[" * 64_000,
    "bracket-lines": f"{CMD}\n" + "[\n" * 30_000,
    "emphasis": f"{CMD}\n" + "*_" * 32_000,
    "angle-lines": f"{CMD}\n" + "<\n" * 30_000,
    "backtick-runs": "`\n" + f"{CMD}\n`\n" * 2_500,
    "code-tags": f"{CMD}\n" + "<code>" * 10_000,
    "quote-markers": ">" * 64_000,
    "comment-openers": "<!--" * 16_000,
}
"""Bodies of up to 64,000 characters that exercise Markdown parsers' worst cases; each
must parse, within seconds (a benchmark is not a test: only completion is asserted)."""
