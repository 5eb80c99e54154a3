"""NOTE [Heavy tests split between interpreters] (tests/conftest.py): the shards of `make test` together run
every collected test, each split test on exactly one shard, everything else on all of them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]


def _collected(*args: str, env_shard: str | None = None) -> list[str]:
    import os
    env = {k: v for k, v in os.environ.items() if k != conftest.SHARD_VAR}
    if env_shard is not None:
        env[conftest.SHARD_VAR] = env_shard
    out = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
                          *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 5), out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("count", [2, 3])
def test_shards_partition_the_split_tests(count):
    ids = [f"tests/models/hf/test_hf_models.py::test_forward[m{i}]" for i in range(7)] + \
          [f"tests/backends/test_x.py::test_{i}" for i in range(5)] + \
          ["tests/backends/test_triton_sm90.py::test_every_generated_kernel_compiles_for_sm90",
           "tests/capture/test_breadth.py::test_a", "tests/cache/test_frame_cache.py::test_b",
           "tests/cache/test_remote_redis.py::test_c"]
    runs = [set(ids) - conftest.split_tests(ids, index, count) for index in range(count)]
    assert set().union(*runs) == set(ids)
    for nodeid in ids:
        on = sum(nodeid in run for run in runs)
        split = nodeid.startswith(conftest.SPLIT_PATHS) and not nodeid.startswith(conftest.NOT_SPLIT)
        assert on == (1 if split else count), nodeid
    sizes = [len(run) for run in runs]
    assert max(sizes) - min(sizes) <= 1


def test_real_collection_splits_and_rejects_bad_values():
    """Collected for real (one split directory and one that is not): shard 0 and 1 of 2 run disjoint halves
    of the backends' tests and all of the guards' ones; a bad value is a usage error naming the variable."""
    paths = ["tests/backends/test_triton_ops.py", "tests/guards/test_kept_source_order.py"]
    whole = _collected(*paths)
    halves = [_collected(*paths, env_shard=f"{i}/2") for i in range(2)]
    backends = {n for n in whole if n.startswith("tests/backends/")}
    assert len(backends) > 10
    assert set(halves[0]) | set(halves[1]) == set(whole)
    assert set(halves[0]) & set(halves[1]) == set(whole) - backends
    bad = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", paths[1]], cwd=ROOT, capture_output=True,
                         text=True, env={**__import__("os").environ, conftest.SHARD_VAR: "2/2"}, timeout=300)
    assert bad.returncode != 0 and conftest.SHARD_VAR in bad.stdout + bad.stderr
