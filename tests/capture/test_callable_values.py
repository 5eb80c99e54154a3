"""`callable(v)` inside compiled code answers as eager for every kind of value (NOTE [callable() of other
values] in capture/type_checks.py): the `default() if callable(default) else default` idiom."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class Plain:
    pass


class WithCall:
    def __call__(self):
        return 1


def _free(a):
    return a


def _gen():
    yield 1


_MAKERS = {
    "ndarray": lambda: np.zeros(2),
    "numpy_scalar": lambda: np.float32(1.0),
    "generator": lambda: (i for i in range(2)),
    "generator_function_result": lambda: _gen(),
    "list_iterator": lambda: iter([1, 2]),
    "zip": lambda: zip([1], [2]),
    "map": lambda: map(abs, [1]),
    "enumerate": lambda: enumerate([1]),
    "range": lambda: range(3),
    "int": lambda: 3,
    "str": lambda: "s",
    "none": lambda: None,
    "tensor": lambda: torch.ones(1),
    "list": lambda: [1],
    "dict": lambda: {"a": 1},
    "set": lambda: {1},
    "slice": lambda: slice(1, 2),
    "slice_none": lambda: slice(None, -1, 2),
    "function": lambda: _free,
    "lambda": lambda: (lambda: 1),
    "builtin": lambda: len,
    "bound_method": lambda: [1].append,
    "class": lambda: Plain,
    "instance": lambda: Plain(),
    "callable_instance": lambda: WithCall(),
    "partial": lambda: functools.partial(_free, 1),
    "torch_function": lambda: torch.relu,
    "module": lambda: torch.nn.ReLU(),
    "dtype": lambda: torch.float32,
}


def _f(x, default):
    return x * 2 if callable(default) else x * 3


@pytest.mark.parametrize("kind", sorted(_MAKERS))
def test_callable_answers_as_eager(kind):
    framejit.reset()
    be = CountingBackend()
    compiled = framejit.compile(_f, backend=be)
    for n in (2, 2, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x, _MAKERS[kind]()), _f(x, _MAKERS[kind]()))
    assert be.graph_count >= 1


def test_callable_made_inside_the_trace():
    def f(x):
        it = iter([x, x])
        gen = (t for t in [x])
        arr = x.numpy() if False else None
        inner = lambda: x  # noqa: E731
        part = functools.partial(torch.add, x)
        return x * (callable(it) + 2 * callable(gen) + 4 * callable(arr) + 8 * callable(inner) + 16 * callable(part))

    be = CountingBackend()
    compiled = framejit.compile(f, backend=be)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), f(x))
    assert be.graph_count == 1  # no break


def test_a_call_slot_added_to_a_class_later_recompiles():
    class K:
        pass

    k = K()
    compiled = framejit.compile(_f, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x, k), _f(x, k))
    K.__call__ = lambda self: 0
    torch.testing.assert_close(compiled(x, k), _f(x, k))
    del K.__call__
    torch.testing.assert_close(compiled(x, k), _f(x, k))


def test_slices_from_outside_are_captured():
    class Holder:
        sl = slice(1, None)

    def f(x, sl, holder):
        return x[sl] * 2, x[holder.sl].sum(), x[sl.start:sl.stop], sl

    be = CountingBackend()
    compiled = framejit.compile(f, backend=be)
    cases = [(slice(0, 2), slice(1, None)), (slice(0, 2), slice(1, None)), (slice(1, 3), slice(None, None, 2)),
             (slice(2, 5), slice(0, 1)), (slice(None, -1, 2), slice(1, 2)), (slice(0, 4, 3), slice(1, 4))]
    before = framejit.stats()["eager_frames"]
    for sl, inner in cases:
        holder = Holder()
        holder.sl = inner
        x = torch.arange(6.0)
        got, want = compiled(x, sl, holder), f(x, sl, holder)
        for g, w in zip(got[:3], want[:3]):
            torch.testing.assert_close(g, w)
        assert got[3] == want[3]
    assert framejit.stats()["eager_frames"] == before  # "L['sl'] is a slice" ran the frame eagerly
    assert be.graph_count <= len(cases) - 1
