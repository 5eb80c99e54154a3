"""Small library values read or made inside the compiled region: `Tensor.type()`, `sys.intern`,
dataclasses with `field(default_factory=...)`, identity of containers made while tracing.

Differential (eager vs compiled on fresh inputs, several calls), graph counts asserted.
"""
from __future__ import annotations

import dataclasses
import gc
import sys
import weakref
from typing import Dict, List

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential


def _two(seed):
    return (torch.randn(3), torch.randn(3))


def test_tensor_type_names_and_conversions():
    def fn(a, b):
        m = a.to(torch.float16)
        return (b.type(m.type()), a.type(torch.HalfTensor), b.type("torch.DoubleTensor"), a.type(torch.float64),
                a.type(), m.type())
    assert run_differential(fn, _two).graph_count == 1


def test_tensor_type_of_unknown_name_raises_like_eager():
    def fn(a, b):
        return a.type("torch.NoSuchTensor")
    run_differential(fn, _two, fullgraph=False)


def test_sys_intern():
    def fn(a, b):
        name = sys.intern("lay" + "er")
        return a + len(name), name
    assert run_differential(fn, _two).graph_count == 1


@dataclasses.dataclass
class Output:
    scalar: int = 2
    named: Dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    items: List[torch.Tensor] = dataclasses.field(default_factory=list)

    def scale(self):
        return self.scalar * 2


@dataclasses.dataclass
class Base:
    outer: int


@dataclasses.dataclass
class Derived(Base):
    inner: list = dataclasses.field(default_factory=list)


def test_dataclass_default_factories():
    def fn(x, y):
        a = Output(1)
        b = Output(5, named={"x": x})
        c = Output()
        c.scalar = 6
        c.named["x"] = y
        c.items.append(x)
        d = Derived(3)
        return c, torch.cos(x) * a.scale() + b.named["x"] + c.scalar, a.named is c.named, d.inner, d.outer * x
    assert run_differential(fn, _two).graph_count == 1


def test_identity_of_containers_made_while_tracing():
    class Plain:
        pass

    def fn(x, outside):
        made, other = [x], {"k": x}
        obj = Plain()
        return (made is outside, other is outside, obj is Plain(), made is made, obj is obj,
                outside is outside, x + 1)
    assert run_differential(fn, lambda seed: (torch.randn(3), [1, 2])).graph_count == 1


def test_dynamo_graph_break_call_breaks_the_graph():
    def fn(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    import torch._dynamo  # noqa: F401  (the user's code imports it; framejit only recognises the call)
    assert run_differential(fn, lambda seed: (torch.randn(3),), fullgraph=False).graph_count == 2


@torch.compiler.disable
def _not_compiled(x):
    return x.sin() + 1


def test_torch_compiler_disable_is_honoured():
    def fn(x):
        return _not_compiled(x * 2) * 3
    backend = run_differential(fn, lambda seed: (torch.randn(3),), fullgraph=False)
    assert backend.graph_count == 2  # x * 2 and * 3; the disabled function runs as plain Python
    for gm in backend.graphs:
        assert not any(n.target in (torch.sin, "sin") for n in gm.graph.nodes)


class _WithClassAttr:
    x = 4

    def __init__(self):
        self.a = 6


_INSTANCE = _WithClassAttr()


def test_class_dict_with_c_descriptors():
    def fn(x):
        d = type(_INSTANCE).__dict__  # holds getset descriptors (__dict__, __weakref__)
        return (x + 1 if "x" in d else x + 2), "a" in d, "__weakref__" in d
    assert run_differential(fn, lambda seed: (torch.randn(3),)).graph_count == 1


class _Held:
    def __init__(self, k):
        self.k, self.calls = k, 0


def _reading_through_a_weak_reference(obj):
    ref = weakref.ref(obj)  # as LRScheduler's wrapper of optimizer.step holds `opt_ref`

    def step(x):
        held = ref()
        if held is None:
            return x - 1
        held.calls += 1
        return x * held.k
    return step


def test_weak_reference_read_from_a_closure_is_called_in_the_trace(own_objects):
    # NOTE [Weak references read from the program]: `ref()` answers its referent, guarded; a dead one recompiles
    backend = CountingBackend()
    runs = []
    for compile_ in (lambda f: f, lambda f: framejit.compile(f, backend=backend, fullgraph=True)):
        obj = _Held(2)
        f = compile_(_reading_through_a_weak_reference(obj))
        out = [f(torch.ones(2)), f(torch.ones(2) * 3)]
        obj.k = 5
        out += [f(torch.ones(2)), obj.calls]
        del obj
        gc.collect()
        out.append(f(torch.ones(2)))  # the referent died: eager takes the other branch
        runs.append(out)
    assert_same(runs[1], runs[0])
    # fullgraph: no break; entries: first call, `calls` changed (int symbolic), k changed, referent dead
    assert backend.graph_count == 4


_SLOT = [None]


class _Box:
    def __init__(self):
        self.k = 0


def _store_after_dropping(holder):
    def f(x):
        o = _SLOT[0]()
        holder.clear()  # eager's local `o` keeps the object alive until f returns
        o.k = 5
        return x + o.k
    return f


def test_a_rebound_weak_reference_slot_and_a_referent_kept_through_the_frame(own_objects):
    # NOTE [deref calls only a weak reference]: a guard called the callable that replaced the ref (46 times for
    # 3 calls); NOTE [Referents loaded once, at entry]: a replayed store reloaded the dead ref (AttributeError)
    lin = torch.nn.Linear(2, 2)
    results = []
    for compile_ in (lambda f: f, lambda f: framejit.compile(f, backend="eager")):
        calls, boxes, holder = [], [], []
        rr = weakref.ref(lin)

        def f(x):
            return rr()(x)
        g, out = compile_(f), []
        out += [g(torch.ones(2)), g(torch.full((2,), 3.0))]

        def counted():
            calls.append(1)
            return lin
        rr = counted
        out += [g(torch.ones(2)), g(torch.zeros(2))]
        store = compile_(_store_after_dropping(holder))
        for k in range(2):  # a new referent per call, held only by `holder`
            box = _Box()
            holder.append(box)
            _SLOT[0] = weakref.ref(box)
            boxes.append(_SLOT[0])
            del box
            out.append(store(torch.ones(1) * k))
        gc.collect()  # (a trace's own cycles may hold the first call's referent until collected)
        results.append((out, len(calls), [b() for b in boxes]))
    (want, want_calls, want_alive), (got, got_calls, got_alive) = results
    assert_same(got, want)
    assert got_calls == want_calls == 2 and got_alive == want_alive == [None, None]


class _Cached:
    def __init__(self, k):
        self.k = k


def _weak_cache_get(x, key, cache, log):
    o = cache.get(key)
    if o is None:
        o = _Cached(len(key))
        cache[key] = o
    log.append(o.k)
    return x * o.k, len(cache)


def test_objects_of_a_traced_call_die_when_the_call_returns():
    # NOTE [Trace garbage collected] (framejit/fake_modes.py): the cycles a trace leaves held the objects the
    # traced call made or got until the cyclic collector ran: after each call that traced, the cache still held
    # the object eager had dropped (len 2 where eager answers 1); collection is off, as between two automatic
    # collections
    compiled = framejit.compile(_weak_cache_get, backend="eager")
    runs = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for f in (_weak_cache_get, compiled):
            cache, log, out = weakref.WeakValueDictionary(), [], []
            for key in ("ab", "ab", "abc", "ab", "abcd"):
                y, n = f(torch.ones(2), key, cache, log)
                out.append((y.tolist(), n, list(cache.keys())))
            runs.append((out, log))
    finally:
        if enabled:
            gc.enable()
    assert runs[0] == runs[1]
