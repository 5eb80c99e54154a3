"""Effects eager makes before a graph op that fails at run time (NOTE [Effects between failing ops] in
framejit/capture/graph_errors.py).

A graph that writes an input cannot simply rerun eagerly when it raises, and the effects recorded for replay
after it were lost when it raised: `x.add_(1); log.append(x.size(0)); return x[torch.tensor([3])] * 2` on a
size-3 `x` raised with `log == []` where eager has `[3]`. Each program runs eagerly and compiled (eager and
onnxrt backends, dynamic=None so the size turns symbolic after it changes) on inputs where a later, an earlier
or no op fails, comparing results, exceptions, the written inputs and every Python effect.
"""
from __future__ import annotations

import random

import pytest
import torch

import framejit

class State:
    n = 0


STATE = State()
COUNT = 0


def size_append(x, log, d):
    x.add_(1)
    log.append(x.size(0))
    return x[torch.tensor([3])] * 2


def effects_between_indexes(x, log, d):
    global COUNT
    x.mul_(2)
    first = x[:1].long()  # 0: indexes computed in the graph (no entry check can test them)
    y = x[first + 2]  # fails for a size-2 x
    log.append("between")
    d["k"] = len(log)
    STATE.n += 1
    COUNT += 1
    return y + x[first + 4]  # fails for sizes 3 and 4


def write_then_two_indexes(x, log, d):
    log.append("first")
    x.sub_(1)
    a = x[x[:1].long() + 2]
    log.append(a.shape[0])
    d[len(log)] = "mid"
    return a * x[x[:1].long() + 4]


def _state():
    return STATE.n, COUNT


def _run(fn, n, backend_fn):
    x = torch.arange(float(n))
    log, d = ["old"], {"old": 0}
    before = _state()
    try:
        result, error = backend_fn(fn)(x, log, d), None
    except Exception as e:
        result, error = None, type(e)
    after = _state()
    return result, error, x, log, d, (after[0] - before[0], after[1] - before[1])


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("fn", [size_append, effects_between_indexes, write_then_two_indexes],
                         ids=lambda f: f.__name__)
def test_effects_before_the_failing_op_are_made(fn, backend):
    compiled = framejit.compile(fn, backend=backend)
    failures = 0
    for n in (6, 7, 3, 8, 2, 4, 9):
        expected = _run(fn, n, lambda f: f)
        actual = _run(fn, n, lambda f: compiled)
        failures += expected[1] is not None
        assert actual[1] is expected[1], (n, actual[1], expected[1])
        if expected[1] is None:
            torch.testing.assert_close(actual[0], expected[0])
        torch.testing.assert_close(actual[2], expected[2])
        assert actual[3:] == expected[3:], n
    assert failures >= 2


def effects_after_the_last_index(x, log, d):
    x.add_(1)
    y = x[x[:1].long() + 3]
    log.append("after")  # eager makes it only when no op failed: no snapshot needed
    STATE.n += 1
    return y


def test_effects_after_every_failing_op_take_no_snapshot():
    """A graph whose effects all follow its last op that may fail neither clones its written inputs per call
    nor reruns: the replay after the graph is exact whichever op fails."""
    compiled = framejit.compile(effects_after_the_last_index, backend="eager")
    for n in (5, 2, 6):
        expected, actual = _run(effects_after_the_last_index, n, lambda f: f), _run(None, n, lambda f: compiled)
        assert actual[1] is expected[1]
        torch.testing.assert_close(actual[2], expected[2])
        assert actual[3:] == expected[3:]
    assert compiled.entries and all(entry.rerun is None for entry in compiled.entries)


def test_size_reads_need_no_snapshot():
    """`log.append(x.size(0))` after `x.add_(1)`: the size is read again from the input when the graph fails
    (NOTE [Effects before a failing graph]), so no call clones `x`."""
    compiled = framejit.compile(size_append, backend="eager")
    for n in (6, 7, 3):
        expected, actual = _run(size_append, n, lambda f: f), _run(None, n, lambda f: compiled)
        assert actual[1] is expected[1] and actual[3:] == expected[3:]
        torch.testing.assert_close(actual[2], expected[2])
    assert all(entry.rerun is None and entry.on_graph_error is not None for entry in compiled.entries)


def unsqueezes(x, log, d):
    x.unsqueeze_(0)
    a = x[0, x[0, :1].long() + 2]
    log.append("mid")
    return a * x[0, x[0, :1].long() + 4]


def test_no_snapshot_rerun_after_a_change_of_sizes():
    """A snapshot that put values back, not sizes, reran `unsqueeze_` a second time (shape (1, 1, n)); it puts the
    sizes back too now (review revS HIGH-1), so the append between the indexes is made as in eager."""
    compiled = framejit.compile(unsqueezes, backend="eager")
    for n in (6, 7, 3, 8):
        expected, actual = _run(unsqueezes, n, lambda f: f), _run(None, n, lambda f: compiled)
        assert actual[1] is expected[1] and actual[3:] == expected[3:]
        torch.testing.assert_close(actual[2], expected[2])


def unsqueezes_in_try(x, log, d):
    x.unsqueeze_(0)
    try:
        a = x[0, x[0, :1].long() + 3]
    except IndexError:
        log.append("caught")
        a = x
    return a


def test_handler_rerun_after_a_change_of_sizes():
    """Review revS HIGH-1 (try path): the handler's rerun from a snapshot unsqueezed x twice (shape (1, 1, 3),
    eager (1, 3)); such a write is unrestorable now, so the index breaks and runs where the handler catches."""
    compiled = framejit.compile(unsqueezes_in_try, backend="eager")
    for n in (6, 7, 3, 2):
        expected, actual = _run(unsqueezes_in_try, n, lambda f: f), _run(None, n, lambda f: compiled)
        assert actual[1] is expected[1] and actual[3:] == expected[3:]
        torch.testing.assert_close(actual[2], expected[2])


def draws_then_writes(x, log, d):
    r = random.random()  # made after the graph (NOTE [Draws from the random module])
    x.add_(1)
    return x[x[:1].long() + 4] * r


def test_draw_before_a_failing_graph():
    """Review revS MED-1: eager draws before the failing index; the failing call drew nothing (the draws are
    made after the graph), so the next number drawn differed."""
    compiled = framejit.compile(draws_then_writes, backend="eager")
    for n in (6, 7, 3, 8, 2):
        results = []
        for fn in (draws_then_writes, compiled):
            random.seed(n)
            results.append((_run(fn, n, lambda f: f), random.random()))
        (expected, after_e), (actual, after) = results
        assert actual[1] is expected[1] and actual[3:] == expected[3:] and after == after_e, n
        torch.testing.assert_close(actual[2], expected[2])
