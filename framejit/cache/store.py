"""The persistent store: bytes and metadata under keys, in a private directory shared by processes.

Role: `get(key)` and `put(key, files, meta)` for backends and the frame cache, plus `lock(key)`; the
maintenance operations (`ls`, `stats`, `clear`, `verify`, eviction) live in admin.py and are exposed
as methods here. The store imports neither capture nor backends: it never interprets what it stores.

Layout under the cache directory (config.cache_dir, FRAMEJIT_CACHE_DIR):

    <cache_dir>/              0o700, created on first use (a get or a put)
      v1/                     LAYOUT; a future incompatible layout gets a sibling directory
        counters              persisted totals: hits, misses, writes, rejected, evicted (see fsutil)
        tmp/                  temp files of writes in progress
        locks/                evict.lock and the per-key locks of Store.lock
        ab/ab12...ef.entry    one entry (NOTE [Entry file format]); "ab" = the key's first 2 digits
        ab/ab12...ef.hits     that entry's hit count

Invariants:
- get/put never raise for file-system trouble: a problem is a miss (get) or a skipped write (put),
  logged on the `cache` artifact. Wrong arguments raise TypeError/ValueError.
- A bad entry (truncated, corrupt, foreign version, stored under another key) is a miss, logged and
  removed so that the caller's rebuild replaces it. An untrusted one (NOTE [Cache trust]) is a miss
  and logged, but not loaded.
- Concurrent writers of one key each publish a complete entry with one atomic rename; the last wins.

Main types: `Store` and `default_store()`; `Entry`, `Counters`, `counters` and `CacheError` live in
common.py.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Iterator

from .. import config, logs
from . import admin, entry_format, fsutil, keys
from .common import COUNTER_SLOTS, CacheError, Entry, counters

LAYOUT = "v1"

# NOTE [Cache trust]
# A cache entry is code (ONNX models, kernels, transformed bytecode) that framejit will run, so it is
# loaded only from a tree that nobody else can write: the cache directory, the layout directory, the
# shard directory and the entry file must be owned by the effective user and not writable by group or
# others. framejit creates all of them 0o700/0o600. The cache directory itself may be a symlink (to
# another disk); everything below it must not be.


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"cache key must be a str made by cache_key(), got {type(key).__name__}")
    if not keys.is_valid_key(key):
        raise ValueError(f"cache key must be 64 lowercase hex digits as made by cache_key(), got {key!r}")
    return key


def _check_files(files: object) -> dict[str, bytes]:
    if not isinstance(files, dict):
        raise TypeError(f"put(files=...) must be a dict[str, bytes], got {type(files).__name__}")
    checked = {}
    for name, data in files.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"put(files=...): file names must be non-empty str, got {name!r}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"put(files=...): files[{name!r}] must be bytes, got {type(data).__name__}")
        checked[name] = bytes(data)
    return checked


def _check_meta(meta: object) -> dict:
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise TypeError(f"put(meta=...) must be a dict of JSON values, got {type(meta).__name__}")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"put(meta=...) must hold only JSON values (str, numbers, lists, dicts): {exc}") from None
    return meta


class Store:
    """A cache directory. Cheap to construct: nothing touches the disk until it is used."""

    def __init__(self, root: str | os.PathLike, size_limit_bytes: int | None = None, remote=None):
        if size_limit_bytes is not None and type(size_limit_bytes) is not int:
            raise TypeError(f"size_limit_bytes must be an int or None, got {type(size_limit_bytes).__name__}")
        if size_limit_bytes is not None and size_limit_bytes < 0:
            raise ValueError(f"size_limit_bytes must not be negative, got {size_limit_bytes}")
        self.root = os.path.abspath(os.fspath(root))
        self.base = os.path.join(self.root, LAYOUT)
        self._size_limit_bytes = size_limit_bytes
        self.remote = remote  # a remote.RemoteTier or None (NOTE [Remote tier])

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # -- paths ---------------------------------------------------------------------------------
    def shard_dir(self, key: str) -> str:
        return os.path.join(self.base, key[:2])

    def entry_path(self, key: str) -> str:
        return os.path.join(self.base, key[:2], key + ".entry")

    def hits_path(self, key: str) -> str:
        return os.path.join(self.base, key[:2], key + ".hits")

    @property
    def tmp_dir(self) -> str:
        return os.path.join(self.base, "tmp")

    @property
    def locks_dir(self) -> str:
        return os.path.join(self.base, "locks")

    @property
    def counters_path(self) -> str:
        return os.path.join(self.base, "counters")

    def size_limit_bytes(self) -> int:
        if self._size_limit_bytes is not None:
            return self._size_limit_bytes
        return int(config.cache_size_mb) * 1024 * 1024

    # -- trust ---------------------------------------------------------------------------------
    def tree_problem(self, key: str | None = None) -> str | None:
        """Why the directories down to `key`'s shard are not trusted, or None (NOTE [Cache trust])."""
        problem = fsutil.dir_problem(self.root, follow_symlinks=True)
        if problem:
            return problem
        for path in (self.base, self.shard_dir(key)) if key else (self.base,):
            problem = fsutil.dir_problem(path)
            if problem:
                return problem
        return None

    def prepare_dirs(self, *subdirs: str) -> str | None:
        """Create the private tree and the given subdirectories; returns a problem or None."""
        for path in (self.root, self.base, *subdirs):
            try:
                fsutil.ensure_private_dir(path)
            except OSError as exc:
                return f"cannot create {exc.filename or path}: {exc.strerror}"
            problem = fsutil.dir_problem(path, follow_symlinks=path == self.root)
            if problem:
                return problem
        return None

    # -- get -----------------------------------------------------------------------------------
    def get(self, key: str) -> Entry | None:
        """The entry stored under `key`, or None (missing, bad or untrusted: see the invariants)."""
        _check_key(key)
        path = self.entry_path(key)
        if not os.path.exists(path):
            return self._from_remote(key) or self._miss(key)
        problem = self.tree_problem(key)
        if problem:
            return self._reject(key, problem)
        try:
            fd, st = fsutil.open_trusted(path)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return self._miss(key)
        except fsutil.Untrusted as exc:
            return self._reject(key, str(exc))
        except OSError as exc:
            return self._reject(key, f"cannot read {path}: {exc.strerror}")
        return self._load(key, path, st, data)

    def _load(self, key: str, path: str, st: os.stat_result, data: bytes) -> Entry | None:
        try:
            header, files = entry_format.decode(data)
            if header.key != key:
                raise entry_format.CorruptEntry(f"entry is stored under the wrong key ({header.key[:12]})")
            current = keys.runtime_versions()
            if header.versions != current:
                raise entry_format.CorruptEntry(f"foreign version: written by {header.versions}, this is {current}")
        except entry_format.CorruptEntry as exc:
            self._remove_if_unchanged(path, st)
            return self._reject(key, f"{exc}; removed, it will be rebuilt")
        counters.hits += 1
        self._persist_hit(key, path)
        logs.log("cache", "hit %s (%s, %d bytes)", key[:16], header.meta.get("backend", "-"), len(data))
        if self.remote is not None and self.remote.publish_local_hits:
            self.remote.put(key, data, only_if_absent=True)
        return Entry(files, header.meta, key, header.created)

    # NOTE [Remote tier]
    # With a remote tier (remote.py; default_store() attaches the one FRAMEJIT_REMOTE_CACHE names), a key
    # missing from the local directory is asked of Redis; a trusted answer is written to the local
    # directory (the same entry bytes, so its created time and versions are kept) and returned as a hit.
    # put() writes the local entry, then the same bytes, signed, to Redis; either write may fail alone.
    # The remote tier never raises: its faults make it answer None for a while, and the store is local-only.
    def _from_remote(self, key: str) -> Entry | None:
        if self.remote is None:
            return None
        got = self.remote.get(key)
        if got is None:
            return None
        data, header, files = got
        if self.prepare_dirs(self.tmp_dir, self.shard_dir(key)) is None:
            with contextlib.suppress(OSError):
                fsutil.write_atomic(self.tmp_dir, self.entry_path(key), data)
                self._persist_hit(key, self.entry_path(key))
        counters.hits += 1
        return Entry(files, header.meta, key, header.created)

    def _put_remote(self, key: str, data: bytes) -> bool:
        return self.remote is not None and self.remote.put(key, data)

    def _persist_hit(self, key: str, path: str) -> None:
        now = time.time_ns()
        with contextlib.suppress(OSError):
            os.utime(path, ns=(now, now))  # NOTE [LRU by mtime]: a hit makes the entry the newest
        with contextlib.suppress(OSError):
            fsutil.add_counters(self.hits_path(key), [1])
            fsutil.add_counters(self.counters_path, [1])

    def _miss(self, key: str) -> None:
        counters.misses += 1
        logs.log("cache", "miss %s", key[:16])
        self.persist_counts(misses=1)
        return None

    def _reject(self, key: str, reason: str) -> None:
        counters.misses += 1
        counters.rejected += 1
        logs.log("cache", "rejected entry %s: %s", key[:16], reason)
        self.persist_counts(misses=1, rejected=1)
        return None

    def persist_counts(self, **deltas: int) -> None:
        if self.prepare_dirs() is not None:
            return  # never write into a directory we do not trust
        with contextlib.suppress(OSError):
            fsutil.add_counters(self.counters_path, [deltas.get(name, 0) for name in COUNTER_SLOTS])

    @staticmethod
    def _remove_if_unchanged(path: str, st: os.stat_result) -> None:
        """Remove a bad entry unless another process has already replaced it with a new file."""
        with contextlib.suppress(OSError):
            now = os.lstat(path)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                os.unlink(path)

    # -- put -----------------------------------------------------------------------------------
    def put(self, key: str, files: dict[str, bytes], meta: dict | None = None) -> bool:
        """Store `files` and `meta` under `key`; returns whether the entry was written.

        meta is free-form JSON; `cache ls` shows the keys backend, function, location ("file:line")
        and kind when present.
        """
        _check_key(key)
        files, meta = _check_files(files), _check_meta(meta)
        data = entry_format.encode(key, files, meta, keys.runtime_versions(), time.time())
        problem = self.prepare_dirs(self.tmp_dir, self.shard_dir(key))
        if problem:
            logs.log("cache", "not writing %s: %s", key[:16], problem)
            return self._put_remote(key, data)
        path = self.entry_path(key)
        try:
            fsutil.write_atomic(self.tmp_dir, path, data)
            now = time.time_ns()
            os.utime(path, ns=(now, now))
        except OSError as exc:
            logs.log("cache", "could not write %s: %s", key[:16], exc)
            return self._put_remote(key, data)
        counters.writes += 1
        counters.bytes_written += len(data)
        self.persist_counts(writes=1)
        logs.log("cache", "wrote %s (%s, %d bytes)", key[:16], meta.get("backend", "-"), len(data))
        self._put_remote(key, data)
        try:
            self.evict(keep=key)
        except (OSError, CacheError) as exc:  # the entry is written; eviction is retried on the next put
            logs.log("cache", "eviction skipped: %s", exc)
        return True

    # -- lock ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, key: str, timeout_s: float | None = 60.0) -> Iterator[bool]:
        """Hold an inter-process lock for `key`, so that processes warming the same entry build it once:

            with store.lock(key):
                entry = store.get(key) or build_and_put()

        Yields whether the lock was taken; on a timeout or a file-system problem it yields False and
        the caller proceeds unlocked (correct, only possibly duplicated work).
        """
        _check_key(key)
        with contextlib.ExitStack() as stack:
            acquired = False
            if self.prepare_dirs(self.locks_dir) is None:
                with contextlib.suppress(OSError):
                    lock_path = os.path.join(self.locks_dir, key + ".lock")
                    acquired = stack.enter_context(fsutil.file_lock(lock_path, timeout_s))
            yield acquired

    # -- maintenance (admin.py) ------------------------------------------------------------------
    def ls(self) -> list[admin.EntryInfo]:
        """Every entry, most recently used first (raises CacheError if the directory is unusable)."""
        return admin.list_entries(self)

    def stats(self) -> dict:
        """Totals: entries, bytes, size limit, persisted hits/misses/writes/rejected/evicted, hit rate."""
        return admin.stats(self)

    def clear(self, older_than=None, backend: str | None = None) -> int:
        """Remove entries (all; or not used for `older_than`, a timedelta or seconds; or of one backend)."""
        return admin.clear(self, older_than=older_than, backend=backend)

    def verify(self) -> list[str]:
        """Check every entry's integrity and permissions; returns the problems found (empty when sound)."""
        return admin.verify(self)

    def evict(self, keep: str | None = None, limit_bytes: int | None = None) -> int:
        """Remove least recently used entries until the store fits its size limit; returns how many."""
        return admin.evict(self, keep=keep, limit_bytes=limit_bytes)


def default_store() -> Store | None:
    """The store at config.cache_dir (read now), or None when config.cache_enabled is False; with the
    remote tier config.remote_cache names, if any (NOTE [Remote tier])."""
    if not config.cache_enabled:
        return None
    from .remote import default_remote
    return Store(config.cache_dir, remote=default_remote())
