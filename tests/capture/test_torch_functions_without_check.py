"""Torch Python functions with no __torch_function__ check of their own, called on a tensor subclass with its own
__torch_function__ (NOTE [Torch functions without a __torch_function__ check]).

`F.sigmoid(x)` is `return input.sigmoid()`: eager's subclass sees `Tensor.sigmoid`, never `F.sigmoid`. framejit
broke at such a call ("sigmoid runs code before its __torch_function__ check"), so fullgraph=True raised.
Differential: eager vs framejit over 3 calls with changing sizes, comparing values, exact result types and the
functions the user's __torch_function__ saw, in order.
"""
import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend

SEEN = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        SEEN.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs)


class Shifted(torch.Tensor):
    """Changes what sigmoid returns: the value shows which function the call really went through."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if getattr(func, "__name__", "") == "sigmoid":
            out = out + 10
        return out


def _activations(x):
    a = F.sigmoid(x)
    b = F.tanh(x) * 2
    return a + b, x.sigmoid()


def _pools(x):
    return F.max_pool1d(x, 2), F.adaptive_max_pool1d(x, 2), F.sigmoid(x + 1)


def _run(fn, cls, shapes):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for shape in shapes:
        x = torch.randn(*shape).as_subclass(cls)
        SEEN.clear()
        expected, eager_seen = fn(x), list(SEEN)
        SEEN.clear()
        got, seen = compiled(x), list(SEEN)
        assert [type(t) for t in got] == [type(t) for t in expected]
        for e, g in zip(expected, got):
            torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))
        assert seen == eager_seen
    return backend


@pytest.mark.parametrize("fn, shapes", [(_activations, [(3,), (4,), (2, 5)]),
                                        (_pools, [(1, 2, 4), (1, 2, 6), (2, 3, 8)])])
def test_functions_without_a_check_are_routed_through_their_bodies(fn, shapes):
    backend = _run(fn, Logged, shapes)
    assert 1 <= backend.graph_count <= 3  # no break: one graph per shape at most


def test_the_subclass_result_is_what_its_own_function_returns():
    backend = _run(_activations, Shifted, [(3,), (4,), (6,)])
    assert 1 <= backend.graph_count <= 3
    x = torch.zeros(2).as_subclass(Shifted)
    got = framejit.compile(_activations, backend="eager", fullgraph=True)(x)
    assert torch.equal(got[1].as_subclass(torch.Tensor), torch.full((2,), 10.5))
