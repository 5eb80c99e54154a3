"""Ops made with `torch.library.custom_op` inside compiled code (NOTE [Custom ops] in
capture/values/builder.py): the graph calls the op's OpOverload, fake tensors run its registered fake, and
its mutations, autograd formula and symbolic sizes behave as in eager. Before, the CustomOpDef object was
used as a node target: an internal error, and the whole frame ran eagerly."""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks, eager_frames


@torch.library.custom_op("fjtest::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, k: float) -> torch.Tensor:
    return x.sin() * k


@scaled_sin.register_fake
def _(x, k):
    return torch.empty_like(x)


def _scaled_sin_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * x.cos() * ctx.k, None


def _scaled_sin_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.k = inputs[1]


scaled_sin.register_autograd(_scaled_sin_backward, setup_context=_scaled_sin_setup)


@torch.library.custom_op("fjtest::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, x: torch.Tensor) -> None:
    out.add_(x)


@add_into.register_fake
def _(out, x):
    return None


@torch.library.custom_op("fjtest::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].clone()


def test_a_custom_op_is_one_node_of_the_graph_over_changing_sizes():
    def f(x):
        return scaled_sin(x + 1, 2.0).relu()

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    before = eager_frames()
    with logged_breaks() as breaks:
        for n in (3, 5, 7, 9):
            x = torch.randn(n)
            torch.testing.assert_close(cf(x), f(x))
    assert breaks == [] and eager_frames() == before
    assert be.graph_count == 2  # static, then one symbolic graph for every later size
    assert any(getattr(n.target, "_schema", None) is not None and "scaled_sin" in str(n.target)
               for n in be.graphs[-1].graph.nodes)


def test_gradients_through_a_custom_op_use_its_autograd_formula():
    def f(x):
        return scaled_sin(x, 3.0).sum()

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    before = eager_frames()
    for _ in range(2):
        x = torch.randn(4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        f(x).backward()
        cf(x2).backward()
        torch.testing.assert_close(x2.grad, x.grad)
    assert be.graph_count == 1 and eager_frames() == before


def test_a_mutating_custom_op_writes_its_argument_as_eager():
    def f(acc, x):
        add_into(acc, x * 2)
        return acc.sum()

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    before = eager_frames()
    for _ in range(2):
        acc, x = torch.zeros(3), torch.randn(3)
        acc2 = acc.clone()
        want = f(acc, x)
        got = cf(acc2, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(acc2, acc)
    assert be.graph_count == 1 and eager_frames() == before


def test_a_custom_op_without_a_fake_breaks_and_keeps_eager_values():
    def f(x):
        return no_fake(x * 2).sum() + 1

    cf = framejit.compile(f, backend="eager")
    before = eager_frames()
    for _ in range(2):
        x = torch.randn(6)
        torch.testing.assert_close(cf(x), f(x))
    assert eager_frames() == before
