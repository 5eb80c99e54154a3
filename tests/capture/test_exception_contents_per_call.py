"""Exceptions of classes with a Python __init__ made while tracing hold no object shared between calls or
copied from the user's (NOTE [Immutable exception contents] in capture/user_exceptions.py)."""
import torch

import framejit

CFG = {"lvl": 0}
LST = [1, 2]


class Holds(Exception):
    def __init__(self, a):
        self.info = {"a": a}
        self.hist = [[a]]


class Points(Exception):
    def __init__(self, a):
        self.cfg = CFG
        self.lst = LST
        self.a = a


class Keeps(Exception):
    def __init__(self, a):
        self.a = a


def made(x):
    return x + 1, Holds(1)


def caught_global(x, i):
    try:
        raise Points(i)
    except Points as e:
        e.cfg["hits"] = e.cfg.get("hits", 0) + 1
        e.lst.append(-1)
        return x + e.a, e.cfg is CFG, e.lst is LST


def caught_args(x):
    try:
        raise Keeps([1, 2])
    except Keeps as e:
        e.args[0].append(3)
        return x + len(e.a), e.a is e.args[0], len(e.args[0])


def _eager_and_compiled(run):
    CFG.clear(); CFG["lvl"] = 0; LST[:] = [1, 2]
    want = run(lambda f: f)
    state = (dict(CFG), list(LST))
    CFG.clear(); CFG["lvl"] = 0; LST[:] = [1, 2]
    got = run(lambda f: framejit.compile(f, backend="eager"))
    assert repr(got) == repr(want) and (dict(CFG), list(LST)) == state


def test_each_calls_exception_has_its_own_dict_and_lists():
    def run(wrap):
        f, out = wrap(made), []
        for i in range(3):
            _, e = f(torch.ones(2))
            e.info["calls"] = e.info.get("calls", 0) + 1
            e.hist[0].append(i)
            out.append((e.info, e.hist))
        return out
    _eager_and_compiled(run)


def test_an_exception_keeps_the_users_objects():
    _eager_and_compiled(lambda wrap: [wrap(caught_global)(torch.ones(2), i) for i in range(3)])


def test_args_and_attributes_are_one_object_per_call():
    _eager_and_compiled(lambda wrap: [wrap(caught_args)(torch.ones(2)) for _ in range(3)])
