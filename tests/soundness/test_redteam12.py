"""Adversarial differential programs, twelfth round (issue 12, red team): state read through enum members,
module `__getattr__`, walks that skip duplicate modules and parameters, and effects before a graph that
raises at run time. Each runs eagerly and compiled on separate but equal state over several calls, changing
the state between calls, and compares results and the state left behind."""
from __future__ import annotations

import enum
import types

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _module(source: str, name: str) -> types.ModuleType:
    m = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), m.__dict__)
    return m


# ---- NOTE [Attributes of enum members] (attributes.py) ---------------------------------------------------

_ENUM_SOURCE = '''
import enum
SCALES = {"A": 2, "B": 3}

class Mode(enum.Enum):
    A = 1
    B = 2
    @property
    def scale(self):
        return SCALES[self.name]
    def shift(self):
        return self.value * 2

class Planet(enum.Enum):
    EARTH = (1, 2)
    MARS = (3, 4)
    def __init__(self, mass, radius):
        self.mass = mass
        self.radius = radius

def f(x, m, p):
    return x * m.scale + m.shift() + p.mass * p.radius
'''


def test_attributes_of_enum_members_are_read_each_call():
    # before: an enum member was a constant and every attribute was folded with getattr while tracing: after
    # SCALES["A"] = 10 (a property), Mode.shift replaced on the class, or Planet.EARTH.mass = 10 (set by
    # __init__), the compiled function kept the first call's answers (x * 2 + 2 + 2 where eager gives 10 ...)
    eager_m, comp_m = _module(_ENUM_SOURCE, "rt12_enum_eager"), _module(_ENUM_SOURCE, "rt12_enum_comp")
    compiled = framejit.compile(comp_m.f, backend=CountingBackend())
    for step in range(5):
        for m in (eager_m, comp_m):
            if step == 1:
                m.SCALES["A"] = 10
            elif step == 2:
                m.Mode.shift = lambda self: self.value * 100
            elif step == 3:
                m.Planet.EARTH.mass = 7
        member = "B" if step == 4 else "A"
        for _ in range(2):
            expected = eager_m.f(torch.ones(2), eager_m.Mode[member], eager_m.Planet.EARTH)
            actual = compiled(torch.ones(2), comp_m.Mode[member], comp_m.Planet.EARTH)
            assert_same(actual, expected)


def test_enum_name_and_value_stay_folded():
    # the members' own name/value (Enum's) are still constants: one graph for several calls, no break
    class Color(enum.Enum):
        R = "r"

    def f(x, c):
        return x * len(c.name + c.value)
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for _ in range(3):
        assert_same(compiled(torch.ones(2), Color.R), f(torch.ones(2), Color.R))
    assert backend.graph_count == 1
    assert framejit.explain(f)(torch.ones(2), Color.R).graph_break_count == 0


# ---- NOTE [Module __getattr__] (attributes.py) -------------------------------------------------------------

_PEP562_SOURCE = '''
N = [0]
def __getattr__(name):
    N[0] += 1
    return len(name) * N[0]
'''


def test_a_module_getattr_runs_once_per_call():
    # before: `h.abcd` was computed by the module's __getattr__ while tracing and folded with a value guard
    # that ran __getattr__ again on every call: the counter grew 3 times per call and each call recompiled
    # (x * 12 ... where eager gives x * 4, x * 8, x * 12)
    def make(name):
        h = _module(_PEP562_SOURCE, name)
        h.__file__ = f"<{name}>"
        m = _module("def f(x):\n    return x * h.abcd\n", name + "_user")
        m.h = h
        return h, m.f
    (eager_h, eager_f), (comp_h, f) = make("rt12_pep562_eager"), make("rt12_pep562_comp")
    compiled = framejit.compile(f, backend=CountingBackend())
    for step in range(4):
        if step == 3:
            eager_h.abcd = comp_h.abcd = 5  # now in the module's dict: __getattr__ is not called
        assert_same(compiled(torch.ones(1)), eager_f(torch.ones(1)))
        assert comp_h.N == eager_h.N


# ---- NOTE [Walks that skip duplicates] (modules.py) --------------------------------------------------------

def _shared_walks(x, m):
    n = 0
    for _ in m.named_modules():
        n += 1
    for _ in m.children():
        n += 10
    return x * n + sum(p.sum() for p in m.parameters())


def _seq():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2, bias=False))


def test_sharing_a_submodule_or_a_weight_later_changes_the_walks():
    # before: the walks skip an entry whose object was seen before, but the entry traced with distinct
    # entries guarded nothing about it, and a skipped duplicate was not read at all: after
    # `m[1] = m[0]` (or tying the weights) the compiled call still counted and summed both entries; after
    # untying, the entry traced tied kept summing one weight
    eager_m, comp_m = _seq(), _seq()
    compiled = framejit.compile(_shared_walks, backend=CountingBackend())
    for step in range(4):
        for m in (eager_m, comp_m):
            if step == 1:
                m[1].weight = m[0].weight
            elif step == 2:
                m[1].weight = torch.nn.Parameter(torch.ones(2, 2))
            elif step == 3:
                m[1] = m[0]
        for _ in range(2):
            assert_same(compiled(torch.ones(1), comp_m), _shared_walks(torch.ones(1), eager_m))


# ---- NOTE [Tensor ops that cannot fail at run time] (side_effects.py) ------------------------------------

class _State:
    def __init__(self):
        self.n = 0
        self.log = []


def _counted(x, idx, st):
    x.add_(1)            # the graph writes an input: the call cannot rerun eagerly
    y = torch.sin(x) * 2 - x.neg()
    st.n += 1            # after ops that cannot fail: eager makes it whenever the gather fails
    st.log.append("a")
    z = torch.gather(y, 0, idx)
    st.log.append("b")   # after the failing op: eager makes it only when the gather succeeds
    return z


def test_effects_after_ops_that_cannot_fail_are_made_when_the_graph_raises():
    # before: the effects after `x.add_(1)` counted as "late" (after the graph's first op), so a call whose
    # gather raised lost `st.n += 1` and the "a" append that eager makes before raising
    compiled = framejit.compile(_counted, backend=CountingBackend())
    worlds = [(_counted, _State()), (compiled, _State())]
    for i in (0, 7, 1, -9):
        seen = []
        for fn, st in worlds:
            x = torch.zeros(3)
            try:
                out = fn(x, torch.tensor([i]), st)
            except RuntimeError as e:
                out = str(e).split("\n")[0]
            seen.append((out, x, st.n, list(st.log)))
        assert_same(seen[1], seen[0])
    assert worlds[1][1].n == 4
