"""Graph breaks inside try blocks (NOTE [Breaks inside try blocks] in framejit/capture/graph_break.py).

The unsupported step runs in a plain tail function, under a copy of the frame's own exception table, so
an exception it raises reaches the frame's handlers exactly as in eager. Each edge out of the step then
trampolines, from outside every exception region, into a hooked resume function that holds the rest of
the frame, try body, handlers and finally blocks included, so that rest is captured. Exceptions raised by
the resumed code are handled by the resume function's own copy of the handlers, once.

Each case runs eagerly and compiled on three fresh input sets (tests/helpers.run_differential: results,
printed output, exceptions, inputs such as logs after the call, global state) and asserts the number of
graphs: more than one means code after the break inside the try was captured.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def one(*shape):
    return lambda seed: (torch.randn(*shape),)


def with_log(*shape):
    return lambda seed: (torch.randn(*shape), [])


def failing(x):
    print("failing now")
    raise ValueError("from failing")


def try_finally_print(x, log):
    try:
        y = x * 2
        print("in try")
        y = y.sin()
    finally:
        log.append("finally")
        y = y + 1
    return y
def try_finally_raise_after_break(x, log):
    try:
        y = x * 2
        print("before")
        y = y + 1
        failing(y)
    finally:
        log.append("finally once")
    return y
def try_except_after_break(x, log):
    try:
        y = x.cos()
        print("before")
        failing(y)
        y = y * 100
    except ValueError as e:
        log.append(str(e))
        y = y - 1
    return y * 2
def try_keyword_call(x):
    try:
        y = x * 2
        print("keywords", end="!\n", sep="-")
        z = y + 1
    except TypeError:
        z = x
    return z
def try_item_in_loop(x):
    total = x * 0
    for i in range(3):
        try:
            s = (x - x).sum().item()
            total = total + x * (s + i)
        except ZeroDivisionError:
            total = total - 1
    return total
def try_branch(x):
    try:
        y = x.sin()
        if (y - y).sum() >= 0:
            z = y * 2
        else:
            z = y * 3
        z = z.cos()
    except RuntimeError:
        z = x
    return z
def try_return_in_finally_frame(x, log):
    try:
        y = x * 3
        print("returning")
        return y + 1
    finally:
        log.append("after return")
def try_nested(x, log):
    try:
        y = x * 2
        try:
            print("inner")
            y = y + 1
            failing(y)
        except KeyError:
            log.append("wrong handler")
        finally:
            log.append("inner finally")
    except ValueError:
        log.append("outer caught")
        y = y * 3
    return y
def try_inside_no_grad(x):
    with torch.no_grad():
        try:
            y = x * 2
            print("no_grad try")
            z = y + 1
        finally:
            w = x * 3
    return z, w
def no_grad_inside_try(x):
    try:
        with torch.no_grad():
            y = x * 2
            print("try no_grad")
            z = y + 1
    finally:
        w = x * 3
    return z, w
def break_in_except_handler(x, log):
    try:
        failing(x)
    except ValueError:
        print("handling")
        log.append("handled")
        y = x * 2
    return y + 1


CASES = [
    # x*2 before the print; the resume: sin, the finally's append (replayed) and + 1: 2
    (try_finally_print, with_log(3), 2),
    # x*2; the resume holds +1 up to failing(), a second break in the try (failing prints): 2
    (try_finally_raise_after_break, with_log(3), 2),
    # cos before the print; failing() is a break with no op before it, and it raises: the handler runs as
    # plain Python in a tail function: 1
    (try_except_after_break, with_log(3), 1),
    # a keyword call at the break (the tail function starts at its KW_NAMES): x*2; y+1: 2
    (try_keyword_call, one(3), 2),
    # sum before the first .item(); one resume graph per iteration after it: 4
    (try_item_in_loop, one(3), 4),
    # sin, sum, ge before the branch (always taken: y - y is 0); the taken side's resume: mul, cos: 2
    (try_branch, one(3), 2),
    (try_return_in_finally_frame, with_log(3), 2),
    # x*2 before the print; y+1 before failing() in the inner try; the exception goes through the inner
    # finally to the outer handler in plain Python: 2
    (try_nested, with_log(3), 2),
    # a re-entered grad block on the stack: the rest stays plain after the break: 1
    (try_inside_no_grad, one(3), 1),
    (no_grad_inside_try, one(3), 1),
    # failing() raises inside the try at trace time: the frame breaks before it, with no op captured: 0
    (break_in_except_handler, with_log(3), 0),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_break_inside_try(fn, make_args, graphs):
    backend = run_differential(fn, make_args, fullgraph=False, seeds=(0, 1, 2))
    assert backend.graph_count == graphs


def test_finally_runs_once_when_resumed_code_raises():
    log = []
    compiled = framejit.compile(try_finally_raise_after_break, backend=CountingBackend())
    for expected in (["finally once"], ["finally once"] * 2):
        with pytest.raises(ValueError, match="from failing"):
            compiled(torch.randn(3), log)
        assert log == expected


def test_code_after_break_in_try_is_a_hooked_resume_function():
    """The graph after the break runs in a resume function entered through the frame hook: its graph is
    guarded like any frame (a new dtype recompiles it, the result stays right)."""
    backend = CountingBackend()
    compiled = framejit.compile(try_finally_print, backend=backend)
    for dtype in (torch.float32, torch.float64):
        log, ref_log = [], []
        x = torch.randn(3, dtype=dtype)
        torch.testing.assert_close(compiled(x, log), try_finally_print(x, ref_log))
        assert log == ref_log == ["finally"]
    assert backend.graph_count == 4
    assert any("sin" in str(n.target) for n in backend.graphs[1].graph.nodes)
