"""Committing verified screen bundles (bot/features/screen/evidence.py) through real git
against the GitHub double: where a bundle goes, what stays outside, frozen directories, a
branch that moves under the bot, forks, dry runs; and that what was committed verifies."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from github_helpers import REPO, port

from bot.features.screen.evidence import commit_screen, split_bundle, target_dir
from bot.github.git import GitMirrors
from bot.github.recording import RecordingGitHub
from evidence.manifest import EXTERNAL_ARTIFACTS_FILE, verify_tree
from evidence.signing import check_signed_bundle, load_trusted_keys
from runners.signer import generate_key, load_private_key, sign_bundle, write_bag

CAMP = "campaigns/h3"
BIG = 50_000


def make_bundle(root: Path, key: Path, video: bytes, note: str = "{}\n") -> Path:
    """A signed BagIt bundle as the runner writes one: a receipt-like JSON and a video."""
    (root / "data" / "outputs").mkdir(parents=True)
    (root / "data" / "receipts").mkdir(parents=True)
    (root / "data" / "receipts" / "session-00.json").write_text(note)
    (root / "data" / "outputs" / "candidate.mp4").write_bytes(video)
    write_bag(root, {"Bag-Software-Agent": "campaign-bot test"})
    sign_bundle(root, load_private_key(key), {"screen": "S1"})
    return root


@pytest.fixture
def key(tmp_path: Path) -> Path:
    k = tmp_path / "runner.key"
    generate_key(k)
    return k


def screen(label: str = "S1") -> Any:
    return SimpleNamespace(label=label, campaign_path=CAMP, name="cache-dit", kind="candidate",
                           track="5s-lossless", campaign="h3", head_sha="a" * 40,
                           request_id="r-1", run_id=4242)


def run(git: GitMirrors, gh: Any, s: Any, bundle: Path, **kw: Any) -> Any:
    pr = port_of(gh).get_pull(7)
    return commit_screen(git, gh, s, bundle, "SUPPORTED", pr=pr, evidence_path="screens",
                         max_file_bytes=kw.pop("max_file_bytes", BIG // 2),
                         run_url="https://github.com/o/r/actions/runs/4242",
                         artifact="screen-bundle-r-1", **kw)


def port_of(gh: Any) -> Any:
    return gh.delegate if isinstance(gh, RecordingGitHub) else gh


@pytest.fixture
def setup(github_double: Any, tmp_path: Path) -> tuple[Any, GitMirrors]:
    github_double.add_repo(REPO, {f"{CAMP}/campaign.toml": "id = 'h3'\n"})
    github_double.add_pull(REPO, 7, {f"{CAMP}/NOTES.md": "n\n"}, head_ref="topic")
    return github_double, GitMirrors(tmp_path / "cache")


def test_target_dir() -> None:
    assert target_dir("campaigns/h3", "screens", "S12") == "campaigns/h3/screens/S12"
    assert target_dir("", "evidence/screens", "S1") == "evidence/screens/S1"


def test_committed_on_the_head_branch_large_files_outside_and_it_verifies(
        setup: tuple[Any, GitMirrors], tmp_path: Path, key: Path) -> None:
    d, git = setup
    video = os.urandom(BIG)
    bundle = make_bundle(tmp_path / "b", key, video)
    head0 = d.repo(REPO).pulls[7].head_sha
    out = run(git, port(d), screen(), bundle)
    assert (out.state, out.branch, out.fork) == ("committed", "topic", False)
    new = d.repo(REPO).refs["topic"]
    assert out.sha == new and d.repo(REPO).pulls[7].head_sha == new
    tree = d.repo(REPO).trees[new]
    prefix = f"{CAMP}/screens/S1/"
    mine = {p[len(prefix):] for p in tree if p.startswith(prefix)}
    assert "data/outputs/candidate.mp4" not in mine
    assert {"attestation.dsse.json", "manifest-sha256.txt", "tagmanifest-sha256.txt",
            "bagit.txt", "bag-info.txt", "data/receipts/session-00.json",
            EXTERNAL_ARTIFACTS_FILE} == mine
    ext = json.loads(tree[prefix + EXTERNAL_ARTIFACTS_FILE])
    assert ext["external"] == {"data/outputs/candidate.mp4": {
        "sha256": hashlib.sha256(video).hexdigest(), "size": BIG, "external": True,
        "url": "https://github.com/o/r/actions/runs/4242", "run_id": 4242,
        "artifact": "screen-bundle-r-1"}}
    assert set(tree) - set(d.repo(REPO).trees[head0]) == {prefix + m for m in mine}
    # what was committed verifies: signature, manifests; the video is external, not missing
    checkout = tmp_path / "checkout"
    git.materialise(REPO, new, prefix.rstrip("/"), checkout)
    keys = load_trusted_keys(key.with_name("runner.key.pub"))
    res = check_signed_bundle(checkout, keys)
    assert res.ok, res.messages()
    assert res.external == ["data/outputs/candidate.mp4"]
    vr = verify_tree(checkout)
    assert (vr.missing, vr.mismatched, vr.extra) == (0, 0, 0)
    assert [x.path for x in vr.external] == ["data/outputs/candidate.mp4"]
    assert not [f for f in vr.findings if f.severity in ("P0", "P1", "P2")]
    assert not [f for f in vr.findings if f.rule == "BAG_PAYLOAD_OXUM"]  # octets add up


def test_a_redelivery_commits_nothing_and_other_content_is_refused(
        setup: tuple[Any, GitMirrors], tmp_path: Path, key: Path) -> None:
    d, git = setup
    bundle = make_bundle(tmp_path / "b", key, os.urandom(BIG))
    first = run(git, port(d), screen(), bundle)
    again = run(git, port(d), screen(), bundle)
    assert (again.state, again.sha) == ("already", first.sha)
    # the same label with other evidence (a reset bot database, a second bot): frozen
    other = make_bundle(tmp_path / "b2", key, os.urandom(BIG), note='{"other": 1}\n')
    refused = run(git, port(d), screen(), other)
    assert refused.state == "refused"
    assert refused.message.startswith(f"{CAMP}/screens/S1 already exists on topic with other "
                                      "content (")
    assert refused.message.endswith("committed screen evidence is never rewritten")
    assert d.repo(REPO).refs["topic"] == first.sha  # nothing rewritten
    # a later screen gets its own directory beside it
    later = run(git, port(d), screen("S2"), other)
    assert later.state == "committed"
    tree = d.repo(REPO).trees[later.sha]
    assert tree[f"{CAMP}/screens/S1/data/receipts/session-00.json"] == b"{}\n"
    assert tree[f"{CAMP}/screens/S2/data/receipts/session-00.json"] == b'{"other": 1}\n'


def test_the_branch_moves_during_the_commit_it_is_rebuilt_on_the_new_tip(
        setup: tuple[Any, GitMirrors], tmp_path: Path, key: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    d, git = setup
    bundle = make_bundle(tmp_path / "b", key, os.urandom(10))
    real = git.commit_files
    moved: list[str] = []

    def commit_then_someone_pushes(*a: Any, **kw: Any) -> str:
        sha = real(*a, **kw)
        if not moved:
            moved.append(d.push(REPO, 7, {f"{CAMP}/NOTES.md": "edited meanwhile\n"}))
        return sha

    monkeypatch.setattr(git, "commit_files", commit_then_someone_pushes)
    out = run(git, port(d), screen(), bundle)
    assert out.state == "committed"
    tree = d.repo(REPO).trees[out.sha]
    assert tree[f"{CAMP}/NOTES.md"] == b"edited meanwhile\n"  # the human's push is kept
    assert f"{CAMP}/screens/S1/attestation.dsse.json" in tree
    assert d.git.state(REPO).parents[out.sha] == moved  # built on the new tip, no force


def test_a_fork_gets_the_bot_branch_made_from_the_base(github_double: Any, tmp_path: Path,
                                                       key: Path) -> None:
    d = github_double
    d.add_repo(REPO, {f"{CAMP}/campaign.toml": "id = 'h3'\n"})
    d.add_pull(REPO, 7, {f"{CAMP}/NOTES.md": "fork code\n"}, fork="evil/Hello-World")
    git = GitMirrors(tmp_path / "cache")
    bundle = make_bundle(tmp_path / "b", key, os.urandom(10))
    out = run(git, port(d), screen(), bundle)
    assert (out.state, out.branch, out.fork) == ("committed", "campaign-bot/screens/PR-7", True)
    tree = d.repo(REPO).trees[out.sha]
    assert f"{CAMP}/NOTES.md" not in tree  # no fork code on a branch of this repository
    assert set(tree) - set(d.repo(REPO).trees[d.repo(REPO).refs["main"]]) == {
        p for p in tree if p.startswith(f"{CAMP}/screens/S1/")}
    # the next screen of the same fork PR goes on top of the bot's branch
    out2 = run(git, port(d), screen("S2"), make_bundle(tmp_path / "b2", key, b"x"))
    assert out2.state == "committed"
    assert f"{CAMP}/screens/S1/bagit.txt" in d.repo(REPO).trees[out2.sha]


def test_a_dry_run_pushes_nothing(setup: tuple[Any, GitMirrors], tmp_path: Path,
                                  key: Path) -> None:
    d, git = setup
    rec = RecordingGitHub(port(d))
    head = d.repo(REPO).refs["topic"]
    out = run(git, rec, screen(), make_bundle(tmp_path / "b", key, b"x"))
    assert out.state == "dry-run"
    assert [w.op for w in rec.writes] == ["git_push"]
    assert d.repo(REPO).refs["topic"] == head and d.writes() == []


def test_split_bundle_keeps_documents_and_refuses_links(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.json").write_text("x" * 100)
    (tmp_path / "data" / "big.mp4").write_bytes(b"y" * 100)
    (tmp_path / "data" / "small.mp4").write_bytes(b"z")
    committed, external = split_bundle(tmp_path, 10)
    assert sorted(committed) == ["data/big.json", "data/small.mp4"]
    assert list(external) == ["data/big.mp4"] and external["data/big.mp4"]["size"] == 100
    (tmp_path / "data" / "link").symlink_to("/etc/passwd")
    with pytest.raises(ValueError, match="data/link: not a regular file"):
        split_bundle(tmp_path, 10)


@pytest.mark.parametrize("twin", ["data/SMALL.mp4", "data/small.mp4".replace("a", "A", 1),
                                  "DATA/other.json"])
def test_split_bundle_refuses_case_and_normalisation_twins(tmp_path: Path, twin: str) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "small.mp4").write_bytes(b"z")
    (tmp_path / twin).parent.mkdir(exist_ok=True)
    (tmp_path / twin).write_bytes(b"forged")
    with pytest.raises(ValueError, match="one name once case-folded or Unicode-normalised"):
        split_bundle(tmp_path, 10)


def test_split_bundle_refuses_nfc_beside_nfd(tmp_path: Path) -> None:
    (tmp_path / "caf\u00e9.json").write_text("{}")
    (tmp_path / "cafe\u0301.json").write_text('{"forged": true}')
    with pytest.raises(ValueError, match="one name once case-folded or Unicode-normalised"):
        split_bundle(tmp_path, 10)


@pytest.mark.parametrize("head_ref", ["main", "campaign-bot/screens/PR-3"])
def test_a_head_on_the_default_or_a_bot_branch_gets_the_bot_branch(
        github_double: Any, tmp_path: Path, key: Path, head_ref: str) -> None:
    """A same-repository PR whose head is the default branch (any reader of a public
    repository can open one) or one of the bot's own branches: the evidence goes to the PR's
    own campaign-bot/screens/PR-N branch, made from the base; the head branch is untouched."""
    d = github_double
    d.add_repo(REPO, {f"{CAMP}/campaign.toml": "id = 'h3'\n"})
    d.add_pull(REPO, 7, {f"{CAMP}/NOTES.md": "n\n"}, head_ref=head_ref)
    before = d.repo(REPO).refs[head_ref]
    git = GitMirrors(tmp_path / "cache")
    out = run(git, port(d), screen(), make_bundle(tmp_path / "b", key, b"x"))
    assert (out.state, out.branch, out.fork) == ("committed", "campaign-bot/screens/PR-7", True)
    assert d.repo(REPO).refs[head_ref] == before
    assert "head is the default branch" in str(out.own_reason) or "bot's own" in str(
        out.own_reason)
    from bot.features.screen.evidence import evidence_note
    note = evidence_note(out, max_file_bytes=BIG)
    assert "does not commit to this pull request's head branch" in note
    assert "comes from a fork" not in note


@pytest.mark.parametrize("case", ["protected", "head-of-another", "base-of-another"])
def test_a_shared_head_branch_gets_the_bot_branch(github_double: Any, tmp_path: Path,
                                                  key: Path, case: str) -> None:
    """A same-repository PR whose head is a branch not made for it: a protected release
    branch, the head of another open PR, or the base other PRs build on.  The evidence goes
    to campaign-bot/screens/PR-7 and the head branch is untouched."""
    d = github_double
    d.add_repo(REPO, {f"{CAMP}/campaign.toml": "id = 'h3'\n"})
    head = "release/1.0"
    d.set_branch(REPO, head, {f"{CAMP}/RELEASE.md": "r\n"}, parent="main")
    if case == "protected":
        d.protect_branch(REPO, head)
    d.add_pull(REPO, 7, {f"{CAMP}/NOTES.md": "n\n"}, head_ref=head)
    if case == "head-of-another":
        d.add_pull(REPO, 8, {f"{CAMP}/OTHER.md": "o\n"}, head_ref=head)
    elif case == "base-of-another":
        d.add_pull(REPO, 9, {f"{CAMP}/ON-TOP.md": "t\n"}, head_ref="on-top", base_ref=head)
    before = d.repo(REPO).refs[head]
    git = GitMirrors(tmp_path / "cache")
    out = run(git, port(d), screen(), make_bundle(tmp_path / "b", key, b"x"))
    assert (out.state, out.branch, out.fork) == ("committed", "campaign-bot/screens/PR-7", True)
    assert d.repo(REPO).refs[head] == before
    want = {"protected": f"head branch {head} is protected",
            "head-of-another": f"head branch {head} is also the head of #8",
            "base-of-another": f"head branch {head} is the base of #9"}[case]
    assert want in str(out.own_reason)


def test_a_branch_made_for_the_pull_request_takes_its_evidence(
        setup: tuple[Any, GitMirrors], tmp_path: Path, key: Path) -> None:
    """The asked reads, and what they find for a PR's own branch: nothing shared."""
    d, git = setup
    gh = port(d)
    assert gh.branch_protected("topic") is False
    assert [p.number for p in gh.list_open_pulls(head="topic")] == [7]
    assert gh.list_open_pulls(base="topic") == []
    out = run(git, gh, screen(), make_bundle(tmp_path / "b", key, b"x"))
    assert (out.state, out.branch, out.fork, out.own_reason) == ("committed", "topic", False,
                                                                 None)


def test_a_bundle_holding_a_private_key_is_refused(tmp_path: Path, key: Path) -> None:
    """Defence in depth: a signed bundle that carries private-key material (PEM or the DER of
    an ed25519 PKCS#8 key) is refused whatever its signature says."""
    from cryptography.hazmat.primitives import serialization

    from bot.features.screen.bundle import verify_bundle

    pub = key.with_name(key.name + ".pub").read_bytes()
    clean = make_bundle(tmp_path / "clean", key, b"video")
    assert verify_bundle(clean, pub).ok
    pem = key.read_bytes()
    der = load_private_key(key).private_bytes(serialization.Encoding.DER,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())
    for name, body in (("pem", pem), ("der", b"\0" * ((1 << 20) - 5) + der)):
        bundle = make_bundle(tmp_path / name, key, body)
        res = verify_bundle(bundle, pub)
        assert not res.ok and res.documents == []
        assert any("data/outputs/candidate.mp4: holds private-key material" in p
                   for p in res.problems), res.problems


def test_a_name_with_a_line_break_is_refused_before_git(setup: tuple[Any, GitMirrors],
                                                        tmp_path: Path, key: Path) -> None:
    """``x.log\\r`` beside ``x.log`` was committed with ``x.log``'s content (paths went to
    ``git hash-object --stdin-paths`` one per line): now nothing is committed."""
    d, git = setup
    bundle = make_bundle(tmp_path / "b", key, b"x")
    (bundle / "data" / "x.log").write_text("honest\n")
    (bundle / "data" / "x.log\r").write_text("other\n")
    head = d.repo(REPO).refs["topic"]
    out = run(git, port(d), screen(), bundle)
    assert out.state == "failed" and "a control character" in out.message, out.message
    assert d.repo(REPO).refs["topic"] == head
    with pytest.raises(ValueError, match="a line break in a file name"):
        git.blob_shas(REPO, [bundle / "data" / "x.log\r"])


def test_a_bundle_over_the_commit_caps_is_not_committed(setup: tuple[Any, GitMirrors],
                                                       tmp_path: Path, key: Path) -> None:
    """More files, or more bytes, to commit than ``[screen] max_committed_files`` /
    ``max_committed_bytes``: refused, nothing pushed (9,015 files and 60 MiB each went into
    one commit before the caps)."""
    d, git = setup
    bundle = make_bundle(tmp_path / "b", key, b"x")
    for i in range(30):
        (bundle / "data" / f"f{i}.txt").write_text("y" * 1000)
    head = d.repo(REPO).refs["topic"]
    out = run(git, port(d), screen(), bundle, max_files=20)
    assert out.state == "refused" and "over the caps of 20 files" in out.message, out.message
    out = run(git, port(d), screen(), bundle, max_bytes=10_000)
    assert out.state == "refused" and "10,000 bytes" in out.message
    assert d.repo(REPO).refs["topic"] == head
    assert run(git, port(d), screen(), bundle).state == "committed"  # the defaults hold it


def test_a_signed_receipt_with_a_duplicate_key_is_refused_as_check_refuses_it(
        tmp_path: Path) -> None:
    """One reader for signed documents: the bot read ``{"x": 1, "x": 2}`` as 2 (last wins)
    where ``campaign-bot check`` reports JSON_INVALID; now both refuse it."""
    from bot.features.screen.bundle import read_bundle
    from evidence.bundle import load_campaign

    d = tmp_path / "b" / "data" / "receipts"
    d.mkdir(parents=True)
    (d / "r.json").write_text('{"schema": "campaign-bot/receipt@1", "arm": "control",\n'
                              ' "arm": "candidate"}\n')
    docs = read_bundle(tmp_path / "b", ["data/receipts/r.json"])
    assert docs.receipts == [] and docs.unreadable == [
        "data/receipts/r.json: not readable JSON: duplicate key 'arm' in one object: readers "
        "disagree on which value wins"]
    found = load_campaign(tmp_path / "b").findings
    assert any(f.rule == "JSON_INVALID" and "duplicate key 'arm'" in f.message for f in found)


def test_evidence_lands_on_a_head_whose_large_file_was_never_fetched(
        github_double: Any, tmp_path: Path, key: Path) -> None:
    """The review fetched the pull request's head without the contents of a large file it
    adds outside the campaign; committing a screen's bundle onto that head (a commit over a
    tree whose blob the mirror lacks) neither needs nor fetches that blob."""
    import subprocess

    from bot.features.review.review import read_pull
    from bot.repo_config import RepoConfig

    d = github_double
    big = os.urandom(4 << 20)
    d.add_repo(REPO, {f"{CAMP}/campaign.toml": "id = 'h3'\n"})
    d.add_pull(REPO, 7, {f"{CAMP}/NOTES.md": "n\n", "vendor/big.bin": big}, head_ref="topic")
    git = GitMirrors(tmp_path / "cache")
    gh = port(d)
    read_pull(git, gh, gh.get_pull(7), RepoConfig().campaigns.paths)
    oid = subprocess.run(["git", "hash-object", "--stdin"], input=big, capture_output=True,
                         check=True).stdout.decode().strip()

    def missing() -> bool:
        out = subprocess.run(["git", "-C", str(git.path(REPO)), "rev-list", "--objects",
                              "--missing=print", "refs/campaign-bot/pull/7/head"],
                             capture_output=True, text=True, check=True).stdout.split()
        return f"?{oid}" in out

    assert missing()
    out = run(git, gh, screen(), make_bundle(tmp_path / "b", key, b"x"))
    assert (out.state, out.branch) == ("committed", "topic"), out.message
    tree = d.repo(REPO).trees[out.sha]
    assert tree["vendor/big.bin"] == big and f"{CAMP}/screens/S1/bagit.txt" in tree
    assert missing()  # still not in the mirror: nothing fetched it
