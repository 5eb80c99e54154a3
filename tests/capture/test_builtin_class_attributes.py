"""A builtin function stored as a class attribute (`act = torch.relu`, `m = abs`, `out = print`) is not
bound to the instance: CPython binds only objects with __get__, so `self.act(t)` is `torch.relu(t)`."""
import math

import torch

import framejit
from tests.helpers import CountingBackend


class _Holder:
    m = abs


class _Block(torch.nn.Module):
    act = torch.relu
    size = len
    root = math.sqrt

    def forward(self, t):
        return self.act(t - 2) * self.root(4.0), self.size([1, 2, 3])


def _add_m(x, o):
    return x + o.m(-3)


def test_builtin_class_attribute_is_not_bound():
    compiled = framejit.compile(_add_m, backend="eager")
    for n in (2, 3, 5):
        x = torch.randn(n)
        assert torch.equal(compiled(x, _Holder()), _add_m(x, _Holder()))


def test_module_class_attribute_torch_function_in_one_graph():
    block, counter = _Block(), CountingBackend()
    compiled = framejit.compile(block, backend=counter, fullgraph=True)
    for n in (2, 3, 4):
        x = torch.randn(n) * 4
        (got, got_len), (want, want_len) = compiled(x), block(x)
        assert torch.equal(got, want) and got_len == want_len == 3
    targets = {n.target for gm in counter.graphs for n in gm.graph.nodes}
    assert counter.graph_count in (1, 2) and torch.relu in targets


def test_class_attribute_replaced_by_builtin_between_calls():
    class Swap:
        m = lambda self, v: v * 100  # noqa: E731  (a function: bound)

    compiled = framejit.compile(_add_m, backend="eager")
    x = torch.ones(2)
    assert torch.equal(compiled(x, Swap()), _add_m(x, Swap()))
    Swap.m = abs  # a builtin: not bound
    assert torch.equal(compiled(x, Swap()), x + 3)
    assert torch.equal(_add_m(x, Swap()), x + 3)


def test_print_as_class_attribute_prints_only_its_argument(capsys):
    class Log:
        out = print

    def f(x, o):
        o.out("step", 1)
        return x * 2

    compiled = framejit.compile(f, backend="eager")
    for n in (2, 3):
        x = torch.randn(n)
        assert torch.equal(compiled(x, Log()), f(x, Log()))
    assert capsys.readouterr().out == "step 1\n" * 4
