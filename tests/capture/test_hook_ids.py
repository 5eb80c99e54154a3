"""Hook ids read inside a compiled function (NOTE [Hook ids that never leave the trace], hook_handles.py).

722e8b0 dropped the `RemovableHandle.next_id` guard of a trace whose hook ids never outlive it, deciding
that only from `handle.id` attribute reads outside torch's hook files. Other reads of the id (the handle's
`__dict__`, torch's own `__getstate__`, the keys of the hook dict the id was filed in) baked the first
call's id into the compiled function: a hook registered, read and removed per call returned the same id on
every call where eager returns the ids the counter hands out. Each program here is run eagerly and compiled
alternately on fresh inputs; the compiled call must return the id the counter hands out in that call.
"""
from __future__ import annotations

import collections

import pytest
import torch
from torch.utils.hooks import RemovableHandle

import framejit
from tests.helpers import CountingBackend, assert_same


def _hook(module, args, out):
    return out * 2


_LIN = torch.nn.Linear(3, 3)


@pytest.fixture(autouse=True)
def _no_hooks_left():
    yield
    _LIN._forward_hooks.clear()  # a failing program leaves its hook; the next test starts clean
    _LIN._forward_pre_hooks.clear()

_READS = {
    "instance_dict_item": lambda h: h.__dict__["id"],
    "instance_dict_get": lambda h: h.__dict__.get("id"),
    "instance_dict_values": lambda h: [v for v in h.__dict__.values() if type(v) is int][0],
    "instance_dict_copy": lambda h: dict(h.__dict__)["id"],
    "vars": lambda h: vars(h)["id"],
    "getattr": lambda h: getattr(h, "id"),
    "getstate": lambda h: h.__getstate__()[1],
    "class_getstate": lambda h: RemovableHandle.__getstate__(h)[1],
    "reduce_ex": lambda h: h.__reduce_ex__(2)[2][1],
    "hook_dict_keys": lambda h: list(_LIN._forward_hooks)[0],
    "hook_dict_items": lambda h: [k for k, _ in _LIN._forward_hooks.items()][0],
    "hook_dict_iter": lambda h: next(iter(_LIN._forward_hooks)),
    "hook_dict_max": lambda h: max(_LIN._forward_hooks),
    "hook_dict_popitem": lambda h: _LIN._forward_hooks.copy().popitem()[0],
    "hook_dict_by_weakref": lambda h: list(h.hooks_dict_ref())[0],
    "hook_dict_keys_str": lambda h: int(str(_LIN._forward_hooks.keys())[len("odict_keys(["):-2]),
}


def _program(read):
    def f(x):
        handle = _LIN.register_forward_hook(_hook)
        y = _LIN(x)
        got = read(handle)
        handle.remove()
        return y, got, str(got)
    return f


@pytest.mark.parametrize("name", sorted(_READS))
def test_a_hook_id_read_in_the_trace_is_this_calls_id(name):
    f = _program(_READS[name])
    compiled = framejit.compile(f, backend=CountingBackend())
    for _ in range(3):
        x = torch.randn(2, 3)
        start = RemovableHandle.next_id
        y, got, text = f(x)
        assert got == start and text == str(start)  # eager: the id the counter handed out in this call
        start = RemovableHandle.next_id
        cy, cgot, ctext = compiled(x)
        assert_same(cy, y)
        assert (cgot, ctext) == (start, str(start))
        assert RemovableHandle.next_id == start + 1
        assert not _LIN._forward_hooks


def test_an_id_folded_into_a_tensor_is_this_calls_id():
    def f(x):
        handle = _LIN.register_forward_hook(_hook)
        y = _LIN(x) + handle.__dict__["id"]
        handle.remove()
        return y

    compiled = framejit.compile(f, backend=CountingBackend())
    for _ in range(3):
        x = torch.randn(2, 3)
        start = RemovableHandle.next_id
        expected = f(x) - start  # the output less this call's id
        start = RemovableHandle.next_id
        assert_same(compiled(x) - start, expected)


def test_hooks_only_registered_called_and_removed_still_trace_once():
    # the pattern 722e8b0 made cheap: no id read by the program, so no guard on the counter
    backend = CountingBackend()

    def f(x):
        handle = _LIN.register_forward_hook(_hook)
        with _LIN.register_forward_pre_hook(lambda m, args: (args[0] + 1,)):
            y = _LIN(x)
        handle.remove()
        return y + (1 if _LIN._forward_hooks else 0)

    compiled = framejit.compile(f, backend=backend)
    for _ in range(6):
        x = torch.randn(2, 3)
        assert_same(compiled(x), f(x))
        assert not _LIN._forward_hooks and not _LIN._forward_pre_hooks
    assert backend.graph_count == 1


def test_str_of_an_ordered_dicts_keys_view_names_odict_keys():
    def f(x):
        d = collections.OrderedDict(a=1, b=2)
        return x + 1, str(d.keys()), repr(d.values()), str(d.items())

    compiled = framejit.compile(f, backend=CountingBackend())
    for n in (2, 3):
        x = torch.randn(n)
        ey, *etext = f(x)
        cy, *ctext = compiled(x)
        assert_same(cy, ey)
        assert ctext == etext
