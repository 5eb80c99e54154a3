"""Store: round trips, bad entries rebuilt with a log line, stats, clear, verify, eviction, locks."""
from __future__ import annotations

import datetime
import os
import random
import shutil
import time

import pytest

from framejit import config
from framejit.cache import Entry, Store, cache_key, counters, default_store, keys


def key_of(name: str) -> str:
    return cache_key(kind="test", name=name)


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def test_round_trip(store):
    key = key_of("a")
    files = {"model.onnx": payload(1, 5000), "empty": b"", "kernel.py": "def k():\n    pass\n".encode()}
    meta = {"backend": "onnxrt", "function": "f", "location": "m.py:3", "nested": {"x": [1, 2.5, None]}}
    assert store.get(key) is None
    assert store.put(key, files, meta) is True
    entry = store.get(key)
    assert isinstance(entry, Entry)
    assert entry.files == files and list(entry.files) == list(files)
    assert entry.meta == meta
    assert entry.key == key and abs(entry.created - time.time()) < 60
    assert counters.as_dict() == dict(hits=1, misses=1, writes=1, rejected=0, evicted=0,
                                      bytes_written=os.path.getsize(store.entry_path(key)), remote_hits=0,
                                      remote_misses=0, remote_writes=0, remote_rejected=0, remote_errors=0)


def test_a_second_store_object_and_overwrite(store):
    key = key_of("a")
    store.put(key, {"x": b"old"}, {"v": 1})
    store.put(key, {"x": b"new", "y": b"2"}, {"v": 2})
    entry = Store(store.root).get(key)
    assert entry.files == {"x": b"new", "y": b"2"} and entry.meta == {"v": 2}
    assert store.verify() == []


def test_a_missing_directory_is_an_empty_cache(tmp_path):
    store = Store(tmp_path / "absent")
    assert store.ls() == [] and store.verify() == [] and store.clear() == 0
    assert store.stats()["entries"] == 0 and not os.path.exists(store.root)
    assert store.get(key_of("a")) is None
    assert store.stats()["misses"] == 1  # the miss is counted: the directory now exists, private
    assert os.stat(store.root).st_mode & 0o777 == 0o700


def test_bad_arguments(store):
    with pytest.raises(TypeError, match="cache key"):
        store.get(123)
    with pytest.raises(ValueError, match="64 lowercase hex"):
        store.get("../../etc/passwd")
    with pytest.raises(TypeError, match="files"):
        store.put(key_of("a"), [b"x"], {})
    with pytest.raises(TypeError, match=r"files\['x'\]"):
        store.put(key_of("a"), {"x": "text"}, {})
    with pytest.raises(TypeError, match="meta"):
        store.put(key_of("a"), {"x": b""}, {"f": object()})
    with pytest.raises(ValueError, match="size_limit_bytes"):
        Store("x", size_limit_bytes=-1)
    with pytest.raises(TypeError, match="size_limit_bytes"):
        Store("x", size_limit_bytes=1.5)
    assert not os.path.exists(store.root)


# -- bad entries ---------------------------------------------------------------------------------
def _truncate_half(data: bytes, store, key) -> bytes:
    return data[: len(data) // 2]


def _truncate_to_prefix(data: bytes, store, key) -> bytes:
    return data[:5]


def _empty(data: bytes, store, key) -> bytes:
    return b""


def _random_bytes(data: bytes, store, key) -> bytes:
    return payload(7, len(data))


def _flip_payload_byte(data: bytes, store, key) -> bytes:
    i = len(data) - 100
    return data[:i] + bytes([data[i] ^ 1]) + data[i + 1 :]


def _drop_checksum_byte(data: bytes, store, key) -> bytes:
    return data[:-1]


def _other_key(data: bytes, store, key) -> bytes:
    other = key_of("other")
    store.put(other, {"model": b"other"}, {})
    with open(store.entry_path(other), "rb") as f:
        return f.read()


CORRUPTIONS = [_truncate_half, _truncate_to_prefix, _empty, _random_bytes, _flip_payload_byte,
               _drop_checksum_byte, _other_key]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_bad_entry_is_a_logged_miss_and_is_rebuilt(store, cache_log, corrupt):
    key = key_of("a")
    files = {"model": payload(3, 3000)}
    store.put(key, files, {"backend": "eager"})
    path = store.entry_path(key)
    with open(path, "rb") as f:
        bad = corrupt(f.read(), store, key)
    with open(path, "wb") as f:
        f.write(bad)
    assert [p for p in store.verify() if p.startswith(path + ": ")] != []
    counters.reset()

    assert store.get(key) is None
    assert counters.rejected == 1 and counters.misses == 1 and counters.hits == 0
    assert any(f"rejected entry {key[:16]}" in message for message in cache_log())
    assert not os.path.exists(path)  # removed, so that nothing reads it again
    store.put(key, files, {"backend": "eager"})  # the caller's rebuild
    assert store.get(key).files == files
    assert store.verify() == []


def test_entry_of_another_runtime_version_is_a_logged_miss(store, cache_log, monkeypatch):
    key = key_of("a")
    foreign = dict(keys.runtime_versions(), torch="0.0.1")
    with monkeypatch.context() as m:
        m.setattr(keys, "runtime_versions", lambda: foreign)
        store.put(key, {"model": b"built by another torch"}, {})
    assert store.verify() == []  # a sound entry of another runtime, which a shared cache may hold
    assert store.get(key) is None
    assert counters.rejected == 1
    assert any("foreign version" in message and key[:16] in message for message in cache_log())
    store.put(key, {"model": b"rebuilt"}, {})
    assert store.get(key).files == {"model": b"rebuilt"}


def test_verify_reports_stray_files_and_directories(store):
    key = key_of("a")
    store.put(key, {"x": b"1"}, {})
    stray = os.path.join(store.shard_dir(key), "notes.txt")
    with open(stray, "w") as f:
        f.write("hello")
    os.mkdir(os.path.join(store.base, "zz"))
    problems = store.verify()
    assert len(problems) == 2
    assert any(stray in p and "unexpected" in p for p in problems)
    assert any(os.path.join(store.base, "zz") in p for p in problems)


# -- stats, ls, clear ------------------------------------------------------------------------------
def test_hits_and_misses_are_persisted(store):
    a, b = key_of("a"), key_of("b")
    store.get(a)
    store.put(a, {"x": b"1"}, {"backend": "eager"})
    store.put(b, {"x": b"22"}, {"backend": "onnxrt"})
    store.get(a), store.get(a), store.get(b)
    stats = Store(store.root).stats()
    assert (stats["entries"], stats["hits"], stats["misses"], stats["writes"]) == (2, 3, 1, 2)
    assert stats["hit_rate"] == pytest.approx(3 / 4)
    assert stats["bytes"] == os.path.getsize(store.entry_path(a)) + os.path.getsize(store.entry_path(b))
    assert stats["by_backend"]["eager"]["entries"] == 1 and stats["by_backend"]["onnxrt"]["entries"] == 1
    hits = {info.key: info.hits for info in store.ls()}
    assert hits == {a: 2, b: 1}
    assert store.ls()[0].key == b  # most recently used first


def test_clear_by_age_and_backend(store):
    old, new, onnx = key_of("old"), key_of("new"), key_of("onnx")
    store.put(old, {"x": b"1"}, {"backend": "eager"})
    store.put(new, {"x": b"1"}, {"backend": "eager"})
    store.put(onnx, {"x": b"1"}, {"backend": "onnxrt"})
    ten_days_ago = time.time() - 10 * 86400
    os.utime(store.entry_path(old), (ten_days_ago, ten_days_ago))
    assert store.clear(older_than=datetime.timedelta(days=5)) == 1
    assert store.get(old) is None and store.get(new) is not None
    assert store.clear(backend="onnxrt") == 1
    assert [info.key for info in store.ls()] == [new]
    orphan = store.hits_path(key_of("gone"))  # a hit that raced with the removal of its entry
    os.makedirs(os.path.dirname(orphan), mode=0o700, exist_ok=True)
    open(orphan, "wb").close()
    store.get(new)
    assert store.clear() == 1
    assert store.ls() == [] and store.stats()["hits"] == 0
    assert not os.path.exists(store.hits_path(new)) and not os.path.exists(orphan)


def test_clear_rejects_bad_arguments(store):
    with pytest.raises(TypeError, match="older_than"):
        store.clear(older_than="5 days")
    with pytest.raises(ValueError, match="older_than"):
        store.clear(older_than=-1)
    with pytest.raises(TypeError, match="backend"):
        store.clear(backend=3)


# -- eviction -------------------------------------------------------------------------------------
def test_eviction_removes_least_recently_used_first(tmp_path):
    store = Store(tmp_path / "cache", size_limit_bytes=100_000)
    a, b, c, d = (key_of(n) for n in "abcd")
    for i, key in enumerate((a, b, c)):
        store.put(key, {"x": payload(i, 30_000)}, {})
    store.get(a)  # now b is the least recently used
    store.put(d, {"x": payload(9, 30_000)}, {})
    assert counters.evicted == 1
    assert store.get(b) is None
    assert all(store.get(k) is not None for k in (a, c, d))
    assert store.stats()["bytes"] <= 100_000 and store.stats()["evicted"] == 1


def test_an_entry_larger_than_the_limit_is_kept_alone(tmp_path):
    store = Store(tmp_path / "cache", size_limit_bytes=50_000)
    store.put(key_of("small"), {"x": b"1"}, {})
    store.put(key_of("big"), {"x": payload(1, 80_000)}, {})
    assert [info.key for info in store.ls()] == [key_of("big")]


def test_size_limit_and_directory_are_read_from_config_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_size_mb", 3)
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "one"))
    store = default_store()
    assert store.root == str(tmp_path / "one") and store.size_limit_bytes() == 3 * 1024 * 1024
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "two"))
    assert default_store().root == str(tmp_path / "two")


def test_disabled_cache_has_no_store(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)
    assert default_store() is None


# -- locks and temp files ---------------------------------------------------------------------------
def test_lock_excludes_a_second_holder(store):
    key = key_of("a")
    with store.lock(key) as first:
        with store.lock(key, timeout_s=0) as second:
            assert first is True and second is False
    with store.lock(key, timeout_s=0) as again:
        assert again is True


def test_failed_write_leaves_no_temp_file_and_no_entry(store, monkeypatch, cache_log):
    key = key_of("a")

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    assert store.put(key, {"x": b"1"}, {}) is False
    monkeypatch.undo()
    assert os.listdir(store.tmp_dir) == []
    assert store.get(key) is None
    assert any("could not write" in message for message in cache_log())


def test_stale_temp_files_are_removed_by_clear(store):
    store.put(key_of("a"), {"x": b"1"}, {})
    stale = os.path.join(store.tmp_dir, "999999-0.tmp")
    with open(stale, "wb") as f:
        f.write(b"partial")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    store.clear(backend="none")
    assert not os.path.exists(stale)


def test_copied_store_still_verifies(store, tmp_path):
    store.put(key_of("a"), {"x": b"1"}, {})
    copy = Store(tmp_path / "copy")
    shutil.copytree(store.root, copy.root)
    assert copy.verify() == [] and copy.get(key_of("a")).files == {"x": b"1"}
