"""Item stores, iteration and len() of a tensor subclass with its own __torch_function__ are routed through it
(NOTE [Inlined __torch_function__]): `x[i] = v` / `x[a:b] = v` (STORE_SUBSCR, STORE_SLICE), `for r in x` (torch's
Tensor.__iter__ inlined: its dim() and unbind(0) go through the user's function as in eager), `len(x)`, and the
length hint CPython asks after iter() in list(x), tuple(x), `[*x]` and `f(*x)`, binary operators reached through
sum() or functools.reduce; `p.grad` of an input leaf (guarded
and reloaded with subclass dispatch off: no guard calls the user's function).

Differential: eager vs framejit over calls with changing sizes, comparing values, exact types and the user
function's log (func names, argument counts, kwargs None or not). Before: a break at each of these (runs as
Python, /tmp/htf2/p6.py, p7.py); stock torch.compile(backend="eager") makes 3-4 graphs on the same calls.
"""
import functools
import operator

import pytest
import torch

import framejit
from tests.helpers import CountingBackend

LOG = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append((getattr(func, "__name__", "?"), len(args), kwargs is None))
        return super().__torch_function__(func, types, args, kwargs)


class Blocking(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__setitem__:
            LOG.append("blocked")
            return None
        return super().__torch_function__(func, types, args, kwargs)


def _plain(t):
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor)


def _flat(r):
    if isinstance(r, torch.Tensor):
        return [(type(r), _plain(r).clone())]
    if isinstance(r, (list, tuple)):
        return [type(r), len(r)] + [x for item in r for x in _flat(item)]
    return [r]


def _run(fn, cls=Logged, sizes=(2, 3, 2, 4)):
    cb = CountingBackend()
    compiled = framejit.compile(fn, backend=cb)
    for n in sizes:
        x = torch.randn(n, 3).as_subclass(cls)
        twin = _plain(x).clone().as_subclass(cls)
        LOG.clear()
        expected = _flat((fn(x), x)), list(LOG)
        LOG.clear()
        got = _flat((compiled(twin), twin)), list(LOG)
        assert got[1] == expected[1]
        assert len(got[0]) == len(expected[0])
        for a, b in zip(expected[0], got[0]):
            if isinstance(a, tuple):
                assert a[0] is b[0]
                torch.testing.assert_close(b[1], a[1])
            else:
                assert a == b
    return cb


def _stores(x):
    y = x * 2
    y[0] = 5
    y[1:] = x[:-1]
    x[-1] = 1.5
    y[:, 1] += 1
    return y


def _loops(x):
    rows = [r * 2 for r in x]
    pairs = [a + b for a, b in zip(x, x)]
    first, *rest = x
    return rows, pairs, [i * r for i, r in enumerate(x)], first, rest


def _drawn(x):
    return list(x), tuple(x), [*x], torch.stack([*x]), torch.stack(x.unbind(0)), len(x) + 1, x * len(x)


def _zero_dim(x):
    s = x.sum()
    try:
        for _ in s:
            pass
    except TypeError as e:
        return str(e)
    return "no error"


def _reduced(x):
    return sum(x), sum([x, x]), functools.reduce(operator.mul, [x, 2, x])  # protocol.binary, not BINARY_OP


@pytest.mark.parametrize("fn", [_stores, _loops, _drawn, _zero_dim, _reduced])
def test_routed_and_eager_equal(fn):
    framejit.reset()
    _run(fn)
    framejit.reset()
    assert framejit.explain(fn)(torch.randn(2, 3).as_subclass(Logged)).graph_break_count == 0  # was >= 1


def test_a_function_that_refuses_item_stores():
    def f(x):
        x[0] = 100
        return x + 0, [r for r in x]
    framejit.reset()
    _run(f, Blocking)
    framejit.reset()
    assert framejit.explain(f)(torch.randn(2, 3).as_subclass(Blocking)).graph_break_count == 0


def _step(p):
    g = p.grad
    with torch.no_grad():
        p.sub_(g * 0.1)
    return p, type(g)


def test_grad_of_an_input_leaf():
    framejit.reset()
    compiled = framejit.compile(_step, backend=CountingBackend())
    for n in (2, 3, 2, 4):
        ps = []
        for _ in range(2):
            p = torch.randn(n, 3).as_subclass(Logged).requires_grad_() if not ps else \
                _plain(ps[0]).detach().clone().as_subclass(Logged).requires_grad_()
            (p * n).sum().backward()
            ps.append(p)
        LOG.clear()
        expected = _step(ps[0]), list(LOG)
        LOG.clear()
        got = compiled(ps[1]), list(LOG)
        assert got[1] == expected[1]  # eager's log: one `__get__`, one `sub_`; no guard reads through the function
        assert got[0][1] is expected[0][1] and got[0][0] is ps[1]
        torch.testing.assert_close(_plain(ps[1]), _plain(ps[0]))
    framejit.reset()
    p = torch.randn(2, 3).as_subclass(Logged).requires_grad_()
    (p * 2).sum().backward()
    assert framejit.explain(_step)(p).graph_break_count == 0  # was 1 (Tensor.grad of a Logged)
