"""One torch state manager object entered again inside its own block (NOTE [One torch manager entered twice]).

eager: the inner __enter__ overwrites what the outer one saved, so the outer exit restores the state of the outer
block (autocast stays on after the function; `ng.prev` is True). Review revC MED-2 (/tmp/revC/p6.py): framejit gave
float32 for the last matmul and autocast off after the call. Such a frame now runs eagerly; a manager reused one
block after another stays captured.
"""
import io
import contextlib

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def _ac_twice(x, brk):
    ac = torch.autocast("cpu", dtype=torch.bfloat16)
    with ac:
        y = x @ x
        with ac:
            z = x @ x
            if brk:
                print("b")
        w = x @ x
    return y, z, w, x @ x


def _ng_twice(x):
    ng = torch.no_grad()
    with torch.enable_grad():
        with ng:
            with torch.enable_grad():
                with ng:
                    y = x * 2
                    print("b")
                z = x * 3
            w = x * 4
    return y, z, w, ng.prev


def _ng_reused(x):
    ng = torch.no_grad()
    with ng:
        y = x * 2
    with ng:
        z = x * 3
    return y, z, x * 4


def _state():
    return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_grad_enabled()


def _compare(fn, *extra):
    compiled = framejit.compile(fn, backend=CountingBackend())
    for n in (2, 3, 4):
        x = torch.randn(n, n, requires_grad=True)
        seen = []
        for f in (fn, compiled):
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    r = f(x, *extra)
                seen.append(([(t.dtype, t.requires_grad, t.detach()) if isinstance(t, torch.Tensor) else t
                              for t in r], _state(), out.getvalue()))
            finally:  # leave the process's state as it was for the next run
                torch.set_autocast_enabled("cpu", False)
                torch.set_autocast_dtype("cpu", torch.bfloat16)
                torch.set_grad_enabled(True)
        (re, se, pe), (ro, so, po) = seen
        assert (se, pe) == (so, po)
        for a, b in zip(re, ro):
            if isinstance(a, tuple):
                assert a[:2] == b[:2]
                torch.testing.assert_close(a[2], b[2])
            else:
                assert a == b
    return compiled


@pytest.mark.parametrize("brk", [False, True])
def test_autocast_object_entered_twice(brk):
    framejit.reset()
    _compare(_ac_twice, brk)


def test_no_grad_object_entered_twice():
    framejit.reset()
    _compare(_ng_twice)


def test_reused_one_after_another_stays_captured():
    framejit.reset()
    cb = CountingBackend()
    compiled = framejit.compile(_ng_reused, backend=cb)
    x = torch.randn(3, requires_grad=True)
    for a, b in zip(_ng_reused(x), compiled(x)):
        assert a.requires_grad == b.requires_grad
        torch.testing.assert_close(a, b)
    assert cb.graph_count == 1
