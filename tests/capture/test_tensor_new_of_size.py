"""`Tensor.new(size)` with a torch.Size makes an uninitialized tensor of that shape, as eager does, not a
tensor holding the numbers of a plain tuple (NOTE [Tensor.new of a torch.Size] in
capture/unbound_tensor_methods.py). torch.distributions' Exponential, Weibull and the other samplers built
on `self.rate.new(shape).exponential_()` gave wrong samples of the wrong shape before. Every result is
compared with the same program run eagerly under the same seed, over sizes that change."""
from __future__ import annotations

import torch

import framejit


def _same(fn, sizes=(4, 4, 6, 3)):
    compiled = framejit.compile(fn)
    for n in sizes:
        args = (torch.rand(n) + 0.5,)
        torch.manual_seed(1)
        expected = fn(*args)
        torch.manual_seed(1)
        actual = compiled(*args)
        torch.testing.assert_close(actual, expected)


def test_new_of_a_shape_draws_like_eager():
    def f(r):
        return r.new(r.shape).normal_() + r.new(r.shape[0], 2).uniform_().sum(1)
    _same(f)


def test_new_of_a_size_with_a_device_and_of_a_tuple():
    def f(r):
        a = r.new(torch.Size([r.shape[0], 2]), device=r.device).exponential_()
        return a.sum(1), r.new((1.5, 2.5)), r.new(r.shape).fill_(3.0), r.new(torch.Size([])).shape
    _same(f)


def test_distributions_built_on_new_sample_like_eager():
    D = torch.distributions

    def f(rate):
        return D.Exponential(rate, validate_args=False).rsample((2,))
    _same(f, sizes=(4, 6))


def test_legacy_constructors_of_a_size_make_that_shape():
    def f(r):
        a = torch.Tensor(r.shape).fill_(1.0) + r
        b = torch.FloatTensor(torch.Size([r.shape[0], 2])).fill_(2.0)
        return a, b, torch.Tensor((1.5, 2.5)), torch.DoubleTensor(r.shape).fill_(3.0)
    _same(f)


def tuple_plus_size(x):
    s = (2,) + x.shape  # torch.Size.__radd__: a Size, which Tensor.new reads as a shape
    return type(s).__name__, tuple(x.new(s).shape), type(s + (1,)).__name__


def test_tuple_plus_symbolic_size_is_a_size():
    """revBL PRE-2: with symbolic sizes `(2,) + x.shape` was a tuple, and x.new(it) a tensor of its numbers."""
    compiled = framejit.compile(tuple_plus_size, backend="eager")
    for n in (2, 3, 4):
        x = torch.randn(n, 3)
        assert compiled(x) == tuple_plus_size(x), n
