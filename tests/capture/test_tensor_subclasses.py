"""Tensor subclasses (NOTE [Tensor subclasses traced as tensors] in framejit/capture/tensor_subclasses.py).

Differential: every function runs eagerly and compiled on fresh inputs made the same way (subclass tensors keep
their Python attributes, which a clone would drop), comparing values, the exact `type()` of every tensor, the
tensors' own attributes, identities eager establishes (`x.add_(1) is x`) and what a `__torch_function__`
records. A subclass with torch's own __torch_function__ is captured like a plain tensor (one graph, as stock
torch.compile makes); one with its own __torch_function__ or a __torch_dispatch__ breaks at each op on it,
never making the whole frame eager.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames, logged_breaks, manual_seed


class Plain(torch.Tensor):
    pass


class Other(torch.Tensor):
    pass


class Derived(Plain):
    pass


class Tagged(torch.Tensor):
    unit = 2.0

    def scaled(self, k):
        return self * k + self.shift()

    def shift(self):
        return torch.ones_like(self) * self.unit

    @property
    def doubled(self):
        return self * 2


class NoTorchFunction(torch.Tensor):
    __torch_function__ = torch._C._disabled_torch_function_impl


class Logged(torch.Tensor):
    log: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.log.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs or {})


def make(cls, *shape, **attrs):
    t = torch.randn(*shape)
    t = t if cls is torch.Tensor else t.as_subclass(cls)
    for name, value in attrs.items():
        setattr(t, name, value)
    return t


def same(actual, expected):
    """Values, exact types and the tensors' own Python attributes, recursively."""
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        assert actual.requires_grad == expected.requires_grad
        assert (actual.grad_fn is None) == (expected.grad_fn is None)
        same(vars(actual), vars(expected))
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            same(actual[k], expected[k])
    else:
        assert actual == expected


def differential(fn, make_args, calls, backend=None, state=None):
    """Runs fn eagerly and compiled on the inputs make_args(i) makes (twice, the same values) for each i;
    compares results, the inputs after the call and `state()`. Returns the counting backend."""
    backend = backend or CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for i in calls:
        outcomes = []
        for f in (fn, compiled):
            manual_seed(i)
            args = make_args(i)
            try:
                result = f(*args)
            except Exception as e:  # noqa: BLE001 - the exception type is compared
                result = e
            outcomes.append((result, args, state() if state else None))
        (expected, eager_args, eager_state), (actual, compiled_args, compiled_state) = outcomes
        if isinstance(expected, Exception):
            assert type(actual) is type(expected), actual
        else:
            same(actual, expected)
        same(list(compiled_args), list(eager_args))
        assert compiled_state == eager_state
    return backend


def test_plain_subclass_is_one_graph_with_eager_result_types():
    # before: Unsupported("tensor subclass Plain") at the first read of x: 0 graphs, the frame ran eagerly
    def f(x, y):
        a = x * 2 + y
        return a, torch.sin(a).sum(), y * 3, {"r": x.relu(), "t": (x[0], x.shape, type(x).__name__)}

    before = eager_frames()
    backend = differential(f, lambda i: (make(Plain, 3 + i // 2, 4), torch.randn(3 + i // 2, 4)), range(4))
    assert backend.graph_count == 2  # sizes 3 then 4: static, then one dynamic graph, as for plain tensors
    assert eager_frames() == before
    explained = framejit.explain(f)(make(Plain, 3, 4), torch.randn(3, 4))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_graph_count_matches_stock_torch_compile():
    def f(x, y):
        return (x @ y.T).relu().sum(1), x * 2

    class Count:
        graphs = 0

        def __call__(self, gm, example_inputs):
            Count.graphs += 1
            return gm.forward

    torch._dynamo.reset()
    stock = torch.compile(f, backend=Count())
    expected = stock(make(Plain, 3, 4), torch.randn(5, 4))
    backend = CountingBackend()
    actual = framejit.compile(f, backend=backend)(make(Plain, 3, 4), torch.randn(5, 4))
    assert backend.graph_count == Count.graphs == 1
    assert [type(t) for t in actual] == [type(t) for t in expected] == [Plain, Plain]


def test_mixed_and_changing_classes_between_calls():
    pairs = [(Plain, torch.Tensor), (torch.Tensor, Plain), (Other, Plain), (Derived, Plain), (Plain, Derived),
             (torch.Tensor, torch.Tensor), (Plain, torch.Tensor)]

    def f(x, y):
        return x * y + 1, torch.stack([x, y]), (x + y).sum(), x.new_zeros(2), torch.zeros_like(y)

    backend = differential(f, lambda i: (make(pairs[i][0], 3), make(pairs[i][1], 3)), range(len(pairs)))
    # one per distinct pair of classes, the last pair reusing the first graph; none for (Other, Plain), where
    # eager raises TypeError (unrelated subclasses) at the first op
    assert backend.graph_count == 5


def test_unrelated_subclasses_raise_type_error_as_eager():
    def f(x, y):
        z = x.sin()
        return z + y

    with logged_breaks() as breaks:
        differential(f, lambda i: (make(Plain, 3), make(Other, 3)), range(2))
    assert any("unrelated tensor subclasses" in b for b in breaks)


def test_attributes_methods_and_properties_of_the_subclass():
    def f(x):
        return x.scaled(3) + (x.tag * x).sum(), x.doubled, x.tag, hasattr(x, "missing")

    backend = differential(f, lambda i: (make(Tagged, 4, tag=float(i % 2)),), range(4))
    assert backend.graph_count == 2  # one per tag value
    explained = framejit.explain(f)(make(Tagged, 4, tag=1.0))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_class_attribute_and_method_changed_after_compiling():
    x = make(Tagged, 4, tag=1.0)

    def f(x):
        return x.scaled(2)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    same(compiled(x), f(x))
    assert backend.graph_count == 1
    original = Tagged.__dict__["scaled"]
    Tagged.unit = 5.0
    try:
        same(compiled(x), f(x))
        Tagged.scaled = lambda self, k: self - k
        same(compiled(x), f(x))
    finally:
        Tagged.unit = 2.0
        Tagged.scaled = original
    same(compiled(x), f(x))
    assert backend.graph_count == 3  # the class constant and the method changed: one graph each


def test_disabled_torch_function_gives_plain_results():
    def f(x, y):
        return x * 2 + y, x.T, torch.cat([x, y]), x

    backend = differential(f, lambda i: (make(NoTorchFunction, 3, 2, tag=i), torch.randn(3, 2)), range(2))
    assert backend.graph_count == 1


def test_in_place_ops_return_the_same_object_with_its_attributes():
    def f(x, y):
        r = x.add_(y)
        x[0] = 5.0
        z = x.mul_(2)
        return r, z, r is x, z is x, x

    backend = differential(f, lambda i: (make(Plain, 4 + i, tag=i), torch.randn(4 + i)), range(3))
    assert backend.graph_count == 2

    def g(x, y):  # a Derived operand wins: eager re-wraps x's result as a new Derived object
        r = x.add_(y)
        return r, r is x, type(r).__name__

    differential(g, lambda i: (make(Plain, 3, tag=1), make(Derived, 3)), range(2))


def test_as_subclass_inside_the_function():
    def f(x):
        y = x.as_subclass(torch.Tensor) * 2
        z = (y + 1).as_subclass(Plain)
        return y, z, z * y, y is x

    backend = differential(f, lambda i: (make(Plain, 3),), range(2))
    assert backend.graph_count == 1


def test_subclass_buffer_of_a_module():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.ones(3).as_subclass(Plain))
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) + self.b, self.b * 2

    manual_seed(0)
    m = M()
    before = eager_frames()
    backend = CountingBackend()
    compiled = framejit.compile(m, backend=backend)
    for i in range(3):
        x = torch.randn(2, 3)
        same(compiled(x), m(x))
        m.b.add_(i)
    assert backend.graph_count == 1 and eager_frames() == before
    assert backend.op_count(0) == 3  # linear, add, mul: the buffer's ops in the one graph
    m.b = torch.zeros(3)  # a plain buffer now: recompiled, plain results
    x = torch.randn(2, 3)
    same(compiled(x), m(x))


def test_outputs_in_containers_and_across_a_break():
    def f(x, log):
        a = x * 2
        log.append(type(a).__name__)
        print("", end="")  # a graph break with a and x live
        b = a + x
        return {"a": a, "b": (b, [x, a])}, a is a

    backend = differential(f, lambda i: (make(Plain, 3 + i, tag="t"), []), range(3))
    assert backend.graph_count >= 2  # before and after the break


def test_gradients_through_a_subclass():
    def f(x, w):
        return (x * w).sum(), x * w

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for n in (3, 3, 4):
        grads = []
        for fn in (f, compiled):
            manual_seed(n)
            x = make(Plain, n).requires_grad_()
            w = torch.randn(n, requires_grad=True)
            out = fn(x, w)
            out[0].backward()
            grads.append((out, x.grad, w.grad))
        same(grads[1], grads[0])
    assert backend.graph_count == 2


def test_custom_torch_function_breaks_at_each_op_and_replays_its_calls():
    # before: the whole frame ran eagerly (0 graphs); now the ops on y are captured, each op on x is a break
    def f(x, y):
        a = y * 2 + 1
        b = x * 2
        return b + a, a.sum(), x.shape

    before = eager_frames()
    with logged_breaks() as breaks:
        backend = differential(f, lambda i: (Logged.log.clear(), make(Logged, 3 + i % 2), torch.randn(3 + i % 2))[1:],
                               range(3), state=lambda: list(Logged.log))
    assert eager_frames() == before
    assert backend.graph_count >= 1
    assert breaks and all("Logged has its own __torch_function__" in b for b in breaks)


def test_torch_function_assigned_after_compiling_recompiles_and_runs():
    calls = []

    class Late(torch.Tensor):
        pass

    def f(x):
        return x * 2 + 1

    x = make(Late, 3)
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    same(compiled(x), f(x))
    assert backend.graph_count == 1

    def tf(cls, func, types, args=(), kwargs=None):
        calls.append(func.__name__)
        return torch.Tensor.__torch_function__.__func__(cls, func, types, args, kwargs or {})

    Late.__torch_function__ = classmethod(tf)
    expected = f(x)
    eager_calls = list(calls)
    calls.clear()
    actual = compiled(x)
    compiled_calls = list(calls)
    same(actual, expected)
    assert compiled_calls == eager_calls == ["mul", "add"]


def test_torch_dispatch_subclass_breaks_at_the_op():
    from torch.testing._internal.two_tensor import TwoTensor

    def f(x, y):
        return x * 2, y + 1

    before = eager_frames()
    with logged_breaks() as breaks:
        backend = differential(f, lambda i: (TwoTensor(torch.randn(3), torch.randn(3)), torch.randn(3)), range(2))
    assert eager_frames() == before and backend.graph_count == 1
    assert any("defines __torch_dispatch__" in b for b in breaks)


def test_called_under_no_grad_with_grad_enabled_inside():
    # the graph gets plain aliases of subclass inputs: made under no_grad they lost requires_grad and the
    # autograd link, so `y` did not require grad where eager's does; and the requires_grad guard read the alias
    def f(x):
        with torch.enable_grad():
            y = x * 2
        return y, y.requires_grad

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for mode in (torch.no_grad, torch.no_grad, torch.enable_grad, torch.no_grad):
        results = []
        for fn in (f, compiled):
            manual_seed(0)
            x = make(Plain, 3).requires_grad_()
            with mode():
                out = fn(x)
            out[0].sum().backward()
            results.append((out, x.grad))
        same(results[1], results[0])
    assert backend.graph_count == 2  # one per grad mode at the call
