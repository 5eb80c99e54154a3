"""Exceptions raised inside a with-block whose manager is a Python class: the trace follows the block's handler
and inlines `__exit__(type, value, traceback)` (NOTE [Exceptions in with-blocks] in capture/caught_exceptions.py).
Before, such a block was a graph break at the call into the function that holds it (fullgraph raised)."""

import contextlib
import unittest

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential


class Catching:
    """Suppresses `kinds`, notes what reached __exit__ in `log` (an argument: compared with eager's)."""

    def __init__(self, kinds, log, result=True):
        self.kinds, self.log, self.result = kinds, log, result

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append((None if exc_type is None else exc_type.__name__, None if exc is None else str(exc),
                         tb is None))
        return self.result if exc_type is not None and issubclass(exc_type, self.kinds) else False


class ReadsTraceback:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.line = -1 if tb is None else tb.tb_lineno > 0
        return True


class RaisesOnExit:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            raise ValueError(f"exit saw {exc_type.__name__}")
        return False


def _lookup_in_block(x, table, key, log):
    with Catching(KeyError, log):
        x = x + table[key]
        log.append("after lookup")
    return x * 2


def _caller_of_block(x, table, key, log):
    return _lookup_in_block(x, table, key, log) - 1


def _not_suppressed(x, table, key, log):
    try:
        with Catching(IndexError, log):
            x = x + table[key]
    except KeyError as e:
        return x - 1, str(e)
    return x, "found"


def _exit_raises(x, table, key):
    try:
        with RaisesOnExit():
            x = x + table[key]
    except ValueError as e:
        return x + 5, str(e)
    return x, "found"


def _nested_blocks(x, table, key, log):
    with Catching(KeyError, log, result=[1]):  # a true value that is not a bool also suppresses
        with Catching(IndexError, log):
            x = x * 3
            x = x + table[key]
        x = x + 100
    return x


def _in_loop(x, table, keys, log):
    for key in keys:
        with Catching(KeyError, log):
            x = x + table[key]
            continue
    return x


def _suppress_in_callee(x, table, key):
    def lookup(t):
        with contextlib.suppress(KeyError, IndexError):
            return t + table[key]
        return t - 7
    return lookup(x) * 2


_CASE = unittest.TestCase()


def _assert_raises(x, table, key):
    _CASE.assertRaises(KeyError, table.__getitem__, key)  # raises AssertionError where the key is there
    with _CASE.assertRaises(KeyError) as cm:
        x = x + table[key]
    return x + 1, str(cm.exception)


def _tables(seed):
    """Key "b" is missing for even seeds and present for odd ones (the same numbers: no float recompiles)."""
    return {"a": 1.5, "b": 2.0} if seed % 2 else {"a": 1.5}


@pytest.mark.parametrize("fn", [_lookup_in_block, _caller_of_block, _nested_blocks])
def test_exception_in_user_with_block_is_one_graph(fn):
    before = framejit.stats()["eager_frames"]
    backend = run_differential(fn, lambda seed: (torch.randn(3) + seed, _tables(seed), "b", []),
                               seeds=(0, 1, 2, 3), fullgraph=True)
    assert backend.graph_count == 2  # key missing (seeds 0, 2) and present (1, 3): one graph each
    assert framejit.stats()["eager_frames"] == before


def test_exception_the_exit_does_not_suppress_reaches_the_callers_except():
    # a false __exit__ re-raises: the trace gives the handler up (NOTE [Exceptions caught while tracing]) and the
    # lookup runs as Python where it raises, as before; the values and the exit's notes are eager's
    run_differential(_not_suppressed, lambda seed: (torch.randn(3) + seed, _tables(seed), "b", []),
                     seeds=(0, 1, 2, 3), fullgraph=False)


def test_exit_that_raises_another_exception():
    """The ValueError `__exit__` raises while the block's KeyError is handled is followed with the KeyError as
    its context (NOTE [Contexts of exceptions raised while handling]); before, the frame ran from the lookup
    on as Python, even under fullgraph."""
    backend = run_differential(_exit_raises, lambda seed: (torch.randn(2), _tables(seed), "b"), seeds=(0, 1, 2),
                               fullgraph=True)
    assert backend.graph_count == 2


def test_with_block_in_a_loop_with_continue():
    keys = ["a", "zz", "b", "a"]
    backend = run_differential(_in_loop, lambda seed: (torch.randn(4), _tables(seed), keys, []),
                               seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count == 2


def test_contextlib_suppress_in_a_callee():
    backend = run_differential(_suppress_in_callee, lambda seed: (torch.randn(2) * seed, _tables(seed), "b"),
                               seeds=(0, 1, 2, 3), fullgraph=True)
    assert backend.graph_count == 2


def test_unittest_assert_raises_in_compiled_code():
    # key "b" is missing for even seeds: both assertRaises pass; present for odd seeds: AssertionError, as eager
    backend = run_differential(_assert_raises, lambda seed: (torch.randn(2), _tables(seed), "b"),
                               seeds=(0, 1, 2), fullgraph=False)
    assert backend.graph_count >= 1


def test_exit_reading_the_traceback_gets_eagers_answer():
    # the traceback the inlined exit receives is not None; reading its attributes gives the handler up
    def fn(x, table):
        m = ReadsTraceback()
        with m:
            x = x + table["b"]
        return x * 2, m.line
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in range(3):
        x, table = torch.randn(2), _tables(seed)
        expected, actual = fn(x, table), compiled(x, table)
        assert torch.equal(expected[0], actual[0]) and expected[1] == actual[1]


def test_torch_no_grad_block_is_not_followed_and_restores_grad_mode():
    def fn(x, table):
        try:
            with torch.no_grad():
                y = x * 2
                y = y + table["b"]
        except KeyError:
            y = x * 3
        return y, torch.is_grad_enabled()
    run_differential(fn, lambda seed: (torch.randn(2, requires_grad=True), _tables(seed)), seeds=(0, 1, 2),
                     fullgraph=False)
