"""Numbers drawn from Python's random module after the graph (NOTE [Draws from the random module]) have no
truth value or identity while tracing (NOTE [Draws have no truth while tracing]); draw methods held by
other objects are not drawn from those objects (NOTE [Draw methods held by other objects]); draws that
could raise are not recorded (NOTE [Draws that cannot raise]). Review revM F1-F3."""
from __future__ import annotations

import random

import pytest
import torch

import framejit

RNG = random.Random(0)
ZERO = 0


def coin_bits(x):
    if random.getrandbits(1):
        x = x.flip(0)
    return x * 2


def coin_randint(x):
    return x + 1 if RNG.randint(0, 1) else x - 1


def not_choice(x):
    return x * (3 if not random.choice((True, False)) else 5)


def or_and(x):
    d = RNG.randint(0, 1)
    return x * (d or 5) + (d and 7)


def while_draw(x):
    n = 0
    while RNG.randint(0, 2) and n < 20:
        n += 1
        x = x + 1
    return x, n


def any_of_draws(x):
    return x * 2, any([RNG.randint(0, 1) for _ in range(3)]), all(random.randint(0, 1) for _ in range(2))


def is_zero(x):
    v = RNG.randrange(2)
    return x + 1, v is ZERO


def assert_draw(x):
    assert RNG.randint(0, 1), "zero drawn"
    return x + 1


class Sampler:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.sample = self.rng.random


S = Sampler(3)


def held_method(x):
    p = S.sample()
    return x * 2, p


def lognorm_overflow(x, xs):
    a = random.lognormvariate(1000, 1)
    xs[0].add_(1)
    return x + a


def _run(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as e:  # the exception is part of the behaviour compared
        return ("exc", type(e), str(e))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("fn", [coin_bits, coin_randint, not_choice, or_and, while_draw, any_of_draws, is_zero,
                                assert_draw, held_method])
@pytest.mark.parametrize("dynamic", [None, True])
def test_draws_decide_branches_as_in_eager(fn, dynamic):
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for call in range(8):
        x = torch.arange(float(3 + call % 3))
        seed = 100 + call
        random.seed(seed), RNG.seed(seed), S.rng.seed(seed)
        want = _run(fn, x.clone())
        states = (random.getstate(), RNG.getstate(), S.rng.getstate())
        random.seed(seed), RNG.seed(seed), S.rng.seed(seed)
        got = _run(compiled, x.clone())
        assert _same(got, want), (call, got, want)
        assert (random.getstate(), RNG.getstate(), S.rng.getstate()) == states


def test_a_draw_that_raises_raises_before_later_writes():
    compiled = framejit.compile(lambda_free := lognorm_overflow, backend="eager")
    for n in (3, 4):
        xs_e, xs_c = [torch.zeros(n)], [torch.zeros(n)]
        random.seed(n)
        want = _run(lambda_free, torch.ones(n), xs_e)
        random.seed(n)
        got = _run(compiled, torch.ones(n), xs_c)
        assert got[:2] == want[:2] == ("exc", OverflowError)
        assert torch.equal(xs_c[0], xs_e[0])  # eager raised before the add_


def gauss_next_store(x):
    a = RNG.gauss(0, 1)
    RNG.gauss_next = None
    return x + 1, a, RNG.gauss(0, 1)


def gauss_next_setattr_module(x):
    a = random.gauss(0, 1)
    setattr(random._inst, "gauss_next", None)
    return x * 2, a, random.gauss(0, 1), random.random()


def gauss_next_through_vars(x):
    a = RNG.gauss(0, 1)
    vars(RNG)["gauss_next"] = None
    return x - 1, a, RNG.gauss(0, 1)


def gauss_next_store_in_callee(x):
    a = RNG.gauss(0, 1)
    _forget_pair(RNG)
    return x + 2, a, RNG.gauss(0, 1), RNG.uniform(0, 1)


def _forget_pair(rng):
    rng.gauss_next = None


@pytest.mark.parametrize("fn", [gauss_next_store, gauss_next_setattr_module, gauss_next_through_vars,
                                gauss_next_store_in_callee])
@pytest.mark.parametrize("dynamic", [None, True])
def test_draws_after_a_store_to_their_generator_see_it(fn, dynamic):
    # NOTE [Draws after stores to their generator]: the store is made before the second draw, as in eager
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for call in range(4):
        x = torch.arange(float(3 + call % 2))
        random.seed(call), RNG.seed(call)
        want = _run(fn, x.clone())
        states = (random.getstate(), RNG.getstate(), RNG.gauss_next, random._inst.gauss_next)
        random.seed(call), RNG.seed(call)
        got = _run(compiled, x.clone())
        assert _same(got, want), (call, got, want)
        assert (random.getstate(), RNG.getstate(), RNG.gauss_next, random._inst.gauss_next) == states
