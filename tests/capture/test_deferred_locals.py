"""Frames whose code calls `locals()` (or `vars()`, `dir()`) only on some paths (NOTE [Locals readers decided
where they are reached] in framejit/capture/deferred_readers.py): traced while the call is not reached and no
break can lead to it; the frame runs wholly eagerly (exact locals) where the trace reaches the call or breaks
before it. Before, every such frame ran wholly eagerly (transformers' `generate`, whose `locals()` sits under
`if custom_generate is not None`). Each case runs eagerly and compiled on fresh inputs, >= 2 calls per path,
and asserts how many graphs were made and how many frames ran eagerly.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend


def _run(fn, calls, fullgraph=False):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    before = framejit.stats()["eager_frames"]
    for args in calls:
        x = torch.randn(3)
        expected, actual = fn(x, *args), compiled(x, *args)
        assert type(actual) is type(expected)
        if isinstance(expected, tuple):
            torch.testing.assert_close(actual[0], expected[0])
            assert actual[1:] == expected[1:]
        else:
            torch.testing.assert_close(actual, expected)
    return backend.graph_count, framejit.stats()["eager_frames"] - before


def only_on_request(x, recipe=None):
    y = x * 2
    if recipe is not None and isinstance(recipe, str):
        names = {k: v for k, v in locals().items() if k != "x"}
        return y, sorted(names)
    z = y + 1
    return z.sin(), recipe


def test_a_call_that_is_not_reached_is_traced():
    graphs, eager = _run(only_on_request, [(None,), (None,), (3,)], fullgraph=True)
    assert (graphs, eager) == (2, 0)  # before: the frame ran wholly eagerly, 0 graphs


def test_reaching_the_call_runs_the_frame_eagerly():
    graphs, eager = _run(only_on_request, [(None,), ("hub",), ("hub",), (None,)])
    assert graphs == 1 and eager >= 1  # the locals() path ran as Python, listing eager's names


def break_then_locals(x, k):
    y = x + k
    print("break")
    d = locals()
    return y * 2, sorted(d)


def test_a_break_that_can_reach_the_call_runs_the_frame_eagerly(capsys):
    graphs, eager = _run(break_then_locals, [(1,), (1,), (2,)])
    assert (graphs, eager) == (0, 2)  # the eager entry keeps the trace's guards (k == 1): k = 2 traces again


def locals_first_then_break(x, flag):
    if flag:
        return x, sorted(vars())
    y = x * 3
    print("break")
    return y + 1, flag


def test_a_break_after_which_no_call_can_run_is_taken(capsys):
    graphs, eager = _run(locals_first_then_break, [(False,), (False,), (True,)])
    assert graphs == 2 and eager == 1  # the graph before the break and the resume function's; True ran eagerly


def locals_in_a_loop(x, n):
    for i in range(n):
        x = x + i
        print("step", i)
        if i == 5:
            return x, sorted(dir())
    return x, n


def test_a_call_reachable_by_a_loop_back_edge_runs_the_frame_eagerly(capsys):
    graphs, eager = _run(locals_in_a_loop, [(2,), (3,)])
    assert eager >= 1


def evaluates(x, k):
    if k > 10:
        return x, eval("k + 1")
    return x * k, k


def test_eval_keeps_the_old_rule():
    graphs, eager = _run(evaluates, [(1,), (2,)])
    assert (graphs, eager) == (0, 1)
