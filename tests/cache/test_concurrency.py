"""8 processes reading and writing the same keys at once leave a sound store with correct data."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from framejit.cache import Store, keys
from tests.cache import concurrent_worker as worker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKERS = 8
KEYS = 12


def run_workers(tmp_path, rounds: int, limit_bytes: int) -> list[dict]:
    root = str(tmp_path / "cache")
    start = str(tmp_path / "start")
    cmd = [sys.executable, "-m", "tests.cache.concurrent_worker", root]
    procs = [
        subprocess.Popen(cmd + [str(w), str(KEYS), str(rounds), str(limit_bytes), start], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(WORKERS)
    ]
    open(start, "w").close()  # all workers start together
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def check_store(store: Store, monkeypatch) -> None:
    """Sound, no temp files left, and every entry holds exactly what its writer wrote."""
    assert store.verify() == []
    assert os.listdir(store.tmp_dir) == []  # no writer left a temp file behind
    monkeypatch.setattr(keys, "runtime_versions", lambda: worker.FIXED_VERSIONS)
    for info in store.ls():
        i = next(i for i in range(KEYS) if worker.key_for(i) == info.key)
        entry = store.get(info.key)
        assert entry.files == worker.files_for(i, entry.meta["writer"])


def test_concurrent_writers_and_readers_of_the_same_keys(tmp_path, monkeypatch):
    results = run_workers(tmp_path, rounds=3, limit_bytes=0)
    store = Store(tmp_path / "cache")
    stats = store.stats()
    assert sum(r["writes"] for r in results) == WORKERS * KEYS
    assert sum(r["hits"] for r in results) == WORKERS * KEYS * 2  # nothing was lost after round 0
    assert stats["hits"] == WORKERS * KEYS * 2  # the persisted counters lost no update
    assert stats["writes"] == WORKERS * KEYS and stats["entries"] == KEYS
    assert sum(info.hits for info in store.ls()) == WORKERS * KEYS * 2
    check_store(store, monkeypatch)


def test_concurrent_use_with_eviction(tmp_path, monkeypatch):
    limit = 600_000  # about a third of the keys fit: entries are evicted while others read them
    run_workers(tmp_path, rounds=3, limit_bytes=limit)
    store = Store(tmp_path / "cache", size_limit_bytes=limit)
    assert store.stats()["evicted"] > 0
    check_store(store, monkeypatch)
    store.evict()
    assert store.stats()["bytes"] <= limit
