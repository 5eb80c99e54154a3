"""NOTE [Closures made per call share one hook]: a nested function with free variables, made on every call and
called at a graph break, is traced once per guard set (not once per object), and an object whose cell was
deleted runs as Python (NameError as eager), not as an eager frame. Eager vs compiled over several calls with
changing values and shapes; frames traced and eager frames counted from their values at the start.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit import config


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


def test_a_closure_made_per_call_is_traced_once():
    traced, eager = _run(per_call_closure, [(3, 1.0), (3, 1.0), (3, 1.0), (3, 1.0)])
    assert eager == 0
    assert traced[1:] == [traced[0]] * 3  # before (3.12): one more frame (the new object's) on every call


def test_changing_closure_values_retrace_as_guards_say():
    traced, eager = _run(per_call_closure, [(3, 1.0), (4, 1.0), (5, 2.0), (6, 1.0), (4, 2.0)])
    assert eager == 0


def test_a_closure_called_after_del_of_its_variable_raises_as_eager_without_eager_frames():
    traced, eager = _run(closure_after_del, [(3, 1.0), (3, 2.0), (4, 1.0)])
    assert eager == 0  # before: the object's frame (NameError at its first read) ran eagerly on every call


def test_a_wrapper_called_inside_a_wrapper_of_its_code_is_still_captured():
    """transformers stacks decorator wrappers of one code (`can_return_tuple`): the inner call, made while the
    outer one's twin runs, takes a hook of its own (a76a769 ran it as plain Python: its function uncaptured)."""
    start = len(framejit.stats()["frames"])
    _run(nested_wrappers, [(3, 1.0), (3, 2.0), (3, 1.0)])
    traced = {frame["function"] for frame in framejit.stats()["frames"][start:]}
    assert "_inner" in traced and "_outer" in traced


def test_writers_and_inner_closures_keep_their_own_hooks():
    _run(nonlocal_and_inner, [(3, 1.0), (3, 2.0), (4, 1.0)])


def test_only_codes_that_read_their_free_variables_share():
    from framejit.capture.shared_cells import reads_free_variables_only
    t = torch.ones(2)
    count = 0

    def reads(a):
        return a + t

    def writes():
        nonlocal count
        count += 1

    def passes_on():
        return lambda: t

    def generator():
        yield t

    assert reads_free_variables_only(reads.__code__)
    assert not reads_free_variables_only(writes.__code__)
    assert not reads_free_variables_only(passes_on.__code__)
    assert not reads_free_variables_only(generator.__code__)
