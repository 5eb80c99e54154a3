"""NOTE [Closures made per call share a hook through their cells] (closure_hooks.py): nested functions with free
variables, made on every call and called at a graph break (3.12+ step an inlined comprehension at a break).
a76a769 shared one hook over a twin with copied cells; review revC C6 showed the copies go stale when another
function writes the original cell during the call, so that sharing was removed (943d840); the shared hook now
reads the cells of the object called. Eager vs compiled over several calls with changing values and shapes
(more in test_closures_per_call.py).
"""
from __future__ import annotations

import operator

import pytest
import torch

import framejit
from framejit import config
from tests.helpers import CountingBackend


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


@framejit.disable
def _opaque(t):
    return t * 1


def per_call_closure(x, k):
    t = x + k

    def add(a):
        return a + t

    return [add(_opaque(x * i)) for i in range(2)]


def closure_after_del(x, k):
    t = x * k

    def add(a):
        return a + t

    out = [add(_opaque(x * i)) for i in range(2)]
    del t
    try:
        add(x)
    except NameError as e:
        out.append(str(e))
    return out


def nonlocal_and_inner(x, k):
    t = x + k
    count = 0

    def bump(a):
        nonlocal count
        count += 1
        return a * count

    def outer(a):
        def inner():
            return t + a
        return inner()

    out = [bump(_opaque(x * i)) + outer(_opaque(x)) for i in range(3)]
    return out, count


def _wrap(func):
    def wrapper(x):
        return func(x)
    return wrapper


@_wrap
def _inner(x):
    y = _opaque(x.sin())
    return y * 2


@_wrap
def _outer(x):
    z = _opaque(x.cos())
    return _inner(z) + 1  # the same wrapper code, called at a break while the outer wrapper's twin runs


def nested_wrappers(x, k):
    return _outer(x + k) - 1


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert torch.equal(got, want)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


def _run(fn, calls):
    compiled = framejit.compile(fn, backend="eager")
    start = framejit.stats()
    traced = []
    for rows, k in calls:
        x = torch.randn(rows, generator=torch.Generator().manual_seed(rows * 10 + int(k)))
        _same(compiled(x, k), fn(x, k))
        traced.append(framejit.stats()["frames_traced"] - start["frames_traced"])
    return traced, framejit.stats()["eager_frames"] - start["eager_frames"]


def test_changing_closure_values_retrace_as_guards_say():
    traced, eager = _run(per_call_closure, [(3, 1.0), (4, 1.0), (5, 2.0), (6, 1.0), (4, 2.0)])
    assert eager == 0


def test_a_closure_called_after_del_of_its_variable_raises_as_eager():
    _run(closure_after_del, [(3, 1.0), (3, 2.0), (4, 1.0)])


def test_a_wrapper_called_inside_a_wrapper_of_its_code_is_still_captured():
    """transformers stacks decorator wrappers of one code (`can_return_tuple`): the inner call, made while the
    outer one's twin runs, is captured (a76a769 ran it as plain Python: its function uncaptured). Since nested
    graph breaks (NOTE [Nested graph breaks] in nested_breaks.py) _inner is inlined in the wrapper's trace
    instead of being a frame of its own: its operations (sin before the break, * 2 after it) are in graphs."""
    backend = CountingBackend()
    compiled = framejit.compile(nested_wrappers, backend=backend)
    eager = framejit.stats()["eager_frames"]
    for rows, k in [(3, 1.0), (3, 2.0), (3, 1.0)]:
        x = torch.randn(rows, generator=torch.Generator().manual_seed(rows * 10 + int(k)))
        _same(compiled(x, k), nested_wrappers(x, k))
    ops = {node.target for graph in backend.graphs for node in graph.graph.nodes
           if node.op in ("call_function", "call_method")}
    assert {"sin", "cos", operator.mul, operator.sub} <= ops
    assert framejit.stats()["eager_frames"] == eager


def test_writers_and_inner_closures_keep_their_own_hooks():
    _run(nonlocal_and_inner, [(3, 1.0), (3, 2.0), (4, 1.0)])


def setter_reader(x, k):
    t = x + k

    def setter(v):
        nonlocal t
        t = v

    def reader(a):
        setter(a * 10)  # writes the cell reader reads next
        return a + t

    return [reader(_opaque(x * i)) for i in range(3)]


def test_a_closure_sees_a_cell_written_by_another_function_during_its_call():
    """Review revC C6 (3.12, a wrong value with a76a769's shared twins): reader's copy of `t` was stale."""
    _run(setter_reader, [(2, 1.0), (2, 1.0), (3, 2.0)])
