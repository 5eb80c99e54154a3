"""A set used to look up a set element (`in`, `discard`, `remove`) is looked up as the frozenset of its elements,
as CPython does (NOTE [Sets looked up as frozensets] in capture/identity_keys.py); `add` and dict lookups keep
the TypeError, a set subclass with its own __hash__ is hashed as itself, and a `remove` that misses runs as
Python. Every result is compared with the same program run eagerly."""
from __future__ import annotations

import torch

import framejit


class Plain(set):
    pass


class Hashed(set):
    def __hash__(self):
        return 7


def membership(x):
    groups = {frozenset("abc"), frozenset(), 1}
    flags = [set("abc") in groups, set("z") in groups, set() in groups, Plain("cab") in groups,
             set("ab") not in groups]
    return x + sum(2 ** i * f for i, f in enumerate(flags))


def discard_and_remove(x):
    groups = {frozenset("ab"), frozenset("cd")}
    groups.discard(set("ab"))
    groups.discard(set("zz"))
    groups.remove(set("dc"))
    return x + len(groups)


def missing_remove(x):
    groups = {frozenset("ab")}
    try:
        groups.remove(set("zz"))
    except KeyError as e:
        return x + len(e.args[0])
    return x


def still_type_errors(x):
    out = x
    for attempt in (lambda: {frozenset("ab")}.add(set("ab")), lambda: set("ab") in {frozenset("ab"): 1},
                    lambda: Hashed() in {1}):
        try:
            out = out + attempt()
        except TypeError:
            out = out - 1
    return out


def _check(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (2, 3, 2):
        x = torch.randn(n)
        assert torch.equal(compiled(x), fn(x)), fn.__name__
    return framejit.explain(fn)(torch.randn(3))


def test_sets_found_as_frozensets_without_a_break():
    for fn in (membership, discard_and_remove):
        report = _check(fn)
        assert report.graph_count == 1 and report.graph_break_count == 0, (fn.__name__, report)


def test_fullgraph_membership_of_a_set_key():
    framejit.reset()
    compiled = framejit.compile(membership, backend="eager", fullgraph=True)
    x = torch.randn(4)
    assert torch.equal(compiled(x), membership(x))


def test_misses_and_type_errors_match_eager():
    for fn in (missing_remove, still_type_errors):
        _check(fn)


FZ = frozenset({3, 1, 2})


def _frozenset_of_frozensets(x, fz):
    made = frozenset([1, 2, 3])
    same = (frozenset(fz) is fz, frozenset(FZ) is FZ, frozenset(made) is made)
    return x + sum(same), frozenset(fz), frozenset(made), made


def test_frozenset_of_an_exact_frozenset_is_that_frozenset():
    # CPython returns an exact frozenset itself from frozenset(fz) (revBO HIGH-2: a new object since c83109b)
    compiled = framejit.compile(_frozenset_of_frozensets, backend="eager")
    for k in (1, 2, 3):
        fz = frozenset(range(k))
        x = torch.full((2,), float(k))
        got, want = compiled(x, fz), _frozenset_of_frozensets(x, fz)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] is fz and got[2] is got[3] and list(got[3]) == list(want[3])
