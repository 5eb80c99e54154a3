"""NOTE [Addresses are symbolic in resume functions] in framejit/capture/carried_loops.py: the result of
`t.data_ptr()` (a graph break) is symbolic in the resume function from its first trace, so a new tensor's
address does not recompile every resume function after the break (20 traces over 12 calls before, 14 after;
here 13 before and 7 after over calls of one shape)."""
from __future__ import annotations

import pytest
import torch

import framejit


def views_share_data(x):
    a = x[1:]
    b = x.view(-1)
    same = a.data_ptr() == x.data_ptr()
    shares = b.data_ptr() == x.data_ptr()
    offset = a.data_ptr() - x.data_ptr()
    return (x * 2 if shares and not same else x), offset


def aligned(x, y):
    p = x.data_ptr()
    if p % 16 == 0:
        return x + 1, x.data_ptr() == y.data_ptr()
    return x - 1, x.data_ptr() == y.data_ptr()


def _compare(fn, compiled, args):
    expected, actual = fn(*args), compiled(*args)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1] == expected[1]


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_new_addresses_do_not_recompile(backend):
    compiled = framejit.compile(views_share_data, backend=backend)
    before = framejit.stats()["frames_traced"]
    for _ in range(4):
        _compare(views_share_data, compiled, (torch.randn(5),))
    assert framejit.stats()["frames_traced"] - before == 7  # the frame and its 6 resume functions, once each


def test_decisions_on_addresses_are_guarded():
    """Aligned and unaligned views, a tensor compared with itself and with another: every decision the trace
    took from a symbolic address is guarded, so each call runs the branch eager takes."""
    compiled = framejit.compile(aligned, backend="eager")
    base = torch.randn(64)
    for i in (0, 1, 4, 2, 8, 3, 5, 12):
        x = base[i:i + 8]
        _compare(aligned, compiled, (x, x if i % 2 else base[i + 1:i + 9]))

