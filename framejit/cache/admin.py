"""Maintenance of a store: listing, totals, clearing, integrity checks and LRU eviction.

Role: the operations behind `framejit cache ls|stats|clear|verify` and the size limit. They take a
`Store` (store.py) and use only its public path and directory helpers, so this module does not import
store.py.

Invariants:
- Listing and clearing raise CacheError when the cache directory itself is unusable (not a
  directory, unreadable, owned by another user, writable by others); a directory that does not exist
  yet is an empty cache.
- `verify` checks what every process can check: magic, format, checksum, the key an entry claims,
  permissions. It does not compare runtime versions, because one cache directory legitimately holds
  entries of several Python and torch versions (their keys differ).
- Eviction removes least recently used entries first (NOTE [LRU by mtime]) and never the entry just
  written; one process evicts at a time (a non-blocking lock), the others skip.

Main names: `EntryInfo`, `list_entries`, `stats`, `clear`, `verify`, `evict`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import re
import time
from typing import Iterator

from .. import logs
from . import entry_format, fsutil, keys
from .common import COUNTER_SLOTS, CacheError, counters

# NOTE [LRU by mtime]
# An entry's mtime is its last use: put sets it, and every hit sets it again with a nanosecond
# timestamp (os.utime), which is atomic and needs no shared index that concurrent processes would
# have to lock. Eviction sorts by it. `clear --older-than` means "not used for that long".

_SHARD_RE = re.compile(r"[0-9a-f]{2}")
_STALE_TMP_S = 3600.0
_NOT_SHARDS = {"tmp", "locks", "counters"}


@dataclasses.dataclass(frozen=True)
class EntryInfo:
    """One entry as `cache ls` shows it; `problem` is set when its header cannot be read."""

    key: str
    path: str
    size: int
    last_used: float
    hits: int
    created: float | None = None
    meta: dict = dataclasses.field(default_factory=dict)
    versions: dict = dataclasses.field(default_factory=dict)
    problem: str | None = None

    @property
    def backend(self) -> str | None:
        backend = self.meta.get("backend")
        return backend if isinstance(backend, str) else None


def _usable(store) -> bool:
    """False if the store does not exist yet; raises CacheError if it exists but cannot be used."""
    if not os.path.lexists(store.root):
        return False
    problem = fsutil.dir_problem(store.root, follow_symlinks=True)
    if problem is None and os.path.lexists(store.base):
        problem = fsutil.dir_problem(store.base)
    if problem:
        raise CacheError(f"cache directory unusable: {problem}")
    if not os.path.lexists(store.base):
        return False
    if not os.access(store.base, os.R_OK | os.X_OK):
        raise CacheError(f"cache directory unusable: cannot read {store.base}")
    return True


def _entry_files(store) -> Iterator[tuple[str, str]]:
    """(key, path) of every entry file, in a stable order."""
    for shard in sorted(os.listdir(store.base)):
        shard_path = os.path.join(store.base, shard)
        if not _SHARD_RE.fullmatch(shard) or not os.path.isdir(shard_path):
            continue
        for name in sorted(os.listdir(shard_path)):
            key, ext = os.path.splitext(name)
            if ext == ".entry" and keys.is_valid_key(key):
                yield key, os.path.join(shard_path, name)


def _info(store, key: str, path: str) -> EntryInfo | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None  # removed meanwhile by another process
    hits = fsutil.read_counters(store.hits_path(key), 1)[0]
    base = dict(key=key, path=path, size=st.st_size, last_used=st.st_mtime, hits=hits)
    try:
        fd, _ = fsutil.open_trusted(path)
        with os.fdopen(fd, "rb") as f:
            header = entry_format.read_header(f)
    except (OSError, fsutil.Untrusted, entry_format.CorruptEntry) as exc:
        return EntryInfo(**base, problem=str(exc) or type(exc).__name__)
    return EntryInfo(**base, created=header.created, meta=header.meta, versions=header.versions)


def list_entries(store) -> list[EntryInfo]:
    if not _usable(store):
        return []
    infos = [info for key, path in _entry_files(store) if (info := _info(store, key, path)) is not None]
    return sorted(infos, key=lambda info: (-info.last_used, info.key))


def stats(store) -> dict:
    infos = list_entries(store)
    totals = dict(zip(COUNTER_SLOTS, fsutil.read_counters(store.counters_path, len(COUNTER_SLOTS))))
    by_backend: dict[str, dict[str, int]] = {}
    for info in infos:
        row = by_backend.setdefault(info.backend or "-", {"entries": 0, "bytes": 0})
        row["entries"] += 1
        row["bytes"] += info.size
    lookups = totals["hits"] + totals["misses"]
    return {
        "root": store.root,
        "entries": len(infos),
        "bytes": sum(info.size for info in infos),
        "size_limit_bytes": store.size_limit_bytes(),
        **totals,
        "hit_rate": totals["hits"] / lookups if lookups else None,
        "by_backend": by_backend,
    }


def _remove_entry(store, key: str) -> None:
    for path in (store.entry_path(key), store.hits_path(key)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _older_than_seconds(older_than) -> float | None:
    if older_than is None:
        return None
    if isinstance(older_than, datetime.timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        seconds = float(older_than)
    else:
        raise TypeError(
            f"clear(older_than=...) must be a datetime.timedelta or seconds, got {type(older_than).__name__}"
        )
    if not seconds >= 0:
        raise ValueError(f"clear(older_than=...) must not be negative, got {older_than!r}")
    return seconds


def clear(store, older_than=None, backend: str | None = None) -> int:
    """Remove matching entries (every entry when no filter is given); returns how many."""
    seconds = _older_than_seconds(older_than)
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"clear(backend=...) must be a backend name (str) or None, got {type(backend).__name__}")
    if not _usable(store):
        return 0
    cutoff = time.time() - seconds if seconds is not None else None
    removed = 0
    for info in list_entries(store):
        if cutoff is not None and info.last_used > cutoff:
            continue
        if backend is not None and info.backend != backend:
            continue
        _remove_entry(store, info.key)
        removed += 1
    if seconds is None and backend is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store.counters_path)
    _remove_stale_temps(store, max_age_s=0.0 if seconds is None and backend is None else _STALE_TMP_S)
    _remove_orphan_hits(store)
    logs.log("cache", "cleared %d entries from %s", removed, store.root)
    return removed


def _remove_orphan_hits(store) -> None:
    """Hit counters whose entry is gone (a hit raced with a removal): nothing else ever deletes them."""
    for shard in os.listdir(store.base):
        shard_path = os.path.join(store.base, shard)
        if not _SHARD_RE.fullmatch(shard) or not os.path.isdir(shard_path):
            continue
        for name in os.listdir(shard_path):
            key, ext = os.path.splitext(name)
            if ext == ".hits" and not os.path.exists(os.path.join(shard_path, key + ".entry")):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(shard_path, name))


def _remove_stale_temps(store, max_age_s: float) -> None:
    """Temp files of writers that died; a live writer's file is seconds old and is left alone."""
    cutoff = time.time() - max(max_age_s, 60.0)
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(store.tmp_dir):
            path = os.path.join(store.tmp_dir, name)
            with contextlib.suppress(OSError):
                if os.lstat(path).st_mtime < cutoff:
                    os.unlink(path)


def _verify_entry(key: str, path: str) -> str | None:
    try:
        fd, _ = fsutil.open_trusted(path)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
        header, _ = entry_format.decode(data)
    except (fsutil.Untrusted, entry_format.CorruptEntry) as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    if header.key != key:
        return f"stored under the wrong key (the header says {header.key[:16]})"
    return None


def _verify_shard(shard_path: str) -> list[str]:
    problems = []
    for name in sorted(os.listdir(shard_path)):
        path = os.path.join(shard_path, name)
        key, ext = os.path.splitext(name)
        if not keys.is_valid_key(key) or ext not in (".entry", ".hits"):
            problems.append(f"{path}: unexpected file")
        elif ext == ".entry" and (problem := _verify_entry(key, path)):
            problems.append(f"{path}: {problem}")
    return problems


def verify(store) -> list[str]:
    """Every problem found, one line each ("<path>: <reason>"); empty when the store is sound."""
    if not _usable(store):
        return []
    problems = []
    for name in sorted(os.listdir(store.base)):
        path = os.path.join(store.base, name)
        is_dir_name = name in ("tmp", "locks") or _SHARD_RE.fullmatch(name)
        if name == "counters":
            continue
        if not is_dir_name:
            problems.append(f"{path}: unexpected file")
            continue
        problem = fsutil.dir_problem(path)
        if problem:
            problems.append(problem)
        elif name not in _NOT_SHARDS:
            problems.extend(_verify_shard(path))
    return problems


def evict(store, keep: str | None = None, limit_bytes: int | None = None) -> int:
    """Remove least recently used entries until the total fits `limit_bytes` (default: the store's)."""
    limit = store.size_limit_bytes() if limit_bytes is None else limit_bytes
    if not _usable(store) or store.prepare_dirs(store.locks_dir) is not None:
        return 0
    with fsutil.file_lock(os.path.join(store.locks_dir, "evict.lock"), timeout_s=0) as acquired:
        if not acquired:
            return 0  # another process is evicting right now
        removed = _evict_locked(store, keep, limit)
        if removed:
            _remove_stale_temps(store, _STALE_TMP_S)
            _remove_orphan_hits(store)
        return removed


def _evict_locked(store, keep: str | None, limit: int) -> int:
    sized = []
    for key, path in _entry_files(store):
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            sized.append((st.st_mtime_ns, key, st.st_size))
    total = sum(size for _, _, size in sized)
    removed = 0
    for _, key, size in sorted(sized):
        if total <= limit:
            break
        if key == keep:
            continue
        _remove_entry(store, key)
        total -= size
        removed += 1
    if removed:
        counters.evicted += removed
        store.persist_counts(evicted=removed)
        logs.log("cache", "evicted %d least recently used entries to fit %d bytes", removed, limit)
    return removed
