"""The guard of an attribute read from the instance dict of a class with `__getattr__` runs no user code once the
attribute is deleted (issue 12: hhuntG3 MED-1), differential (eager vs compiled, the same state changes on each).

NOTE [Instance attributes past a __getattr__] (framejit/capture/lookup.py): the entry made while `foo` is in
`o.__dict__` is guarded `'foo' in o.__dict__` before its value guard reads `o.foo`; before, after `del o.foo` that
read ran the class's `__getattr__` in the guard and again explaining the miss (5 extra calls per miss here).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def make_class():
    class Served:
        def __init__(self):
            self.log = []

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            self.log.append(name)
            return 7 + len(self.log)
    return Served


def read_foo(x, o):
    return x + o.foo


def _steps(o):
    yield None
    yield None
    o.foo = 1
    yield None
    del o.foo
    yield None
    yield None
    o.foo = 2
    yield None
    del o.foo
    yield None


def test_deleted_instance_attribute_runs_getattr_as_eager_only():
    cls = make_class()
    eager_obj, compiled_obj = cls(), cls()
    compiled = framejit.compile(read_foo, backend=CountingBackend())
    for size, _, _ in zip(range(2, 20), _steps(eager_obj), _steps(compiled_obj)):
        x = torch.randn(size % 3 + 1)
        assert_same(compiled(x, compiled_obj), read_foo(x, eager_obj))
        assert compiled_obj.log == eager_obj.log
