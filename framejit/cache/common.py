"""Types shared by store.py and admin.py: `Entry`, `Counters` (and the process-wide `counters`),
`CacheError`.

Invariants: `counters` is the only mutable state of the cache package; it counts what this process did
and is never persisted (the persisted totals live in the store's counters file, see store.py).
"""
from __future__ import annotations

import dataclasses

# The totals persisted in a store's counters file, in slot order (see fsutil.add_counters).
COUNTER_SLOTS = ("hits", "misses", "writes", "rejected", "evicted")


class CacheError(Exception):
    """The cache directory cannot be used (missing permissions, not a directory, not trusted)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """What `Store.get` returns: the stored files and the caller's metadata."""

    files: dict[str, bytes]
    meta: dict
    key: str = ""
    created: float = 0.0


@dataclasses.dataclass
class Counters:
    """What this process did with the persistent cache (read by tests and `framejit.stats()`)."""

    hits: int = 0
    misses: int = 0  # includes rejected entries
    writes: int = 0
    rejected: int = 0  # corrupt, foreign-version or untrusted entries
    evicted: int = 0
    bytes_written: int = 0
    remote_hits: int = 0  # the remote tier (remote.py): entries it supplied after a local miss
    remote_misses: int = 0  # includes refused values
    remote_writes: int = 0
    remote_rejected: int = 0  # unsigned, wrongly signed, truncated, oversized or foreign-version values
    remote_errors: int = 0  # faults that turned the tier off for a while

    def reset(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


counters = Counters()
