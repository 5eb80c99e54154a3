"""Facts a compiled entry relied on that were not guarded (issue 12, "every fact is guarded").

Each test runs a function eagerly and compiled (run_steps from test_soundness_facts), changes one fact
between calls, and compares every call: a library class attribute patched on the class (NOTE [Library
class attributes]), a tensor method shadowed by a Python attribute of the tensor, `object.__setattr__`
putting a value in a module's `__dict__` past `nn.Module.__setattr__`, an ABC registering a class, a
property added to the class of an instance attribute (no guard may run it: NOTE [Guards run no user
code]), and `framejit.disable` applied after compiling (NOTE [Disable after compiling]). The
cross-process case is test_warm_cache_rechecks_library_class_attributes.
"""
from __future__ import annotations

import abc
import functools
import re
import textwrap

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.guards.test_soundness_facts import run_steps
from tests.helpers import BACKEND_MODULES, CountingBackend, run_cache_program

BACKENDS = ["eager", "onnxrt"]


def _x():
    return (torch.arange(8.0).reshape(2, 4) - 3,)


# ---- 1. library classes: methods and attributes patched on the class --------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_forward_patched_on_the_class(backend, monkeypatch):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def fn(x):
        return lin(x).relu()

    counting = run_steps(fn, _x, [None, None, lambda: monkeypatch.setattr(torch.nn.Linear, "forward",
                                                                          lambda self, x: x * 7), None,
                                  lambda: monkeypatch.undo(), None], backend=backend)
    assert counting.graph_count == 2  # the original entry is hit again once the patch is undone


def test_layer_norm_forward_patched_on_the_class_used_by_a_user_subclass(monkeypatch):
    class Norm(torch.nn.LayerNorm):
        pass
    norm = Norm(4)

    def fn(x):
        return norm(x) + 1

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.nn.LayerNorm, "forward", lambda self, x: x * 3),
                       None, None])


def test_library_method_added_to_a_class_before_its_owner(monkeypatch):
    """`forward` found on nn.Linear; a `forward` later set on nn.Module changes nothing, while one set on a
    library class earlier in the MRO (here LazyLinear's Linear base is the owner, the subclass is patched)
    takes over."""
    class MyLinear(torch.nn.Linear):
        pass
    torch.manual_seed(0)
    lin = MyLinear(4, 4)

    def fn(x):
        return lin(x)

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.nn.Module, "forward", lambda self, x: x * 0, raising=False),
                       None, lambda: monkeypatch.setattr(MyLinear, "forward", lambda self, x: x - 1), None])


def test_module___call___patched_on_nn_module(monkeypatch):
    relu = torch.nn.ReLU()
    original = torch.nn.Module.__call__

    def doubled(self, *args, **kwargs):
        return original(self, *args, **kwargs) * 2

    def fn(x):
        return relu(x) + 1

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.nn.Module, "__call__", doubled), None,
                       lambda: monkeypatch.undo(), None])


def test_module__call_impl_patched_on_nn_module(monkeypatch):
    tanh = torch.nn.Tanh()

    def fn(x):
        return tanh(x) - 1

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.nn.Module, "_call_impl",
                                                         lambda self, *a, **k: a[0] * 5), None])


def test_library_function_reached_through_a_library_module_global(monkeypatch):
    """nn.GELU.forward calls `F.gelu` through torch.nn.modules.activation's global `F`."""
    import torch.nn.modules.activation as activation
    gelu = torch.nn.GELU()

    class FakeF:
        def __getattr__(self, name):
            return getattr(F, name)

        @staticmethod
        def gelu(x, approximate="none"):
            return x * 3

    def fn(x):
        return gelu(x)

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(activation, "F", FakeF()), None,
                       lambda: monkeypatch.setattr(F, "gelu", lambda x, approximate="none": x - 9), None])


def test_library_class_constant_patched(monkeypatch):
    class Block(torch.nn.Module):
        def forward(self, x):
            return x * (2 if type(self).call_super_init else 3)
    block = Block()

    def fn(x):
        return block(x)

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.nn.Module, "call_super_init", True), None])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_method_patched_on_torch_tensor(backend, monkeypatch):
    def fn(x):
        return x.add(1).sum(0)

    run_steps(fn, _x, [None, lambda: monkeypatch.setattr(torch.Tensor, "add", lambda self, other: self - other),
                       None, lambda: monkeypatch.undo(), None], backend=backend)


# ---- 2. a tensor's Python attribute shadowing a Tensor method ---------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_method_shadowed_by_an_instance_attribute(backend):
    x = torch.arange(6.0)

    def fn(t):
        return t * t.size(0) + t.mul(2)

    def shadow():
        x.size = lambda *args: 100
        x.mul = lambda other: x.new_zeros(6)

    run_steps(fn, lambda: (x,), [None, None, shadow, None, lambda: (delattr(x, "size"), delattr(x, "mul")), None],
              backend=backend)


def test_tensor_properties_cannot_be_shadowed():
    """shape, dtype, ... are data descriptors of TensorBase: CPython refuses the store, so they need no guard."""
    x = torch.arange(3.0)
    for name in ("shape", "dtype", "device", "ndim"):
        with pytest.raises(AttributeError):
            setattr(x, name, 3)


# ---- 3. object.__setattr__ past nn.Module.__setattr__ -----------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_object_setattr_puts_a_tensor_in_the_module_dict(backend):
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def fn(x):
        return lin(x)

    run_steps(fn, _x, [None, lambda: object.__setattr__(lin, "weight", torch.ones(4, 4)), None,
                       lambda: object.__setattr__(lin, "bias", torch.full((4,), 2.0)), None], backend=backend)


def test_object_setattr_shadows_a_submodule():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(x) * 2
    net = Net()

    def fn(x):
        return net(x)

    run_steps(fn, _x, [None, lambda: object.__setattr__(net, "act", torch.nn.Tanh()), None,
                       lambda: object.__delattr__(net, "act"), None])


# ---- 4. ABC registry ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_abc_register_after_the_first_call(backend):
    class Shape(abc.ABC):
        pass

    class Box:
        pass
    box = Box()

    def fn(x):
        return x + (10 if isinstance(box, Shape) else 1)

    run_steps(fn, _x, [None, None, lambda: Shape.register(Box), None], backend=backend)


def test_abc_register_seen_by_issubclass_of_a_library_abc():
    import collections.abc

    class Bag:
        pass

    def fn(x):
        return x * (2 if issubclass(Bag, collections.abc.Sized) else 3)

    run_steps(fn, _x, [None, lambda: collections.abc.Sized.register(Bag), None])


# ---- 5. guards never run user code --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_property_added_over_an_instance_attribute_is_not_run_by_guards(backend):
    calls = []

    class Cfg:
        pass
    cfg = Cfg()
    cfg.scale = 2

    def scale(self):
        calls.append(1)
        return 5

    def fn(x):
        return x * cfg.scale

    counting = CountingBackend()
    compiled = framejit.compile(fn, backend=counting if backend == "eager" else backend)
    for _ in range(2):
        torch.testing.assert_close(compiled(*_x()), fn(*_x()))
    Cfg.scale = property(scale)
    for _ in range(3):
        calls.clear()
        expected = fn(*_x())
        assert len(calls) == 1
        calls.clear()
        torch.testing.assert_close(compiled(*_x()), expected)
        assert len(calls) == 1  # the program's own call (replayed), none from a guard


def test_property_added_to_the_class_of_a_nested_object_is_not_run_by_guards():
    calls = []

    class Inner:
        pass

    class Outer:
        pass
    outer = Outer()
    outer.inner = Inner()
    outer.inner.fn = torch.sin

    def fn(x):
        return outer.inner.fn(x)

    compiled = framejit.compile(fn, backend=CountingBackend())
    compiled(*_x())
    compiled(*_x())

    def getter(self):
        calls.append(1)
        return torch.cos

    outer.inner = type("Other", (), {"fn": property(getter)})()  # a new type whose `fn` is a property
    calls.clear()
    torch.testing.assert_close(compiled(*_x()), fn(*_x()))
    assert len(calls) == 2  # one eager call, one compiled call: no guard ran the property


def test_failure_explanations_do_not_run_a_property_either():
    calls = []

    class Cfg:
        pass
    cfg = Cfg()
    cfg.k = 2

    def fn(x):
        return x * cfg.k

    compiled = framejit.compile(fn, backend="eager")
    compiled(*_x())
    guard = compiled.entries[0].guard  # the compiled function is its FrameHook
    Cfg.k = property(lambda self: calls.append(1) or 5)
    assert not guard(*_x())
    assert guard.first_failure(*_x()).guard.kind == "CLASS_ATTR_ABSENT"  # the recompiles log's reason
    assert [f.guard.kind for f in guard.all_failures(*_x())] == ["CLASS_ATTR_ABSENT"]  # recompiles_verbose
    assert calls == []


def test_guard_functions_define_shared_reads_after_the_facts_they_rely_on():
    class Cfg:
        pass
    cfg = Cfg()
    cfg.k = 3

    def fn(x):
        return x * cfg.k + cfg.k

    compiled = framejit.compile(fn, backend="eager")
    compiled(*_x())
    source = compiled.entries[0].guard.source  # the compiled function is its FrameHook
    lines = [line.split("#")[0] for line in source.splitlines()]  # code without the origin comments
    absent = next(i for i, line in enumerate(lines) if "'k' not in" in line)
    reads = [i for i, line in enumerate(lines) if re.search(r"\.k\b", line)]
    assert reads and min(reads) > absent, source


# ---- 6. framejit.disable after compiling --------------------------------------------------------------------
def test_disable_after_a_graph_break_wrapped_the_callee():
    def callee(x):
        y = x * 2
        print("inside")
        return y - 1

    def fn(x):
        y = x + 1
        print("before")
        return callee(y) * 5

    counting = CountingBackend()
    compiled = framejit.compile(fn, backend=counting, dynamic=False)  # static shapes: a new size recompiles
    args = lambda n: (torch.arange(float(n)),)  # noqa: E731  (a new shape each call: every call recompiles)
    for n in (2, 3):
        torch.testing.assert_close(compiled(*args(n)), fn(*args(n)))
    assert any("sub" in str(g.code) for g in counting.graphs)  # callee was captured
    framejit.disable(callee)
    before = counting.graph_count
    for n in (4, 5):
        torch.testing.assert_close(compiled(*args(n)), fn(*args(n)))
    new = counting.graphs[before:]
    assert new and all("sub" not in str(g.code) for g in new)  # callee now runs as plain Python


def test_disable_after_the_callee_was_inlined():
    def callee(x):
        return x.sin() * 3

    def fn(x):
        return callee(x) + 1

    counting = CountingBackend()
    compiled = framejit.compile(fn, backend=counting)
    torch.testing.assert_close(compiled(*_x()), fn(*_x()))
    assert "sin" in str(counting.graphs[-1].code)
    framejit.disable(callee)
    for _ in range(2):
        torch.testing.assert_close(compiled(*_x()), fn(*_x()))
    assert counting.graph_count >= 2 and "sin" not in str(counting.graphs[-1].code)


# ---- other facts of the same kind ----------------------------------------------------------------------------
def test_metaclass_gains___getattr___after_a_failed_class_lookup():
    class Meta(type):
        pass

    class K(metaclass=Meta):
        pass

    def fn(x):
        return x + (K.w if hasattr(K, "w") else 1)

    run_steps(fn, _x, [None, lambda: setattr(Meta, "__getattr__", lambda cls, name: 5), None])


def test_slots_member_value_and_deletion():
    class S:
        __slots__ = ("a",)

        def __init__(self):
            self.a = 2
    s = S()

    def fn(x):
        return x * (s.a if hasattr(s, "a") else -1)

    run_steps(fn, _x, [None, lambda: setattr(s, "a", 3), None, lambda: delattr(s, "a"), None])


def test_class_attribute_deleted_uncovers_the_base_class_one():
    class Base:
        k = 2

    class Derived(Base):
        k = 3
    obj = Derived()

    def fn(x):
        return x * obj.k

    run_steps(fn, _x, [None, lambda: delattr(Derived, "k"), None])


def test___class___reassigned():
    class P:
        def m(self):
            return 2

    class Q:
        def m(self):
            return 7
    p = P()

    def fn(x):
        return x * p.m() + (1 if isinstance(p, P) else 0)

    run_steps(fn, _x, [None, lambda: setattr(p, "__class__", Q), None, lambda: setattr(p, "__class__", P), None])


def test_functools_partial_arguments_mutated():
    def mul(a, b):
        return a * b
    by_keyword = functools.partial(mul, b=2)
    positional = functools.partial(mul, 2)

    def fn(x):
        return by_keyword(x) + positional(x)

    run_steps(fn, _x, [None, lambda: by_keyword.keywords.__setitem__("b", 5), None,
                       lambda: positional.__setstate__((mul, (9,), {}, None)), None])


# ---- across processes ----------------------------------------------------------------------------------------

PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def f(x):
        return lin(x) + x.add(1)

    mode = sys.argv[1]
    if mode == "forward":
        torch.nn.Linear.forward = lambda self, x: x * 7
    elif mode == "tensor_add":
        torch.Tensor.add = lambda self, other: self - other
    elif mode == "setattr":
        object.__setattr__(lin, "weight", torch.ones(4, 4))
    compiled = framejit.compile(f, backend=sys.argv[2])
    x = torch.arange(8.0).reshape(2, 4)
    out, ref = compiled(x).tolist(), f(x).tolist()
    stats = framejit.stats()
    print(json.dumps({"out": out, "ref": ref, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')


def _run(tmp_path, mode: str, backend: str) -> dict:
    return run_cache_program(tmp_path, "gaps_program.py", PROGRAM, mode, backend,
                             preload=BACKEND_MODULES[backend])


def _close(got: list, want: list) -> bool:
    """Equal up to float rounding (ONNX Runtime's Gemm may round a Linear differently from torch's addmm)."""
    return torch.allclose(torch.tensor(got), torch.tensor(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_cache_rechecks_library_class_attributes(tmp_path, backend):
    cold = _run(tmp_path, "plain", backend)
    assert _close(cold["out"], cold["ref"]) and cold["traced"] >= 1
    warm = _run(tmp_path, "plain", backend)
    assert _close(warm["out"], warm["ref"]) and warm["traced"] == 0 and warm["loaded"] >= 1  # the cache is used
    for mode in ("forward", "tensor_add", "setattr"):
        changed = _run(tmp_path, mode, backend)
        assert not _close(changed["ref"], cold["ref"]), mode  # the change matters to the program
        assert _close(changed["out"], changed["ref"]), mode
