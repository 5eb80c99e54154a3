"""NOTE [Raw dict contents shared]: guards reading many items of one dict subclass through `raw_dict_items` (an
optimizer's state keyed by parameters) copy its contents once per check, not once per guard line; the check
still fails when any item changes, and reads nothing of the dict before its type is checked."""
from __future__ import annotations

import collections

import torch

import framejit
from framejit.guards import Guard
from framejit.guards.codegen import compile_guards
from tests.guards.test_guard_cost import _calls

N = 12


def raw_dict_items(obj):  # the capture's reader (capture/dict_objects.py), as the namespace names it
    return dict(dict.items(obj))


def _guard_function():
    guards = [Guard("___type(d) is ___c1_defaultdict", "TYPE_MATCH", "L['d']", cost=1)]
    guards += [Guard(f"___c0_raw_dict_items(d)[{i}]['step'] == {i}", "CONSTANT_MATCH", f"L['d'][{i}]", cost=2)
               for i in range(N)]
    namespace = {"___c0_raw_dict_items": raw_dict_items, "___c1_defaultdict": collections.defaultdict}
    return compile_guards(guards, "d", namespace)


def _state():
    d = collections.defaultdict(dict)
    for i in range(N):
        d[i]["step"] = i
    return d


def test_the_contents_are_copied_once_per_check():
    guard = _guard_function()
    calls = _calls(guard.check, _state())
    assert calls.count(("py", "raw_dict_items")) == 1
    source = guard.source
    assert source.index("___type(d) is ___c1_defaultdict") < source.index("___c0_raw_dict_items(d)")


def test_every_item_is_still_checked():
    guard = _guard_function()
    assert guard(_state())
    for i in range(N):
        d = _state()
        d[i]["step"] = -1
        assert not guard(d)
        assert not guard({k: v for k, v in _state().items()})  # a plain dict: its type fails first


def test_a_compiled_adamw_step_matches_eager_with_the_shared_state_read():
    def make():
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(3)) for _ in range(N)]
        opt = torch.optim.AdamW(params, lr=0.1, foreach=False)
        return params, opt

    (pe, oe), (pc, oc) = make(), make()
    step = framejit.compile(oc.step, backend="eager")
    for i in range(4):
        for a, b in zip(pe, pc):
            a.grad = torch.full((3,), float(i + 1))
            b.grad = torch.full((3,), float(i + 1))
        oe.step()
        step()
        for a, b in zip(pe, pc):
            torch.testing.assert_close(a, b)  # (the graph rounds AdamW's update differently: ~1e-6)
            torch.testing.assert_close(oe.state[a]["exp_avg"], oc.state[b]["exp_avg"])
