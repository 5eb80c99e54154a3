"""`torch.linspace` whose step count is a size or an int argument, issue 13 (h13dyn3): one graph serves
every length (NOTE [Linspace of a symbolic length], capture/sym_factories.py), with eager's values exactly.

Before, the count was specialised by fake propagation (aten.linspace takes a C++ int): one graph per size
with dynamic=True as well (6 graphs over 6 sizes; stock torch.compile 6 as well). Now a size of 2 and more
is one graph with dynamic=True and two with automatic dynamic (the first call static); sizes of 1 and 0 are
served by the same graph where nothing else specialises them (linspace of 1 step is [start], of 0 steps
empty, as eager computes them at run time).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, RecordingBackend, assert_same


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _ramp_rows(x):
    return x * torch.linspace(0, 1, x.size(0)).unsqueeze(1)


def _ramp_cols(x):
    return x + torch.linspace(-1.5, 2, steps=x.size(1), dtype=torch.float64)


def _ramp_keywords(x):
    return x.sum(0) + torch.linspace(start=3, end=-7, steps=x.size(1), device=x.device)


def _ramp_ints(x):
    return torch.linspace(0, 100, x.size(0) * 2 + 1, dtype=torch.int64) + x.size(1)


_SHAPES = [(5, 4), (6, 7), (3, 9), (8, 5), (7, 7), (9, 3)]
_CALLS = [(_r(*s, seed=k),) for k, s in enumerate(_SHAPES)]


def _run(fn, calls, dynamic, backend="eager"):
    counting = CountingBackend() if backend == "eager" else RecordingBackend(backend)
    compiled = framejit.compile(fn, backend=counting, dynamic=dynamic)
    eager = framejit.stats()["eager_frames"]
    for args in calls:
        if backend == "eager":
            assert_same(compiled(*args), fn(*args), rtol=0, atol=0)
        else:
            assert_same(compiled(*args), fn(*args), rtol=1e-5, atol=1e-5)
    assert framejit.stats()["eager_frames"] == eager
    return counting.graph_count


@pytest.mark.parametrize("fn", [_ramp_rows, _ramp_cols, _ramp_keywords, _ramp_ints])
@pytest.mark.parametrize("dynamic,expected", [(True, 1), (None, 2)])
def test_linspace_of_a_size_is_one_graph(fn, dynamic, expected):
    assert _run(fn, _CALLS, dynamic) == expected  # before: one per shape (6)


def test_linspace_of_an_int_argument():
    def ramp(x, n):
        return x.sum() * torch.linspace(0.5, 4, n)

    calls = [(_r(3, seed=n), n) for n in (4, 7, 2, 9, 5)]
    assert _run(ramp, calls, None) == 2  # n static at first, then symbolic (before: 5)


def test_linspace_at_lengths_one_and_zero_is_eager_s():
    def ramp(x):
        return torch.linspace(2, 5, x.size(0)) * 2

    calls = [(torch.zeros(n),) for n in (4, 6, 1, 0, 3)]
    assert _run(ramp, calls, True) <= 3  # stock: 3 (one for 2 and more, one for 1, one for 0)


def test_a_negative_length_raises_as_eager():
    def ramp(x, n):
        return x + torch.linspace(0, 1, n).sum()

    compiled = framejit.compile(ramp, backend="eager", dynamic=True)
    x = torch.ones(2)
    assert_same(compiled(x, 3), ramp(x, 3))
    with pytest.raises(RuntimeError) as eager:
        ramp(x, -2)
    with pytest.raises(RuntimeError) as ours:
        compiled(x, -2)
    assert str(ours.value) == str(eager.value)
    assert_same(compiled(x, 5), ramp(x, 5))


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_linspace_of_a_size_on_other_backends(backend):
    assert _run(_ramp_rows, _CALLS[:4], True, backend) == 1


def test_symbolic_bounds_keep_specialising():
    # an end computed from the size is not a constant: the call is left as it was (one graph per size),
    # and its values are still eager's
    def ramp(x):
        return x * torch.linspace(0, x.size(0) - 1, x.size(0)).unsqueeze(1)

    assert _run(ramp, _CALLS[:3], True) <= 3
