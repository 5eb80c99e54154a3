"""`except T` after the raised class's bases change between calls takes eager's branch (NOTE [MRO guarded]
in capture/lookup.py, CHECK_EXC_MATCH in capture/handlers/blocks.py). Differential: the same inputs, the
bases reassigned before the 2nd call, so only a guard can notice."""
from __future__ import annotations

import torch

import framejit


def _classes():
    class E1(Exception):
        pass

    class E2(Exception):
        pass

    class Mine(E1):
        pass
    return E1, E2, Mine


def _make_frame_handler():
    E1, E2, Mine = _classes()

    def f(x):
        try:
            raise Mine()
        except E2:
            return x - 1
        except Exception:
            return x + 1
    return f, Mine, E2


def _make_callee_handler():
    E1, E2, Mine = _classes()

    def helper(t):
        try:
            raise Mine()
        except E2:
            return t - 1
        except E1:
            return t + 1

    def f(x):
        return helper(x) * 2
    return f, Mine, E2


def _differential(make):
    eager, eager_mine, eager_e2 = make()
    compiled_fn, mine, e2 = make()
    compiled = framejit.compile(compiled_fn, backend="eager")
    x = torch.arange(3.0)
    results = []
    for call in range(3):
        if call == 1:
            eager_mine.__bases__ = (eager_e2,)
            mine.__bases__ = (e2,)
        want, got = eager(x), compiled(x)
        assert torch.equal(got, want), (call, got, want)
        results.append(want)
    assert not torch.equal(results[0], results[1])  # the change matters in eager


def test_a_handler_in_the_frame_follows_the_new_bases():
    # before: the 2nd and 3rd calls returned x + 1 (the entry traced with Mine(E1) was hit), eager x - 1
    _differential(_make_frame_handler)


def test_a_handler_in_an_inlined_callee_follows_the_new_bases():
    # before: (x + 1) * 2 where eager gives (x - 1) * 2
    _differential(_make_callee_handler)


def test_except_ignores_a_metaclass_subclasscheck():
    """Review revC C2: CPython's `except T` tests the MRO (PyType_IsSubtype), never a metaclass's
    __subclasscheck__/__instancecheck__; framejit used isinstance and took the wrong handler."""
    class Meta(type):
        def __subclasscheck__(cls, sub):
            return True

        def __instancecheck__(cls, inst):
            return True

    class Weird(Exception, metaclass=Meta):
        pass

    def h(x, key):
        try:
            raise KeyError(key)
        except (ValueError, Weird):
            return x - 1
        except KeyError:
            return x + 1

    compiled = framejit.compile(h, backend="eager")
    for key in ("a", "b", "a"):
        x = torch.randn(3)
        assert torch.equal(compiled(x, key), h(x, key))
