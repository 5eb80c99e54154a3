"""One of the processes of test_concurrency.py: reads and writes a shared store as fast as it can.

Run as `python -m tests.cache.concurrent_worker ROOT WORKER_ID KEYS ROUNDS LIMIT_BYTES START_FILE`.
Every writer stores content that depends on the key and on itself, and every reader checks that what
it got is exactly what the writer named in the entry's meta wrote: a torn or mixed entry fails. Prints
one JSON line with what it did; exits 1 on the first wrong read.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
import types

if "framejit" not in sys.modules:
    # Load framejit.cache without running framejit/__init__.py, which imports torch and the frontend
    # (over a second per worker). The cache package needs neither (DESIGN.md, section 3), which this
    # also checks: it must import with only framejit.config and framejit.logs beside it.
    _package = types.ModuleType("framejit")
    _package.__path__ = [os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "framejit")]
    sys.modules["framejit"] = _package

from framejit.cache import Store, keys  # noqa: E402

# The store compares each entry's runtime versions with the reader's; fixing them in the workers (and
# in the test that reads their entries) spares every worker an `import torch` (about a second each)
# without changing what is tested: safety at the file level.
FIXED_VERSIONS = {"framejit": "test", "python": "test", "torch": "test", "machine": "test"}


def key_for(i: int) -> str:
    return hashlib.sha256(f"shared key {i}".encode()).hexdigest()


def files_for(i: int, writer: int) -> dict[str, bytes]:
    rng = random.Random(i * 1000 + writer)
    size = 1000 + (i * 37_000) % 200_000  # 1 kB .. 200 kB, so writes overlap in time
    return {"model": rng.randbytes(size), "source": f"key {i} by writer {writer}\n".encode()}


def main(argv: list[str]) -> int:
    root, worker, n_keys, rounds, limit, start_file = argv
    worker, n_keys, rounds, limit = int(worker), int(n_keys), int(rounds), int(limit)
    keys.runtime_versions = lambda: FIXED_VERSIONS
    store = Store(root, size_limit_bytes=limit or None)
    deadline = time.monotonic() + 60
    while not os.path.exists(start_file) and time.monotonic() < deadline:
        time.sleep(0.001)
    done = {"hits": 0, "misses": 0, "writes": 0}
    order = list(range(n_keys))
    for round_ in range(rounds):
        random.Random(worker * 100 + round_).shuffle(order)
        for i in order:
            entry = store.get(key_for(i)) if round_ > 0 else None  # round 0: everybody writes every key
            if entry is None:
                done["misses" if round_ > 0 else "writes"] += 1
                store.put(key_for(i), files_for(i, worker), {"writer": worker, "backend": "test"})
                continue
            done["hits"] += 1
            if entry.files != files_for(i, entry.meta["writer"]):
                print(f"worker {worker}: wrong content for key {i}", file=sys.stderr)
                return 1
    print(json.dumps(done))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
