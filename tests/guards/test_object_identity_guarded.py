"""`A is B` of two objects from outside is guarded (NOTE [Identity of objects guarded] in capture/comparisons.py;
review revE E6's f4). Differential: eager vs framejit over calls where a global is rebound between calls so
that the two objects become one object and then two again.
"""
import pytest
import torch

import framejit


class _Obj:
    pass


A = _Obj()
B = _Obj()


class _Holder:
    def __init__(self, a, b):
        self.a, self.b = a, b


def _is_same(x):
    return x * (2 if A is B else 3)


def _is_not(x, h):
    return x + (10 if h.a is not h.b else 20)


def test_globals_rebound_to_one_object():
    global B
    compiled = framejit.compile(_is_same, backend="eager")
    for rebind in (False, True, False, True):
        B = A if rebind else _Obj()
        x = torch.arange(3.0)
        assert torch.equal(compiled(x), _is_same(x))


def test_attributes_made_one_object():
    compiled = framejit.compile(_is_not, backend="eager")
    shared = _Obj()
    for h in (_Holder(_Obj(), _Obj()), _Holder(shared, shared), _Holder(_Obj(), _Obj())):
        x = torch.arange(2.0)
        assert torch.equal(compiled(x, h), _is_not(x, h))
    h.b = h.a
    assert torch.equal(compiled(x, h), _is_not(x, h))


L = [A]


def _eq(x):
    return x * (2 if A == B else 3)


def _ne(x):
    return x * (2 if A != B else 3)


def _in_tuple(x):
    return x * (2 if A in (B,) else 3)


def _in_global_list(x):
    return x * (2 if B in L else 3)


def _any_eq(x):
    return x * (2 if any(o == B for o in L) else 3)


@pytest.mark.parametrize("fn", [_eq, _ne, _in_tuple, _in_global_list, _any_eq], ids=lambda f: f.__name__)
def test_default_equality_and_membership_follow_rebinding(fn):
    """`==`, `!=` and `in` of objects with object's own __eq__ are identity (review revH H4): guarded as `is`."""
    global B
    compiled = framejit.compile(fn, backend="eager")
    for rebind in (False, True, False, True):
        B = A if rebind else _Obj()
        x = torch.arange(3.0)
        assert torch.equal(compiled(x), fn(x)), (fn.__name__, rebind)
