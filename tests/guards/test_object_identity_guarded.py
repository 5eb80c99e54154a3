"""`A is B` of two objects from outside is guarded (NOTE [Identity of objects guarded] in capture/comparisons.py;
review revE E6's f4). Differential: eager vs framejit over calls where a global is rebound between calls so
that the two objects become one object and then two again.
"""
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
