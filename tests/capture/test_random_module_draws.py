"""Draws from Python's `random` module in compiled code (NOTE [Draws from the random module]).

Every test runs a program eagerly and compiled after the same `random.seed(s)`, for several seeds and
input sizes, and compares the results (tensors and drawn numbers) and `random.getstate()` afterwards: the
compiled code must draw exactly what eager draws, in the same order. Graph counts are asserted where
capturing the draw without a break is the point.
"""
from __future__ import annotations

import contextlib
import random

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _check(fn, sizes=(3, 3, 5, 2)) -> CountingBackend:
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    saved = random.getstate()
    try:
        for seed, n in enumerate(sizes):
            x = torch.arange(float(n))
            random.seed(seed)
            want = fn(x)
            want_state = random.getstate()
            random.seed(seed)
            got = compiled(x)
            assert random.getstate() == want_state, f"seed {seed}: the random module's state differs from eager's"
            assert _same(got, want), (seed, got, want)
    finally:
        random.setstate(saved)
    return backend


def _uniform_unused(x):
    for _ in range(3):  # transformers' layer drop in eval: drawn, never read
        dropout_probability = random.uniform(0, 1)  # noqa: F841
        x = x * 2 + 1
    return x


def test_unused_draws_are_made_and_captured():
    backend = _check(_uniform_unused)
    assert backend.graph_count == 2  # no break: the first shape, then one dynamic entry


def _returned(x):
    a = random.random()
    b = random.uniform(2.0, 3.5)
    return x + 1, a, b, [random.random() for _ in range(2)]


def test_returned_draws_are_eagers_numbers():
    assert _check(_returned).graph_count == 2


class _Holder:
    last = None


def _stored(x):
    _Holder.last = random.random()
    y = x * 3
    return y, _Holder.last


def test_a_stored_draw_is_replayed_with_its_value():
    _Holder.last = None
    _check(_stored)


def _used_in_arithmetic(x):
    p = random.uniform(0, 1)
    return x * p


def _compared(x):
    p = random.random()
    if p < 0.5:
        return x + 1, p
    return x - 1, p


@pytest.mark.parametrize("fn", [_used_in_arithmetic, _compared])
def test_a_draw_that_is_read_breaks_there_with_eagers_number(fn):
    _check(fn)


def _inner(x):
    p = random.random()
    print("inner")  # a break inside the callee, after its draw
    return x * 2, p


def _calls_inner(x):
    q = random.random()
    y, p = _inner(x + 1)
    return y + 1, p, q, random.random()


def test_draws_around_a_break_in_a_callee(capsys):
    _check(_calls_inner)


def _numbers(n):
    for _ in range(n):
        yield random.random()


def _generator_interleaved(x):
    it = _numbers(2)
    a = next(it)
    c = random.random()  # drawn between the generator's two draws
    b = next(it)
    return x + 1, a, b, c


def _generator_listed(x):
    return x + 1, list(_numbers(3))


@pytest.mark.parametrize("fn", [_generator_interleaved, _generator_listed])
def test_draws_in_generators_keep_their_order(fn):
    _check(fn)


@contextlib.contextmanager
def _drawing_manager():
    random.random()
    yield
    random.random()


def _in_manager(x):
    with _drawing_manager():
        y = x + 1
    return y, random.random()


def test_draws_in_a_context_manager():
    _check(_in_manager)


def _reseeded(x):
    random.seed(5)  # a break: the draw after it is made by the resume function
    return x + 1, random.random()


def _other_generator(x):
    rng = random.Random(3)  # not the module's generator: a break, as before
    return x + 1, rng.random(), random.random()


def _tensor_bounds(x):
    return x + 1, random.uniform(x.shape[0], 10)  # a size as bound: uniform runs as traced code


@pytest.mark.parametrize("fn", [_reseeded, _other_generator, _tensor_bounds])
def test_other_random_calls(fn):
    _check(fn)


def test_a_draw_is_never_guarded():
    """A draw's number changes on every call: no guard can name it (it runs before the draw), so a
    frame whose draw is only passed along compiles once per shape, not once per number."""
    backend = _check(_returned, sizes=(4, 4, 4, 4, 4))
    assert backend.graph_count == 1
