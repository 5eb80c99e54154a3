"""Every fact a compiled entry relies on is guarded (issue 12, "facts used but not guarded").

Each test runs a function eagerly and compiled, changes the Python state the function reads between
calls (attributes, classes, defaults, monkeypatched torch functions, global torch state, the tensor's
view offset, float signs), and compares results after every change. Before NOTE [Lookup facts],
NOTE [Live defaults], NOTE [Float guards are bitwise] and the storage-offset guard, each of these
returned a stale result silently. The cross-process cases live in test_soundness_facts_cache.py.
"""
from __future__ import annotations

import collections
import copy
import functools
import os
import types

os.environ.setdefault("TRITON_INTERPRET", "1")  # triton kernels run on CPU (as in tests/backends/conftest.py)

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, assert_same, call_capturing


class NamedCounting(CountingBackend):
    """Counts graphs and runs them with a registered backend (onnxrt, triton)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(example_inputs)
        return framejit.lookup_backend(self.name)(gm, example_inputs)


def _backend(name: str) -> CountingBackend:
    return CountingBackend() if name == "eager" else NamedCounting(name)


def fresh_copy(fn):
    """fn with a new copy of its code object (so no specialization state of earlier calls), reading fn's
    current globals, defaults, closure and attributes. See NOTE [Stale __getitem__ on CPython 3.13.0]."""
    copy_ = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy_.__kwdefaults__ = fn.__kwdefaults__
    copy_.__dict__.update(fn.__dict__)
    return copy_


# NOTE [Stale __getitem__ on CPython 3.13.0]
# CPython 3.13.0 specialises `o[i]` on a class with a Python `__getitem__` (BINARY_SUBSCR_GETITEM) by caching
# the function on the class; a class change clears that cache only while the class still has a valid
# version tag. A class gets at most 1000 version tags (MAX_VERSIONS_PER_CLASS), and every change to it or to
# a base class uses one up: torch.fx's tracer patches `nn.Module.__getattr__`/`__call__` for every make_fx
# trace (4 changes per onnxrt/triton compile through AOT autograd), so after ~250 such compiles in one process
# every nn.Module class is out of tags. From then on, on 3.13.0 only, an already specialised `layers[0]` keeps
# calling the old `ModuleList.__getitem__` after `nn.ModuleList.__getitem__` is patched: the EAGER reference
# is wrong, not framejit (reproducer: patch a class 1000 times, specialise `o[0]`, patch `__getitem__` again;
# 3.12.1 sees the new method, 3.13.0 the old). The full 3.13 suite hit this in
# test_module_list_protocol_patched_on_the_class[__getitem__] after the backend tests. Tests that patch a
# library class's `__getitem__` compute their eager reference with a fresh copy of fn's code per call
# (`fresh_eager=True`), which has no specialised site; the compiled side is unchanged.
def run_steps(fn, make_args, steps, *, backend="eager", fullgraph=False, compiled=None, fresh_eager=False):
    """Before call i, apply steps[i] (None: change nothing); then call fn eagerly and compiled on the same
    arguments and compare values, exception types and printed output."""
    counting = _backend(backend)
    compiled = compiled or framejit.compile(fn, backend=counting, fullgraph=fullgraph)
    for step in steps:
        if step is not None:
            step()
        args = make_args()
        eager = fresh_copy(fn) if fresh_eager else fn
        expected, expected_exc, expected_out = call_capturing(eager, args, {})
        actual, actual_exc, actual_out = call_capturing(compiled, args, {})
        assert actual_exc is expected_exc, f"eager raised {expected_exc}, compiled {actual_exc}: {actual!r}"
        assert actual_out == expected_out
        assert expected_exc is None, f"the program itself raised {expected!r}"
        assert_same(actual, expected, rtol=1e-5, atol=1e-5)
    return counting


def _x():
    return (torch.arange(4.0),)


BACKENDS = ["eager", "onnxrt"]
ALL_BACKENDS = ["eager", "onnxrt", "triton"]


# ---- absence: hasattr, getattr with a default --------------------------------------------------------
def test_hasattr_false_then_instance_attribute_set():
    class Obj:
        pass
    obj = Obj()

    def fn(x):
        return x + (obj.b if hasattr(obj, "b") else 2)

    counting = run_steps(fn, _x, [None, None, lambda: setattr(obj, "b", 3), None, lambda: delattr(obj, "b"), None])
    assert counting.graph_count == 2  # one entry per lookup outcome, reused when it holds again


def test_getattr_default_then_class_attribute_set():
    class K:
        pass
    k = K()

    def fn(x):
        return x * getattr(k, "w", 1)

    run_steps(fn, _x, [None, lambda: setattr(K, "w", 3), None, lambda: setattr(K, "w", 5), None])


def test_getattr_default_then_class_gains___getattr__():
    class K:
        pass
    k = K()

    def fn(x):
        return x * getattr(k, "w", 1)

    run_steps(fn, _x, [None, lambda: setattr(K, "__getattr__", lambda self, name: 7), None])


def test_config_attribute_read_with_default_then_set():
    class Config:
        hidden = 4
    config = Config()

    def fn(x):
        scale = getattr(config, "scale", None)
        return x * (scale if scale is not None else 1.0) + config.hidden

    run_steps(fn, _x, [None, lambda: setattr(config, "scale", 0.5), None, lambda: setattr(Config, "hidden", 9), None])


def test_hasattr_on_a_tensor_then_python_attribute_set():
    x = torch.arange(3.0)

    def fn(t):
        return t + (1 if hasattr(t, "tag") else 2)

    run_steps(fn, lambda: (x,), [None, lambda: setattr(x, "tag", "seen"), None])


def test_tensor_python_attribute_is_read_and_guarded():
    x = torch.arange(3.0)
    x.scale = 2

    def fn(t):
        return t * t.scale

    run_steps(fn, lambda: (x,), [None, lambda: setattr(x, "scale", 5), None])


def test_hasattr_on_a_namedtuple_then_class_attribute_set():
    Pair = collections.namedtuple("Pair", "a b")
    pair = Pair(torch.ones(2), torch.zeros(2))

    def fn(p):
        return p.a + (10 if hasattr(p, "extra") else 1)

    run_steps(fn, lambda: (pair,), [None, lambda: setattr(Pair, "extra", 1), None])


def test_namedtuple_method_replaced_on_class():
    class Pair(collections.namedtuple("PairBase", "a b")):
        def total(self):
            return self.a + self.b
    pair = Pair(torch.ones(2), torch.ones(2))

    def fn(p):
        return p.total() * 2

    run_steps(fn, lambda: (pair,), [None, lambda: setattr(Pair, "total", lambda self: self.a - self.b), None])


def test_hasattr_on_a_module_then_attribute_set(monkeypatch):
    import types
    plugins = types.ModuleType("plugins_for_test")

    def fn(x):
        return x + (plugins.OFFSET if hasattr(plugins, "OFFSET") else 0) + getattr(torch, "_fj_test_offset", 1)

    run_steps(fn, _x, [None, lambda: setattr(plugins, "OFFSET", 5), None,
                       lambda: monkeypatch.setattr(torch, "_fj_test_offset", 3, raising=False), None])


@pytest.mark.parametrize("compile_module", [False, True])
def test_absent_module_buffer_parameter_or_attribute_then_added(compile_module):
    # soundness finding #3: absence through nn.Module.__getattr__ (its _parameters/_buffers/_modules)
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            if hasattr(self, "extra"):
                x = x + self.extra
            shift = getattr(self, "shift", None)
            return self.lin(x) + (shift if shift is not None else 0)

    torch.manual_seed(0)
    net = Net()
    fn = net if compile_module else (lambda x: net(x))
    compiled = framejit.compile(net, backend=CountingBackend()) if compile_module else None
    run_steps(fn, _x, [None, lambda: net.register_buffer("extra", torch.ones(4)), None,
                       lambda: setattr(net, "shift", torch.nn.Parameter(torch.ones(1))), None,
                       lambda: setattr(net.lin, "extra", torch.nn.Linear(4, 4)), None], compiled=compiled)


# ---- lookup order and shadowing --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_instance_attribute_shadows_class_attribute(backend):
    class Cfg:
        k = 2
    cfg = Cfg()

    def fn(x):
        return x * cfg.k

    run_steps(fn, _x, [None, None, lambda: setattr(cfg, "k", 100), None, lambda: delattr(cfg, "k"), None],
              backend=backend)


def test_class_attribute_changed_on_the_class():
    class Cfg:
        k = 2
    cfg = Cfg()

    def fn(x):
        return x * cfg.k + Cfg.k

    run_steps(fn, _x, [None, lambda: setattr(Cfg, "k", 7), None])


def test_instance_attribute_shadows_method():
    class M:
        def scale(self):
            return 1
    m = M()

    def fn(x):
        return x * m.scale()

    run_steps(fn, _x, [None, lambda: setattr(m, "scale", lambda: 5), None, lambda: delattr(m, "scale"), None])


def test_method_replaced_on_class():
    class M:
        def scale(self):
            return 1
    m = M()

    def fn(x):
        return x * m.scale()

    run_steps(fn, _x, [None, lambda: setattr(M, "scale", lambda self: 5), None])


def test_inherited_method_overridden_in_subclass_later():
    class Base:
        def scale(self):
            return 1

    class Child(Base):
        pass
    child = Child()

    def fn(x):
        return x * child.scale()

    run_steps(fn, _x, [None, lambda: setattr(Child, "scale", lambda self: 3), None])


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_forward_replaced_on_instance(backend):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def fn(x):
        return lin(x).relu()

    run_steps(fn, _x, [None, lambda: setattr(lin, "forward", lambda inp: inp * 9), None,
                       lambda: delattr(lin, "forward"), None], backend=backend)


def test_module_forward_replaced_on_instance_when_the_call_is_a_graph_break():
    class Printer(torch.nn.Module):
        def forward(self, x):
            print("in forward")  # a graph break: the call of the module is made by the residual code
            return x + 1
    printer = Printer()

    def fn(x):
        return printer(x * 2) - 1

    run_steps(fn, _x, [None, lambda: setattr(printer, "forward", lambda t: t * 100), None,
                       lambda: delattr(printer, "forward"), None])


def test_compiled_module_forward_replaced_on_instance():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    compiled = framejit.compile(lin, backend=CountingBackend())
    x = torch.arange(4.0)
    assert_same(compiled(x), lin(x))
    lin.forward = lambda inp: inp * 9
    assert_same(compiled(x), x * 9)


def test_class_attribute_through_super_changes():
    class Base:
        scale = 1

        def factor(self):
            return 2

    class Child(Base):
        scale = 10

        def get(self):
            return super().scale + super().factor()
    child = Child()

    def fn(x):
        return x * child.get()

    run_steps(fn, _x, [None, lambda: setattr(Base, "scale", 5), None, lambda: setattr(Base, "factor", lambda s: 7),
                       None])


def test_metaclass___instancecheck__():
    class Meta(type):
        answer = True

        def __instancecheck__(cls, inst):
            return Meta.answer

    class Anything(metaclass=Meta):
        pass

    def fn(x):
        return x + (1 if isinstance(x, Anything) else 2)

    run_steps(fn, _x, [None, lambda: setattr(Meta, "answer", False), None])


def test_metaclass_gains___instancecheck___after_first_call():
    class Meta(type):
        pass

    class Thing(metaclass=Meta):
        pass

    def fn(x):
        return x + (1 if isinstance(x, Thing) else 2)

    run_steps(fn, _x, [None, lambda: setattr(Meta, "__instancecheck__", lambda cls, inst: True), None])


def test_assigning___class__():
    class A:
        def value(self):
            return 1

    class B:
        def value(self):
            return 2
    obj = A()

    def fn(x):
        return x * obj.value()

    run_steps(fn, _x, [None, lambda: setattr(obj, "__class__", B), None])


def test_custom___setattr___added_after_first_call():
    class P:
        pass
    p = P()
    p.a = 1

    def fn(x):
        p.a = 5
        return x + p.a

    def add_setattr():
        P.__setattr__ = lambda self, name, value: object.__setattr__(self, name, value * 2)

    run_steps(fn, _x, [None, add_setattr, None])


def test_custom___setattr___of_an_object_made_inside():
    class Doubling:
        def __setattr__(self, name, value):
            object.__setattr__(self, name, value * 2)

    def fn(x):
        d = Doubling()
        d.a = 5
        return x + d.a

    run_steps(fn, _x, [None, None])


def test_data_descriptor_added_to_the_class_of_an_instance_attribute():
    class Holder:
        pass
    h = Holder()
    h.v = 3

    def fn(x):
        return x * h.v

    run_steps(fn, _x, [None, lambda: setattr(Holder, "v", property(lambda self: 11)), None])


# ---- the compiled function's own defaults -----------------------------------------------------------------
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_defaults_reassigned_after_first_call(backend):
    def fn(x, a=1, *, b=2):
        return x * a + b

    def set_defaults():
        fn.__defaults__ = (10,)

    def set_kwdefaults():
        fn.__kwdefaults__ = {"b": 20}

    def mutate_kwdefaults():
        fn.__kwdefaults__["b"] = 30

    run_steps(fn, _x, [None, set_defaults, None, set_kwdefaults, None, mutate_kwdefaults, None],
              backend=backend)


def test_tensor_default_reassigned():
    def fn(x, bias=torch.ones(4)):
        return x + bias

    def set_defaults():
        fn.__defaults__ = (torch.full((4,), 5.0),)

    run_steps(fn, _x, [None, set_defaults, None])


def _callee_kw(x, *, k=2.0):
    return x * k


def _callee_pos(x, a, b=torch.ones(4)):
    return x * a + b


def test_callee_defaults_shape_changed_after_first_call():
    """Which parameters of a callee have defaults is guarded (NOTE [Defaults a call's binding consults]):
    a longer `__defaults__` moves b's default to index 1 (the parent read index 0: x*2 + 0, eager x*2 + 1);
    `__kwdefaults__` None then set again (the parent kept raising the TypeError)."""
    def fn(x):
        try:
            return _callee_kw(x), _callee_pos(x, 2)
        except TypeError as e:
            return str(e)

    kw, pos = _callee_kw.__kwdefaults__, _callee_pos.__defaults__

    def put(f, name, value):
        return lambda: setattr(f, name, value)

    try:
        run_steps(fn, _x, [None, put(_callee_pos, "__defaults__", (torch.zeros(4), pos[0])),
                           put(_callee_kw, "__kwdefaults__", None), put(_callee_kw, "__kwdefaults__", {"k": 4.0}),
                           put(_callee_pos, "__defaults__", pos)])
    finally:
        _callee_kw.__kwdefaults__, _callee_pos.__defaults__ = kw, pos


# ---- tensors and floats -------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_storage_offset_is_guarded(backend):
    base = torch.arange(10.0)
    views = iter([base[1:4], base[1:4], base[2:5], base[0:3]])

    def fn(x):
        return x * x.storage_offset()

    run_steps(fn, lambda: (next(views),), [None] * 4, backend=backend)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_rows_at_changing_offsets_keep_offset_facts_exact(backend):
    """A helper given the rows of a batch one by one, as a VLM's per-image loop does (NOTE [Changing offsets
    of rows]): after its first recompile the offset is a symbol, and what the trace reads of it stays exact:
    the offset itself, as_strided from the row's own offset and at an absolute one (onnxrt ran that over the
    row as a dense buffer: NOTE [Storage offsets read by the graph]), a view of the row."""
    def read(r, s):
        return r * r.storage_offset() + s

    def strided(r, s):
        return r.as_strided((2,), (1,)) + r.as_strided((2,), (1,), 3) + s

    def view(r, s):
        return r[1:] * 2 + s

    for fn in (read, strided, view):
        rows = iter([(4, 8, i) for i in range(4)] + [(3, 6, i) for i in range(3)])

        def make():
            n, size, i = next(rows)
            return torch.arange(float(n * size)).view(n, size)[i], torch.tensor([i + 1])

        run_steps(fn, make, [None] * 7, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_zero_does_not_hit_the_entry_for_zero(backend):
    import math
    values = iter([0.0, -0.0, -0.0, 0.0])

    def fn(x, a):
        return x * math.copysign(1.0, a)

    run_steps(fn, lambda: (torch.arange(4.0), next(values)), [None] * 4, backend=backend)


def test_nan_argument_hits_its_own_entry():
    def fn(x, a):
        return x + (1 if a != a else 2)

    counting = run_steps(fn, lambda: (torch.arange(4.0), float("nan")), [None] * 5)
    assert counting.graph_count == 1


def test_zero_constant_attribute_sign_changes():
    class Cfg:
        pass
    cfg = Cfg()
    cfg.eps = 0.0

    def fn(x):
        return x / (1.0 / cfg.eps if cfg.eps != 0.0 else 1.0) if False else x * (1.0 if str(cfg.eps)[0] != "-" else -1.0)

    run_steps(fn, _x, [None, lambda: setattr(cfg, "eps", -0.0), None])


def test_zeros_in_keys_sets_complex_numpy_keep_their_sign_and_namedtuple_defaults_their_type():
    """NOTE [Float guards are bitwise] (guards/same_values.py): a dict keyed by a float zero, a set and a
    frozenset of one, a complex and a numpy float argument, a dict keyed by a frozen dataclass holding one, each
    changing sign in turn; and a namedtuple default changed from `1` to `1.0` (equal, not the same)."""
    import collections
    import dataclasses
    import numpy as np
    Point = collections.namedtuple("Point", "a b", defaults=(1,))
    Eps = dataclasses.make_dataclass("Eps", ["eps"], frozen=True)
    flips = [(-0.0,) * 6 + (1,)] + [(0.0,) * i + (-0.0,) * (6 - i) + (1,) for i in range(1, 7)] + [(0.0,) * 6 + (1.0,)]
    steps = iter(flips)

    def fn(x, d, s, fs, c, n, e):
        parts = next(iter(d)), next(iter(s)), next(iter(fs)), c, n, next(iter(e)).eps
        return x, torch.full((4,), Point(0).b), [str(p) for p in parts]

    def args():
        key, element, inner, real, scalar, field, default = next(steps)
        Point.__new__.__defaults__ = (default,)
        return (torch.arange(4.0), {key: "a"}, {element}, frozenset([inner]), complex(real, 1.0), np.float64(scalar),
                {Eps(field): 1})

    run_steps(fn, args, [None] * len(flips))


# ---- library functions and global torch state -------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_monkeypatched_torch_function(backend, monkeypatch):
    def fn(x):
        return F.gelu(x) + 1

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(F, "gelu", lambda t: t * 100), None,
                       lambda: monkeypatch.undo(), None], backend=backend)


def test_monkeypatched_torch_function_through_torch_module(monkeypatch):
    def fn(x):
        return torch.nn.functional.relu(x - 1)

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.nn.functional, "relu", torch.sigmoid), None])


def test_autograd_profiler_state():
    def fn(x):
        return x + (1 if torch.autograd._profiler_enabled() else 2)

    counting = CountingBackend()
    compiled = framejit.compile(fn, backend=counting)
    x = torch.arange(4.0)
    assert_same(compiled(x), fn(x))
    with torch.autograd.profiler.profile():
        assert_same(compiled(x), fn(x))
    assert_same(compiled(x), fn(x))
    assert counting.graph_count == 2


class _NoGrad:
    def __enter__(self):
        self.prev = torch.is_grad_enabled()
        torch.set_grad_enabled(False)

    def __exit__(self, *exc):
        torch.set_grad_enabled(self.prev)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_grad_mode_set_by_a_user_context_manager(fullgraph):
    def fn(x):
        with _NoGrad():
            y = x * 2 if not torch.is_grad_enabled() else x * 3
        return y + 1, torch.is_grad_enabled()

    x = torch.ones(3, requires_grad=True)
    compiled = framejit.compile(fn, backend=CountingBackend(), fullgraph=fullgraph)
    for _ in range(3):
        expected, actual = fn(x), compiled(x)
        assert_same(actual, expected)


def test_grad_mode_read_from_torch_c_where_torch_is_grad_enabled_is_replaced(monkeypatch):
    # NOTE [Grad mode read from torch._C] (framejit/grad_mode.py): the guard bound a replaced torch.is_grad_enabled
    # (the entry traced with grad on ran under the caller's no_grad), and torch's context managers around the
    # fake run restored the mode the replacement answered (patched before call 0: eager False, framejit True); a
    # no_grad block restores what the replacement answers in eager (NOTE [Grad blocks rely on torch's grad-mode
    # functions] in capture/context.py)
    def fn(x, w):
        y = x * w
        with torch.no_grad():
            z = x * w
        return y, y.requires_grad, torch.is_grad_enabled(), z, (x * w).requires_grad

    original = torch.is_grad_enabled
    for at in (0, 1):
        runs = []
        for compiled in (False, True):
            monkeypatch.setattr(torch, "is_grad_enabled", original)
            f = framejit.compile(fn, backend="eager") if compiled else fn
            w, log, calls = torch.ones(2, requires_grad=True), [], []
            for i in range(4):
                if i == at:
                    monkeypatch.setattr(torch, "is_grad_enabled", functools.wraps(original)(lambda: log.append(i) or True))
                torch._C._set_grad_enabled(i != 2)
                try:
                    calls.append((f(torch.full((2,), float(i)), w), torch._C.is_grad_enabled(), len(log)))
                finally:
                    torch._C._set_grad_enabled(True)
            runs.append(calls)
        assert_same(runs[1], runs[0])


# ---- copies of compiled modules -----------------------------------------------------------------------------
@pytest.mark.parametrize("copier", [copy.deepcopy, copy.copy])
def test_copy_of_a_compiled_module_runs_with_its_own_parameters(copier):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    compiled = framejit.compile(net, backend=CountingBackend())
    x = torch.randn(3, 4)
    assert_same(compiled(x), net(x))
    twin = copier(compiled)
    if copier is copy.deepcopy:
        with torch.no_grad():
            twin[0].weight.mul_(3)
        assert twin[0].weight is not net[0].weight
    reference = copier(net) if copier is copy.copy else copy.deepcopy(net)
    if copier is copy.deepcopy:
        with torch.no_grad():
            reference[0].weight.copy_(twin[0].weight)
    assert_same(twin(x), reference(x))
    twin(x).sum().backward()
    if copier is copy.deepcopy:
        assert net[0].weight.grad is None  # gradients land on the copy, not on the original
        assert twin[0].weight.grad is not None
    assert_same(compiled(x), net(x))


# ---- readable failures ------------------------------------------------------------------------------------
def test_lookup_fact_failures_name_the_fact():
    class Cfg:
        k = 2

        def scale(self):
            return 3
    cfg = Cfg()
    scale = Cfg.__dict__["scale"]

    def fn(x):
        return x * cfg.k * cfg.scale() + (1 if hasattr(cfg, "extra") else 0)

    compiled = framejit.compile(fn, backend=CountingBackend())
    x = torch.ones(2)
    compiled(x)
    guard = compiled.entries[0].guard
    assert guard.first_failure(x) is None
    cases = [
        ("INSTANCE_ATTR_ABSENT", "no instance attribute 'k', got 100",
         lambda: setattr(cfg, "k", 100), lambda: delattr(cfg, "k")),
        ("INSTANCE_ATTR_ABSENT", "no instance attribute 'extra', got 1",
         lambda: setattr(cfg, "extra", 1), lambda: delattr(cfg, "extra")),
        ("ID_MATCH", "Cfg.__dict__['scale']",
         lambda: setattr(Cfg, "scale", lambda self: 4), lambda: setattr(Cfg, "scale", scale)),
        ("CLASS_ATTR_ABSENT", "no attribute '__getattr__' on",
         lambda: setattr(Cfg, "__getattr__", lambda self, n: 0), lambda: delattr(Cfg, "__getattr__")),
    ]
    for kind, text, change, undo in cases:
        change()
        failure = guard.first_failure(x)
        assert failure is not None and failure.guard.kind == kind, (kind, failure)
        assert text in str(failure), str(failure)
        undo()
        assert guard.first_failure(x) is None


def test_tuple_keys_keep_the_types_of_their_items():
    """NOTE [Exact keys decided when the guard is built] (guards/same_values.py): `(1,)`, `(True,)` and `(1.0,)`
    are equal dict keys (also nested, also beside a string or a class), yet the trace read its own: the value
    read back, its repr and the dtype of a tensor made from it follow the key of each call."""
    keys = [(1, "a"), (True, "a"), (1.0, "a"), ((1, 2), int), ((True, 2), int), ((1.0, 2), int), (1, "a")]
    steps = iter(keys)

    def fn(x, d):
        k = next(iter(d))
        first = k[0] if type(k[0]) is not tuple else k[0][0]
        return torch.full((2,), first) + x, repr(k), d[k]

    def args():
        return torch.zeros(2, dtype=torch.int64), {next(steps): 3, "b": 4}

    counting = run_steps(fn, args, [None] * len(keys))
    assert counting.graph_count == 6  # one per key of its own types; the last call reuses the first entry
