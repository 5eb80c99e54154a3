"""Draws from `random.Random` generators and the random module's functions recompile no more than the
input shapes ask (NOTE [Draws from the random module], NOTE [Generators read where the trace read them]).

Each program runs eagerly and compiled over several calls with changing sizes, the generators reseeded
(or replaced) between some calls; the results, and each generator's state after each call, must equal
eager's. The number of traces of each frame (the function and its resume functions) is asserted: at most
2 under automatic dynamic (the first shape, then symbolic sizes), 1 under dynamic=True. Before, a user's
generator or `random.gauss`/`randint`/`choice` was inlined down to random.py's C draws, each a break whose
resume function guarded the number drawn: 4 to 22 traces per program over 4 calls.
"""
from __future__ import annotations

import collections
import random

import pytest
import torch

import framejit

RNG = random.Random(0)


class _Holder:
    def __init__(self) -> None:
        self.rng = random.Random(1)


HOLDER = _Holder()


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _global_draws_returned(x, r):
    return x * 2, RNG.random(), RNG.gauss(0, 1), RNG.randint(1, 6), RNG.choice([1, 2, 3]), RNG.uniform(2, 3)


def _attribute_draw_used(x, r):
    k = HOLDER.rng.randrange(10)
    return x + HOLDER.rng.random(), k


def _module_functions(x, r):
    a = random.gauss(1.0, 0.5)
    y = x * a
    return y, random.randint(1, 5), random.choice("abc"), random.expovariate(2.0)


def _argument_generator(x, r):
    return x * r.normalvariate(0, 1), r.getrandbits(8)


def _draw_kept_over_a_break(x, r):
    a = RNG.random()
    k = RNG.randint(2, 4)
    y = x.sin()
    print("", end="")
    return y * a + k, a, k


_PROGRAMS = [_global_draws_returned, _attribute_draw_used, _module_functions, _argument_generator,
             _draw_kept_over_a_break]


def _reseed(call: int) -> None:
    global RNG
    if call == 3:
        RNG = random.Random(11)  # a new generator where the trace read the old one
    RNG.seed(call % 3)
    HOLDER.rng.seed(call % 2 + 5)
    random.seed(call % 3 + 7)


def _states():
    return RNG.getstate(), HOLDER.rng.getstate(), random.getstate()


def _traces_per_frame(before: int) -> dict[str, int]:
    counts = collections.Counter(f["function"] for f in framejit.stats()["frames"][before:] if f["cache"] == "miss")
    return dict(counts)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", _PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_draws_from_generators_recompile_only_for_shapes(fn, dynamic):
    global RNG
    framejit.reset()
    saved, saved_global = random.getstate(), RNG
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, dynamic=dynamic)
    try:
        for call, n in enumerate([3, 3, 4, 5, 6, 7]):
            x = torch.randn(n)
            _reseed(call)
            want = fn(x, random.Random(call))
            want_states = _states()
            _reseed(call)
            got = compiled(x, random.Random(call))
            assert _same(got, want), (call, got, want)
            assert _states() == want_states, f"call {call}: a generator's state differs from eager's"
    finally:
        random.setstate(saved)
        RNG = saved_global
    traces = _traces_per_frame(before)
    assert traces, "nothing was traced"
    limit = 2 if dynamic is None else 1
    assert max(traces.values()) <= limit, traces


class _Loaded(random.Random):
    def random(self):
        return 0.25


def test_a_subclass_of_random_draws_its_own_way():
    rng = _Loaded(3)

    def fn(x):
        return x * rng.uniform(0, 4), rng.gauss(1, 0)

    compiled = framejit.compile(fn)
    for n in (3, 4):
        x = torch.randn(n)
        assert _same(compiled(x), fn(x))
