"""dict and OrderedDict methods called with arguments that do not bind (issue 11, PyTorch's test_dicts.py):
`d.get()`, `d.pop()`, `d.setdefault()`, `d.update({}, {})`, `d.copy(1)`, `d.get(key=k)` raise CPython's own
TypeError in the trace (NOTE [Argument errors of container methods], container_slots.py).

Before, the models indexed missing arguments (an internal IndexError: the whole frame ran eagerly, and under
fullgraph framejit raised where eager raises nothing) or ignored extra ones (`{}.update({}, {})` returned None
where eager raises TypeError: a silent wrong result). Each program runs eagerly and compiled on fresh inputs,
with no break and no frame run eagerly.
"""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.capture.test_idiom_sweep5 import _run  # eager vs compiled on fresh arguments, break records

_CALLS = [
    lambda d: d.get(),
    lambda d: d.get("a", 1, 2),
    lambda d: d.get(key="a"),
    lambda d: d.pop(),
    lambda d: d.pop("a", 1, 2),
    lambda d: d.setdefault(),
    lambda d: d.update({}, {}),
    lambda d: dict.update(d, {"z": 1}, {}),
    lambda d: d.copy(1),
    lambda d: d.keys(1),
    lambda d: d.items(1),
    lambda d: d.clear(1),
    lambda d: dict.get(d),
]


@pytest.mark.parametrize("cls", [dict, collections.OrderedDict])
def test_methods_called_with_wrong_arguments_raise_eagers_type_error(cls):
    def f(x, d, k):
        out = []
        for call in _CALLS:
            try:
                call(d)
                out.append("no error")
            except TypeError as e:
                out.append(str(e))
        d.update({k: len(out)})  # the dict is still usable and its updates are replayed
        return x + len(d), out, d.get(k), d.pop("a", None), d.setdefault("w", k)

    backend, records = _run(f, lambda i: (torch.randn(i + 2), cls(a=i, b=2), f"k{i}"))
    assert not records and len(backend.graphs) == 3  # one per call: the keys and values are guarded constants


def test_fullgraph_raises_the_users_type_error_and_keeps_updates():
    def f(x, d):
        d["seen"] = 1
        try:
            d.update({"q": 1}, {"r": 2})
        except TypeError:
            return x + 1
        return x

    for i in range(2):
        expected_d, d = {"i": i}, {"i": i}
        x = torch.randn(i + 2)
        framejit.reset()
        compiled = framejit.compile(f, fullgraph=True)
        torch.testing.assert_close(compiled(x, d), f(x, expected_d))
        assert d == expected_d == {"i": i, "seen": 1}


@pytest.mark.parametrize("cls", [dict, collections.OrderedDict, collections.defaultdict])
def test_fromkeys_with_wrong_arguments_raises_eagers_type_error(cls):
    calls = [lambda: cls.fromkeys(), lambda k: cls.fromkeys(k, 1, 2), lambda k: cls.fromkeys(1, k),
             lambda k: cls.fromkeys(k, v=3)]

    def f(x, k):
        out = []
        for call in calls:
            try:
                call() if call is calls[0] else call(k)
                out.append("no error")
            except TypeError as e:
                out.append(str(e))
        made = cls.fromkeys(k, len(out))
        return x + len(made), out, made, type(made)

    backend, records = _run(f, lambda i: (torch.randn(i + 2), "abc"[: i + 1]))
    assert not records and 1 <= len(backend.graphs) <= 3
