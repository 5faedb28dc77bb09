"""A pull request may not redefine its own control: ``campaign-bot check`` holds every signed
bundle's statement (``scope_blob``, ``scope_frozen``, ``candidate``, ``candidate_config``)
against the default branch's ``campaign.toml`` and gives a P0 ``CONTROL_REDEFINED`` and no
verdict for a bundle measured under another control, protocol or candidate definition.

The attack: a pull request adds a slow-down flag to ``[serving] flags`` (the control) and a
fast flag to candidate ``noop`` (identical to control on the default branch), runs the screen
with a runner given no frozen scope (``campaign-bot screen`` by hand, or a runner from before
the frozen scope) and commits the signed bundle: the control is 7.5 times slower than the
candidate, so without the rule the track reads SUPPORTED.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _evidence_factory import SCOPE_DATA, lossless_report, screen
from screen_scope import toml_dumps
from typer.testing import CliRunner

from evidence.cli import app
from evidence.hashing import git_blob_sha
from evidence.manifest import write_bag
from evidence.scope_binding import SCOPE_FILE
from runners.signer import generate_key, load_private_key, sign_bundle

SLOW = "--sleep-per-step=0.5"
FAST = "--skip-steps=40"
TRACK = "5s-lossless"
OUT = "out-5s-lossless"


def _scope(*, control_flags: list[str], noop: dict[str, Any],
           extra: list[dict[str, Any]] = ()) -> bytes:  # type: ignore[assignment]
    data = {**SCOPE_DATA,
            "pool": {**SCOPE_DATA["pool"], "runner_labels": ["self-hosted", "x4"]},
            "serving": {**SCOPE_DATA["serving"], "flags": control_flags},
            "candidates": [{"name": "noop", **noop}, *extra]}
    return toml_dumps(data).encode()


MAIN = _scope(control_flags=["--usp=2"], noop={})
REDEFINED = _scope(control_flags=["--usp=2", SLOW], noop={"add_flags": [FAST]})
NEW_CANDIDATE = _scope(control_flags=["--usp=2"], noop={},
                       extra=[{"name": "pr-fast", "add_flags": [FAST]}])


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    key = tmp_path_factory.mktemp("keys") / "runner.key"
    return key, generate_key(key).read_bytes()


def _bundle(dest: Path, key: Path, scope: bytes, candidate: str, *, frozen: bool,
            candidate_config: dict[str, Any] | None = None) -> None:
    """A screen bundle as the runner signs it: a 7.5x faster candidate, a bit-exact media
    report, the scope file the control came from and the statement naming it."""
    report = "data/media/s1-lossless.json"
    rs = screen([10.0, 10.1, 10.2], [1.30, 1.33, 1.35], screen="s1", track=TRACK,
                cand_kw={"candidate": candidate, "media_reports": [report]})
    for r in rs:
        p = dest / "data" / "receipts" / f"{r.session_id}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(r.model_dump_json(by_alias=True, indent=2) + "\n")
    media = dest / report
    media.parent.mkdir(parents=True, exist_ok=True)
    media.write_text(lossless_report(OUT, OUT, True).model_dump_json(by_alias=True, indent=2))
    (dest / SCOPE_FILE).write_bytes(scope)
    write_bag(dest, info={"External-Identifier": "s1"})
    predicate: dict[str, Any] = {"screen_id": "s1", "candidate": candidate,
                                 "scope_blob": git_blob_sha(scope), "scope_frozen": frozen}
    if candidate_config is not None:
        predicate["candidate_config"] = candidate_config
    sign_bundle(dest, load_private_key(key), predicate)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _repository(tmp: Path, pem: bytes) -> Path:
    """A campaign repository whose default branch (main) holds :data:`MAIN`, cloned (so the
    clone has origin/HEAD, as ``git clone`` and ``gh pr checkout`` leave it)."""
    origin = tmp / "origin"
    (origin / "campaign").mkdir(parents=True)
    _git(origin, "init", "-q", "-b", "main")
    (origin / "campaign" / "campaign.toml").write_bytes(MAIN)
    (origin / "campaign" / "trusted-keys.pem").write_bytes(pem)
    _git(origin, "add", ".")
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "scope")
    subprocess.run(["git", "clone", "-q", str(origin), str(tmp / "clone")], check=True)
    return tmp / "clone"


def _check(*args: str) -> tuple[int, dict[str, Any]]:
    res = CliRunner().invoke(app, ["check", *args, "--json"])
    assert res.output.startswith("{"), res.output
    return res.exit_code, json.loads(res.output)


def _verdicts(rep: dict[str, Any]) -> dict[str, str]:
    return {f"{v['candidate']}@{v['track']}": v["verdict"] for v in rep["verdicts"]
            if v["track"] == TRACK}


def test_the_control_redefinition_pull_request_gets_p0_and_no_verdict(
        tmp_path: Path, keys: tuple[Path, bytes]) -> None:
    clone = _repository(tmp_path, keys[1])
    camp = clone / "campaign"
    (camp / "campaign.toml").write_bytes(REDEFINED)  # the pull request's checkout
    _bundle(camp / "screens" / "s1", keys[0], REDEFINED, "noop", frozen=False)
    code, rep = _check(str(camp))
    assert code == 1
    p0 = [f for f in rep["findings"] if f["rule"] == "CONTROL_REDEFINED"]
    assert [(f["severity"], f["path"]) for f in p0] == [
        ("P0", "screens/s1/attestation.dsse.json")]
    assert "in serving, candidate noop" in p0[0]["message"]
    assert "campaign.toml at origin/main" in p0[0]["message"]
    assert "SUPPORTED" not in _verdicts(rep).values()
    assert rep["documents"]["receipts"] == 0  # nothing of the bundle is judged
    # the same bundle, checked with the pull request's file as the only scope, reads
    # SUPPORTED: what the rule prevents
    plain = tmp_path / "plain"
    subprocess.run(["cp", "-r", str(camp), str(plain)], check=True)
    code, rep = _check(str(plain))
    assert _verdicts(rep) == {f"noop@{TRACK}": "SUPPORTED"}, rep["findings"]


def test_an_explicit_base_names_the_default_branch(tmp_path: Path,
                                                   keys: tuple[Path, bytes]) -> None:
    clone = _repository(tmp_path, keys[1])
    _git(clone, "remote", "set-head", "origin", "-d")  # a checkout without origin/HEAD
    camp = clone / "campaign"
    (camp / "campaign.toml").write_bytes(REDEFINED)
    _bundle(camp / "screens" / "s1", keys[0], REDEFINED, "noop", frozen=False)
    code, rep = _check(str(camp), "--base", "origin/main")
    assert code == 1 and "SUPPORTED" not in _verdicts(rep).values()
    assert {f["rule"] for f in rep["findings"] if f["severity"] == "P0"} == {
        "CONTROL_REDEFINED"}


def test_a_frozen_control_with_a_redefined_candidate_is_p0(tmp_path: Path,
                                                           keys: tuple[Path, bytes]) -> None:
    """The runner pinned the default branch's file, but the statement says candidate noop ran
    with a fast flag the default branch's noop does not have: the command named noop, the
    config run was not noop's.  Outside git, the campaign.toml checked is the frozen scope."""
    camp = tmp_path / "campaign"
    camp.mkdir()
    (camp / "campaign.toml").write_bytes(MAIN)
    (camp / "trusted-keys.pem").write_bytes(keys[1])
    _bundle(camp / "screens" / "s1", keys[0], MAIN, "noop", frozen=True,
            candidate_config={"add_flags": [FAST], "remove_flags": [], "env": {}})
    code, rep = _check(str(camp))
    assert code == 1 and "SUPPORTED" not in _verdicts(rep).values()
    msg = next(f["message"] for f in rep["findings"] if f["rule"] == "CONTROL_REDEFINED")
    assert "in candidate noop" in msg and "pinned at dispatch" in msg


def test_a_scope_named_nowhere_is_p0(tmp_path: Path, keys: tuple[Path, bytes]) -> None:
    camp = tmp_path / "campaign"
    camp.mkdir()
    (camp / "campaign.toml").write_bytes(MAIN)
    (camp / "trusted-keys.pem").write_bytes(keys[1])
    bundle = camp / "screens" / "s1"
    _bundle(bundle, keys[0], REDEFINED, "noop", frozen=False)
    # the statement names REDEFINED's blob; drop the copy and re-sign without it
    for p in bundle.iterdir():
        if p.is_file():
            p.unlink()
    (bundle / SCOPE_FILE).unlink()
    write_bag(bundle, info={"External-Identifier": "s1"})
    sign_bundle(bundle, load_private_key(keys[0]), {
        "candidate": "noop", "scope_blob": git_blob_sha(REDEFINED), "scope_frozen": False})
    code, rep = _check(str(camp))
    assert code == 1 and "SUPPORTED" not in _verdicts(rep).values()
    assert {f["rule"] for f in rep["findings"] if f["severity"] == "P0"} == {"SCOPE_UNKNOWN"}


def test_a_pull_request_that_only_adds_a_candidate_is_judged(tmp_path: Path,
                                                             keys: tuple[Path, bytes]) -> None:
    clone = _repository(tmp_path, keys[1])
    camp = clone / "campaign"
    (camp / "campaign.toml").write_bytes(NEW_CANDIDATE)
    _bundle(camp / "screens" / "s1", keys[0], NEW_CANDIDATE, "pr-fast", frozen=False)
    code, rep = _check(str(camp))
    assert not [f for f in rep["findings"] if f["severity"] == "P0"], rep["findings"]
    assert _verdicts(rep) == {f"pr-fast@{TRACK}": "SUPPORTED"}


def test_the_bot_review_of_that_pull_request_gives_p0_and_no_verdict(
        github_double, tmp_path: Path, keys: tuple[Path, bytes]) -> None:
    """The bot reviews the pull request's head under the default branch's campaign.toml:
    the summary names CONTROL_REDEFINED and shows no SUPPORTED."""
    from github_helpers import REPO, clear_configs, port, pr_event, router

    from bot.repo_config import RepoConfig

    bundle = tmp_path / "s1"
    _bundle(bundle, keys[0], REDEFINED, "noop", frozen=False)
    pre = "campaigns/x"
    github_double.add_repo(REPO, {f"{pre}/campaign.toml": MAIN,
                                  f"{pre}/trusted-keys.pem": keys[1]})
    changes: dict[str, bytes | str | None] = {f"{pre}/campaign.toml": REDEFINED}
    changes.update({f"{pre}/screens/s1/{p.relative_to(bundle).as_posix()}": p.read_bytes()
                    for p in sorted(bundle.rglob("*")) if p.is_file()})
    pull = github_double.add_pull(REPO, 2, changes, user="dave")
    clear_configs()
    results = router.dispatch(pr_event(2, pull.head_sha), port(github_double), RepoConfig())
    assert all(r.ok for r in results), results
    (summary,) = [c["body"] for c in github_double.repo(REPO).comments.values()
                  if "<!-- campaign-bot:summary pr=2 -->" in c["body"]]
    (review,) = github_double.repo(REPO).reviews.values()
    assert "CONTROL_REDEFINED" in review["body"] + summary
    assert "SUPPORTED" not in summary


KEEPS_NOOP = {"add_flags": [], "remove_flags": [], "env": {}}


@pytest.mark.parametrize("keys_file", ["replaced", "removed"])
def test_keys_a_pull_request_changes_are_not_trusted(tmp_path: Path, keys: tuple[Path, bytes],
                                                     keys_file: str) -> None:
    """The pull request replaces the campaign's trusted-keys.pem with its own key (or removes
    it) and commits a bundle it signed itself, claiming the frozen scope: ``check`` takes the
    keys from the default branch, as the bot does, so the bundle is refused, not judged."""
    clone = _repository(tmp_path, keys[1])
    camp = clone / "campaign"
    own_key = tmp_path / "pr.key"
    own_pem = generate_key(own_key).read_bytes()
    (camp / "campaign.toml").write_bytes(REDEFINED)
    if keys_file == "replaced":
        (camp / "trusted-keys.pem").write_bytes(own_pem)
    else:
        (camp / "trusted-keys.pem").unlink()
    _bundle(camp / "screens" / "s1", own_key, MAIN, "noop", frozen=True,
            candidate_config=KEEPS_NOOP)
    # the same forged bundle, judged by the pull request's own keys, would read SUPPORTED
    assert _verdicts(_check(str(camp), "--trusted-keys", str(camp / "trusted-keys.pem"))[1]
                     if keys_file == "replaced" else _check(str(camp), "--no-signatures")[1]
                     ) == {f"noop@{TRACK}": "SUPPORTED"}
    for args in ((), ("--base", "origin/main")):
        code, rep = _check(str(camp), *args)
        assert code == 1, rep["findings"]
        assert "SUPPORTED" not in _verdicts(rep).values(), rep["findings"]
        assert rep["signatures"]["keys_file"] == "trusted-keys.pem at origin/main"
        assert rep["signatures"]["refused"] == 1


def test_the_bot_review_takes_keys_and_scope_from_the_default_branch_not_the_base(
        github_double, tmp_path: Path, keys: tuple[Path, bytes]) -> None:
    """A pull request may be based on any branch: one based on an old branch, whose
    trusted-keys.pem still lists a key the default branch has since removed (a leaked runner
    key) and whose campaign.toml defines the slow control, gets its bundle signed with that
    key refused, as on the default branch."""
    from github_helpers import REPO, clear_configs, port, pr_event, router

    from bot.repo_config import RepoConfig

    old_key = tmp_path / "old.key"
    old_pem = generate_key(old_key).read_bytes()
    bundle = tmp_path / "s1"
    _bundle(bundle, old_key, REDEFINED, "noop", frozen=True,
            candidate_config={"add_flags": [FAST], "remove_flags": [], "env": {}})
    pre = "campaigns/x"
    github_double.add_repo(REPO, {f"{pre}/campaign.toml": MAIN,
                                  f"{pre}/trusted-keys.pem": keys[1]})
    github_double.set_branch(REPO, "release-1", {f"{pre}/campaign.toml": REDEFINED,
                                                 f"{pre}/trusted-keys.pem": old_pem},
                             parent="main")
    changes: dict[str, bytes | str | None] = {
        f"{pre}/screens/s1/{p.relative_to(bundle).as_posix()}": p.read_bytes()
        for p in sorted(bundle.rglob("*")) if p.is_file()}
    pull = github_double.add_pull(REPO, 3, changes, user="dave", base_ref="release-1")
    clear_configs()
    event = pr_event(3, pull.head_sha)
    event.payload["pull_request"]["base"].update(ref="release-1", sha=pull.base_sha)
    results = router.dispatch(event, port(github_double), RepoConfig())
    assert all(r.ok for r in results), results
    (summary,) = [c["body"] for c in github_double.repo(REPO).comments.values()
                  if "<!-- campaign-bot:summary pr=3 -->" in c["body"]]
    (review,) = github_double.repo(REPO).reviews.values()
    assert "SIGNATURE_INVALID" in review["body"] + summary
    assert "SUPPORTED" not in summary


def test_a_campaign_moved_to_another_folder_is_judged_by_its_default_branch_files(
        tmp_path: Path, keys: tuple[Path, bytes]) -> None:
    """The pull request moves the campaign to a folder the default branch lacks (same id),
    with its own key and control: ``check`` finds the campaign on the default branch by its
    id and takes keys and scope from there, so its self-signed bundle is refused."""
    clone = _repository(tmp_path, keys[1])
    moved = clone / "campaign-v2"
    (clone / "campaign").rename(moved)
    own_key = tmp_path / "pr.key"
    (moved / "trusted-keys.pem").write_bytes(generate_key(own_key).read_bytes())
    (moved / "campaign.toml").write_bytes(REDEFINED)
    _bundle(moved / "screens" / "s1", own_key, REDEFINED, "noop", frozen=False)
    for args in ((), ("--base", "origin/main")):
        code, rep = _check(str(moved), *args)
        assert code == 1, rep["findings"]
        assert "SUPPORTED" not in _verdicts(rep).values(), rep["findings"]
        assert rep["signatures"]["keys_file"] == "trusted-keys.pem at origin/main"
