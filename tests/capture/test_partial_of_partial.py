"""`functools.partial(p, ...)` of a partial p: CPython flattens it (func p.func, args p.args + args, keywords
merged) while p has no instance dict, and reading `p.__dict__` makes that dict for good. framejit neither
makes the dict of a partial it observes (which changed later EAGER code too) nor misses the flattening
(NOTE [Partials of partials] in capture/partials.py). Each program runs eagerly and compiled, several calls,
state changed between them; the eager flattening of the outside partials is checked after the compiled calls."""
from __future__ import annotations

import functools

import torch

import framejit


def scale(x, a, b=1.0, c=0.0):
    return x * a + b + c


P = functools.partial(scale, 2.0)
PK = functools.partial(scale, 2.0, b=1.0, c=4.0)


def _view(q, x):
    return q.func is scale, q.func is P, q.args, sorted(q.keywords.items()), q(x)


def _same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        if isinstance(u, torch.Tensor):
            assert torch.equal(u, v)
        else:
            assert u == v


def _compare(f, args_per_call, between=None):
    c = framejit.compile(f, backend="eager")
    for i, args in enumerate(args_per_call):
        if between is not None:
            between(i)
        _same(f(*args), c(*args))


def _flattens(p) -> bool:
    return functools.partial(p, b=3.0).func is p.func


def test_partial_of_a_global_partial_is_flattened_and_the_global_stays_flattenable():
    def f(x):
        q = functools.partial(P, b=3.0)
        return (*_view(q, x), repr(q).startswith("functools.partial(<function scale"))
    eager_frames = framejit.stats()["eager_frames"]
    _compare(f, [(torch.ones(2),), (torch.arange(3.0),), (torch.ones(1),)])
    assert _flattens(P) and functools.partial(P, b=3.0).args == (2.0,)
    assert framejit.stats()["eager_frames"] == eager_frames


def test_keywords_are_merged_and_a_partial_argument_is_flattened():
    def f(x, p):
        q = functools.partial(p, c=-1.0)
        return q.func is scale, q.args, sorted(q.keywords.items()), q(x), sorted(p.keywords.items())
    p2 = functools.partial(scale, 3.0, b=2.0)
    _compare(f, [(torch.ones(2), PK), (torch.ones(3), PK), (torch.ones(2), p2)])
    assert _flattens(PK) and _flattens(p2)


def test_a_partial_whose_dict_exists_is_not_flattened_and_the_guard_notices_a_new_dict():
    holder = [functools.partial(scale, 2.0)]

    def f(x):
        q = functools.partial(holder[0], b=3.0)
        return q.func is scale, q.func is holder[0], q.args, q(x)

    def between(i):
        if i == 2:
            vars(holder[0])  # makes the dict: from now on eager does not flatten it
        if i == 4:
            holder[0] = functools.partial(scale, 4.0)  # a new partial without a dict
    _compare(f, [(torch.ones(2),)] * 6, between)
    assert _flattens(holder[0])


def test_partial_of_a_partial_made_in_the_trace():
    def f(x):
        p = functools.partial(scale, 2.0)
        q = functools.partial(p, b=3.0)
        return q.func is scale, q.args, sorted(q.keywords.items()), q(x)
    _compare(f, [(torch.ones(2),), (torch.arange(4.0),)])


def test_partials_made_in_the_trace_one_with_a_dict():
    def f(x):
        p = functools.partial(scale, 2.0)
        q = functools.partial(p, b=3.0)
        first = (q.func is scale, q.args, q(x))
        r = functools.partial(scale, 1.5)
        r.tag = "t"  # r has a dict now: not flattened
        s = functools.partial(r, b=0.5)
        return (*first, s.func is r, s.args, s(x))
    _compare(f, [(torch.ones(2),), (torch.arange(4.0),)])


class Sub(functools.partial):
    pass


SUB = Sub(scale, 2.0)


def test_partial_of_a_partial_subclass_instance():
    def f(x):
        q = functools.partial(SUB, b=3.0)
        return q.func is scale, q.func is SUB, q.args, q(x)
    _compare(f, [(torch.ones(2),), (torch.ones(3),)])
    assert _flattens(SUB)
