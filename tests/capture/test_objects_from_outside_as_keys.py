"""A dict from outside keyed by plain user objects (issue 11, PyTorch's test_dicts.py test_user_defined_object:
`REF[self] = {}` in `__init__`, then `REF[a]["foo"] = x` in the compiled function): an instance of a user class
keeping object's __eq__ and __hash__ is a key by identity, as modules already were (NOTE [Objects as dict keys],
identity_keys.py), with its identity guarded and its class's __eq__/__hash__ lookups guarded.

Before: "dict closure['REF'] has non-constant keys", a break (the frame, or the resume function holding such a
dict, ran wholly eagerly). The programs run eagerly and compiled on fresh objects with no break and no frame run
eagerly, and the nested dicts' updates are replayed into the real ones; a class given an __eq__ after compiling
recompiles and stays equal to eager.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames, logged_breaks

_REF: dict = {}


class _Obj:
    def __init__(self):
        _REF[self] = {}


def _store(a, x):
    _REF[a]["foo"] = x * 2
    hits = sum(1 for k in _REF if k is a)
    return x + len(_REF[a]) + hits, a in _REF


def test_registry_keyed_by_plain_objects_is_read_and_updated_in_the_trace():
    backend = CountingBackend()
    compiled = framejit.compile(_store, backend=backend)
    before = eager_frames()
    with logged_breaks() as records:
        for i in range(3):
            _REF.clear()
            a, b = _Obj(), _Obj()
            x = torch.randn(i + 2)
            expected = _store(a, x)
            got = compiled(b, x)
            torch.testing.assert_close(got[0], expected[0])
            assert got[1] is expected[1] is True
            torch.testing.assert_close(_REF[b]["foo"], x * 2)
            assert list(_REF) == [a, b]
            torch.testing.assert_close(_REF[a]["foo"], x * 2)
    assert not list(records) and eager_frames() == before and 1 <= len(backend.graphs) <= 3


def test_a_class_given_eq_after_compiling_recompiles():
    class Key:
        pass

    def f(d, k, x):
        return x + d.get(k, 0)

    compiled = framejit.compile(f, backend=CountingBackend())
    k = Key()
    d = {k: 1}
    x = torch.randn(2)
    torch.testing.assert_close(compiled(d, Key(), x), f(d, Key(), x))
    torch.testing.assert_close(compiled(d, k, x), x + 1)
    Key.__eq__ = lambda self, other: True
    Key.__hash__ = lambda self: hash(k.__class__)  # every Key now equals k: d.get finds it
    other = Key()
    assert f({k: 1}, other, x).tolist() == (x + 1).tolist()
    torch.testing.assert_close(compiled({k: 1}, other, x), f({k: 1}, other, x))
