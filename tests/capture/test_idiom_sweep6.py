"""Idioms from the sixth side-by-side sweep of framejit against stock torch.compile (issue 11, helper
h11mod2): library idioms that were a graph break (or more graphs than stock) at this point.

Each program runs eagerly and compiled over several calls with inputs or state changed between them, and
asserts equal values, the graph and break counts where that is the point, and that no frame ran wholly
eagerly. Stock torch.compile's counts, measured on the same programs (torch 2.13): noted per test.
"""
from __future__ import annotations

import collections
import functools
import re
import typing

import pytest
import torch
from torch.utils.hooks import RemovableHandle

import framejit
from tests.helpers import CountingBackend, assert_same, logged_breaks, eager_frames


def _norm(v):
    """Deques compared by type, maxlen and items (assert_same compares other values as ==)."""
    if isinstance(v, collections.deque):
        return ("deque", v.maxlen, [_norm(i) for i in v])
    if type(v) in (list, tuple):
        return type(v)(_norm(i) for i in v)
    if type(v) is dict:
        return {k: _norm(i) for k, i in v.items()}
    return v


def _run(f, make_args, calls=3, backend=None):
    """Runs f eagerly and compiled on the same fresh arguments; returns (backend, break records)."""
    backend = backend or CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    with logged_breaks() as records:
        for i in range(calls):
            torch.manual_seed(i)
            expected = f(*make_args(i))
            torch.manual_seed(i)
            assert_same(_norm(compiled(*make_args(i))), _norm(expected))
    assert eager_frames() == eager_before
    return backend, list(records)


# ---- vars(obj): NOTE [vars() is a read of __dict__] (stdlib.py) --------------------------------------------
class _VarsConfig:
    def __init__(self, **kw):
        vars(self).update(kw)
        for k, v in kw.items():
            vars(self)[k + "_x2"] = v * 2


def test_vars_of_an_object_made_in_the_trace_is_its_dict():
    def f(x, k):
        c = _VarsConfig(a=k, b=3)
        return x * c.a + c.b_x2, sorted(vars(c))

    backend, records = _run(f, lambda i: (torch.randn(3), i + 1))
    assert records == []  # stock: 1 graph per k; before: a break at vars() (call of builtins.vars)


def test_vars_errors_and_reads_as_eager():
    class Slotted:
        __slots__ = ("a",)

    def f(x, m):
        try:
            vars(Slotted())
        except TypeError as e:
            msg = str(e)
        try:
            vars(1, 2)
        except TypeError as e:
            msg2 = str(e)
        return x * len(vars(m)["_modules"]), msg, msg2, "a" in vars(_VarsConfig)

    _run(f, lambda i: (torch.randn(2), torch.nn.Sequential(*[torch.nn.ReLU()] * (i + 1))))


# ---- deque(maxlen=n): NOTE [Deques with a maxlen] (mappings.py) --------------------------------------------
def test_deque_with_a_maxlen_is_a_sliding_window():
    def f(x):
        window = collections.deque(maxlen=2)
        for i in range(4):
            window.append(x * i)
        window.rotate(1)
        return sum(window), len(window), window.maxlen

    backend, records = _run(f, lambda i: (torch.randn(3),))
    assert records == [] and backend.graph_count == 1  # stock: 1; before: 4 graphs, a break per append


def test_deque_with_a_maxlen_methods_match_eager():
    def f(x):
        q = collections.deque([1, 2, 3], 3)
        q.appendleft(0)
        q.extend([7, 8])
        q.extendleft([9])
        c = q.copy()
        c.append(5)
        try:
            q.insert(0, 4)
        except IndexError as e:
            msg = str(e)
        z = collections.deque(range(3), maxlen=0)
        z.append(1)
        t = collections.deque([x, x + 1], maxlen=1)
        t.extend(t)
        return x * sum(q), list(q), c, msg, z, t, q

    _, records = _run(f, lambda i: (torch.randn(3),))
    assert records == []


def test_deque_maxlen_errors_and_operators():
    def f(x, m):
        try:
            collections.deque([], m)
        except ValueError as e:
            return x + 1, str(e)
        q = collections.deque([x], maxlen=2)
        q += [x * 3, x * 4]  # a break (operators on a bounded deque), right values
        return q

    _run(f, lambda i: (torch.randn(3), -1 if i % 2 else 2), calls=4)


# ---- functools.singledispatch: NOTE [singledispatch answered at trace time] (cached_calls.py) -------------
@functools.singledispatch
def _scale(a, x):
    return x


@_scale.register
def _(a: int, x):
    return x + a


@_scale.register
def _(a: float, x):
    return x * a


@_scale.register(str)
def _(a, x):
    return x - len(a)


def test_singledispatch_calls_dispatch_at_trace_time():
    def f(x):
        return _scale(1, x) + _scale(2.0, x) + _scale("abc", x) + _scale(None, x) + _scale(True, x)

    backend, records = _run(f, lambda i: (torch.randn(3),))
    assert records == [] and backend.graph_count == 1  # stock: 1 graph per call shape; before: 2 graphs, 13 breaks


def test_singledispatch_registrations_after_the_first_call_are_seen():
    @functools.singledispatch
    def g(a, x):
        return x * 2

    def f(x):
        return g(1, x)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    x = torch.ones(2)
    results = [compiled(x)]
    g.register(int, lambda a, x: x * 10)
    results.append(compiled(x))
    g.register(bool, lambda a, x: x * 99)  # does not change what int dispatches to: no retrace
    results.append(compiled(x))
    g.register(int, lambda a, x: x * 7)
    results.append(compiled(x))
    assert [r[0].item() for r in results] == [2.0, 10.0, 10.0, 7.0]
    assert backend.graph_count == 3


def test_singledispatch_on_abc_registration_and_methods():
    import abc

    class Base(abc.ABC):
        pass

    class Plain:
        pass

    @functools.singledispatch
    def h(a, x):
        return x + 1

    @h.register(Base)
    def _(a, x):
        return x * 5

    class Sd:
        @functools.singledispatchmethod
        def m(self, a, x):
            return x

        @m.register(int)
        def _(self, a, x):
            return x + a

    def f(x, p):
        return h(p, x) + Sd().m(3, x) + Sd().m("q", x)

    compiled = framejit.compile(f, backend=CountingBackend())
    p = Plain()
    assert_same(compiled(torch.ones(2), p), f(torch.ones(2), p))
    Base.register(Plain)  # the ABC registration changes what Plain dispatches to
    assert_same(compiled(torch.ones(2), p), f(torch.ones(2), p))


# ---- re.sub with a function, finditer: NOTE [Regular expressions with Python callbacks] (regex_calls.py) -----
def test_re_sub_with_a_function_on_constant_strings():
    def f(x):
        s = re.sub(r"\d", lambda m: str(int(m.group()) * 2), "a1b2")
        t, n = re.subn(r"[ab]", lambda m: m.group().upper(), "abc")

        def rep(m):
            return None if m.group() == "b" else m.group() * 2
        u = re.compile("[abc]").sub(rep, "xaybzc", count=2)
        v = re.sub(r"x*", lambda m: "-", "abxd")
        w = re.sub(rb"\d", lambda m: b"#", b"a1b22")
        return x * len(s) + n, s, t, u, v, w

    backend, records = _run(f, lambda i: (torch.randn(3),))
    assert records == [] and backend.graph_count == 1  # stock: 1; before: 2 graphs, 4 breaks


def test_re_sub_replacement_function_effects_and_errors():
    names = []

    def f(x):
        s = re.sub(r"\w+", lambda m: names.append(m.group()) or m.group().title(), "ab cd")
        try:
            re.sub("a", lambda m: 1, "aa")
        except TypeError as e:
            return x, s, len(names), str(e)

    compiled = framejit.compile(f, backend=CountingBackend())
    for _ in range(2):
        before = len(names)
        expected = f(torch.ones(1))
        assert len(names) - before == 2
        assert_same(compiled(torch.ones(1))[:2], expected[:2])
        assert len(names) - before == 4


def test_re_finditer_loops_are_captured():
    pattern = re.compile(r"(\w+)=(\d+)")

    def f(x, spec):
        total = 0
        for m in re.finditer(r"\d+", "a12b3c456"):
            total += int(m.group())
            x = x + 1
        cfg = {m.group(1): int(m.group(2)) for m in pattern.finditer(spec)}
        it = pattern.finditer(spec)
        first = next(it)
        return x * total + cfg["a"], first.group(1), type(it).__name__, [m.group() for m in it]

    backend, records = _run(f, lambda i: (torch.randn(3), "a=%d b=2" % (i % 2)), calls=4)
    assert records == [] and backend.graph_count == 2  # one per spec string; before: 0 graphs, 2 eager frames


def test_finditer_iterator_returned_is_a_callable_iterator():
    def f(x):
        it = re.finditer(r"\d", "1a2b3")
        next(it)
        return x + 1, it

    compiled = framejit.compile(f, backend=CountingBackend())
    for _ in range(2):
        y, it = compiled(torch.ones(1))
        _, expected = f(torch.ones(1))
        assert type(it) is type(expected)
        assert [m.group() for m in it] == [m.group() for m in expected] == ["2", "3"]


# ---- Tensor.register_hook: NOTE [Tensor hooks registered after the graph] (tensor_hooks.py) -----------------
_HOOK_CALLS = []


def _times_three(g):
    _HOOK_CALLS.append(tuple(g.shape))
    return g * 3


def _intermediate_hooks(x):
    y = x * 2
    y.register_hook(_times_three)
    z = y.sin()
    z.register_hook(lambda g: g + 1)
    return (y * z).sum()


def _input_hook(x):
    x.register_hook(lambda g: g * 10)
    return (x * x).sum()


def _closure_hook(x):
    k = 5.0
    y = x @ x.T
    y.register_hook(lambda g: g * k)
    k = 7.0  # the hook runs at backward: it sees the final k, as eager's does
    return y.relu().sum()


@pytest.mark.parametrize("fn", [_intermediate_hooks, _input_hook, _closure_hook])
@pytest.mark.parametrize("backend_name", ["counting", "onnxrt"])
def test_tensor_hooks_run_at_backward_as_eager(fn, backend_name):
    backend = CountingBackend() if backend_name == "counting" else backend_name
    compiled = framejit.compile(fn, backend=backend)
    with logged_breaks() as records:
        for i in range(3):
            a = torch.randn(3 + i % 2, 3, requires_grad=True)
            b = a.detach().clone().requires_grad_()
            runs = []
            for f, t in ((fn, a), (compiled, b)):
                calls, ids = len(_HOOK_CALLS), RemovableHandle.next_id
                out = f(t)
                out.backward()
                runs.append((out.detach(), _HOOK_CALLS[calls:], RemovableHandle.next_id - ids))
            torch.testing.assert_close(b.grad, a.grad)
            torch.testing.assert_close(runs[1][0], runs[0][0])
            assert runs[1][1] == runs[0][1]  # the hook ran at backward, with the same gradient shapes
            if backend_name == "counting":  # (onnxrt's compiles register hooks of their own)
                assert runs[1][2] == runs[0][2]  # the handles took as many ids
    assert records == []
    if backend_name == "counting":
        assert backend.graph_count == 2  # one per shape; stock: 1 (intermediate: 2); before: 2 per shape


def test_tensor_hook_handle_kept_or_without_grad_as_eager():
    def kept(x):
        y = x * 2
        h = y.register_hook(lambda g: g * 3)
        h.remove()
        return (y * y).sum()

    def no_grad_tensor(x):
        y = x.detach() * 2
        try:
            y.register_hook(lambda g: g)
        except RuntimeError as e:
            return y + 1, str(e)

    for fn in (kept, no_grad_tensor):
        compiled = framejit.compile(fn, backend=CountingBackend())
        for _ in range(2):
            a = torch.randn(3, requires_grad=True)
            b = a.detach().clone().requires_grad_()
            e, c = fn(a), compiled(b)
            if fn is kept:
                e.backward()
                c.backward()
                torch.testing.assert_close(b.grad, a.grad)
            else:
                assert_same(c, e)


def test_tensor_hook_before_a_break_is_registered_for_a_backward_in_the_frame():
    def f(x):
        y = x * 2
        y.register_hook(lambda g: g * 3)
        z = (y * y).sum()
        (gx,) = torch.autograd.grad(z, x)
        return gx

    backend, records = _run(f, lambda i: (torch.randn(3, requires_grad=True),))
    assert backend.graph_count == 1


# ---- deques from outside: NOTE [Deques from outside] (mappings.py) ------------------------------------------
class _History(torch.nn.Module):
    """A rolling buffer of recent means, appended to in forward."""

    def __init__(self):
        super().__init__()
        self.hist = collections.deque(maxlen=2)

    def forward(self, x):
        self.hist.append(x.mean())
        self.hist.rotate(1)
        return x - sum(self.hist) / len(self.hist)


def test_a_deque_held_by_a_module_is_traced_and_its_mutations_replayed():
    eager_module, compiled_module = _History(), _History()
    backend = CountingBackend()
    compiled = framejit.compile(compiled_module, backend=backend)
    with logged_breaks() as records:
        for i in range(4):
            x = torch.randn(3, 4) + i
            assert_same(compiled(x), eager_module(x))
            assert_same(list(compiled_module.hist), list(eager_module.hist))
    assert records == [] and backend.graph_count == 3  # one per length at entry (0, 1, 2); before: a break per method


def test_deque_arguments_mutated_as_eager():
    def f(x, q, r):
        q.append(len(q))
        q.extendleft([7])
        r.appendleft(x * 2)
        if len(r) > 2:
            r.pop()
        r.extend([x + 1])
        q.remove(7)
        q.reverse()
        return x * sum(q) + sum(r), q.maxlen, repr(collections.deque([1, 2, 3], maxlen=2))

    states = [(collections.deque([1], maxlen=3), collections.deque()) for _ in range(2)]
    compiled = framejit.compile(f, backend=CountingBackend())
    for i in range(4):
        x = torch.randn(3)
        expected = f(x, *states[0])
        assert_same(compiled(x, *states[1]), expected)
        assert list(states[1][0]) == list(states[0][0]) and states[1][0].maxlen == 3
        assert_same(list(states[1][1]), list(states[0][1]))


# ---- identity of a bound method and a function (protocol._exact_type) ---------------------------------------
class _WithMethods:
    def m(self):
        return 1

    def n(self):
        return 2


def test_a_bound_method_is_not_a_function():
    a = _WithMethods()

    def f(x):
        return x + (a.m is not _WithMethods.m) * 2 + (a.m is _WithMethods.n) + (_WithMethods.m is _WithMethods.m) * 4

    _, records = _run(f, lambda i: (torch.randn(3),))
    assert records == []  # before: a break (identity comparison of BoundMethod and Function)


# ---- `__class__` of containers (attributes.getattr_value) --------------------------------------------------
class _Pair(typing.NamedTuple):
    a: int
    b: int = 0


@functools.singledispatch
def _normalized(t):
    raise NotImplementedError(type(t))


@_normalized.register
def _(t: torch.Tensor):
    return t / t.norm()


@_normalized.register(list)
@_normalized.register(tuple)
def _(t):
    return [_normalized(i) for i in t]


@_normalized.register(dict)
def _(t):
    return {k: _normalized(v) for k, v in t.items()}


def test_singledispatch_over_containers_reads_their_class():
    def f(x, d):
        kinds = [v.__class__.__name__ for v in ([1], (1,), {1: 2}, {1}, frozenset(), _Pair(1),
                                                collections.deque(), collections.OrderedDict(a=1), d)]
        return _normalized({"a": x, "b": (x * 2, [x + 1])}), _normalized(d), kinds

    backend, records = _run(f, lambda i: (torch.randn(3) + 1, {"z": torch.ones(2) * (i + 1)}))
    assert records == [] and backend.graph_count == 1  # stock: 2; before: 2 graphs, 5 breaks (dict.__class__)


def test_tensor_hook_then_an_in_place_write_sees_eagers_gradient():
    seen = []

    def hook(g):
        seen.append(g.clone())
        return g * 2

    def written(x):
        y = x * 2
        y.register_hook(hook)
        y.mul_(3)  # a new grad_fn for y: the hook stays on the version it was registered on
        return (y * y).sum()

    def view_written(x):
        y = x * 2
        y.register_hook(hook)
        y.view(-1)[:2].mul_(3)
        return (y * y).sum()

    for fn in (written, view_written):
        compiled = framejit.compile(fn, backend=CountingBackend())
        for i in range(2):
            runs = []
            for f in (fn, compiled):
                torch.manual_seed(i)
                x = torch.randn(3, requires_grad=True)
                seen.clear()
                f(x).backward()
                runs.append((x.grad, list(seen)))
            torch.testing.assert_close(runs[1][0], runs[0][0])
            assert len(runs[1][1]) == len(runs[0][1]) == 1
            torch.testing.assert_close(runs[1][1][0], runs[0][1][0])  # before: the new version's gradient


# ---- functools.partialmethod: NOTE [Attributes of partials made while tracing] (partials.py) -----------------
class _WithPartialMethods:
    def __init__(self):
        self.c = 1

    def f(self, a, b):
        return a * b + self.c

    g = functools.partialmethod(f, 3)

    @functools.partialmethod
    def h(self, x):
        return x - self.c


def test_partialmethod_calls_are_traced():
    def f(x):
        a = _WithPartialMethods()
        return a.g(x), a.h(x)

    backend, records = _run(f, lambda i: (torch.randn(3),))
    assert records == [] and backend.graph_count == 1  # stock: 2; before: a break at `result.__self__ = ...`


def test_attributes_of_a_partial_made_in_the_trace():
    def f(x):
        p = functools.partial(torch.add, x)
        p.tag = "t"
        try:
            p.func = None
        except AttributeError as e:
            msg = str(e)
        return p(1), p.tag, msg, p.__dict__

    _run(f, lambda i: (torch.randn(3),))

    def escapes(x):
        p = functools.partial(torch.add, x)
        p.tag = "t"
        return p

    compiled = framejit.compile(escapes, backend=CountingBackend())
    eager_before = eager_frames()
    for i in range(2):
        x = torch.randn(3)
        c, e = compiled(x), escapes(x)
        assert c.tag == e.tag and torch.equal(c(1), e(1))
    assert eager_frames() == eager_before  # a break at the store, not a frame run eagerly
