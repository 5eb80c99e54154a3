"""An input written in place while a view of it (or its base) is an argument read only later (NOTE
[Aliased inputs written before the alias is read]): the frame breaks at the write instead of running
eagerly as a whole, on every backend, with the values and the written tensors equal to eager's."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same, reset_with_triton_interpreted

BACKENDS = ["eager", "onnxrt", "triton"]


_reset = pytest.fixture(autouse=True)(reset_with_triton_interpreted)


def base_then_element(ts, t):  # a sampling loop's schedule advanced, then its current step read
    ts.add_(1)
    return t * 2


def element_then_base(ts, t):
    t.mul_(2)
    ts.add_(1)
    return t + ts.sum()


def buffer_then_window(buf, win):
    buf.mul_(0.5)
    return win.sum(0) + buf[0]


def _element(ts, i):
    return ts[i]


def _window(buf, i):
    return buf[i:i + 3]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, view", [(base_then_element, _element), (element_then_base, _element),
                                      (buffer_then_window, _window)])
def test_a_write_before_its_alias_is_read_breaks_instead_of_running_eagerly(fn, view, backend):
    compiled = framejit.compile(fn, backend=backend)
    make = (lambda: torch.linspace(1, 2, 8)) if view is _element else (lambda: torch.randn(8, 4))
    base_eager = make()
    base_compiled = base_eager.clone()
    before, traced = framejit.stats()["eager_frames"], framejit.stats()["frames_traced"]
    for i in range(5):
        expected = fn(base_eager, view(base_eager, i))
        got = compiled(base_compiled, view(base_compiled, i))
        assert_same(got, expected)
        assert torch.equal(base_compiled, base_eager)
    assert framejit.stats()["eager_frames"] == before  # before: the frame ran eagerly on every call
    assert framejit.stats()["frames_traced"] - traced <= 6  # the frame, resume functions, one offset recompile each


def test_inputs_that_do_not_alias_stay_one_graph():
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = framejit.compile(base_then_element, backend=count)
    ts, other = torch.linspace(1, 2, 8), torch.linspace(1, 2, 8)
    for _ in range(3):
        expected_ts = ts.clone().add_(1)
        assert_same(compiled(ts, other[3]), other[3] * 2)
        assert torch.equal(ts, expected_ts)
    assert len(graphs) == 1
