"""framejit's persistent cache: bytes and metadata stored under keys, shared between processes.

Role: backends store compiled artifacts (ONNX models, kernel sources and binaries) and the frame
cache stores compiled frames here, so that a new process can skip tracing and backend compilation.
This package imports neither capture nor backends: it stores what it is given under the keys it is
given (DESIGN.md, section 3).

Usage:

    from framejit.cache import cache_key, default_store
    key = cache_key(kind="onnx", graph=code, inputs=meta, backend=version_key, options=repr(opts))
    store = default_store()              # None when FRAMEJIT_CACHE=0
    if store is not None:
        entry = store.get(key)           # Entry(files, meta) or None
        ...
        store.put(key, files={"model.onnx": data}, meta={"backend": "onnxrt", "function": ..., "location": ...})

Main names: `cache_key`, `default_store`, `Store`, `Entry`, `EntryInfo`, `CacheError`, and
`counters` (this process's hits/misses/writes/rejected/evicted/bytes_written, for tests and
`framejit.stats()`). Layout and invariants: store.py; file format: entry_format.py.
"""
from .admin import EntryInfo
from .common import CacheError, Counters, Entry, counters
from .keys import cache_key, runtime_versions
from .store import Store, default_store

__all__ = [
    "CacheError", "Counters", "Entry", "EntryInfo", "Store", "cache_key", "counters", "default_store",
    "runtime_versions",
]
