"""Tensor subclasses that override names torch.Tensor has run as eager runs them (NOTE [Subclasses that
override Tensor's names] in capture/tensor_subclasses.py), and outputs that are one object stay one object
(review revP P1, P2, P4-P8)."""
from __future__ import annotations

import pytest
import torch

import framejit


class Reflected(torch.Tensor):
    def __radd__(self, other):
        return torch.Tensor.__add__(self, 1000)

    def __gt__(self, other):
        return torch.Tensor.__lt__(self, other)


class Sized(torch.Tensor):
    def __len__(self):
        return 42

    def size(self, dim=None):
        return 11 if dim is not None else (11,)


class Unbinds(torch.Tensor):
    def unbind(self, dim=0):
        return (self * 0 + 5,)

    def reciprocal(self):
        return torch.Tensor.reciprocal(self) * 0 + 100


class Plain(torch.Tensor):
    pass


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


def _reflected(x, p):
    return p + x, p < x


def _length(x, p):
    return x * len(x), x.shape, x.numel()


def _python_tensor_code(x, p):
    return [t for t in x], 2 / x


@pytest.mark.parametrize("fn, cls", [(_reflected, Reflected), (_length, Sized), (_python_tensor_code, Unbinds)],
                         ids=["reflected", "length", "python_tensor_code"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_overrides_of_tensor_names_as_eager(fn, cls, dynamic):
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for n in (3, 3, 4):
        x = (torch.arange(n, dtype=torch.float32) + 1).as_subclass(cls)
        p = torch.ones(n)
        _same(compiled(x, p), fn(x, p))


def test_an_instance_attribute_shadowing_a_tensor_method():
    def g(x):
        return x.sum(), x.mul

    compiled = framejit.compile(g, backend="eager")
    for _ in range(2):
        t = torch.randn(3).as_subclass(Plain)
        t.sum = lambda: "inst"
        t.mul = 7
        assert compiled(t) == g(t) == ("inst", 7)
    t = torch.randn(3).as_subclass(Plain)  # without the attributes: the Tensor method again
    torch.testing.assert_close(compiled(t)[0], t.sum())


def test_ops_that_return_their_input_keep_the_object():
    def f(x):
        y = x.float()
        z = (x * 2).contiguous()
        w = z.cpu()
        return y, y is x, z, w

    compiled = framejit.compile(f, backend="eager")
    for n in (3, 3, 4):
        x = torch.randn(n).as_subclass(Plain)
        x.tag = "t"
        y, inside, z, w = compiled(x)
        assert y is x and inside and vars(y) == {"tag": "t"}
        assert z is w and type(z) is Plain


def test_tuple_out_keeps_the_given_tensor():
    def mx(x, v, i):
        return torch.max(x, 0, out=(v, i))

    compiled = framejit.compile(mx, backend="eager")
    for _ in range(2):
        x, v, i = torch.randn(3, 2).as_subclass(Plain), torch.empty(2).as_subclass(Plain), torch.empty(2, dtype=torch.long)
        v.tag = 1
        r = compiled(x, v, i)
        assert r[0] is v and vars(r[0]) == {"tag": 1}
        torch.testing.assert_close(r[0].as_subclass(torch.Tensor), x.as_subclass(torch.Tensor).max(0).values)
