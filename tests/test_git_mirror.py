"""Evidence through git (bot/github/git.py) against the GitHub double's real git server: what
is fetched, what is written (and what never is), LFS pointers, limits, timeouts, the token's
path, and pushes that are looked up before they are called failed."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from github_helpers import REPO, port

from bot.github import GitRemote
from bot.github.git import (
    CampaignTooLarge,
    GitError,
    GitMirrors,
    GitTimeout,
    PushRejected,
    git_base_url,
)
from bot.github.tree import parse_lfs_pointer, twin_paths, unsafe_path

LFS = ("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32
       + "\nsize 123456789\n")


@pytest.fixture
def mirrors(tmp_path: Path) -> GitMirrors:
    return GitMirrors(tmp_path / "cache", timeout_s=60)


def remote(double: Any) -> GitRemote:
    gr = port(double).git_remote()
    assert gr is not None
    return gr


def test_git_base_url() -> None:
    assert git_base_url("https://api.github.com") == "https://github.com"
    assert git_base_url("https://ghe.example.com/api/v3/") == "https://ghe.example.com"
    assert git_base_url("http://127.0.0.1:9") == "http://127.0.0.1:9"


@pytest.mark.parametrize("data,expected", [
    (LFS.encode(), ("ab" * 32, 123456789)),
    (LFS.replace("spec/v1", "spec/v2").encode(), None),           # unknown version
    (LFS.encode()[:-1], None),                                    # no final LF
    (LFS.replace("sha256:", "sha1:").encode(), None),             # not a SHA-256 oid
    (b"version https://git-lfs.github.com/spec/v1\nsize 1\n", None),  # no oid
    (b'{"schema": "x"}\n', None),
])
def test_lfs_pointer(data: bytes, expected: tuple[str, int] | None) -> None:
    assert parse_lfs_pointer(data) == expected


@pytest.mark.parametrize("path", ["../x", "a/../b", "/etc/passwd", "a/.git/config", "a/.GIT",
                                  "a//b", "./a", "", "x.log\r", "a\nb", "tab\there",
                                  "evil\u202egnp.exe", "d/" + "n" * 256,
                                  "/".join(["d" * 200] * 21)])
def test_unsafe_paths(path: str) -> None:
    assert unsafe_path(path) is not None


CAFE_NFC, CAFE_NFD = "caf\u00e9", "cafe\u0301"


@pytest.mark.parametrize("paths", [
    ["s/x.log", "s/X.LOG"],                          # case-fold collision
    ["s/stra\u00dfe.txt", "s/STRASSE.txt"],         # full case folding (sharp s)
    [f"s/{CAFE_NFC}.json", f"s/{CAFE_NFD}.json"],    # NFC beside NFD
    [f"s/{CAFE_NFC}/a", f"s/{CAFE_NFD.upper()}/b"],  # two folders that are one
])
def test_twin_names_are_refused(paths: list[str]) -> None:
    why = twin_paths(paths)
    assert why is not None and "one name once case-folded or Unicode-normalised" in why
    assert why.startswith("'s/")  # names the twins (or their twin folders)


def test_distinct_names_are_not_twins() -> None:
    assert twin_paths(["s/x.log", "s/x.log2", f"s/{CAFE_NFC}", "t/x.log", "s/x.log"]) is None


def test_fetch_materialise_everything_no_per_file_cap(github_double: Any, tmp_path: Path,
                                                      mirrors: GitMirrors) -> None:
    d = github_double
    big = os.urandom(3 * 1024 * 1024)  # over the contents API's 1 MB
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": "id = 'h3'\n",
                      "campaigns/h3/outputs/big.bin": big,
                      "campaigns/h3/outputs/video.mp4": LFS,
                      "campaigns/other/x.json": "{}\n"})
    pull = d.add_pull(REPO, 2, {"campaigns/h3/results/a.json": '{"a": 1}\n'})
    refs = mirrors.fetch(remote(d), REPO, ["refs/heads/main", "refs/pull/2/head"])
    assert refs == {"refs/heads/main": d.repo(REPO).refs["main"],
                    "refs/pull/2/head": pull.head_sha}
    out = mirrors.materialise(REPO, pull.head_sha, "campaigns/h3", tmp_path / "m")
    assert (tmp_path / "m/outputs/big.bin").read_bytes() == big
    assert (tmp_path / "m/results/a.json").read_text() == '{"a": 1}\n'
    assert not (tmp_path / "m/outputs/video.mp4").exists()  # a pointer: external, not written
    assert [(p.path, p.sha256, p.size) for p in out.lfs] == [
        ("outputs/video.mp4", "ab" * 32, 123456789)]
    assert (out.files, out.bytes) == (3, len(big) + len("id = 'h3'\n") + len('{"a": 1}\n'))
    assert not (tmp_path / "m/x.json").exists()  # another campaign's files stay out
    # the PR's changed files, as GitHub lists them
    changes = mirrors.changed_files(REPO, refs["refs/heads/main"], pull.head_sha)
    assert [(c.filename, c.status, c.patch) for c in changes] == [
        ("campaigns/h3/results/a.json", "added", '@@ -0,0 +1 @@\n+{"a": 1}')]
    # the tree SHA the header keys on is git's, the same the contents API names
    listing = port(d).list_dir("campaigns", "main")
    assert mirrors.tree_sha(REPO, refs["refs/heads/main"], "campaigns/h3") == next(
        e.sha for e in listing if e.path == "campaigns/h3")


def test_over_long_names_are_skipped_not_raised(github_double: Any, tmp_path: Path,
                                               mirrors: GitMirrors) -> None:
    """A name over 255 bytes or a path over PATH_MAX in a campaign folder is listed as not
    written (the review reports it), never an ENAMETOOLONG that fails the delivery."""
    d = github_double
    long_name = "campaigns/h3/" + "n" * 300 + ".json"
    deep = "campaigns/h3/" + "/".join(["d" * 250] * 17) + "/x.json"
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": "id = 'h3'\n", long_name: "{}\n",
                      deep: "{}\n"})
    tip = mirrors.fetch(remote(d), REPO, ["refs/heads/main"])["refs/heads/main"]
    out = mirrors.materialise(REPO, tip, "campaigns/h3", tmp_path / "m")
    why = dict(out.skipped)
    assert why["n" * 300 + ".json"] == "not written: path component over 255 bytes"
    assert why[deep.removeprefix("campaigns/h3/")].startswith("not written: path over ")
    assert (tmp_path / "m/campaign.toml").exists() and out.files == 1


def test_over_the_campaign_limit_nothing_is_written(github_double: Any, tmp_path: Path
                                                    ) -> None:
    github_double.add_repo(REPO, {"c/a.bin": b"x" * 6000, "c/b.bin": b"y" * 6000})
    m = GitMirrors(tmp_path / "cache", max_campaign_bytes=10_000)
    tip = m.fetch(remote(github_double), REPO, ["refs/heads/main"])["refs/heads/main"]
    with pytest.raises(CampaignTooLarge) as exc:
        m.materialise(REPO, tip, "c", tmp_path / "m")
    assert str(exc.value) == (
        f"c at {tip[:12]} holds 2 files of 11.7 KiB, over the per-campaign limit of 9.8 KiB "
        "(CAMPAIGN_BOT_GIT_MAX_CAMPAIGN_BYTES); nothing was checked")
    assert not (tmp_path / "m").exists()


def test_links_and_submodules_are_not_written(github_double: Any, tmp_path: Path,
                                              mirrors: GitMirrors) -> None:
    d = github_double
    d.add_repo(REPO, {"c/a.txt": "a\n"})
    tip = mirrors.fetch(remote(d), REPO, ["refs/heads/main"])["refs/heads/main"]
    # a commit with a symlink to /etc/passwd and a submodule, built with git plumbing
    path = mirrors.path(REPO)
    env = {**os.environ, "GIT_DIR": str(path), "GIT_INDEX_FILE": str(tmp_path / "idx")}
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"/etc/passwd",
                          env=env, capture_output=True, check=True).stdout.decode().strip()
    subprocess.run(["git", "read-tree", tip], env=env, check=True)
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"120000,{blob},c/link"],
                   env=env, check=True)
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"160000,{tip},c/sub"],
                   env=env, check=True)
    tree = subprocess.run(["git", "write-tree"], env=env, capture_output=True,
                          check=True).stdout.decode().strip()
    commit = subprocess.run(["git", "commit-tree", tree, "-m", "x"], env={
        **env, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@b"}, capture_output=True, check=True).stdout.decode().strip()
    out = mirrors.materialise(REPO, commit, "c", tmp_path / "m")
    assert sorted(out.skipped) == [
        ("link", "symbolic link: not followed, not verified"),
        ("sub", "submodule: not fetched, not verified")]
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["a.txt"]


def test_a_missing_ref_and_a_bad_token_are_clear_errors(github_double: Any,
                                                         mirrors: GitMirrors) -> None:
    d = github_double
    d.add_repo(REPO, {"a.txt": "a\n"})
    with pytest.raises(GitError, match="couldn't find remote ref refs/heads/gone"):
        mirrors.fetch(remote(d), REPO, ["refs/heads/gone"])
    bad = GitRemote(d.git_url(REPO), "ghs_revoked_token")
    with pytest.raises(GitError) as exc:
        mirrors.fetch(bad, REPO, ["refs/heads/main"])
    assert str(exc.value) == (
        "git fetch failed: the server refused the token (HTTP 401): the installation may not "
        "have access to this repository, or its token expired")


def test_the_token_travels_in_the_environment_only(github_double: Any, tmp_path: Path,
                                                   mirrors: GitMirrors,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    d = github_double
    d.add_repo(REPO, {"a.txt": "a\n"})
    seen: list[tuple[list[str], dict[str, str]]] = []
    real = subprocess.Popen

    def spy(cmd: list[str], *a: Any, **kw: Any) -> Any:
        seen.append((list(cmd), dict(kw.get("env") or {})))
        return real(cmd, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", spy)
    gr = remote(d)
    mirrors.fetch(gr, REPO, ["refs/heads/main"])
    fetch_cmd, env = next((c, e) for c, e in seen if "fetch" in c)
    assert not any(gr.token in part for part in fetch_cmd)
    header = next(v for k, v in env.items() if k.startswith("GIT_CONFIG_VALUE_")
                  and v.startswith("Authorization: Basic "))
    assert header and env["GIT_CONFIG_NOSYSTEM"] == "1"
    keys = {env[k]: env[k.replace("KEY", "VALUE")] for k in env if k.startswith("GIT_CONFIG_KEY")}
    assert keys["core.hooksPath"] == os.devnull and keys["protocol.allow"] == "never"
    assert keys["http.followRedirects"] == "false"
    assert keys[f"http.{gr.url}.extraHeader"] == header  # scoped to this remote only
    for f in (mirrors.cache_dir).rglob("*"):
        if f.is_file():
            assert gr.token.encode() not in f.read_bytes(), f


def test_a_hanging_server_times_out(tmp_path: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)  # accepts the connection, never answers
    held: list[socket.socket] = []
    t = threading.Thread(target=lambda: held.append(srv.accept()[0]), daemon=True)
    t.start()
    m = GitMirrors(tmp_path / "cache", timeout_s=2)
    gr = GitRemote(f"http://127.0.0.1:{srv.getsockname()[1]}/o/r.git", "t")
    with pytest.raises(GitTimeout, match="took longer than 2 s and was stopped"):
        m.fetch(gr, "o/r", ["refs/heads/main"])
    srv.close()


def test_commit_push_and_a_moved_branch(github_double: Any, tmp_path: Path,
                                        mirrors: GitMirrors) -> None:
    d = github_double
    d.add_repo(REPO, {"c/a.txt": "a\n"})
    pull = d.add_pull(REPO, 2, {"c/b.txt": "b\n"}, head_ref="topic")
    gr = remote(d)
    tip = mirrors.fetch(gr, REPO, ["refs/heads/topic"])["refs/heads/topic"]
    f = tmp_path / "r.json"
    f.write_text("{}\n")
    sha = mirrors.commit_files(REPO, tip, {"c/screens/S1/r.json": f}, "Screen S1\n")
    # someone pushes first: the bot's push is not a fast-forward and is refused
    moved = d.push(REPO, 2, {"c/human.txt": "h\n"})
    with pytest.raises(PushRejected):
        mirrors.push(gr, REPO, sha, "topic", expect=tip)
    assert pull.head_sha == moved
    with pytest.raises(ValueError, match="path component '..'"):
        mirrors.commit_files(REPO, tip, {"c/../x": f}, "x\n")
    with pytest.raises(ValueError, match="case-folded or Unicode-normalised"):
        mirrors.commit_files(REPO, tip, {"c/x.log": f, "c/X.log": f}, "x\n")


def test_a_push_whose_answer_is_lost_is_looked_up(github_double: Any, tmp_path: Path,
                                                  mirrors: GitMirrors,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    d = github_double
    d.add_repo(REPO, {"c/a.txt": "a\n"})
    gr = remote(d)
    tip = mirrors.fetch(gr, REPO, ["refs/heads/main"])["refs/heads/main"]
    f = tmp_path / "r.json"
    f.write_text("{}\n")
    sha = mirrors.commit_files(REPO, tip, {"c/r.json": f}, "x\n")
    real = mirrors._run

    def lossy(args: Any, **kw: Any) -> Any:
        res = real(args, **kw)
        if args[0] == "push":  # it landed, but the answer says otherwise
            return subprocess.CompletedProcess(res.args, 128, b"", b"fatal: the remote end "
                                               b"hung up unexpectedly")
        return res

    monkeypatch.setattr(mirrors, "_run", lossy)
    out = mirrors.push(gr, REPO, sha, "main", expect=tip)
    assert (out.sha, out.confirmed) == (sha, True)
    assert d.repo(REPO).refs["main"] == sha


def test_a_closed_pull_is_pruned_from_the_mirror(github_double: Any, mirrors: GitMirrors
                                                 ) -> None:
    """A fork's push fetched for review stays in the mirror until its PR is forgotten: then
    its ref and the objects only it reached are gone, the base branch's are kept."""
    d = github_double
    d.add_repo(REPO, {"c/a.txt": "a\n"})
    pull = d.add_pull(REPO, 2, {"vendor/noise.txt": os.urandom(1 << 20).hex()},
                      fork="evil/Hello-World")
    got = mirrors.fetch(remote(d), REPO, ["refs/pull/2/head", "refs/heads/main"])
    assert got["refs/pull/2/head"] == pull.head_sha
    path = mirrors.path(REPO)

    def size() -> int:
        return sum(p.stat().st_size for p in (path / "objects").rglob("*") if p.is_file())

    before = size()
    assert mirrors.forget_pull(REPO, 2) is True
    assert not mirrors.has_commit(REPO, pull.head_sha)
    assert mirrors.has_commit(REPO, got["refs/heads/main"])
    assert size() < before - (1 << 20)  # the 2 MiB of hex (1 MiB compressed) are gone
    assert mirrors.forget_pull(REPO, 2) is False  # nothing left to forget
    assert mirrors.forget_pull("octo/never-fetched", 3) is False


def test_a_file_a_partial_fetch_left_on_the_server_is_an_error_not_absent(
        github_double: Any, mirrors: GitMirrors) -> None:
    """A pull request's head is fetched without file contents: reading one of its files
    (a trusted-keys.pem) must fail loudly, never read as absent (taken as absent, the review
    would verify no signature at all).  Once the head is merged, the default branch's full
    fetch brings the contents: git's negotiation counts them as the mirror's (its commits
    are "have"s), so the fetch backfills them by id."""
    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": "id = 'h3'\n"})
    pull = d.add_pull(REPO, 2, {"campaigns/h3/trusted-keys.pem": "KEY\n"})
    mirrors.fetch(remote(d), REPO, ["refs/heads/main"])
    mirrors.fetch(remote(d), REPO, ["refs/pull/2/head"], blobs=False)
    assert mirrors.read_file(REPO, pull.head_sha, "campaigns/h3/absent.pem") is None
    with pytest.raises(GitError, match="campaigns/h3/trusted-keys.pem .* not in the mirror"):
        mirrors.read_file(REPO, pull.head_sha, "campaigns/h3/trusted-keys.pem")
    merged = d.set_branch(REPO, "main", {}, parent="topic")  # merged: main moves to the head
    assert mirrors.fetch(remote(d), REPO, ["refs/heads/main"])["refs/heads/main"] == merged
    assert mirrors.read_file(REPO, merged, "campaigns/h3/campaign.toml") == b"id = 'h3'\n"
    assert mirrors.read_file(REPO, merged, "campaigns/h3/trusted-keys.pem") == b"KEY\n"
