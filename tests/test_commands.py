"""Command handlers through the router against the GitHub double: each test asserts the exact
GitHub writes made (and that no others were)."""

from __future__ import annotations

import pytest
from github_helpers import APP, BOT, REPO, clear_configs, comment_event, port, router

from bot.commands import CommandContext, Commands, CommandSpec, Who
from bot.inbox.router import Router
from bot.repo_config import CONFIG_PATH, RepoConfig, RepoConfigs

COMMENTS = f"/repos/{REPO}/issues/2/comments"
CAMPAIGN_TOML = 'id = "h3"\nrequesters = ["carol"]\n'


@pytest.fixture
def repo(github_double):
    github_double.add_repo(REPO, {"README.md": "hi\n",
                                  "campaigns/h3/campaign.toml": CAMPAIGN_TOML})
    github_double.add_pull(REPO, 2, {"README.md": "hi\nthere\n"}, user="dave")
    github_double.add_issue(REPO, 3)
    clear_configs()
    return github_double


def bot_comments(double, number: int = 2) -> list[str]:
    return [c["body"] for c in double.repo(REPO).comments.values()
            if c["issue"] == number and c["user"] == BOT]


def test_help_lists_every_command_once_per_command(repo) -> None:
    gh = port(repo)
    ev = comment_event("/campaign help")
    results = router.dispatch(ev, gh, RepoConfig())
    assert all(r.ok for r in results), results
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]
    (body,) = bot_comments(repo)
    assert body.startswith("<!-- campaign-bot:reply comment=555 line=1 -->")
    for spec in APP.commands.specs:
        assert f"### `{spec.usage}`" in body and spec.who.value in body
    # GitHub redelivers the same comment: the reply is found, not posted again
    router.dispatch(ev, gh, RepoConfig())
    assert len(repo.writes()) == 1


def test_a_command_repeated_in_one_comment_runs_once(repo) -> None:
    router.dispatch(comment_event("/campaign help\n/campaign help"), port(repo),
                    RepoConfig())
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]


def test_comments_by_bots_are_ignored_without_any_request(repo) -> None:
    for login, kind in ((BOT, "Bot"), ("dependabot[bot]", "Bot"), ("ci-bot[bot]", "User")):
        router.dispatch(comment_event("/campaign help", login=login, user_type=kind),
                        port(repo), RepoConfig())
    assert repo.calls == []


def test_commands_in_code_quotes_and_comments_do_nothing(repo) -> None:
    body = "```\n/campaign help\n```\n> /campaign help\n<!-- /campaign help -->\n`/campaign help`"
    router.dispatch(comment_event(body), port(repo), RepoConfig())
    assert repo.calls == []


def test_edited_comment_runs_only_new_commands(repo) -> None:
    ev = comment_event("/campaign help\n/campaign frobnicate", action="edited",
                       previous="/campaign help")
    router.dispatch(ev, port(repo), RepoConfig())
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]
    (body,) = bot_comments(repo)
    assert "line=2" in body and "I do not know `/campaign frobnicate`" in body
    assert "`/campaign help`" in body and "`/campaign verify`" in body


def test_edit_without_body_change_does_nothing(repo) -> None:
    ev = comment_event("/campaign help", action="edited")
    ev.payload["changes"] = {}
    router.dispatch(ev, port(repo), RepoConfig())
    assert repo.calls == []


@pytest.fixture
def screen_router(request):
    """A /screen command added on its own router, as a feature adds its commands."""
    calls: list[CommandContext] = []
    local = Router()
    commands = Commands(local, RepoConfigs())
    spec = CommandSpec("screen", "/screen candidate NAME", "Start a screen.",
                       ("/screen candidate tp2-sp2",), Who.WRITERS_OR_REQUESTERS,
                       pull_only=True, needs_config=True)

    def screen(ctx: CommandContext) -> None:
        calls.append(ctx)
        ctx.say(f"screen of {ctx.command.verb_args[1]} accepted")

    commands.add(spec, screen)
    return local, calls


def test_screen_refused_for_user_without_write_permission(repo, screen_router) -> None:
    local, calls = screen_router
    repo.set_permission(REPO, "eve", "read")
    ev = comment_event("/screen candidate tp2-sp2", login="eve")
    ev.payload["comment"]["author_association"] = "MEMBER"  # never trusted
    results = local.dispatch(ev, port(repo), RepoConfig())
    assert all(r.ok for r in results) and calls == []
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]
    (body,) = bot_comments(repo)
    assert "I did not run `/screen candidate tp2-sp2`" in body
    assert Who.WRITERS_OR_REQUESTERS.value in body and len(body) < 600
    perm = [c for c in repo.calls if c.path.endswith("/collaborators/eve/permission")]
    assert len(perm) == 1


@pytest.mark.parametrize("login,permission,allowed", [
    ("wendy", "write", True),
    ("ada", "admin", True),
    ("carol", None, True),      # requester in campaign.toml on the default branch
    ("mallory", None, False),   # requester only on the PR head: not trusted
    ("alice", "none", True),    # listed in [screen] allowed
], ids=["write", "admin", "requester", "pr-self-authorized", "allowed-list"])
def test_screen_authorization(repo, screen_router, login, permission, allowed) -> None:
    local, calls = screen_router
    if permission:
        repo.set_permission(REPO, login, permission)
    repo.push(REPO, 2, {"campaigns/h3/campaign.toml": 'id = "h3"\nrequesters = ["mallory"]\n'})
    cfg = RepoConfig.model_validate({"screen": {"allowed": ["alice"]}})
    local.dispatch(comment_event("/screen candidate x", login=login), port(repo), cfg)
    assert bool(calls) is allowed
    (body,) = bot_comments(repo)
    assert ("accepted" in body) is allowed


def test_screen_on_plain_issue_is_refused(repo, screen_router) -> None:
    local, calls = screen_router
    local.dispatch(comment_event("/screen candidate x", number=3, pull=False),
                   port(repo), RepoConfig())
    assert calls == [] and "pull requests only" in bot_comments(repo, 3)[0]
    assert repo.write_summary() == [("issues/create-comment", f"/repos/{REPO}/issues/3/comments")]


def test_broken_config_reply_says_what_to_fix(repo) -> None:
    repo.set_branch(REPO, "main", {CONFIG_PATH: "[screen]\nworkflw = 'x.yml'\n"}, parent="main")
    repo.set_permission(REPO, "wendy", "write")
    router.dispatch(comment_event("/campaign verify", login="wendy"), port(repo), None)
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]
    (body,) = bot_comments(repo)
    assert "is broken" in body and "line 2, `screen.workflw`: unknown key" in body


def test_verify_refused_for_stranger_allowed_for_pr_author(repo) -> None:
    router.dispatch(comment_event("/campaign verify", login="zed"), port(repo),
                    RepoConfig())
    assert "I did not run `/campaign verify`" in bot_comments(repo)[0]
    ev = comment_event("/campaign verify", login="dave", comment_id=556)
    ev.payload["issue"]["user"]["login"] = "dave"  # the PR's author, as GitHub sends it
    router.dispatch(ev, port(repo), RepoConfig())
    second = bot_comments(repo)[1]
    assert "line=1" in second and "no evidence to check" in second


def test_reply_survives_5xx_after_write_without_duplicate(repo) -> None:
    repo.inject("POST", COMMENTS, 500, after_write=True)
    ev = comment_event("/campaign help")
    results = router.dispatch(ev, port(repo), RepoConfig())
    # GitHub stored the reply and answered 500: the reply is looked up by marker and login
    # before the error is believed, so the handler is done
    assert all(r.ok for r in results)
    assert len(bot_comments(repo)) == 1
    # the worker may still retry the delivery (another handler failed): nothing is posted
    results = router.dispatch(ev, port(repo), RepoConfig())
    assert all(r.ok for r in results)
    assert len(bot_comments(repo)) == 1
    posts = [c for c in repo.calls if c.method == "POST"]
    assert len(posts) == 1 and posts[0].status == 500 and posts[0].injected


def test_rate_limited_permission_check_backs_off(repo, screen_router) -> None:
    local, calls = screen_router
    repo.set_permission(REPO, "wendy", "write")
    repo.inject("GET", f"/repos/{REPO}/collaborators/wendy/permission", 403, retry_after=1)
    local.dispatch(comment_event("/screen candidate x", login="wendy"), port(repo),
                   RepoConfig())
    assert len(calls) == 1
    statuses = [c.status for c in repo.calls if c.path.endswith("/wendy/permission")]
    assert statuses == [403, 200]


def test_spoofed_marker_in_user_comment_is_not_edited(repo) -> None:
    repo.add_comment(REPO, 2, "<!-- campaign-bot:reply comment=555 line=1 --> mine", "eve")
    router.dispatch(comment_event("/campaign help"), port(repo), RepoConfig())
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]


def test_a_screen_admitted_by_the_framework_asks_github_once(github_double) -> None:
    """The framework's authorize() says how it admitted the commenter; /screen records that
    instead of asking GitHub for the permission a second time."""
    from screen_scope import scope_dict, toml_dumps

    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": toml_dumps(scope_dict())})
    d.add_pull(REPO, 2, {"campaigns/h3/candidates.md": "cache-dit\n"}, user="dave")
    d.set_permission(REPO, "maint", "write")
    clear_configs()
    results = router.dispatch(
        comment_event("/screen candidate cache-dit track=5s-lossless dry-run", login="maint"),
        port(d), RepoConfig())
    assert [r.error for r in results if not r.ok] == []
    asks = [c for c in d.calls if c.path.endswith("/collaborators/maint/permission")]
    assert len(asks) == 1
    (reply,) = bot_comments(d)
    assert "Dry run" in reply or "dry run" in reply


@pytest.mark.parametrize("action", ["created", "edited"])
def test_a_comment_whose_user_is_null_runs_nothing_and_does_not_fail(repo,
                                                                     action) -> None:
    """GitHub's schema allows ``comment.user: null`` (a deleted account): the delivery passes
    the worker's shape check and ends without running a command (nobody to authorise)."""
    from bot.inbox.payloads import check_shape

    ev = comment_event("/campaign help", action=action, previous="")
    ev.payload["comment"]["user"] = None
    check_shape(ev.name, ev.payload)  # raised PayloadShapeError: comment.user
    results = router.dispatch(ev, port(repo), RepoConfig())
    assert all(r.ok for r in results), results
    assert repo.write_summary() == []


def test_a_feature_adds_a_new_command_prefix_by_adding_its_command(repo) -> None:
    """No closed list of prefixes: ``/bench`` is read as a command once a feature added the
    verb ``bench`` (and ``/campaign report`` beside ``/campaign help``), and only then."""
    local = Router()
    commands = Commands(local, RepoConfigs())
    ran: list[tuple[str, tuple[str, ...]]] = []

    def bench(ctx: CommandContext) -> None:
        ran.append((ctx.command.verb, ctx.command.verb_args))

    body = "/bench now please\n/campaign report weekly"
    local.dispatch(comment_event(body, login="carol"), port(repo), RepoConfig())
    assert ran == [] and commands.prefixes == {}
    commands.add(CommandSpec("bench", "/bench WHEN", "Bench.", ("/bench now",), Who.ANYONE),
                 bench)
    commands.add(CommandSpec("campaign report", "/campaign report", "Report.",
                             ("/campaign report",), Who.ANYONE), bench)
    assert commands.prefixes == {"bench": False, "campaign": True}
    results = local.dispatch(comment_event(body, login="carol", comment_id=556), port(repo),
                             RepoConfig())
    assert all(r.ok for r in results)
    assert ran == [("bench", ("now", "please")), ("campaign report", ("weekly",))]
