"""Facts about a class that a trace folds are guarded: `callable(o)` (the class's `__call__`, NOTE [callable()
of an object] in type_checks.py), the dict of a class reached without a source (`type(o).__dict__`), and the
lookups on classes made by exec in a namespace without `__name__` (whose `__module__` is "builtins": NOTE
[Classes made by exec] in lookup.py). Each program runs eagerly and compiled over the same sequence of calls,
with the class changed between calls; results compared exactly."""
from __future__ import annotations

import pytest
import torch

import framejit


def _classes(source: str, name: str | None):
    ns = {} if name is None else {"__name__": name}
    exec(source, ns)
    return ns


def _callable_gains_call(ns):
    o = ns["C"]()
    return (lambda x: x * (2 if callable(o) else 3)), lambda: setattr(ns["C"], "__call__", lambda s: 0)


def _callable_loses_call(ns):
    o = ns["D"]()
    return (lambda x: x * (2 if callable(o) else 3)), lambda: delattr(ns["D"], "__call__")


def _base_gains_call(ns):
    o = ns["C"]()
    return (lambda x: x * (2 if callable(o) else 3)), lambda: setattr(ns["B"], "__call__", lambda s: 0)


def _base_gains_getattribute(ns):
    o = ns["C"]()
    return (lambda x: x * o.k), lambda: setattr(ns["B"], "__getattribute__", lambda s, n: 7)


def _class_getitem_replaced(ns):
    o = ns["C"]()
    return (lambda x: x * type(o)[0]), lambda: setattr(ns["C"], "__class_getitem__", classmethod(lambda c, i: 6))


def _class_dict_len(ns):
    o = ns["C"]()
    return (lambda x: x * len(type(o).__dict__)), lambda: setattr(ns["C"], "z", 1)


def _class_dict_item(ns):
    o = ns["B"]()
    return (lambda x: x * type(o).__dict__["k"]), lambda: setattr(ns["B"], "k", 5)


_SOURCE = """
class B:
    k = 2
class C(B):
    def __class_getitem__(cls, i):
        return 2
class D:
    def __call__(self):
        return 1
"""


@pytest.mark.parametrize("module_name", [None, "user_namespace"])
@pytest.mark.parametrize("program", [_callable_gains_call, _callable_loses_call, _base_gains_call,
                                     _base_gains_getattribute, _class_getitem_replaced, _class_dict_len,
                                     _class_dict_item], ids=lambda p: p.__name__.strip("_"))
def test_a_class_changed_between_calls_is_seen(program, module_name):
    results = []
    for compile_it in (False, True):
        framejit.reset()
        fn, change = program(_classes(_SOURCE, module_name))
        run = framejit.compile(fn, backend="eager") if compile_it else fn
        seen = []
        for call in range(4):
            if call == 2:
                change()
            seen.append(run(torch.arange(4.0) + call))
        results.append(seen)
    for got, want in zip(results[1], results[0]):
        assert torch.equal(got, want)
