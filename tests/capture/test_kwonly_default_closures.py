"""A closure held as a keyword-only default (`def use(*, fn=lambda: s)`, `lambda t, *, fn=lambda: s: ...`) over a
cell the frame writes after a graph break or after a reentrant checkpoint call reads the cell as eager does (revBH
HIGH-1/HIGH-2): break_callees.shared_cells walks keyword-only defaults as it walks positional ones, and a
reentrant checkpoint's recomputation rebuilds its function with them (reentrant_recall._made)."""
from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import framejit


def _breaks(x):
    print("break")
    return x


def _kwonly_root(x):
    s = 2.0

    def use(*, fn=lambda: s):
        return fn()
    y = _breaks(x)
    s = 3.0
    return y * use() + 1


def _kwonly_callee(x):
    s = 2.0

    def use(*, fn=lambda: s):
        return fn()
    y = _breaks(x)
    s = 3.0
    return y * use()


def _kwonly_inlined(x):
    return _kwonly_callee(x) + 1


@pytest.mark.parametrize("fn", [_kwonly_root, _kwonly_inlined], ids=["root", "inlined"])
def test_a_kwonly_default_closure_reads_the_cell_written_after_a_break(fn, capsys):
    compiled = framejit.compile(fn, backend="eager")
    for k in range(3):
        x = torch.tensor([0.5, 1.0, 1.5]) * (k + 1)
        want, out_eager = fn(x), capsys.readouterr().out
        got, out_compiled = compiled(x), capsys.readouterr().out
        assert torch.equal(got, want) and out_compiled == out_eager, (k, got, want)


def _checkpointed(x):
    s = 2.0
    y = checkpoint(lambda t, *, fn=lambda: s: (t * fn()).sin(), x, use_reentrant=True)
    s = 3.0
    return y.sum() + s


def test_a_reentrant_checkpoint_function_with_a_kwonly_default_closure_recomputes_with_the_later_cell():
    compiled = framejit.compile(_checkpointed, backend="eager")
    for k in range(3):
        grads = []
        for fn in (_checkpointed, compiled):
            x = (torch.tensor([0.5, 1.0, 1.5]) * (k + 1)).requires_grad_()
            fn(x).backward()
            grads.append(x.grad)
        assert torch.allclose(grads[0], grads[1]), (k, grads)
