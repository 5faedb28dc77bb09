"""Size and complexity limits of ``bot/``, so that a reader can hold one module and one
function in their head.

- No module in ``bot/`` is over 700 lines: split a growing module along a seam of what it
  does (see docs/architecture.md for how the package is divided).
- No function or method in ``bot/`` reaches cyclomatic rank C (McCabe complexity 11 or more,
  radon's ranks: A 1-5, B 6-10, C 11-20, D 21-30, E 31-40, F 41+), except those listed in
  :data:`KNOWN_RANK_C`, which were over the limit when the limit came and are being split.
  The list only shrinks: a function that got simpler must leave it, and no new one may join
  it.  The count is radon's (``radon cc -s -n C bot/`` prints the same list).
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

ROOT = Path(__file__).resolve().parents[1]
BOT = ROOT / "bot"
MAX_LINES = 700

KNOWN_RANK_C = frozenset({
    "bot/app.py:create_app",
    "bot/cli.py:_serve",
    "bot/cli.py:deliveries",
    "bot/cli.py:_missing",
    "bot/commands/__init__.py:authorize",
    "bot/commands/__init__.py:_comment_target",
    "bot/commands/__init__.py:Commands._run",
    "bot/commands/parser.py:_command_lines",
    "bot/commands/parser.py:parse",
    "bot/doctor.py:check_credentials",
    "bot/features/config/__init__.py:validate_config_change",
    "bot/features/config/drift.py:on_push",
    "bot/features/dashboard/api.py:screen_out",
    "bot/features/dashboard/api.py:Api.answer",
    "bot/features/dashboard/charts.py:strip_chart",
    "bot/features/dashboard/charts.py:budget_chart",
    "bot/features/dashboard/live.py:GitCampaignDirs.__call__",
    "bot/features/dashboard/live.py:LiveDashboard.page",
    "bot/features/dashboard/live.py:LiveDashboard._render",
    "bot/features/dashboard/signin.py:SignIn.access",
    "bot/features/dashboard/signin.py:SignIn.callback",
    "bot/features/dashboard/pages.py:drift_charts",
    "bot/features/notify/outbox.py:Notifier._deliver_one",
    "bot/features/review/__init__.py:rerequested",
    "bot/features/review/review.py:analyse_campaign",
    "bot/features/review/review.py:review_pull",
    "bot/features/review/review.py:pull_of",
    "bot/features/screen/budget.py:parse_extend",
    "bot/features/screen/bundle.py:fetch_bundle",
    "bot/features/screen/bundle.py:verify_bundle",
    "bot/features/screen/bundle.py:read_bundle",
    "bot/features/screen/bundle.py:judge_screen",
    "bot/features/screen/campaign.py:find_campaign",
    "bot/features/screen/campaign_state.py:queue_items",
    "bot/features/screen/clicks.py:on_check_run",
    "bot/features/screen/clicks.py:_request",
    "bot/features/screen/commands.py:continue_screen",
    "bot/features/screen/commands.py:run_sync",
    "bot/features/screen/commands.py:request_screens",
    "bot/features/screen/followup.py:plan_followup",
    "bot/features/screen/commands.py:cancel_screen",
    "bot/features/screen/dispatch.py:_dispatch_claimed",
    "bot/features/screen/dispatch.py:on_push",
    "bot/features/screen/evidence.py:shared_branch_reason",
    "bot/features/screen/evidence.py:split_bundle",
    "bot/features/screen/evidence.py:commit_screen",
    "bot/features/screen/evidence.py:_commit",
    "bot/features/screen/grammar.py:parse_screen",
    "bot/features/screen/grammar.py:_options",
    "bot/features/screen/grammar.py:check_against_scope",
    "bot/features/screen/queue.py:place",
    "bot/features/screen/report.py:session_view",
    "bot/features/screen/report.py:gate_views",
    "bot/features/screen/results.py:_match_run",
    "bot/features/screen/results.py:on_workflow_job",
    "bot/features/screen/results.py:finish_screen",
    "bot/features/screen/results.py:_judge_bundle",
    "bot/features/screen/watchdog.py:watchdog_pass",
    "bot/features/screen/writes.py:write_once",
    "bot/github/artifacts.py:download_zip",
    "bot/github/artifacts.py:_check_name",
    "bot/github/artifacts.py:safe_extract",
    "bot/github/git.py:GitMirrors.materialise",
    "bot/github/git.py:GitMirrors._cat",
    "bot/inbox/payloads.py:check_shape",
    "bot/inbox/recovery.py:_todo",
    "bot/inbox/replay.py:load_delivery_file",
    "bot/inbox/replay.py:replay",
    "bot/inbox/replay.py:_describe",
    "bot/inbox/replay.py:print_report",
    "bot/inbox/worker.py:Worker.run",
    "bot/inbox/worker.py:Worker._process_claimed",
    "bot/inbox/writer.py:InboxWriter._loop_batches",
    "bot/repo_config.py:find_campaign_dirs",
    "bot/scaffold.py:pin_inputs",
    "bot/scaffold.py:_write",
})
"""``path:Class.function`` of the functions at rank C or worse when the limit came."""


def modules() -> list[Path]:
    """Every Python module under ``bot/``, sorted."""
    return sorted(BOT.rglob("*.py"))


def rank_c_or_worse() -> dict[str, tuple[int, str]]:
    """``path:Class.function -> (complexity, rank)`` for each function or method of ``bot/``
    that radon ranks C or worse."""
    out = {}
    for f in modules():
        rel = f.relative_to(ROOT).as_posix()
        for block in cc_visit(f.read_text(encoding="utf-8")):
            rank = cc_rank(block.complexity)
            if rank >= "C":
                out[f"{rel}:{block.fullname}"] = (block.complexity, rank)
    return out


def test_no_module_in_bot_is_over_700_lines() -> None:
    long = {f.relative_to(ROOT).as_posix(): n for f in modules()
            if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, (f"modules over {MAX_LINES} lines (split each along a seam of what it "
                        f"does, and list the new modules in docs/architecture.md): {long}")


def test_no_new_function_in_bot_reaches_rank_c() -> None:
    found = rank_c_or_worse()
    new = {k: v for k, v in found.items() if k not in KNOWN_RANK_C}
    assert new == {}, ("functions at cyclomatic rank C or worse (complexity 11+: split them, "
                       f"or turn an if-chain into a table): {new}")


def test_the_list_of_known_rank_c_functions_only_shrinks() -> None:
    gone = sorted(KNOWN_RANK_C - set(rank_c_or_worse()))
    assert gone == [], ("these are no longer rank C or worse (or were renamed): remove them "
                        f"from KNOWN_RANK_C in tests/test_complexity.py: {gone}")


def test_the_rank_counter_counts_branches() -> None:
    """radon as used here ranks a function of 11 branches C and one of 10 B."""
    def source(n: int) -> str:
        body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(n - 1))
        return f"def f(x):\n{body}    return -1\n"

    assert [cc_rank(cc_visit(source(n))[0].complexity) for n in (10, 11)] == ["B", "C"]
