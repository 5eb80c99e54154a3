"""copy.deepcopy of tensors inside compiled code (NOTE [Deep copies of tensors] in capture/copies.py), the
deepcopy call at a break running as plain Python (NOTE [Modelled functions at breaks]), and `id()` of a
parameter. Differential: eager vs compiled on fresh inputs, with the copy's storage facts compared too."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


def _traced() -> int:
    return framejit.stats()["frames_traced"]


def _facts(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.storage_offset(), t.untyped_storage().nbytes(), t.requires_grad, t.dtype)


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want)
    assert _facts(got) == _facts(want)


def test_deepcopy_of_an_input_is_one_clone_in_the_graph():
    def f(x):
        y = copy.deepcopy(x)
        y.add_(1)
        return y, x * 2

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    before = _traced()
    with logged_breaks() as breaks:
        for n in (3, 3, 3):
            x = torch.randn(n, 4)
            want_y, want_x2 = f(x.clone())
            got_y, got_x2 = cf(x)
            _same(got_y, want_y)
            torch.testing.assert_close(got_x2, want_x2)
            assert got_y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert breaks == []
    assert be.graph_count == 1 and _traced() - before == 1
    assert any(n.target == "clone" for n in be.graphs[0].graph.nodes)


def test_deepcopy_keeps_the_aliasing_of_the_same_tensor_twice():
    def f(x):
        t = x.sin()
        c = copy.deepcopy([t, t, {"k": t}])
        c[0].mul_(2)
        return c[0] is c[1], c[2]["k"] is c[0], c[1], t

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    for _ in range(2):
        x = torch.randn(5)
        want, got = f(x), cf(x)
        assert got[:2] == want[:2] == (True, True)
        _same(got[2], want[2])
        torch.testing.assert_close(got[3], want[3])
    assert be.graph_count == 1


def test_dataclass_astuple_of_tensors_is_captured():
    @dataclasses.dataclass
    class Out:
        a: torch.Tensor
        b: torch.Tensor

    def f(x):
        t = dataclasses.astuple(Out(x.sin(), x.cos()))
        t[0].add_(1)
        return t

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    before = _traced()
    for _ in range(3):
        x = torch.randn(4)
        for g, w in zip(cf(x), f(x)):
            _same(g, w)
    assert be.graph_count == 1 and _traced() - before == 1


def test_a_view_sharing_storage_breaks_and_keeps_eager_aliasing():
    # eager: both copies share one new storage, so writing the second changes the first
    def f(x):
        t = x.sin()
        c = copy.deepcopy([t, t[1:]])
        c[1].add_(1)
        return c[0], c[1], t

    cf = framejit.compile(f, backend="eager")
    with logged_breaks() as breaks:
        for _ in range(2):
            x = torch.randn(4)
            want, got = f(x), cf(x)
            for g, w in zip(got, want):
                _same(g, w)
            assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()
    assert any("copy.deepcopy" in b for b in breaks)


def test_deepcopy_at_a_break_does_not_trace_copy_module_frames():
    w = torch.randn(3, requires_grad=True)

    def f(x):
        c = copy.deepcopy(w)  # requires grad: a break; deepcopy then runs as plain Python
        return x * 2, c

    cf = framejit.compile(f, backend="eager")
    before = _traced()
    for _ in range(3):
        x = torch.randn(3)
        want, got = f(x), cf(x)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        assert (got[1].requires_grad, got[1].is_leaf) == (want[1].requires_grad, want[1].is_leaf) == (True, True)
    # the function and its resume function; not copy.deepcopy / _keep_alive / Tensor.__deepcopy__
    assert _traced() - before == 2


def test_a_grad_set_on_the_input_later_is_copied_as_eager_does():
    def f(x):
        return copy.deepcopy(x)

    cf = framejit.compile(f, backend="eager")
    x = torch.randn(3)
    assert cf(x).grad is None
    x.grad = torch.ones(3)
    want, got = f(x), cf(x)
    torch.testing.assert_close(got.grad, want.grad)
    assert got.grad is not None and got.grad.untyped_storage().data_ptr() != x.grad.untyped_storage().data_ptr()


def test_a_python_attribute_set_on_the_input_later_is_copied():
    def f(x):
        return copy.deepcopy(x)

    cf = framejit.compile(f, backend="eager")
    x = torch.randn(3)
    assert not hasattr(cf(x), "tag")
    x.tag = [1, 2]
    want, got = f(x), cf(x)
    assert got.tag == want.tag == [1, 2] and got.tag is not x.tag


def test_two_inputs_that_come_to_share_storage_are_copied_onto_one_storage():
    def f(a, b):
        c = copy.deepcopy((a, b))
        c[0].add_(1)
        return c

    cf = framejit.compile(f, backend="eager")
    for _ in range(2):
        a, b = torch.randn(4), torch.randn(4)
        for g, w in zip(cf(a, b), f(a, b)):
            _same(g, w)
    base = torch.randn(4)
    view = base.view(2, 2)
    want, got = f(base, view), cf(base, view)
    for g, w in zip(got, want):
        _same(g, w)
    assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()


def test_deepcopy_of_a_non_leaf_raises_as_eager():
    def f(w):
        return copy.deepcopy(w * 2)

    cf = framejit.compile(f, backend="eager")
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves") as eager:
        f(w)
    with pytest.raises(RuntimeError, match="graph leaves") as compiled:
        cf(w)
    assert str(compiled.value) == str(eager.value)


def test_id_of_parameters_deduplicates_tied_weights_in_one_graph():
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    b.weight = a.weight

    def f(x):
        seen, total = set(), 0
        for p in [*a.parameters(), *b.parameters()]:
            if id(p) in seen:
                continue
            seen.add(id(p))
            total = total + p.sum()
        return x * total

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    with logged_breaks() as breaks:
        for _ in range(2):
            x = torch.randn(3)
            torch.testing.assert_close(cf(x), f(x))
    assert breaks == [] and be.graph_count == 1
    b.weight = torch.nn.Parameter(torch.randn(3, 3))  # untied: the identity guard fails, the answer changes
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), f(x))
    assert be.graph_count == 2


ATOMIC = frozenset({int, str, type(None)})


def test_a_frozenset_of_classes_from_outside_is_queried_in_the_graph():
    # dataclasses.astuple/asdict test `type(obj) in _ATOMIC_TYPES` (a frozenset of classes) on 3.12+
    global ATOMIC

    def f(x, v):
        return x + 1 if type(v) in ATOMIC else x - 1

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    with logged_breaks() as breaks:
        for v in (1, "a", 2.5, None):
            x = torch.randn(3)
            torch.testing.assert_close(cf(x, v), f(x, v))
    assert breaks == []
    saved = ATOMIC
    try:
        ATOMIC = frozenset({float})  # rebound: the set's guard fails, the answer follows it
        for v in (1, 2.5):
            x = torch.randn(3)
            torch.testing.assert_close(cf(x, v), f(x, v))
    finally:
        ATOMIC = saved
