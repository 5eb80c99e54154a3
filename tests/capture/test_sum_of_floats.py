"""sum() of Python floats answers as the running CPython's sum() (NOTE [sum() of floats on 3.12+]): from 3.12 a
run of floats is added with compensated summation, so sum([1e16, 1.0, -1e16]) is 1.0 there and 0.0 on 3.11.
Before: the trace added one `+` at a time on every version (3.12/3.13: 0.0 where eager 1.0, and a branch on it
went the other way; review revZ /tmp/revZ/sum313.py). Differential: eager vs compiled, several calls with the
floats changing (constant on the first call, dynamic after), on the running interpreter."""
import torch

import framejit
from tests.helpers import CountingBackend

CASES = [(1e16, 1.0, -1e16), (1e16, 2.0, -1e16), (0.1, 0.2, 0.3), (1e16, 1.0, -1e16), (1.5, -2.5, 3.0)]


def branch(x, a, b, c):
    x = x + 1
    if sum([a, b, c]) > 0.5:
        return x * 2
    return x * 3


def value(x, a, b, c):
    return x * sum([a, b, c]), sum((v for v in (b, c)), a), sum([b, c], a)


def mixed(x, a, b, c):
    # an int start, a tensor in the middle (the run ends there), ints and bools in a float run
    return sum([a, x, b, c]), sum([a, b, 2, True, c], 0.5), sum([1, 2, 3]) + x, sum([x, x * 2, x * 3])


def _check(fn, cb=None):
    compiled = framejit.compile(fn, backend=cb or "eager")
    for n, (a, b, c) in enumerate(CASES):
        x = torch.ones(n % 2 + 1)
        expected, got = fn(x, a, b, c), compiled(x.clone(), a, b, c)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        for e, g in zip(expected, got):
            assert type(e) is type(g)
            assert torch.equal(e, g) if isinstance(e, torch.Tensor) else e == g, (fn.__name__, (a, b, c), e, g)


def test_a_branch_on_a_sum_of_floats_goes_as_eager():
    framejit.reset()
    _check(branch)


def test_sums_of_floats_equal_eager_with_a_start_and_a_generator():
    framejit.reset()
    _check(value)


def test_tensors_ints_and_bools_in_a_sum():
    framejit.reset()
    _check(mixed)


def test_a_sum_of_tensors_stays_one_graph():
    framejit.reset()
    cb = CountingBackend()
    compiled = framejit.compile(lambda x, ys: sum(y * x for y in ys) + sum([x, x]), backend=cb)
    for n in (2, 3):
        x, ys = torch.randn(n), [torch.randn(n) for _ in range(3)]
        assert torch.allclose(compiled(x, ys), sum(y * x for y in ys) + sum([x, x]))
    assert framejit.explain(lambda x: sum([x, x * 2, 1.5, 2.5]))(torch.ones(2)).graph_break_count == 0
