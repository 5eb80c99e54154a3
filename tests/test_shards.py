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
           "tests/cache/test_frame_cache.py::test_b[onnxrt]", "tests/cache/test_remote_redis.py::test_c",
           "tests/cache/test_frame_cache.py::test_corrupt_entries_are_rebuilt",
           "tests/test_shards.py::test_real_collection_splits", "tests/capture/test_o.py::test_sgd_step_on_triton",
           "tests/soundness/test_r.py::test_onnxrt_sum_of_zeros[a]", "tests/capture/test_o.py::test_onnxrtlike_name",
           "tests/cache/test_frame_cache.py::test_step_on_triton"] + \
          [f"tests/soundness/test_r.py::test_{i}[{p}]" for i, p in enumerate(("eager", "onnxrt", "triton-grad",
                                                                                 "x-onnxrt", "onnxrt_like", "a-b"))]
    runs = [set(ids) - conftest.split_tests(ids, index, count) for index in range(count)]
    assert set().union(*runs) == set(ids)
    for nodeid in ids:
        on = sum(nodeid in run for run in runs)
        split = nodeid.startswith(conftest.SPLIT_PATHS) and not nodeid.startswith(conftest.NOT_SPLIT)
        split = split or nodeid.endswith(("[onnxrt]", "[triton-grad]", "[x-onnxrt]"))   # backend variants
        split = split and not nodeid.endswith("test_b[onnxrt]")  # a variant in a NOT_SPLIT file
        split = split or nodeid.endswith(("test_corrupt_entries_are_rebuilt", "test_real_collection_splits",
                                          "test_sgd_step_on_triton", "test_onnxrt_sum_of_zeros[a]"))
        every = nodeid.startswith(conftest.NOT_SPLIT) and not split
        assert on == (1 if split else count if every else min(2, count)), nodeid
    sizes = [len(run) for run in runs]
    assert max(sizes) - min(sizes) <= 2


def test_frontend_tests_run_on_two_of_three_shards_and_every_pair_shares_some():
    """NOTE [Frontend tests on two interpreters]: each frontend test on exactly two of three shards, the shards'
    shares of them equal within one, and every interpreter sharing some with each other one."""
    ids = [f"tests/capture/test_{i:02d}.py::test_{j}" for i in range(7) for j in range(3)]
    runs = [set(ids) - conftest.split_tests(ids, index, 3) for index in range(3)]
    assert all(sum(nodeid in run for run in runs) == 2 for nodeid in ids)
    assert max(map(len, runs)) - min(map(len, runs)) <= 1
    assert all(runs[a] & runs[b] for a in range(3) for b in range(a + 1, 3))
    kept = "tests/cache/test_frame_cache.py::test_b"
    assert all(kept in set(ids + [kept]) - conftest.split_tests(ids + [kept], index, 3) for index in range(3))


def test_real_collection_splits():
    """Collected for real (one split file and one that is not): shards 0 and 1 of 2 run disjoint halves of the
    model zoo's tests and of the frontend file's onnxrt and triton variants, and all of its other tests."""
    paths = ["tests/models/test_zoo.py", "tests/soundness/test_redteam23.py"]
    halves = [set(_collected(*paths, env_shard=f"{i}/2")) for i in range(2)]
    both = halves[0] | halves[1]
    models = {n for n in both if n.startswith("tests/models/")}
    variants = {n for n in both - models if n.endswith(("-onnxrt]", "-triton]", "[onnxrt]", "[triton]"))}
    frontend = both - models - variants
    assert len(models) > 10 and len(variants) > 10 and len(frontend) > 10
    assert halves[0] & halves[1] == frontend
    assert abs(len(halves[0]) - len(halves[1])) <= 1


@pytest.mark.parametrize("value", ["2/2", "1", "a/b", "-1/2"])
def test_a_bad_value_is_a_usage_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(conftest.SHARD_VAR, value)
    with pytest.raises(pytest.UsageError, match=conftest.SHARD_VAR):
        conftest.shard()
    monkeypatch.setenv(conftest.SHARD_VAR, "1/2")
    assert conftest.shard() == (1, 2)


def test_every_listed_path_and_test_exists():
    """A renamed file or test in SPLIT_PATHS or NOT_SPLIT would quietly change where it runs."""
    for prefix in conftest.SPLIT_PATHS + conftest.NOT_SPLIT:
        path, _, name = prefix.partition("::")
        assert (ROOT / path).exists(), prefix
        function, _, param = name.rstrip("]").partition("[")
        assert not function or f"def {function}" in (ROOT / path).read_text(), prefix  # or a name's start
        assert not param or f'"{param}"' in (ROOT / path).read_text(), prefix  # a parametrization's id
