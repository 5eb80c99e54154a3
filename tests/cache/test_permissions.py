"""NOTE [Cache trust]: private directories, and nothing loaded from paths others own or can write."""
from __future__ import annotations

import os
import stat

import pytest

from framejit.cache import CacheError, Store, cache_key, counters, fsutil

FOREIGN_UID = 4242


def key_of(name: str) -> str:
    return cache_key(kind="test", name=name)


def make_foreign(path: str, monkeypatch) -> None:
    """Make `path` owned by another user: for real as root, else by making us look like another user."""
    if os.geteuid() == 0:
        os.chown(path, FOREIGN_UID, FOREIGN_UID, follow_symlinks=False)
    else:  # then every path looks foreign, which the assertions below also cover
        monkeypatch.setattr(fsutil, "current_uid", lambda: os.geteuid() + 1)


def test_created_directories_and_files_are_private_whatever_the_umask(store):
    old = os.umask(0)
    try:
        key = key_of("a")
        store.put(key, {"x": b"1"}, {})
        store.get(key)
    finally:
        os.umask(old)
    for path in (store.root, store.base, store.tmp_dir, store.shard_dir(key), store.locks_dir):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
    for path in (store.entry_path(key), store.hits_path(key), store.counters_path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def _stat(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 1, 1, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    "mode, uid_delta, problem",
    [
        (stat.S_IFDIR | 0o700, 0, None),
        (stat.S_IFDIR | 0o755, 0, None),
        (stat.S_IFREG | 0o600, 0, None),
        (stat.S_IFDIR | 0o770, 0, "writable by group or others"),
        (stat.S_IFREG | 0o602, 0, "writable by group or others"),
        (stat.S_IFDIR | 0o700, 1, "owned by uid"),
    ],
)
def test_trust_rule(mode, uid_delta, problem):
    result = fsutil.trust_problem(_stat(mode, os.geteuid() + uid_delta), "/p", "file")
    assert result is None if problem is None else problem in result


@pytest.mark.parametrize("where", ["root", "layout", "shard"])
def test_entries_below_a_writable_directory_are_not_loaded(store, cache_log, where):
    key = key_of("a")
    store.put(key, {"x": b"1"}, {})
    directory = {"root": store.root, "layout": store.base, "shard": store.shard_dir(key)}[where]
    os.chmod(directory, 0o777)
    assert store.get(key) is None
    assert counters.rejected == 1
    assert any("writable by group or others" in m and key[:16] in m for m in cache_log())
    other = next(k for k in map(key_of, "bcdefgh") if k[:2] != key[:2])
    assert store.put(other, {"x": b"2"}, {}) is (where == "shard")  # another shard is still fine
    if where != "shard":
        with pytest.raises(CacheError, match="writable by group or others"):
            store.ls()
    os.chmod(directory, 0o700)
    assert store.get(key).files == {"x": b"1"}  # nothing was removed: it was not ours to judge


def test_entry_writable_by_others_is_not_loaded_and_is_replaced_by_the_rebuild(store, cache_log):
    key = key_of("a")
    store.put(key, {"x": b"1"}, {})
    os.chmod(store.entry_path(key), 0o606)
    assert store.get(key) is None
    assert any("writable by group or others" in m for m in cache_log())
    assert any(store.entry_path(key) in p for p in store.verify())
    store.put(key, {"x": b"2"}, {})
    assert store.get(key).files == {"x": b"2"}


def test_entry_owned_by_another_user_is_not_loaded(store, cache_log, monkeypatch):
    key = key_of("a")
    store.put(key, {"x": b"1"}, {})
    make_foreign(store.entry_path(key), monkeypatch)
    assert store.get(key) is None
    assert counters.rejected == 1 and counters.hits == 0
    assert any("owned by uid" in m and key[:16] in m for m in cache_log())
    if os.geteuid() == 0:  # only the file is foreign (else the whole tree is, and verify raises)
        assert any("owned by uid" in p for p in store.verify())


def test_cache_directory_owned_by_another_user_is_refused(store, monkeypatch):
    key = key_of("a")
    store.put(key, {"x": b"1"}, {})
    make_foreign(store.root, monkeypatch)
    assert store.get(key) is None
    assert store.put(key_of("b"), {"x": b"2"}, {}) is False
    with pytest.raises(CacheError, match="owned by uid"):
        store.verify()


def test_symlinked_entry_is_not_followed(store, tmp_path):
    key, other = key_of("a"), key_of("b")
    store.put(other, {"x": b"planted"}, {})
    os.makedirs(store.shard_dir(key), mode=0o700, exist_ok=True)
    os.symlink(store.entry_path(other), store.entry_path(key))
    assert store.get(key) is None
    assert counters.rejected == 1


def test_cache_directory_may_be_a_symlink_to_a_private_directory(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "link")
    store = Store(tmp_path / "link")
    store.put(key_of("a"), {"x": b"1"}, {})
    assert store.get(key_of("a")).files == {"x": b"1"}
    assert os.path.isdir(real / "v1")


def test_cache_path_that_is_a_file_is_a_miss_and_an_error_for_maintenance(tmp_path):
    path = tmp_path / "file"
    path.write_text("not a directory")
    store = Store(path)
    assert store.get(key_of("a")) is None
    assert store.put(key_of("a"), {"x": b"1"}, {}) is False
    with pytest.raises(CacheError, match="not a directory"):
        store.ls()
