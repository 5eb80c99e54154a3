"""The soundness fuzzer in CI: a fixed seed budget per backend must show no difference between eager and
compiled runs (excluded families, with their findings, are listed in excluded.py); and the fuzzer's own
checks: it is deterministic, covers every family, and catches planted bugs (a backend that perturbs
results, a compiler that ignores state changes, one that drops side effects)."""
from __future__ import annotations

import pytest
import torch

from tests import conftest
from tests.soundness import fuzz
from tests.soundness.compare import diff
from tests.soundness.excluded import EXCLUDED
from tests.soundness.program import render
from tests.soundness.runner import reproducer, run_program, shrink

# eager's own warning for var() over an empty dimension (the empty_reduce family) is expected on both sides.
pytestmark = pytest.mark.filterwarnings("ignore:var\\(\\)|std\\(\\):UserWarning")

# Seeds per backend (CI: about a minute per Python version in all); tools/soundness_fuzz.py runs more.
# Seed n starts with family n mod count: eager covers every family, the lowered backends a spread of them.
BUDGET = {"eager": range(0, 80), "onnxrt": range(0, 60, 6), "triton": range(3, 63, 10)}


# NOTE [Fuzzed programs split between interpreters]: `make test` runs this file on three interpreters at once
# (NOTE [Heavy tests split between interpreters] in tests/conftest.py), and the 80 eager programs, the same on
# each, took 15-28 s of each one's time. Under FRAMEJIT_TEST_SHARD=i/n shard i runs programs of its own seeds
# (rounds i, i + n, ... of one seed per family; seed n starts with family n mod count): first the fewest that
# together hold every family of the fuzzer (greedily, ~30), then the next ones up to its share of
# SPLIT_PROGRAMS. So every interpreter still runs every family (what capture does with each depends on its
# bytecode), and together the shards run more distinct programs than BUDGET's 80 (36 each of 3).
SPLIT_PROGRAMS = 108


def eager_seeds(which: tuple[int, int] | None) -> list[int]:
    """The eager campaign's seeds of shard `which` (index, count), or BUDGET's when the suite is not split."""
    if which is None:
        return list(BUDGET["eager"])
    index, count = which
    factories = fuzz.factories_for("eager")
    rounds = range(index, 4 * count, count)
    pool = {seed: set(fuzz.program_for(seed, "eager", factories).families)
            for r in rounds for seed in range(r * len(factories), (r + 1) * len(factories))}
    left, chosen = {fuzz.family_of(f) for f in factories}, []
    while left:
        seed = max(pool, key=lambda s: (len(pool[s] & left), -s))
        assert pool[seed] & left, f"no seed of shard {index}/{count} has families {sorted(left)}"
        chosen.append(seed)
        left -= pool.pop(seed)
    return sorted(chosen + list(pool)[:max(0, -(-SPLIT_PROGRAMS // count) - len(chosen))])


@pytest.mark.parametrize("backend", sorted(BUDGET))
def test_fuzzed_programs_match_eager(backend):
    seeds = eager_seeds(conftest.shard()) if backend == "eager" else BUDGET[backend]
    result = fuzz.campaign(backend, seeds)
    assert result.programs == len(seeds)
    # compiled code really ran: graphs were built for (nearly) every program, not an eager fallback
    assert result.counters["programs without a graph"] <= result.programs // 4, result.counters
    assert result.counters["graphs"] >= result.programs, result.counters
    if result.differences:
        small = shrink(result.differences[0], budget=15)
        lines = "\n".join(d.headline()[:200] for d in result.differences)
        pytest.fail(f"{len(result.differences)} of {result.programs} programs differ on {backend}:\n{lines}\n\n"
                    f"first one, shrunk (run it with .venv/bin/python):\n{reproducer(small)}")


def test_programs_are_deterministic_and_varied():
    factories = fuzz.factories_for("eager")
    sources = [render(fuzz.program_for(seed, "eager", factories)) for seed in range(20)]
    assert sources == [render(fuzz.program_for(seed, "eager", factories)) for seed in range(20)]
    assert len(set(sources)) == 20


def test_budget_covers_every_enabled_family():
    seen = set()
    for seed in BUDGET["eager"]:
        seen.update(fuzz.program_for(seed, "eager", fuzz.factories_for("eager")).families)
    enabled = {fuzz.family_of(f) for f in fuzz.factories_for("eager")}
    assert enabled - seen == set()
    for count in (2, 3):  # NOTE [Fuzzed programs split between interpreters]
        shards = [eager_seeds((index, count)) for index in range(count)]
        assert len(set().union(*shards)) == sum(map(len, shards)) >= SPLIT_PROGRAMS  # disjoint, more than BUDGET
        for seeds in shards:
            seen = set().union(*(fuzz.program_for(s, "eager", fuzz.factories_for("eager")).families for s in seeds))
            assert enabled - seen == set()
    every = {fuzz.family_of(f) for f in fuzz.ALL_FACTORIES}
    assert {key.split("@")[0] for key in EXCLUDED} <= every, "EXCLUDED names a family the fuzzer does not have"


def _perturbing_backend(gm, example_inputs):
    def run(*args):
        outs = gm(*args)
        return type(outs)(o + 1e-2 if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs)
    return run


def test_catches_a_backend_that_perturbs_results():
    result = fuzz.campaign(_perturbing_backend, range(8))
    assert len(result.differences) >= 6
    assert {d.what for d in result.differences} <= {"value", "args", "state", "exception", "stdout"}


def _stale_compile(fn, backend):
    """A 'compiler' whose only entry is the first call's result: no guard at all."""
    first = []

    def compiled(*args):
        if not first:
            first.append(fn(*args))
        return first[0]
    return compiled


def test_catches_a_compiler_without_guards():
    only = {"instance_attr", "global_value", "helper_defaults", "module_attrs", "float_values", "default_dtype"}
    result = fuzz.campaign("eager", range(12), only=only, compile_fn=_stale_compile)
    assert len(result.differences) >= 10
    small = shrink(result.differences[0], budget=10)
    assert len(small.program.blocks) == 1
    assert "SRC = '''" in reproducer(small)


def _effectless_compile(fn, backend):
    """A 'compiler' that runs f on copies of the program's globals: every outside side effect is lost."""
    import copy
    import types

    def compiled(*args):
        g = {k: (copy.copy(v) if isinstance(v, (list, dict)) else v) for k, v in fn.__globals__.items()}
        return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)(*args)
    return compiled


def test_catches_lost_side_effects():
    only = {"list_global", "break_side_effect", "dict_views"}
    result = fuzz.campaign("eager", range(10), only=only, compile_fn=_effectless_compile)
    assert any(d.what == "state" for d in result.differences)


def test_floats_compare_bitwise():
    assert diff(-0.0, 0.0, rtol=0, atol=0) is not None
    assert diff(float("nan"), float("nan"), rtol=0, atol=0) is None
    assert diff(torch.tensor([float("nan")]), torch.tensor([float("nan")]), rtol=0, atol=0) is None
    assert diff(torch.ones(2), torch.ones(2, dtype=torch.float64), rtol=0, atol=0) is not None


def test_a_shrunk_reproducer_runs_standalone(tmp_path):
    found = run_program(fuzz.program_for(3, "eager", fuzz.factories_for("eager", only={"global_value"})),
                        "eager", compile_fn=_stale_compile)
    assert found is not None
    script = tmp_path / "repro.py"
    script.write_text(reproducer(shrink(found, budget=5)))
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={"FRAMEJIT_CACHE": "0", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert "call 1 compiled:" in done.stdout
