"""A bound method held under two names before a graph break is one object after it (NOTE [One object per
value] in capture/codegen.py)."""
import torch

import framejit


class _Thing:
    def meth(self):
        return 1


def one_method_two_names(x, o, d, lock):
    a = o.meth
    a2, b = a, d.get
    b2, c = b, lock.locked
    c2, box = c, [b]
    print("break")
    return x + 1, a is a2, b is b2, c is c2, box[0] is b2, id(a) == id(a2), len({b, b2}), a == a2


def test_a_bound_method_is_one_object_after_a_break():
    # NOTE [One object per value] (capture/codegen.py): each name was rebuilt as `o.meth` read again, a new
    # bound method object per name (eager: the same object)
    import threading
    compiled = framejit.compile(one_method_two_names, backend="eager")
    for i in range(3):
        x = torch.randn(2)
        args = (_Thing(), {"k": i}, threading.Lock())
        want, got = one_method_two_names(x, *args), compiled(x, *args)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:], (want, got)


def str_method_two_names(x, s):
    e = s.upper
    e2 = e
    print("break")
    return x + 1, e is e2, e2(), id(e) == id(e2)


def test_a_method_of_a_str_is_one_object_after_a_break():
    # NOTE [One object per value] (capture/codegen.py): `s.upper` of a str from outside was rebuilt per name
    compiled = framejit.compile(str_method_two_names, backend="eager")
    for i, s in enumerate(("ab", "ab", "cd")):
        x = torch.randn(2) + i
        want, got = str_method_two_names(x, s), compiled(x, s)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:] == (True, s.upper(), True), (want, got)
