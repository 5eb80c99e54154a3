"""Saving an entry searches the interpreter's objects for a function's class at most once per function
(issue 16, NOTE [Functions by the class that holds them] in capture/locators.py).

A function with no importable name may be found as the class-dict entry that holds it; finding that class
scans every object of the interpreter (gc.get_referrers: ~0.15 s each with transformers imported). Closure
paths (NOTE [Closure cells by path]) start from the inlined functions, and searched the class of every
unnamed inlined function again for every object they located: a frame inlining 6 closures took 7.4 s to
save in a process that had imported transformers, 49 searches. The search now runs only when the named
roots lead nowhere, and its answer is kept while one entry is saved.
"""
from __future__ import annotations

import sys

from framejit.capture import locators


def _scaler(k):
    def scale(x):
        return x * k
    return scale


def _body_of(functions):
    first, second = functions[0], functions[1]

    def body(x):
        return second(first(x))
    return body


def _held_by_a_class():
    offset = 3

    def shifted(self, x):
        return x + offset
    Holder = type("Holder", (), {"shifted": shifted})
    return Holder, shifted


def _count_searches(monkeypatch) -> list:
    searched = []
    real = locators._search_class_attribute

    def counted(f, fn):
        searched.append(f)
        return real(f, fn)
    monkeypatch.setattr(locators, "_search_class_attribute", counted)
    return searched


def test_paths_from_the_frames_own_cells_search_no_class(monkeypatch):
    searched = _count_searches(monkeypatch)
    functions = [_scaler(i) for i in range(4)]
    body = _body_of(functions)
    with locators.closures(body, [body, *functions]):
        for cell in body.__closure__:
            assert locators.closure_path(cell, body) is not None
        for f in functions[:2]:
            assert locators.resolve(locators.closure_path(f, body), body) is f
    assert searched == []


def test_a_class_held_root_is_searched_once_per_save(monkeypatch):
    # made here, not at import: tests/conftest.py freezes what collection made, which gc.get_referrers skips
    holder, shifted = _held_by_a_class()  # an unnamed function that a class (importable as Holder) holds
    monkeypatch.setattr(sys.modules[__name__], "Holder", holder, raising=False)
    searched = _count_searches(monkeypatch)
    functions = [_scaler(i) for i in range(3)]
    body = _body_of(functions)
    with locators.closures(body, [body, *functions, shifted]):
        for _ in range(5):  # the cell of `offset`, reachable only from the class-held function
            path = locators.closure_path(shifted.__closure__[0], body)
            assert path is not None and locators.resolve(path, body) is shifted.__closure__[0]
    assert sorted(map(id, searched)) == sorted(map(id, [*functions, shifted])), searched  # once each
    with locators.closures(body, [body, shifted]):  # another save searches again (classes may have changed)
        assert locators.closure_path(shifted.__closure__[0], body) is not None
    assert len(searched) == 5
