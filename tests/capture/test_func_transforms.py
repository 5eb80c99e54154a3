"""torch.func transforms captured as one graph node over their traced body (NOTE [Transform regions],
NOTE [vjp functions], NOTE [Effects a body undoes]; vmap: NOTE [vmap regions]).

Differential: eager vs compiled on fresh inputs, three calls with changing values and sizes, with a counting
backend. The capturable programs (tests/capture/func_programs.py, the per-sample-gradient and ensembling
tutorials among them) give one graph with no break, and no more graphs over the calls than stock
torch.compile compiles for them (STOCK_GRAPHS, measured by benchmarks/func_transforms.py with torch 2.13).
Before: every grad/grad_and_value/jacrev/jacfwd/hessian/jvp/vjp call broke inside functorch (values from
eager), and vmap broke on dict arguments and dict results. What cannot be captured breaks at the transform
call and gives eager's values, errors and Python effects.
"""
from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, jacrev, vjp, vmap

import framejit
from tests.capture.func_programs import NET, PROGRAMS
from tests.helpers import CountingBackend, assert_same, logged_breaks, run_differential

TRANSFORM_NODES = ("TransformCall", "VmapCall")

# graphs stock torch.compile (a counting backend) compiles over the three calls of run_differential below
STOCK_GRAPHS = {"grad_of_sum": 2, "grad_argnums_aux": 2, "grad_closure": 2, "grad_and_value_of": 2, "jacrev_of": 1,
                "jacfwd_of": 1, "hessian_of": 3, "vjp_of": 2, "jvp_of": 3, "vmap_of_grad": 2,
                "functional_call_of": 2, "per_sample_grads": 3, "jacrev_of_module": 2, "ensemble": 2}


def _transform_nodes(graphs) -> list:
    return [n for g in graphs for n in g.graph.nodes if type(n.target).__name__ in TRANSFORM_NODES]


@pytest.mark.parametrize("fn,make_args", PROGRAMS, ids=[fn.__name__ for fn, _ in PROGRAMS])
def test_a_transformed_call_is_captured_into_the_graph(fn, make_args):
    framejit.reset()
    backend = run_differential(fn, make_args, seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count <= STOCK_GRAPHS[fn.__name__]
    report = framejit.explain(fn)(*make_args(0))
    assert (report.graph_count, report.graph_break_count, report.eager_frames) == (1, 0, []), report.break_reasons
    if fn.__name__ != "functional_call_of":  # no transform: the module call is inlined
        assert _transform_nodes(report.graphs)
    assert torch._C._functorch.maybe_current_level() is None


SEEN: list = []


class _Box:
    pass


BOX = _Box()


def appends_to_outer_list(x):
    def loss(a):
        SEEN.append(1)
        return a.sin().sum()
    return grad(loss)(x) + 1


def stores_an_attribute(x):
    def loss(a):
        BOX.calls = getattr(BOX, "calls", 0) + 1
        return a.sin().sum()
    return grad(loss)(x) + 1


def prints(x):
    def loss(a):
        print("loss")
        return a.sin().sum()
    return grad(loss)(x) + 1


def reads_requires_grad(x):
    return grad(lambda a: a.sum() * (2 if a.requires_grad else 3))(x)


def non_scalar_output(x):
    return grad(lambda a: a.sin())(x)


def calls_item(x):
    return grad(lambda a: a.sum() * a.sum().item())(x)


def argnums_out_of_range(x):
    return grad(lambda a: a.sum(), argnums=3)(x)


def vjp_fn_returned(x):
    out, fn = vjp(lambda a: a.sin(), x)
    return out * 2, fn


def random_forward(x):
    out, fn = vjp(lambda a: a * torch.rand(a.shape), x)
    return out + fn(torch.ones_like(out))[0]


def written_between(x):
    buf = x * 1
    out, fn = vjp(lambda a: a * buf, x)
    buf.add_(1)
    return out + fn(torch.ones_like(out))[0]


def break_between(x):
    out, fn = vjp(lambda a: a.sin() * 3, x)
    print("break")
    return out + fn(torch.ones_like(out))[0]


class _Count:
    def __init__(self) -> None:
        self.n = 0


def counts_into_an_object_made_in_the_frame(x):
    # a chunked vmap runs the body once per chunk in eager: its store happens 4-6 times, once in a trace
    box = _Count()

    def per_row(a):
        box.n += 1
        return a * 2
    return vmap(per_row, chunk_size=1)(x), box.n


def draws_from_an_iterator_made_in_the_frame(x):
    # each chunk's run of the body draws the next scale in eager
    it = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])

    def per_row(a):
        return a * next(it)
    return vmap(per_row, chunk_size=1)(x), list(it)


def counts_in_a_nonlocal(x):
    k = 0

    def per_row(a):
        nonlocal k
        k += 1
        return a * k
    return vmap(per_row, chunk_size=1)(x), k


BROKEN = [counts_in_a_nonlocal, counts_into_an_object_made_in_the_frame, draws_from_an_iterator_made_in_the_frame, appends_to_outer_list, stores_an_attribute, prints, reads_requires_grad, non_scalar_output, calls_item,
          argnums_out_of_range, written_between, break_between]


@pytest.mark.parametrize("fn", BROKEN, ids=[fn.__name__ for fn in BROKEN])
def test_what_cannot_be_captured_breaks_at_the_transform_call(fn):
    framejit.reset()
    SEEN.clear()
    BOX.__dict__.clear()
    run_differential(fn, lambda s: (torch.randn(4 + s, 3),), fullgraph=False)  # values, errors, output
    assert len(SEEN) == (4 if fn is appends_to_outer_list else 0)  # once per call, eager and compiled alike
    assert BOX.__dict__.get("calls") == (4 if fn is stores_an_attribute else None)
    try:
        report = framejit.explain(fn)(torch.randn(4, 3))
    except Exception:  # noqa: BLE001 - eager's own error, raised at the break
        return
    assert report.graph_break_count >= 1
    assert not _transform_nodes(report.graphs)
    assert torch._C._functorch.maybe_current_level() is None


def test_a_vjp_whose_forward_draws_random_numbers_breaks():
    # vjp_fn would compute the forward again: other draws than eager's saved ones
    backend = CountingBackend()
    compiled = framejit.compile(random_forward, backend=backend)
    for seed in range(3):
        x = torch.randn(4 + seed, 3)
        torch.manual_seed(seed)
        expected, expected_next = random_forward(x), torch.rand(2)
        torch.manual_seed(seed)
        actual, actual_next = compiled(x), torch.rand(2)
        assert_same(actual, expected)
        assert torch.equal(actual_next, expected_next)
    assert not _transform_nodes(backend.graphs)


def _scaled_rows(x, it):
    return vmap(lambda a: a * next(it), chunk_size=1)(x)


def test_a_chunked_vmap_drawing_from_an_outside_iterator_breaks():
    compiled = framejit.compile(_scaled_rows, backend=CountingBackend())
    for seed in range(2):
        x = torch.randn(3 + seed, 2)
        expected_it, actual_it = iter(range(1, 9)), iter(range(1, 9))
        assert_same(compiled(x, actual_it), _scaled_rows(x, expected_it))
        assert list(actual_it) == list(expected_it)


def test_a_returned_vjp_fn_is_eagers():
    compiled = framejit.compile(vjp_fn_returned, backend=CountingBackend())
    for seed in range(2):
        x = torch.randn(3 + seed)
        (out, fn), (expected_out, expected_fn) = compiled(x), vjp_fn_returned(x)
        assert_same(out, expected_out)
        v = torch.randn(3 + seed)
        assert_same(fn(v), expected_fn(v))


def grad_in_no_grad(x):
    with torch.no_grad():
        g = grad(lambda a: a.sin().sum() * (2.0 if torch.is_grad_enabled() else 3.0))(x)
    return g, torch.is_grad_enabled()


def inner_no_grad(x):
    def loss(a):
        with torch.no_grad():
            c = a.cos()
        return (a * c).sum()
    return grad(loss)(x)


def body_undoes_its_append(x):
    def loss(a):
        SEEN.append(a)
        SEEN.pop()
        return a.exp().sum()
    return grad(loss)(x)


def vjp_with_aux_called_twice(x, y):
    out, fn, aux = vjp(lambda a, b: ((a * b).sin(), b.cos()), x, y, has_aux=True)
    ga, gb = fn(torch.ones_like(out))
    return out, aux, ga + gb, fn(out)[0]


def grad_keyword_argument(x, w):
    return grad(lambda a, *, scale: (a * scale).tanh().sum())(x, scale=w)


def jacrev_tuple_argnums(x, y):
    return jacrev(lambda a, b: a.sin() * b, argnums=(0, 1))(x, y)


def vmap_dict_in_dims(x, y):
    return vmap(lambda d: d["a"] * d["b"], in_dims=({"a": 0, "b": None},))({"a": x, "b": y})


def vmap_none_inside_tuple(x, y):
    return vmap(lambda p: p[0] + p[1], in_dims=((0, None),))((x, y))


def vmap_nested_results(x):
    return vmap(lambda a: {"s": a.sum(), "pair": (a * 2, [a.cos()])})(x)


def vmap_empty_batch(x, y):
    return vmap(lambda a, b: (a * 2 + b).sum(), in_dims=(1, None))(x, y) + 1


def vmap_empty_batch_in_place(x):
    return vmap(torch.Tensor.acos_)(x)


def jacrev_of_module_with_buffers(x):
    params = {k: v.detach() for k, v in NET.named_parameters()}
    return jacrev(lambda p, a: functional_call(NET, p, (a,)).sum(0), argnums=0)(params, x)


MORE = [
    (grad_in_no_grad, lambda s: (torch.randn(4 + s),)),
    (inner_no_grad, lambda s: (torch.randn(4 + s),)),
    (body_undoes_its_append, lambda s: (torch.randn(4 + s),)),
    (vjp_with_aux_called_twice, lambda s: (torch.randn(4 + s), torch.randn(4 + s))),
    (grad_keyword_argument, lambda s: (torch.randn(4 + s), torch.randn(4 + s))),
    (jacrev_tuple_argnums, lambda s: (torch.randn(3), torch.randn(3))),
    (vmap_dict_in_dims, lambda s: (torch.randn(4 + s, 3), torch.randn(3))),
    (vmap_none_inside_tuple, lambda s: (torch.randn(4 + s, 3), torch.randn(3))),
    (vmap_nested_results, lambda s: (torch.randn(4 + s, 3),)),
    (jacrev_of_module_with_buffers, lambda s: (torch.randn(2 + s, 3),)),
    (vmap_empty_batch, lambda s: (torch.randn(3, 0, 2), torch.randn(3, 2))),
    (vmap_empty_batch_in_place, lambda s: (torch.rand(0, 2),)),
]


@pytest.mark.parametrize("fn,make_args", MORE, ids=[fn.__name__ for fn, _ in MORE])
def test_more_transformed_calls_are_captured(fn, make_args):
    framejit.reset()
    SEEN.clear()
    backend = run_differential(fn, make_args, seeds=(0, 1, 2), fullgraph=True)
    assert 1 <= backend.graph_count <= 2  # a second size may recompile (automatic dynamic), never a break
    assert SEEN == []
    report = framejit.explain(fn)(*make_args(0))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    assert _transform_nodes(report.graphs)


def _loss(w, x):
    return (x @ w).tanh().sum()


def _gradient_step(w, x):
    return w - 0.1 * grad(_loss)(w, x)


def test_gradients_flow_through_a_captured_grad():
    # the transform's result is differentiable outside (a meta-learning step), as in eager
    backend = CountingBackend()
    compiled = framejit.compile(_gradient_step, backend=backend, fullgraph=True)
    for seed in range(2):
        w, x = torch.randn(3, 2, requires_grad=True), torch.randn(4 + seed, 3)
        w2 = w.detach().clone().requires_grad_()
        _loss(_gradient_step(w, x), x).backward()
        _loss(compiled(w2, x), x).backward()
        assert_same(w2.grad, w.grad)
    assert backend.graph_count <= 2 and _transform_nodes(backend.graphs)


def _sin_sum(a):
    return a.sin().sum()


MADE_OUTSIDE = {  # transformed functions made before the compiled call and passed in
    "grad": (grad(_sin_sum), True),
    "vmap_of_grad": (vmap(grad(_sin_sum)), True),
    "jacrev": (jacrev(torch.sin), False),
    "jacfwd": (torch.func.jacfwd(torch.sin), False),
    "hessian": (torch.func.hessian(_sin_sum), False),
}


def _call_given(f, x):
    return f(x) * 2


@pytest.mark.parametrize("name", list(MADE_OUTSIDE))
def test_a_transform_made_outside_is_captured_or_breaks_once(name):
    # grad and vmap made outside are inlined to their captured calls; jacrev/jacfwd wrappers made outside
    # hold functorch's own closure: one break at the call, which runs as Python (before: a dozen breaks
    # while functorch's internals were traced, and functorch levels pushed at trace time)
    f, captured = MADE_OUTSIDE[name]
    framejit.reset()
    backend = CountingBackend()
    compiled = framejit.compile(_call_given, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    with logged_breaks() as breaks:
        for seed in range(3):
            x = torch.randn(3, 2 + seed) if name == "vmap_of_grad" else torch.randn(3 + seed)
            assert_same(compiled(f, x), _call_given(f, x))
            assert torch._C._functorch.maybe_current_level() is None
    assert bool(_transform_nodes(backend.graphs)) == captured
    # one break per trace (the second size retraces), at the call, for functorch's closure
    assert (len(breaks) == 0) if captured else (1 <= len(breaks) <= 2), breaks
    assert all("holds functorch's transform state" in b for b in breaks), breaks
    assert framejit.stats()["eager_frames"] == eager_before


def per_sample_step(x, t):
    # per-sample gradients, then a walk over the module's parameters: functional_call's swap of
    # `_parameters` inside the transform is undone, so the walk reads them as ever (NOTE [Effects a body undoes])
    params = {k: v.detach() for k, v in NET.named_parameters()}

    def loss(p, a, b):
        return torch.nn.functional.cross_entropy(functional_call(NET, p, (a.unsqueeze(0),)), b.unsqueeze(0))
    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, t)
    return [p - 0.1 * g.mean(0) for p, g in zip(NET.parameters(), grads.values())]


def test_a_module_walk_after_a_transformed_functional_call_is_captured():
    framejit.reset()
    backend = run_differential(per_sample_step, lambda s: (torch.randn(4 + s, 3), torch.randint(0, 2, (4 + s,))),
                               seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count <= 3  # stock torch.compile: 3 (the batch size specialises in vmap)
    report = framejit.explain(per_sample_step)(torch.randn(4, 3), torch.randint(0, 2, (4,)))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
