"""`self.w = nn.Parameter(...)` registering a new parameter on a module from outside inside the graph
(NOTE [Parameters registered in the trace]).

The lazy-initialisation idiom `if not hasattr(self, "w"): self.w = nn.Parameter(torch.empty(...).fill_(...))` in
forward was a break at the store ("registering 'w' on a module inside the graph"), so fullgraph=True raised.
Differential: eager vs framejit on twin modules, 3 calls with fresh inputs, comparing values, gradients, the
registered parameters and their types; plus the cases that must still behave as eager (a name the class has,
a global registration hook added later, a walk over the written parameters).
"""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class LazyScale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        if not hasattr(self, "w"):
            with torch.no_grad():
                self.w = torch.nn.Parameter(torch.empty(x.shape[-1]).fill_(0.5))
        return (x * self.w + self.bias).sum()


class Counting(LazyScale):
    def forward(self, x):
        out = super().forward(x)
        return out, len(list(self.parameters())), sorted(n for n, _ in self.named_parameters())


def _twins(cls, **compile_kwargs):
    eager, compiled = cls(), cls()
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled, framejit.compile(compiled, **compile_kwargs)


def _check_registered_in_two_graphs(cls):
    """Eager vs compiled twins over 3 calls: the first call registers `w` in its graph, the rest reuse one graph."""
    backend = CountingBackend()
    eager, mod, compiled = _twins(cls, backend=backend, fullgraph=True)
    for _ in range(3):
        x = torch.randn(2, 3)
        e, c = eager(x), compiled(x)
        torch.testing.assert_close(c, e)
        e.backward()
        c.backward()
        assert type(mod.w) is torch.nn.Parameter and mod.w.is_leaf
        assert list(mod._parameters) == list(eager._parameters)
        for name, p in eager.named_parameters():
            torch.testing.assert_close(mod.get_parameter(name).grad, p.grad)
    assert backend.graph_count == 2  # the registering call, then the initialised module
    return mod


def test_a_parameter_created_on_the_first_call_is_registered_in_one_graph():
    assert list(_check_registered_in_two_graphs(LazyScale)._parameters) == ["bias", "w"]


def test_a_walk_after_the_registration_sees_it():
    eager, mod, compiled = _twins(Counting, backend="eager")
    for _ in range(3):
        x = torch.randn(4, 3)
        e, c = eager(x), compiled(x)
        torch.testing.assert_close(c[0], e[0])
        assert c[1:] == e[1:]


class Shadowed(torch.nn.Module):
    def w(self):
        return 1

    def forward(self, x):
        self.w = torch.nn.Parameter(torch.ones(2))
        return x + 1


def test_a_name_the_class_has_raises_as_eager():
    with pytest.raises(KeyError) as eager_error:
        Shadowed()(torch.ones(2))
    compiled = framejit.compile(Shadowed(), backend="eager")
    for _ in range(3):
        with pytest.raises(KeyError) as error:
            compiled(torch.ones(2))
        assert str(error.value) == str(eager_error.value)


def test_a_registration_hook_added_later_runs_as_in_eager():
    seen = []

    def hook(module, name, param):
        seen.append(name)
        return torch.nn.Parameter(param * 2)

    def run(m, x):
        return m(x)

    compiled = framejit.compile(run, backend="eager")
    x = torch.ones(2, 3)
    torch.testing.assert_close(compiled(LazyScale(), x), run(LazyScale(), x))
    handle = torch.nn.modules.module.register_module_parameter_registration_hook(hook)
    try:
        for _ in range(3):
            start = len(seen)
            e = run(LazyScale(), x)
            middle = len(seen)
            c = compiled(LazyScale(), x)
            torch.testing.assert_close(c, e)
            assert seen[middle:] == seen[start:middle] == ["bias", "w"]
    finally:
        handle.remove()


class Doubling(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        old = self.w
        self.w = torch.nn.Parameter(self.w.detach() * 2)
        return (x * self.w).sum() + old.sum()


def test_a_parameter_replaced_in_the_graph_is_the_one_later_reads_see():
    backend = CountingBackend()
    eager, mod, compiled = _twins(Doubling, backend=backend, fullgraph=True)
    for _ in range(3):
        before, eager_before = mod.w, eager.w
        x = torch.randn(2, 3)
        e, c = eager(x), compiled(x)
        torch.testing.assert_close(c, e)
        e.backward()
        c.backward()
        assert mod.w is not before and type(mod.w) is torch.nn.Parameter and list(mod._parameters) == ["w"]
        torch.testing.assert_close(mod.w, eager.w)
        torch.testing.assert_close(mod.w.grad, eager.w.grad)
        torch.testing.assert_close(before.grad, eager_before.grad)  # the old parameter's own use
    assert backend.graph_count == 1


class Registering(torch.nn.Module):
    def forward(self, x):
        if getattr(self, "w", None) is None:  # register_parameter tests `if param.grad_fn:`
            self.register_parameter("w", torch.nn.Parameter(torch.full((x.shape[-1],), 0.5)))
        return (x * self.w).sum()


def test_register_parameter_called_in_the_graph():
    assert list(_check_registered_in_two_graphs(Registering)._parameters) == ["w"]


def _by_node(x):
    y = x * 2
    if y.grad_fn:
        return y + 1
    return y - 1


def test_the_truth_of_a_results_grad_fn_follows_requires_grad():
    compiled = framejit.compile(_by_node, backend="eager", fullgraph=True)
    for requires_grad in (True, False, True):
        x = torch.randn(3, requires_grad=requires_grad)
        torch.testing.assert_close(compiled(x), _by_node(x))
