"""The hashing pipeline (evidence/hashing.py): digests, order, flat memory, hostile files, and
hashing overlapped with document parsing in verify_tree."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from evidence import hashing
from evidence.hashing import HashPool, chunk_bytes, hash_files, sha256_file, usable_cores
from evidence.manifest import index_tree, verify_tree, write_bag


def _file(p: Path, size: int, seed: int = 0) -> Path:
    block = hashlib.sha256(str(seed).encode()).digest() * 4096  # 128 KiB pattern
    with open(p, "wb") as f:
        left = size
        while left:
            f.write(block[:min(left, len(block))])
            left -= min(left, len(block))
    return p


def test_digests_and_sizes_match_hashlib(tmp_path: Path) -> None:
    sizes = [0, 1, 2047, 2048, hashing.CHUNK_BYTES - 1, hashing.CHUNK_BYTES,
             hashing.CHUNK_BYTES + 1, 3 * hashing.CHUNK_BYTES + 17]
    files = [_file(tmp_path / f"f{i}", s, i) for i, s in enumerate(sizes)]
    got = hash_files(files, workers=3)
    for p, s in zip(files, sizes, strict=True):
        assert got[p] == (hashlib.sha256(p.read_bytes()).hexdigest(), s)
        assert sha256_file(p, chunk=4096) == got[p]
        assert sha256_file(p, buffer=bytearray(7)) == got[p]  # any buffer length works


def test_largest_waiting_file_is_hashed_first(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    gate = threading.Event()
    real = hashing.digest_file

    def recording(path: Path, algorithms: tuple[str, ...],
                  **kw: object) -> tuple[dict[str, str], int]:
        order.append(Path(path).name)
        if len(order) == 1:
            assert gate.wait(10)  # hold the only thread until everything is queued
        return real(path, algorithms, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(hashing, "digest_file", recording)
    first = _file(tmp_path / "first", 10)
    rest = {n: _file(tmp_path / n, s) for n, s in
            [("small", 100), ("big", 300_000), ("medium", 20_000), ("tiny", 1)]}
    with HashPool(workers=1) as pool:
        pool.submit(first)
        time.sleep(0.05)
        for p in rest.values():
            pool.submit(p)
        pool.submit(rest["big"])  # a second submission is not hashed twice
        gate.set()
        got = pool.results([first, *rest.values()])
    assert order == ["first", "big", "medium", "small", "tiny"]
    assert all(isinstance(v, tuple) for v in got.values())


def test_each_file_is_read_once_for_every_algorithm_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[str, tuple[str, ...]]] = []
    real = hashing.digest_file

    def recording(path: Path, algorithms: tuple[str, ...],
                  **kw: object) -> tuple[dict[str, str], int]:
        reads.append((Path(path).name, tuple(algorithms)))
        return real(path, algorithms, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(hashing, "digest_file", recording)
    a, b = _file(tmp_path / "a", 300_000, 1), _file(tmp_path / "b", 5000, 2)
    got = hashing.digest_files({a: ("md5", "sha512", "sha256"), b: ("sha1",)}, workers=2)
    assert sorted(reads) == [("a", ("md5", "sha256", "sha512")), ("b", ("sha1",))]
    data = a.read_bytes()
    ok = got[a]
    assert not isinstance(ok, OSError)
    assert ok == ({"md5": hashlib.md5(data).hexdigest(),
                   "sha256": hashlib.sha256(data).hexdigest(),
                   "sha512": hashlib.sha512(data).hexdigest()}, 300_000)
    assert got[b] == ({"sha1": hashlib.sha1(b.read_bytes()).hexdigest()}, 5000)
    # asked again for one more algorithm: read once more, for that one only
    reads.clear()
    with HashPool(workers=1) as pool:
        pool.submit(a, algorithms=("sha256",))
        first = pool.digests({a: ("sha256",)})[a]
        both = pool.digests({a: ("sha256", "sha224")})[a]
        again = pool.results([a])[a]
    assert reads == [("a", ("sha256",)), ("a", ("sha224",))]
    assert not isinstance(first, OSError) and not isinstance(both, OSError)
    assert both[0] == {"sha256": first[0]["sha256"], "sha224": hashlib.sha224(data).hexdigest()}
    assert again == (first[0]["sha256"], 300_000)
    with pytest.raises(ValueError, match="whirlpool"):
        hashing.digest_files({a: ("whirlpool",)})


def test_memory_is_flat_whatever_the_file_size(tmp_path: Path) -> None:
    big = _file(tmp_path / "big.bin", 96 << 20)
    workers = 2
    tracemalloc.start()
    try:
        got = hash_files([big, _file(tmp_path / "b.bin", 40 << 20, 1)], workers=workers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got[big][1] == 96 << 20
    # one buffer per thread, nothing that grows with the 96 MiB file
    assert peak < workers * chunk_bytes(workers) + (2 << 20), peak


def test_unreadable_missing_and_special_files_are_results_not_errors(tmp_path: Path) -> None:
    ok = _file(tmp_path / "ok", 5000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    got = hash_files([ok, tmp_path / "missing", fifo, tmp_path])
    assert time.monotonic() - t0 < 10  # the FIFO was not waited on
    assert isinstance(got[ok], tuple)
    assert isinstance(got[tmp_path / "missing"], FileNotFoundError)
    fifo_err = got[fifo]
    assert isinstance(fifo_err, OSError) and fifo_err.errno == errno.EINVAL
    assert "not a regular file" in str(fifo_err) and "fifo" in str(fifo_err)
    assert isinstance(got[tmp_path], OSError)  # a directory: EISDIR or EINVAL


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    files = [_file(tmp_path / f"f{i}", (1 << 20) * (i + 1)) for i in range(3)]
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def progress(done: int, total: int) -> None:
        with lock:
            seen.append((done, total))

    hash_files(files, progress=progress)
    total = sum(p.stat().st_size for p in files)
    assert max(d for d, _ in seen) == total
    assert all(d <= t for d, t in seen)


def test_cancel_stops_at_once_and_closed_pool_refuses_work(tmp_path: Path) -> None:
    big = _file(tmp_path / "big", 64 << 20)
    pool = HashPool(workers=1, chunk=64 << 10)
    pool.submit(big)
    pool.submit(_file(tmp_path / "next", 10))
    t0 = time.monotonic()
    pool.close(cancel=True)
    assert time.monotonic() - t0 < 5
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit(big)


def test_pool_with_nothing_to_hash_starts_no_thread() -> None:
    before = threading.active_count()
    with HashPool() as pool:
        assert pool.results([]) == {}
        assert threading.active_count() == before


def test_sizes_follow_the_cores() -> None:
    assert usable_cores() >= 1
    assert chunk_bytes(2) == hashing.CHUNK_BYTES
    assert chunk_bytes(256) == hashing.BUFFER_BUDGET_BYTES // 256 < hashing.CHUNK_BYTES
    assert chunk_bytes(10_000) == hashing.MIN_CHUNK_BYTES


def test_verify_tree_queues_bag_files_before_it_parses_documents(tmp_path: Path) -> None:
    (tmp_path / "data" / "media").mkdir(parents=True)
    media = [_file(tmp_path / "data" / "media" / f"m{i}.bin", 3 << 20, i) for i in range(3)]
    (tmp_path / "data" / "r.json").write_text('{"a": 1}\n')
    write_bag(tmp_path)
    seen_at_parse: list[frozenset[Path]] = []
    with HashPool(workers=2) as pool:
        def docs() -> dict[str, tuple[object, str]]:
            seen_at_parse.append(pool.queued())
            return {"data/r.json": ({"a": 1}, '{"a": 1}\n')}

        res = verify_tree(tmp_path, json_docs=docs, hasher=pool)
    assert len(seen_at_parse) == 1
    assert set(media) <= seen_at_parse[0]
    assert res.errors == 0 and res.hashes_ok == res.hashes_checked >= 4
    plain = verify_tree(tmp_path)  # no pool: the same result
    assert plain.hashes_ok == res.hashes_ok and plain.findings == res.findings


def test_verify_tree_with_a_pool_reports_a_mismatch(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    f = _file(tmp_path / "data" / "a.bin", 1 << 20)
    write_bag(tmp_path)
    with open(f, "r+b") as fh:
        fh.write(b"X")
    with HashPool() as pool:
        res = verify_tree(tmp_path, hasher=pool, json_docs=dict)
    assert res.mismatched == 1
    assert [x.rule for x in res.findings] == ["MANIFEST_MISMATCH"]


def test_a_failing_progress_callback_raises_instead_of_hanging(tmp_path: Path) -> None:
    def broken(done: int, total: int) -> None:
        raise ZeroDivisionError("progress bug")

    f = _file(tmp_path / "f", 10_000)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="hashing thread failed") as exc:
        hash_files([f, _file(tmp_path / "g", 10)], progress=broken, workers=1)
    assert isinstance(exc.value.__cause__, ZeroDivisionError)
    assert time.monotonic() - t0 < 10


def test_verify_tree_reads_a_file_once_for_md5_and_sha512_manifests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    files = [_file(tmp_path / "data" / f"p{i}.bin", (1 << 20) + i, i) for i in range(3)]
    (tmp_path / "bagit.txt").write_text("BagIt-Version: 1.0\nTag-File-Character-Encoding: "
                                        "UTF-8\n")
    for alg in ("md5", "sha512"):
        (tmp_path / f"manifest-{alg}.txt").write_text("".join(
            f"{hashlib.new(alg, p.read_bytes()).hexdigest()}  data/{p.name}\n"
            for p in files))
    reads: list[tuple[str, tuple[str, ...]]] = []
    real = hashing.digest_file

    def recording(path: Path, algorithms: tuple[str, ...],
                  **kw: object) -> tuple[dict[str, str], int]:
        reads.append((Path(path).name, tuple(algorithms)))
        return real(path, algorithms, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(hashing, "digest_file", recording)
    with HashPool(workers=2) as pool:
        res = verify_tree(tmp_path, hasher=pool, json_docs=dict)
    assert sorted(reads) == [(p.name, ("md5", "sha512")) for p in files]
    assert res.errors == 0 and res.hashes_ok == res.hashes_checked == 6
    with open(files[1], "r+b") as fh:
        fh.write(b"X")
    reads.clear()
    with HashPool(workers=2) as pool:
        bad = verify_tree(tmp_path, hasher=pool, json_docs=dict)
    assert len(reads) == 3 and bad.mismatched == 2  # MD5 and SHA-512 both disagree


def test_prefetch_queues_a_bags_payload_and_verify_tree_reads_each_file_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data" / "media").mkdir(parents=True)
    media = [_file(tmp_path / "data" / "media" / f"m{i}.bin", (1 << 20) + i, i)
             for i in range(3)]
    write_bag(tmp_path)
    # the same manifest written with a binary marker, a ./ prefix and CRLF line ends
    lines = (tmp_path / "manifest-sha256.txt").read_text().splitlines()
    (tmp_path / "manifest-sha256.txt").write_bytes("".join(
        f"{d} *./{p}\r\n" for d, p in (ln.split(None, 1) for ln in lines)).encode())
    for tag in tmp_path.glob("tagmanifest-*.txt"):
        tag.unlink()  # it sealed the manifest as write_bag wrote it
    reads: list[str] = []
    real = hashing.digest_file

    def recording(path: Path, algorithms: tuple[str, ...],
                  **kw: object) -> tuple[dict[str, str], int]:
        reads.append(Path(path).name)
        return real(path, algorithms, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(hashing, "digest_file", recording)
    with HashPool(workers=2) as pool:
        assert hashing.prefetch_bag(tmp_path, pool) == 3
        assert set(media) <= pool.queued()
        res = verify_tree(tmp_path, hasher=pool, json_docs=dict)
    assert res.errors == 0 and res.hashes_ok == res.hashes_checked == 3
    assert sorted(reads) == ["m0.bin", "m1.bin", "m2.bin"]  # once each, not again


def test_prefetch_never_reaches_outside_the_bag_nor_opens_special_files(
        tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    (bag / "data").mkdir(parents=True)
    outside = _file(tmp_path / "secret.bin", 1000)
    _file(bag / "data" / "ok.bin", 1000)
    (bag / "data" / "link.bin").symlink_to(outside)
    os.mkfifo(bag / "data" / "pipe")
    (bag / "data" / "sub").symlink_to(tmp_path, target_is_directory=True)
    digest = "0" * 64
    (bag / "manifest-sha256.txt").write_text("".join(f"{digest}  {p}\n" for p in (
        "data/ok.bin", "data/link.bin", "data/pipe", "data/sub/secret.bin", "../secret.bin",
        str(outside), "data/%2E%2E/x", "data/missing.bin")) + "short  data/ok.bin\n")
    (bag / "manifest-unknown.txt").write_text(f"{digest}  data/ok.bin\n")
    with HashPool(workers=1) as pool:  # not a bag (no bagit.txt): nothing is prefetched
        assert hashing.prefetch_bag(bag, pool) == 0
    (bag / "bagit.txt").write_text("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
    _file(bag / "outside-payload.bin", 1000)  # in the bag, but not its payload (data/)
    with open(bag / "manifest-sha256.txt", "a") as f:
        f.write(f"{digest}  outside-payload.bin\n")
    with HashPool(workers=1) as pool:
        assert hashing.prefetch_bag(bag, pool) == 1
        assert pool.queued() == {bag / "data" / "ok.bin"}
    with HashPool(workers=1) as pool:  # no manifest, or an unreadable directory: nothing
        assert hashing.prefetch_bag(tmp_path / "absent", pool) == 0
        assert hashing.prefetch_bag(outside, pool) == 0
        assert pool.queued() == frozenset()


def test_a_directory_swapped_for_a_link_after_the_walk_is_never_read_through(
        tmp_path: Path) -> None:
    """The tree is walked first and read later: a directory replaced by a symlink to the
    outside in between (a race against check) makes the file unreadable, not read."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    bag = tmp_path / "bag"
    (bag / "data" / "sub").mkdir(parents=True)
    (bag / "data" / "sub" / "f.txt").write_text("secret\n")
    _file(bag / "data" / "other.bin", 1000)
    write_bag(bag)
    (outside / "sub" / "f.txt").write_text("secret\n")  # what the manifest expects
    (bag / "data" / "sub" / "f.txt").write_text("tampered\n")
    idx = index_tree(bag)
    shutil.rmtree(bag / "data" / "sub")
    (bag / "data" / "sub").symlink_to(outside / "sub", target_is_directory=True)
    for pool in (HashPool(workers=1, beneath=bag), None):  # check's pool, and without one
        res = verify_tree(bag, index=idx, hasher=pool, json_docs=dict)
        if pool is not None:
            pool.close()
        bad = [(f.rule, f.path) for f in res.findings if f.severity in ("P0", "P1")]
        assert ("UNREADABLE", "data/sub/f.txt") in bad, res.findings
        assert res.hashes_ok == res.hashes_checked  # the outside file was never hashed


def test_a_fifo_swapped_in_after_the_walk_is_refused_not_waited_on(tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    (bag / "data").mkdir(parents=True)
    _file(bag / "data" / "a.bin", 1000)
    write_bag(bag)
    idx = index_tree(bag)
    for name in ("bagit.txt", "manifest-sha256.txt"):
        (bag / name).rename(bag / f"{name}.orig")
        os.mkfifo(bag / name)
    done: list[object] = []
    t = threading.Thread(target=lambda: done.append(verify_tree(bag, index=idx,
                                                                json_docs=dict)), daemon=True)
    t.start()
    t.join(20)
    assert done, "verify_tree blocked on a FIFO"
    res = done[0]
    rules = {(f.rule, f.path) for f in res.findings}  # type: ignore[attr-defined]
    assert ("UNREADABLE", "bagit.txt") in rules or ("UNREADABLE", "manifest-sha256.txt") in rules


# ------------------------------------------------ hashing in a process of its own (check)

_CHILD_PROBE = """
import errno, json, os, pickle, sys, time
from pathlib import Path
from evidence.hashing import HashPool, digest_files
root, mode = Path(sys.argv[1]), sys.argv[2]
files = sorted(p for p in root.iterdir())
todo = [(p, p.stat().st_size if p.exists() else 0, ("sha256", "md5")) for p in files]
todo.append((root / "missing.bin", 0, ("sha256",)))
if mode == "child-dies":
    def boom(*a, **k):
        raise RuntimeError("the hashing process failed")
    pickle.dumps = boom  # the child cannot send its results: it exits 1 with none
seen = []
pool = HashPool(workers=2, beneath=root,
                progress=(lambda done, total: seen.append((done, total))) if mode == "progress"
                else None)
started = pool.hash_in_child(todo)
if mode == "cancel":
    t0 = time.monotonic()
    child = pool._child
    pool.close(cancel=True)
    try:
        os.waitpid(child, os.WNOHANG)
        reaped = False
    except ChildProcessError:
        reaped = True
    print(json.dumps({"started": started, "close_s": time.monotonic() - t0, "reaped": reaped}))
    sys.exit(0)
got = pool.digests({p: algs for p, _, algs in todo})
pool.close()
want = digest_files({p: algs for p, _, algs in todo}, beneath=root)
def show(r):
    return [r.errno, r.strerror] if isinstance(r, OSError) else [r[0], r[1]]
print(json.dumps({"started": started, "same": {str(p): show(got[p]) == show(want[p])
                  for p in got}, "errors": {str(p): show(r) for p, r in got.items()
                  if isinstance(r, OSError)}, "seen": seen}))
"""


def _child_probe(tmp_path: Path, mode: str) -> dict[str, object]:
    import json
    import subprocess
    import sys

    root = tmp_path / "inside"
    root.mkdir()
    for i, size in enumerate((0, 1, 70_000, 3 << 20)):
        _file(root / f"f{i}.bin", size, i)
    os.mkfifo(root / "fifo")
    (tmp_path / "outside.bin").write_bytes(b"outside\n")
    (root / "link.bin").symlink_to(tmp_path / "outside.bin")
    if mode == "cancel":
        _file(root / "big.bin", 512 << 20)
    if mode == "progress":
        _file(root / "big.bin", 256 << 20)
    res = subprocess.run([sys.executable, "-c", _CHILD_PROBE, str(root), mode],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[str, object] = json.loads(res.stdout)
    return got


def test_a_hashing_process_gives_what_threads_give(tmp_path: Path) -> None:
    got = _child_probe(tmp_path, "normal")
    assert got["started"] is True
    same = got["same"]
    assert isinstance(same, dict) and len(same) >= 7 and all(same.values()), same
    errors = got["errors"]
    assert isinstance(errors, dict)
    root = tmp_path / "inside"
    assert sorted(errors) == sorted(str(root / n) for n in ("fifo", "link.bin", "missing.bin"))
    assert errors[str(root / "fifo")][0] == errno.EINVAL  # refused, not waited on
    assert errors[str(root / "link.bin")][0] == errno.EXDEV  # outside the checked tree
    assert errors[str(root / "missing.bin")][0] == errno.ENOENT


def test_files_a_dead_hashing_process_left_are_hashed_here(tmp_path: Path) -> None:
    got = _child_probe(tmp_path, "child-dies")
    assert got["started"] is True
    same = got["same"]
    assert isinstance(same, dict) and len(same) >= 7 and all(same.values()), same
    assert len(got["errors"]) == 3, got["errors"]  # fifo, link.bin, missing.bin


def test_cancel_stops_the_hashing_process_at_once(tmp_path: Path) -> None:
    got = _child_probe(tmp_path, "cancel")
    assert got["started"] is True and got["reaped"] is True
    assert isinstance(got["close_s"], float) and got["close_s"] < 5


def test_no_hashing_process_beside_running_threads(tmp_path: Path) -> None:
    """A process with threads is not forked (a thread holding a lock would leave it held in
    the child); the pool's own threads hash instead."""
    f = _file(tmp_path / "a.bin", 1000)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        pool = HashPool(workers=1)
        assert pool.hash_in_child([(f, 1000, ("sha256",))]) is False
        assert pool.results([f])[f] == (hashlib.sha256(f.read_bytes()).hexdigest(), 1000)
        pool.close()
    finally:
        stop.set()
        t.join()


def test_a_hashing_process_feeds_the_progress_bar(tmp_path: Path) -> None:
    got = _child_probe(tmp_path, "progress")
    assert got["started"] is True
    seen = got["seen"]
    assert isinstance(seen, list) and seen, "no progress reported"
    total = sum(p.stat().st_size for p in (tmp_path / "inside").iterdir() if p.is_file()
                and not p.is_symlink())
    assert seen[-1][0] == total, seen[-3:]  # every byte read (the link's target was not)
    assert all(d <= t for d, t in seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)
