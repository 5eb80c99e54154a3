"""Stores on a function from outside, replayed after the graph (NOTE [Attributes stored on functions from
outside] in framejit/capture/side_effects.py), against the other ways the same call reaches that function:
its `__dict__` read or written afterwards (review revX HIGH-1), and the container it was reached through
rebound afterwards (HIGH-2, NOTE [Write targets bound before the writes])."""
from __future__ import annotations

import functools

import pytest
import torch

import framejit


def through_vars(x):
    through_vars.calls += 1
    return x + vars(through_vars)["calls"]


def counted_keys(x):
    counted_keys.new = 1
    return x + len(counted_keys.__dict__)


def dict_store_after(x):
    dict_store_after.calls = dict_store_after.calls + 5
    dict_store_after.__dict__["calls"] = dict_store_after.calls + 2  # eager: this store wins
    return x + dict_store_after.calls


def dict_update_after(x):
    dict_update_after.calls = 5
    dict_update_after.__dict__.update(calls=x.shape[0] + 9)
    return x + dict_update_after.calls


def dict_get_after(x):
    dict_get_after.calls += 1
    return x + dict_get_after.__dict__.get("calls", -1)


def base(y):
    return y


def wraps_after(x):
    base.calls += 1

    @functools.wraps(base)  # update_wrapper copies base.__dict__
    def wrapper(y):
        return base(y)
    return x + wrapper.calls


def _run(fn, call, target):
    """Three calls over changing sizes: each result and `target`'s attributes after it."""
    target.__dict__.clear()
    target.calls = 0
    out = []
    for n in (2, 3, 2):
        result = call(torch.arange(float(n)))
        out.append((result, dict(target.__dict__)))
    return out


@pytest.mark.parametrize("fn", [through_vars, counted_keys, dict_store_after, dict_update_after, dict_get_after,
                                wraps_after], ids=lambda f: f.__name__)
def test_function_dict_after_a_store_on_the_function(fn):
    target = base if fn is wraps_after else fn
    expected = _run(fn, fn, target)
    actual = _run(fn, framejit.compile(fn), target)
    for (out, state), (out_e, state_e) in zip(actual, expected):
        torch.testing.assert_close(out, out_e)
        assert state == state_e


def first(x):
    return x


def second(x):
    return x


class Obj:
    pass


o1, o2 = Obj(), Obj()
fn_list, fn_box, obj_box, l1, l2 = [first], {"f": first}, {"o": o1}, [], []
list_box = {"l": l1}


def rebind_list_item(x):
    fn_list[0].calls += 1  # lands on the function the trace saw, not on the one stored next
    fn_list[0] = second if fn_list[0] is first else first
    return x + first.calls * 10 + second.calls


def rebind_dict_item(x):
    fn_box["f"].calls += x.shape[0]
    fn_box["f"] = second if fn_box["f"] is first else first
    return x + first.calls * 10 + second.calls


def rebind_dict_object(x):
    obj_box["o"].calls += 1
    obj_box["o"] = o2 if obj_box["o"] is o1 else o1
    return x + o1.calls * 10 + o2.calls


def rebind_then_append(x):
    old = list_box["l"]
    list_box["l"] = l2 if old is l1 else l1
    old.append(x.shape[0])
    return x + len(l1) * 10 + len(l2)


DATA = list(range(1, 11))
iter_box = {}


def swap_then_advance(x):
    it = iter_box["a"]
    iter_box["a"], iter_box["b"] = iter_box["b"], iter_box["a"]
    return x + next(it)  # moves the iterator the trace read, now under "b"


def _reset():
    fn_list[0], fn_box["f"], obj_box["o"], list_box["l"] = first, first, o1, l1
    first.calls = second.calls = o1.calls = o2.calls = 0
    l1.clear()
    l2.clear()
    iter_box.update(a=iter(DATA), b=iter(DATA[::-1]))


def _run_rebinding(call):
    _reset()
    out = []
    for n in (2, 3, 2, 4):
        result = call(torch.arange(float(n)))
        iters = (iter_box["a"].__reduce__()[2], iter_box["b"].__reduce__()[2])  # their positions
        out.append((result, first.calls, second.calls, o1.calls, o2.calls, list(l1), list(l2), iters))
    return out


@pytest.mark.parametrize("fn", [rebind_list_item, rebind_dict_item, rebind_dict_object, rebind_then_append,
                                swap_then_advance],
                         ids=lambda f: f.__name__)
def test_store_target_rebound_later_in_the_call(fn):
    expected = _run_rebinding(fn)
    actual = _run_rebinding(framejit.compile(fn))
    for (out, *state), (out_e, *state_e) in zip(actual, expected):
        torch.testing.assert_close(out, out_e)
        assert state == state_e
