"""Tensor methods called unbound (`torch.Tensor.add(x, 1)`, `type(x).new_ones(x, 3, ...)`) on tensors whose own
attributes shadow the method, and unbound or bound `new_*` factories of leaves that require grad (revBG HIGH-1/2:
NOTE [Unbound calls past instance attributes], NOTE [Factories of leaves that require grad] in calls.py)."""
from __future__ import annotations

import pytest
import torch

import framejit


def _hijack(*args, **kwargs):
    return torch.full((1,), -99.0)


def _unbound_add(x):
    return torch.Tensor.add(x, 1) * 2


def _class_add(x):
    return type(x).add(x, 1) * 2


def _unbound_getitem(x):
    return torch.Tensor.__getitem__(x, 0) + 1


@pytest.mark.parametrize("fn,name", [(_unbound_add, "add"), (_class_add, "add"), (_unbound_getitem, "__getitem__")])
def test_an_instance_attribute_of_the_input_never_answers_an_unbound_call(fn, name):
    compiled = framejit.compile(fn, backend="eager")
    for i, shape in enumerate(((2, 3), (4, 3), (3, 5), (2, 2))):
        outs = []
        for f in (fn, compiled):
            x = torch.arange(float(shape[0] * shape[1])).reshape(shape)
            if i % 2 == 0:
                setattr(x, name, _hijack)
            outs.append(f(x))
        assert torch.equal(outs[0], outs[1]), (i, outs)


def test_an_attribute_stored_in_the_frame_never_answers_an_unbound_call():
    def f(x):
        x.add = _hijack
        return torch.Tensor.add(x, 1) * 2
    compiled = framejit.compile(f, backend="eager")
    for n in (2, 3, 3):
        assert torch.equal(compiled(torch.ones(n, 3)), f(torch.ones(n, 3)))


def test_a_parameters_attribute_set_after_the_first_call_is_noticed():
    lin = torch.nn.Linear(3, 2)

    def f(x):
        return torch.Tensor.add(lin.weight, 1).sum() + x.sum()
    compiled = framejit.compile(f, backend="eager")
    for i in range(3):
        if i == 1:
            lin.weight.add = _hijack
        x = torch.ones(2, 3)
        assert torch.equal(compiled(x), f(x)), i


@pytest.mark.parametrize("make", [lambda x: torch.Tensor.new_ones(x, 3, requires_grad=True),
                                  lambda x: type(x).new_zeros(x, (3,), requires_grad=True),
                                  lambda x: x.new_full((3,), 2.0, requires_grad=True),
                                  lambda x: x.new_tensor([1.0, 2.0, 3.0], requires_grad=True)],
                         ids=["unbound_new_ones", "class_new_zeros", "bound_new_full", "bound_new_tensor"])
def test_new_leaves_that_require_grad_keep_the_flag_and_get_gradients_on_onnxrt(make):
    def f(x):
        w = make(x)
        return w, (x * w.sum()).sum()
    compiled = framejit.compile(f, backend="onnxrt")
    for shape in ((2, 3), (4, 3), (3, 5)):
        x = torch.randn(shape)
        (we, ye), (wc, yc) = f(x), compiled(x)
        assert (wc.requires_grad, wc.is_leaf, yc.requires_grad) == (we.requires_grad, we.is_leaf, ye.requires_grad)
        ye.backward()
        yc.backward()
        assert torch.allclose(wc.grad, we.grad)


def test_an_in_place_write_to_a_new_leaf_that_requires_grad_raises_as_eager():
    def f(x):
        w = torch.Tensor.new_empty(x, (2,), requires_grad=True)
        w.fill_(1.0)
        return w.sum() + x.sum()
    compiled = framejit.compile(f, backend="onnxrt")
    for n in (2, 4):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            f(torch.randn(n, 3))
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            compiled(torch.randn(n, 3))
