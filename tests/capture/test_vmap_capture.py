"""`torch.vmap` captured as one graph node over its traced body (NOTE [vmap regions], NOTE [functorch state]).

Differential: eager vs compiled on fresh inputs, two or more calls with changing values (and shapes where the
program allows), with a counting backend. Capturable programs give 1 graph per entry and 0 breaks; the
others break at the vmap call and give eager's values, errors and Python effects. Before: every vmap call
broke inside functorch (vmap_impl) and its value came from eager; a traced torch.func.grad left a functorch
level pushed in the process.
"""
from __future__ import annotations

import functorch
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential

W = torch.randn(3)


def lambda_with_none_dim(x, y):
    return torch.vmap(lambda a, b: (a * b).sin() + 1, in_dims=(0, None))(x, y) * 2


def closure_over_outer_tensor(x):
    w = W * 2

    def per_row(a):
        return (a * w).sum()
    return torch.vmap(per_row)(x) + 1


def torch_function(x):
    return torch.vmap(torch.sum)(x) * 2


def other_dims(x):
    return torch.vmap(lambda a: a.cos() * 2, in_dims=1, out_dims=1)(x)


def tuple_outputs(x, y):
    c, d = torch.vmap(lambda a, b: (a + b, a * b))(x, y)
    return c - d


def list_outputs(x):
    return torch.vmap(lambda a: [a + 1, a * 2])(x)


def nested(x, y):
    return torch.vmap(torch.vmap(lambda a, b: a * b, in_dims=(0, None)), in_dims=(None, 0))(x, y)


def chunked(x):
    return torch.vmap(lambda a: a.exp().sum(), chunk_size=2)(x)


def tuple_argument(x, y):
    return torch.vmap(lambda p: p[0] * p[1])((x, y))


def keyword_argument(x, s):
    return torch.vmap(lambda a, scale=1.0: a * scale)(x, scale=s)


def in_place_method(x):
    y = torch.vmap(torch.Tensor.acos_)(x)
    return y is x, y + 1


def func_vmap_of_dot(x):
    return torch.func.vmap(torch.dot, in_dims=(0, 0))(x, x)


def deprecated_functorch_vmap(x):
    return functorch.vmap(torch.sum)(x) + 1


def sample_sizes(x):
    return torch.vmap(lambda a: a.view(a.shape[0] * 3))(x)


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return torch.vmap(self.lin)(x).relu()


LAYER = Layer()


def module_method(x):
    return LAYER(x)


CAPTURED = [
    (lambda_with_none_dim, lambda s: (torch.randn(4 + s, 3), torch.randn(3))),
    (closure_over_outer_tensor, lambda s: (torch.randn(4, 3),)),
    (torch_function, lambda s: (torch.randn(4 + s, 3),)),
    (other_dims, lambda s: (torch.randn(3, 4),)),
    (tuple_outputs, lambda s: (torch.randn(4, 3), torch.randn(4, 3))),
    (list_outputs, lambda s: (torch.randn(4, 3),)),
    (nested, lambda s: (torch.randn(3), torch.randn(5 + s))),
    (chunked, lambda s: (torch.randn(5, 3),)),
    (tuple_argument, lambda s: (torch.randn(4, 3), torch.randn(4, 3))),
    (keyword_argument, lambda s: (torch.randn(4, 3), torch.randn(3))),
    (in_place_method, lambda s: (torch.rand(4, 2 + s),)),
    (func_vmap_of_dot, lambda s: (torch.randn(4, 3),)),
    (deprecated_functorch_vmap, lambda s: (torch.randn(3 + s, 2),)),
    (sample_sizes, lambda s: (torch.randn(4, 2, 3),)),
    (module_method, lambda s: (torch.randn(4, 3),)),
]


def _one_graph_no_break(fn, args) -> None:
    report = framejit.explain(fn)(*args)
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    assert any(type(n.target).__name__ == "VmapCall" for g in report.graphs for n in g.graph.nodes)


@pytest.mark.parametrize("fn,make_args", CAPTURED, ids=[fn.__name__ for fn, _ in CAPTURED])
def test_a_vmap_call_is_captured_into_the_graph(fn, make_args):
    framejit.reset()
    backend = run_differential(fn, make_args, seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count <= 2  # a second shape may recompile (automatic dynamic), never a break
    _one_graph_no_break(fn, make_args(0))


def _random_rows(x, mode):
    return torch.vmap(lambda a: a + torch.rand(3), randomness=mode)(x) * 2


@pytest.mark.parametrize("mode", ["different", "same"])
def test_randomness_modes_draw_what_eager_draws(mode):
    backend = CountingBackend()
    compiled = framejit.compile(_random_rows, backend=backend, fullgraph=True)
    for seed in range(3):
        x = torch.randn(4 + seed, 3)
        torch.manual_seed(seed)
        expected, expected_next = _random_rows(x, mode), torch.rand(2)
        torch.manual_seed(seed)
        actual, actual_next = compiled(x, mode), torch.rand(2)
        assert_same(actual, expected)
        assert torch.equal(actual_next, expected_next)  # the generator advanced as in eager
    assert 1 <= backend.graph_count <= 2


def _weighted(x, w):
    return torch.vmap(lambda a: (a * w).tanh().sum())(x).sum()


def test_gradients_flow_through_a_captured_vmap():
    backend = CountingBackend()
    compiled = framejit.compile(_weighted, backend=backend, fullgraph=True)
    for _ in range(2):
        x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        _weighted(x, w).backward()
        compiled(x2, w2).backward()
        assert_same(x2.grad, x.grad)
        assert_same(w2.grad, w.grad)
    assert backend.graph_count == 1


def _call_given(x, f):
    return f(x) + 1


def test_a_vmapped_function_given_as_an_argument_is_guarded():
    backend = CountingBackend()
    compiled = framejit.compile(_call_given, backend=backend)
    for f in (torch.vmap(torch.sum), torch.vmap(torch.amax), torch.vmap(torch.sum), torch.vmap(lambda a: a.max())):
        x = torch.randn(5, 3)
        assert_same(compiled(x, f), _call_given(x, f))
    assert backend.graphs and all(any(type(n.target).__name__ == "VmapCall" for n in g.graph.nodes)
                                  for g in backend.graphs)


def _scaled_by(k):
    def per_row(a):
        return a * k
    return per_row


def _vmap_given(x, f):
    return torch.vmap(f)(x)


def test_the_closure_cells_of_the_body_are_guarded():
    compiled = framejit.compile(_vmap_given, backend=CountingBackend())
    for k in (2.0, 3.0, 2.0):
        x = torch.randn(5, 3)
        assert_same(compiled(x, _scaled_by(k)), _vmap_given(x, _scaled_by(k)))


SEEN: list = []


class _Box:
    pass


BOX = _Box()


def appends_to_outer_list(x):
    def per_row(a):
        SEEN.append(1)
        return a * 2
    return torch.vmap(per_row)(x) + 1


def stores_an_attribute(x):
    def per_row(a):
        BOX.calls = getattr(BOX, "calls", 0) + 1
        return a * 2
    return torch.vmap(per_row)(x) + 1


def prints(x):
    def per_row(a):
        print("row")
        return a * 2
    return torch.vmap(per_row)(x) + 1


def data_dependent(x):
    return torch.vmap(lambda a: a * 2 if a.sum() > 0 else a)(x) + 1


def random_in_error_mode(x):
    return torch.vmap(lambda a: a + torch.rand(3))(x) + 1


def asks_functorch(x):
    return torch.vmap(lambda a: a * 2 if torch._C._functorch.is_batchedtensor(a) else a)(x) + 1


def reads_requires_grad(x):
    return torch.vmap(lambda a: a * 2 if a.requires_grad else a * 3)(x)


def returns_an_int(x):
    return torch.vmap(lambda a: 3)(x)


def calls_item(x):
    return torch.vmap(lambda a: a * a.sum().item())(x)


def switches_grad_mode(x):
    def per_row(a):
        with torch.no_grad():
            return a * 2
    return torch.vmap(per_row)(x)


def sizes_differ(x, y):
    return torch.vmap(lambda a, b: a + b)(x, y)


BROKEN = [
    (appends_to_outer_list, lambda s: (torch.randn(4, 3),)),
    (stores_an_attribute, lambda s: (torch.randn(4, 3),)),
    (prints, lambda s: (torch.randn(4, 3),)),
    (data_dependent, lambda s: (torch.randn(4, 3),)),
    (random_in_error_mode, lambda s: (torch.randn(4, 3),)),
    (asks_functorch, lambda s: (torch.randn(4, 3),)),
    (reads_requires_grad, lambda s: (torch.randn(4, 3, requires_grad=True),)),
    (returns_an_int, lambda s: (torch.randn(4, 3),)),
    (calls_item, lambda s: (torch.randn(4, 3),)),
    (switches_grad_mode, lambda s: (torch.randn(4, 3, requires_grad=True),)),
    (sizes_differ, lambda s: (torch.randn(4, 3), torch.randn(5, 3))),
]


@pytest.mark.parametrize("fn,make_args", BROKEN, ids=[fn.__name__ for fn, _ in BROKEN])
def test_what_cannot_be_captured_breaks_at_the_vmap_call(fn, make_args):
    framejit.reset()
    SEEN.clear()
    BOX.__dict__.clear()
    run_differential(fn, make_args, fullgraph=False)  # values, errors, printed output, argument state
    # the body's Python effects happen once per vmap call, eager and compiled alike (2 calls x 2 runs)
    assert len(SEEN) == (4 if fn is appends_to_outer_list else 0)
    assert BOX.__dict__.get("calls") == (4 if fn is stores_an_attribute else None)
    try:
        report = framejit.explain(fn)(*make_args(0))
    except Exception:  # noqa: BLE001 - eager's own error, raised at the break
        return
    assert report.graph_break_count >= 1
    assert not any(type(n.target).__name__ == "VmapCall" for g in report.graphs for n in g.graph.nodes)


def _grad_then_more(x):
    return torch.func.grad(lambda a: a.sin().sum())(x) + 1


def test_a_traced_func_grad_leaves_no_functorch_level_behind():
    # before: the trace ran torch._C._functorch._grad_increment_nesting for real and then broke, so every
    # later tensor of the process was a GradTrackingTensor
    backend = CountingBackend()
    compiled = framejit.compile(_grad_then_more, backend=backend)
    for seed in range(2):
        x = torch.randn(3 + seed)
        assert_same(compiled(x), _grad_then_more(x))
        assert torch._C._functorch.maybe_current_level() is None
        assert type(torch.ones(2) * 2) is torch.Tensor and not torch._C._functorch.is_functorch_wrapped_tensor(
            torch.ones(2) * 2)
