"""More facts a compiled entry relies on (issue 12, "every fact is guarded"), each changed between calls.

Code objects replaced on functions (the compiled function itself, an inlined callee, a method),
`__bases__` reassigned, nn.Module call machinery patched per instance or per class, container protocol
methods of nn.Sequential/nn.ModuleList subclasses, ABC answers across processes, and the iteration order
of a set mutated in the compiled region.
"""
from __future__ import annotations

import abc
import textwrap

import pytest
import torch

import framejit
from tests.guards.test_soundness_facts import run_steps
from tests.helpers import BACKEND_MODULES, run_cache_program

BACKENDS = ["eager", "onnxrt"]


def _x():
    return (torch.arange(8.0).reshape(2, 4) - 3,)


# ---- 1. __code__ replaced ----------------------------------------------------------------------------------
def _other_code():
    def other(x):
        return x * 100 - 1
    return other.__code__


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_of_the_compiled_function_replaced(backend):
    def fn(x):
        return x + 1

    original = fn.__code__
    counting = run_steps(fn, _x, [None, None, lambda: setattr(fn, "__code__", _other_code()), None,
                                  lambda: setattr(fn, "__code__", original), None], backend=backend)
    assert counting.graph_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_of_an_inlined_callee_replaced(backend):
    def callee(x):
        return x.sin()

    def fn(x):
        return callee(x) + 1

    run_steps(fn, _x, [None, None, lambda: setattr(callee, "__code__", _other_code()), None], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_of_a_method_replaced(backend):
    class K:
        def m(self, x):
            return x.cos()
    k = K()

    def fn(x):
        return k.m(x) * 2

    run_steps(fn, _x, [None, None, lambda: setattr(K.m, "__code__", (lambda self, x: x - 5).__code__), None],
              backend=backend)


def test_code_of_a_closure_callee_replaced():
    scale = 3

    def callee(x):
        return x * scale

    def fn(x):
        return callee(x) + 1

    def replace():
        def other(x):
            return x - scale
        callee.__code__ = other.__code__

    run_steps(fn, _x, [None, replace, None])


def test_code_of_a_module_forward_replaced():
    class Net(torch.nn.Module):
        def forward(self, x):
            return x.relu()
    net = Net()

    def fn(x):
        return net(x) + 1

    run_steps(fn, _x, [None, lambda: setattr(Net.forward, "__code__", (lambda self, x: x.exp()).__code__), None])


# ---- 2. __bases__ reassigned -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_bases_reassigned_changes_an_inherited_method(backend):
    class A:
        def m(self, x):
            return x + 1

    class B:
        def m(self, x):
            return x * 3

    class C(A):
        pass
    c = C()

    def fn(x):
        return c.m(x)

    counting = run_steps(fn, _x, [None, None, lambda: setattr(C, "__bases__", (B,)), None,
                                  lambda: setattr(C, "__bases__", (A,)), None], backend=backend)
    assert counting.graph_count == 3  # a reassigned MRO is a new tuple, even when equal to an older one


def test_bases_reassigned_changes_an_inherited_class_attribute():
    class A:
        k = 2

    class B:
        k = 5

    class C(A):
        pass
    c = C()

    def fn(x):
        return x * c.k + C.k

    run_steps(fn, _x, [None, lambda: setattr(C, "__bases__", (B,)), None])


def test_bases_of_a_base_reassigned():
    class A:
        k = 2

    class B:
        k = 5

    class Mid(A):
        pass

    class C(Mid):
        pass
    c = C()

    def fn(x):
        return x * c.k

    run_steps(fn, _x, [None, lambda: setattr(Mid, "__bases__", (B,)), None])


def test_bases_reassigned_makes_an_absent_attribute_present():
    class A:
        pass

    class B:
        w = 4

    class C(A):
        pass
    c = C()

    def fn(x):
        return x * getattr(c, "w", 1) + (1 if hasattr(C, "w") else 0)

    run_steps(fn, _x, [None, lambda: setattr(C, "__bases__", (B,)), None])


def test_bases_reassigned_on_a_module_subclass():
    class Base1(torch.nn.Module):
        def act(self, x):
            return x.relu()

    class Base2(torch.nn.Module):
        def act(self, x):
            return x.tanh()

    class Net(Base1):
        def forward(self, x):
            return self.act(x) * 2
    net = Net()

    def fn(x):
        return net(x)

    run_steps(fn, _x, [None, lambda: setattr(Net, "__bases__", (Base2,)), None])


# ---- 4. ABC answers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_abc_answer_changed_by_a_register_and_unchanged_by_another(backend):
    class Shape(abc.ABC):
        pass

    class Other(abc.ABC):
        pass

    class Box:
        pass
    box = Box()

    def fn(x):
        return x + (10 if isinstance(box, Shape) else 1)

    counting = run_steps(fn, _x, [None, None, lambda: Other.register(int), None, lambda: Shape.register(Box), None,
                                  None], backend=backend)
    assert counting.graph_count == 2  # the unrelated registration keeps the answer: no recompile


# ---- across processes ----------------------------------------------------------------------------------------
PROGRAM = textwrap.dedent('''
    import abc, json, sys
    import torch
    import framejit

    class Shape(abc.ABC):
        pass

    class Unrelated(abc.ABC):
        pass

    class Box:
        pass

    class A:
        def m(self, x):
            return x + 1

    class B:
        def m(self, x):
            return x * 3

    class C(A):
        pass

    def callee(x):
        return x.sin()

    def other(x):
        return x * 100

    CHANGES = {"register": lambda: Shape.register(Box), "unrelated": lambda: Unrelated.register(Box),
               "bases": lambda: setattr(C, "__bases__", (B,)),
               "code": lambda: setattr(callee, "__code__", other.__code__), "none": lambda: None}
    box, c = Box(), C()

    def f(x):
        return callee(x) + c.m(x) + (10 if isinstance(box, Shape) else 1)

    before, after, backend = sys.argv[1:4]
    CHANGES[before]()
    compiled = framejit.compile(f, backend=backend)
    x = torch.arange(8.0).reshape(2, 4)
    out, ref = compiled(x).tolist(), f(x).tolist()
    loaded = framejit.stats()["frames_loaded"]
    CHANGES[after]()
    out2, ref2 = compiled(x).tolist(), f(x).tolist()
    stats = framejit.stats()
    print(json.dumps({"out": out, "ref": ref, "out2": out2, "ref2": ref2, "traced": stats["frames_traced"],
                      "loaded": loaded}))
''')


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_cache_guards_abc_answers_mros_and_codes(tmp_path, backend):
    def run(before, after):
        result = run_cache_program(tmp_path, "facts_program.py", PROGRAM, before, after, backend,
                                   preload=BACKEND_MODULES[backend])
        assert result["out"] == result["ref"] and result["out2"] == result["ref2"], (before, after)
        return result

    cold = run("none", "none")
    assert cold["traced"] >= 1
    for before in ("none", "unrelated"):  # the facts hold: loaded, nothing traced
        warm = run(before, "none")
        assert warm["traced"] == 0 and warm["loaded"] >= 1, before
    for after in ("register", "bases", "code"):  # loaded, then the fact changes in the same process
        changed = run("none", after)
        assert changed["ref2"] != changed["ref"], after  # the change matters to the program
        assert changed["loaded"] >= 1 and changed["traced"] >= 1, after
    for before in ("register", "bases", "code"):  # changed before the first call: not loaded wrong
        changed = run(before, "none")
        assert changed["ref"] != cold["ref"], before


# ---- more facts of the same families -----------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_builtin_monkeypatched_in_builtins_after_the_first_call(backend, monkeypatch):
    import builtins
    namespace = {}
    exec("def fn(x):\n    return x * abs(-2) + divmod(7, 2)[0]\n", namespace)
    fn = namespace["fn"]

    run_steps(fn, _x, [None, None, lambda: monkeypatch.setattr(builtins, "abs", lambda v: 10), None,
                       lambda: monkeypatch.setattr(builtins, "divmod", lambda a, b: (-4, 0)), None,
                       lambda: monkeypatch.undo(), None], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_method_defaults_and_kwdefaults_changed(backend):
    class K:
        def m(self, x, s=2):
            return x * s

        def n(self, x, *, t=3):
            return x + t
    k = K()

    def fn(x):
        return k.m(x) + k.n(x)

    run_steps(fn, _x, [None, None, lambda: setattr(K.m, "__defaults__", (9,)), None,
                       lambda: setattr(K.n, "__kwdefaults__", {"t": -5}), None], backend=backend)


def test_dataclass_init_default_changed():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        s: int = 2

    def fn(x):
        return x * Cfg().s

    run_steps(fn, _x, [None, lambda: setattr(Cfg.__init__, "__defaults__", (6,)), None])


def test_metaclass_gains_a_data_descriptor_over_a_class_attribute():
    class Meta(type):
        pass

    class K(metaclass=Meta):
        a = 2

    def fn(x):
        return x * K.a

    run_steps(fn, _x, [None, lambda: setattr(Meta, "a", property(lambda cls: 11)), None,
                       lambda: delattr(Meta, "a"), None])


@pytest.mark.parametrize("backend", BACKENDS)
def test_truth_of_an_object_whose_class_gains___bool___or___len__(backend):
    class Plain:
        pass

    class Sized:
        def __len__(self):
            return 1
    plain, sized = Plain(), Sized()

    def fn(x):
        return x * (2 if plain else 3) + (1 if sized else 0)

    run_steps(fn, _x, [None, None, lambda: setattr(Plain, "__bool__", lambda self: False), None,
                       lambda: delattr(Plain, "__bool__"), None, lambda: setattr(Plain, "__len__", lambda self: 0),
                       None, lambda: setattr(Sized, "__bool__", lambda self: False), None], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_instance_creation_facts_changed(backend):
    class Meta(type):
        pass

    class K(metaclass=Meta):
        def __init__(self):
            self.v = 2

    class Alt:
        v = 13

    def other_init(self):
        self.v = 9

    def fn(x):
        return x * K().v

    run_steps(fn, _x, [None, None, lambda: setattr(K, "__init__", other_init), None,
                       lambda: setattr(K, "__new__", staticmethod(lambda cls: Alt())), None,
                       lambda: delattr(K, "__new__"), None,
                       lambda: setattr(Meta, "__call__", lambda cls: Alt()), None], backend=backend)
