"""An autocast object held outside the frame, entered while its block is already open in a caller or since a bare
`ac.__enter__()` before a break, leaves eager's state: eager's second __enter__ overwrites what the first saved,
so the outer exit keeps autocast on (NOTE [Autocast objects open outside]; review revH HIGH-2).

Differential: eager vs framejit on fresh inputs over several calls with changing sizes, comparing the dtypes
inside and after the blocks and the autocast state after the call. Before, framejit gave float32 after the
block and autocast off after the call (eager: bfloat16, on).
"""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend

ac = torch.autocast("cpu", dtype=torch.bfloat16)


def _inner(x, w):
    with ac:
        return x @ w


def via_callee(x, w):
    with ac:
        a = x @ w
        b = _inner(x, w)
        c = x @ w
    return a.dtype, b.dtype, c.dtype, (x @ w).dtype


def via_callee_after_break(x, w):
    with ac:
        print("in block")
        b = _inner(x, w)
        c = x @ w
    return b.dtype, c.dtype, (x @ w).dtype


def bare_enter_then_with(x, w):
    ac.__enter__()
    a = x @ w
    with ac:
        b = x @ w
    c = x @ w
    ac.__exit__(None, None, None)
    return a.dtype, b.dtype, c.dtype, (x @ w).dtype


def _run(fn, n):
    torch.set_autocast_enabled("cpu", False)
    try:
        r = fn(torch.randn(n, 4), torch.randn(4, 4))
        return r, torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    finally:
        torch.set_autocast_enabled("cpu", False)


@pytest.mark.parametrize("prog", [via_callee, via_callee_after_break, bare_enter_then_with])
def test_reentered_outside_object_matches_eager(prog, capsys):
    cf = framejit.compile(prog)
    for n in (2, 3, 2):
        expected = _run(prog, n)
        printed = capsys.readouterr().out
        assert _run(cf, n) == expected
        assert capsys.readouterr().out == printed


def test_outside_object_entered_once_stays_captured():
    def once(x, w):
        with ac:
            y = x @ w
        return y.dtype, (x @ w).dtype

    backend = CountingBackend()
    cf = framejit.compile(once, backend=backend)
    for n in (2, 3, 4):
        assert _run(cf, n) == _run(once, n)
    assert backend.graph_count == 2  # a static, then a symbolic entry: no break, not run eagerly
