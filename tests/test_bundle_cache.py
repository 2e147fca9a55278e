"""The content-addressed bundle cache: keys, hits, misses, concurrent writers."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from compiler.bundle import KernelBundle, Variant
from compiler.cache import KernelCache, default_cache_dir, source_hash

pytestmark = pytest.mark.generic

VERSIONS = {"clang": "22.1.8", "iree": "3.13.0"}


def _bundle(tag: bytes = b"x", size: int = 1000) -> KernelBundle:
    return KernelBundle("saxpy", source_hash(b"src"),
                        [Variant("hsaco", "gfx1100", None, tag * size)])


def test_default_dir_follows_env(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("AMDGPU_DIRECT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "amdgpu-direct"
    monkeypatch.setenv("AMDGPU_DIRECT_CACHE", str(tmp_path / "override"))
    assert default_cache_dir() == tmp_path / "override"
    assert KernelCache().dir == tmp_path / "override"


def test_key_changes_with_each_input(tmp_path) -> None:
    k = KernelCache.key
    base = k(b"src", VERSIONS, {"O": 2}, ["gfx1100", "vulkan"])
    assert len(base) == 64 and base == k("src", dict(reversed(VERSIONS.items())), {"O": 2},
                                         ["vulkan", "gfx1100"])
    assert base == k(source_hash(b"src"), VERSIONS, {"O": 2}, ["gfx1100", "vulkan"])
    src = tmp_path / "k.cl"
    src.write_bytes(b"src")
    assert base == k(src, VERSIONS, {"O": 2}, ["gfx1100", "vulkan"])
    others = {
        k(b"src2", VERSIONS, {"O": 2}, ["gfx1100", "vulkan"]),
        k(b"src", VERSIONS | {"clang": "22.1.9"}, {"O": 2}, ["gfx1100", "vulkan"]),
        k(b"src", VERSIONS, {"O": 3}, ["gfx1100", "vulkan"]),
        k(b"src", VERSIONS, {"O": 2}, ["gfx1100"]),
    }
    assert base not in others and len(others) == 4


def test_hit_miss_and_corrupt_entry(tmp_path) -> None:
    cache = KernelCache(tmp_path)
    key = cache.key(b"src", VERSIONS, [], ["gfx1100"])
    assert cache.get(key) is None and key not in cache
    bundle = _bundle()
    path = cache.put(key, bundle)
    assert path.parent.parent == tmp_path and key in cache
    assert cache.get(key) == bundle
    assert (cache.hits, cache.misses) == (1, 1)
    path.write_bytes(b"\x00garbage")
    assert cache.get(key) is None and not path.exists()  # a corrupt entry is a miss, removed
    cache.put(key, bundle)
    assert cache.entries() == [path] and cache.clear() == 1 and cache.get(key) is None


def test_concurrent_threads_never_see_half_a_file(tmp_path) -> None:
    cache = KernelCache(tmp_path)
    key = cache.key(b"src", VERSIONS, [], ["gfx1100"])
    stop = threading.Event()
    seen: list[bytes] = []
    errors: list[BaseException] = []

    def writer(tag: bytes) -> None:
        try:
            for _ in range(40):
                cache.put(key, _bundle(tag, 50_000))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        while not stop.is_set():
            got = cache.get(key)
            if got is not None:
                seen.append(got.variants[0].data[:1] + bytes([len(set(got.variants[0].data))]))

    threads = [threading.Thread(target=writer, args=(t,)) for t in (b"a", b"b")]
    r = threading.Thread(target=reader)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    r.join()
    assert not errors
    assert seen and all(s in (b"a\x01", b"b\x01") for s in seen)  # whole, one-tag payloads
    assert cache.get(key).variants[0].data[:1] in (b"a", b"b")
    assert [p.name for p in Path(tmp_path).rglob("*.tmp")] == []


def _process_writer(directory: str, key: str, tag: bytes) -> None:
    cache = KernelCache(directory)
    for _ in range(30):
        cache.put(key, _bundle(tag, 20_000))


def test_concurrent_processes(tmp_path) -> None:
    cache = KernelCache(tmp_path)
    key = cache.key(b"src", VERSIONS, [], ["gfx1100"])
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_process_writer, args=(str(tmp_path), key, t))
             for t in (b"p", b"q")]
    for p in procs:
        p.start()
    hits = misses_after_a_hit = 0
    while any(p.is_alive() for p in procs):
        got = cache.get(key)
        if got is not None:
            data = got.variants[0].data
            assert len(data) == 20_000 and len(set(data)) == 1
            hits += 1
        elif hits:
            misses_after_a_hit += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert cache.get(key) is not None
    # misses only before the first put landed: an atomic replace never leaves the entry
    # missing or torn (a torn entry would read as a miss and be dropped)
    assert misses_after_a_hit == 0
    assert cache.hits == hits + 1  # the loop's hits and the final get
