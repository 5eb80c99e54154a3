"""Exceptions raised where the trace does not follow them: inside the block of a `@contextmanager` manager
the trace made, and inside an inlined callee's own try or with block (issue 11).

NOTE [Exceptions leaving generator context manager blocks] (generator_ctx.py): the trace throws an exception
raised in the block into the traced generator at its `yield` (its `except`/`finally` are traced), so a frame
whose manager swallows it, or whose own handler catches what leaves the manager, is captured whole. An
exception that leaves the frame still breaks before the instruction that entered the manager (NOTE
[Exceptions in generator context manager blocks]): the real manager sees the real exception. Each case runs eagerly and compiled over several seeds (values, the manager's log, the
exception type), and counts graphs and frames run eagerly.
"""
from __future__ import annotations

import contextlib

import torch

from tests.helpers import run_differential, eager_frames


@contextlib.contextmanager
def _swallowing(log: list, x: torch.Tensor):
    """Logs, yields x.sin(), swallows ValueError, always logs its exit."""
    log.append("enter")
    try:
        yield x.sin()
    except ValueError as e:
        log.append(f"caught {e}")
    finally:
        log.append("exit")


def _args(seed: int):
    return torch.randn(3, generator=torch.Generator().manual_seed(seed)) + seed, [], seed % 2 == 0


def test_raise_swallowed_by_the_manager_breaks_before_it():
    def f(x, log, raising):
        y = x.cos() * 2
        with _swallowing(log, x) as z:
            y = y + z
            if raising:
                raise ValueError("big")
            y = y * 3
        log.append("after")
        return y.tan()

    before = eager_frames()
    backend = run_differential(f, _args, seeds=(0, 1, 2, 3), fullgraph=False)
    # one graph per value of `raising`, no break (before NOTE [Exceptions leaving generator context manager
    # blocks]: a break before the manager and 4 graphs): cos, mul, sin, add, tan; the same and mul
    assert backend.graph_count == 2
    assert [backend.op_count(i) for i in range(2)] == [5, 6]
    assert eager_frames() == before  # the frame ran wholly eagerly before


def test_raise_leaving_the_manager_is_caught_by_the_frame():
    def f(x, log, raising):
        y = x.exp() - 1
        try:
            with _swallowing(log, x) as z:
                y = y + z
                if raising:
                    raise KeyError("k")  # not swallowed: the frame's own handler catches it
        except KeyError:
            log.append("frame caught")
            y = y - 1
        return y * 2

    before = eager_frames()
    backend = run_differential(f, _args, seeds=(0, 1, 2), fullgraph=False)
    assert backend.graph_count == 2 and backend.op_count(0) == 6  # exp, sub, sin, add, sub, mul: no break
    assert eager_frames() == before


def test_raise_leaving_the_frame_raises_as_eager():
    def f(x, log):
        y = x.sin() + 1
        with _swallowing(log, x):
            log.append(y.shape[0])
            raise TypeError("out")
        return y

    before = eager_frames()
    backend = run_differential(f, lambda seed: _args(seed)[:2], seeds=(0, 1), fullgraph=False)
    assert backend.graph_count == 1 and backend.op_count(0) == 2  # sin, add
    assert eager_frames() == before


def test_fullgraph_still_raises_nothing_the_user_did_not():
    """With fullgraph=True the frame whose manager swallows the user's exception is captured whole (before NOTE
    [Exceptions leaving generator context manager blocks] it ran eagerly), with eager's result."""
    def f(x, log, raising):
        with _swallowing(log, x) as z:
            if raising:
                raise ValueError("v")
            x = x + z
        return x * 2

    before = eager_frames()
    backend = run_differential(f, _args, seeds=(0, 2), fullgraph=True)  # raising on both seeds
    assert eager_frames() == before and backend.graph_count == 1


def _lookup(d: dict, key: str, log: list):
    try:
        return d[key]
    except KeyError:
        log.append(f"missing {key}")
        return 0.5
    finally:
        log.append("looked up")


def test_exception_caught_in_a_callee_is_traced_through_its_handler():
    """NOTE [Exceptions caught while tracing]: the KeyError the callee catches made the whole frame run
    eagerly, then broke at the call (NOTE [Exceptions caught in callees]); now the trace follows the
    callee's except and finally clauses: one graph per kind of `d`, no break."""
    def f(x, d, log):
        y = x.sin() * 2
        scale = _lookup(d, "scale", log)
        return y * scale + 1

    before = eager_frames()
    backend = run_differential(f, lambda seed: (torch.randn(3) + seed, {} if seed % 2 else {"scale": 3.0}, []),
                               seeds=(1, 3, 0), fullgraph=True)
    # seeds 1 and 3 (key missing) share an entry; seed 0 (scale 3.0) recompiles: sin, mul, mul, add each
    assert [backend.op_count(i) for i in range(backend.graph_count)] == [4, 4]
    assert eager_frames() == before


def test_exception_leaving_a_callee_through_its_finally_raises_as_eager():
    def f(x, log):
        y = x.cos() + 1
        _lookup([], "k", log)  # a list indexed by a str: TypeError, not caught; `finally` logs
        return y

    before = eager_frames()
    backend = run_differential(f, lambda seed: (torch.randn(2), []), seeds=(0, 1), fullgraph=False)
    assert backend.graph_count == 1 and backend.op_count(0) == 2  # cos, add before the call
    assert eager_frames() == before
