"""Two compiled blocks in a row (as a graph break in a model gives), the loss reaching the second block's first
output only through a user Function whose backward declines it (returns None): eager's engine still runs the
history below with undefined gradients, so the Python Functions there run on zeros, tensor hooks are called,
and AdamW's weight decay moves the eager layers feeding them (NOTE [Nones the user's backward sends] in
framejit/backends/user_none.py).

A walk from the later joint noted the earlier joint's node under its class before joint_kept swapped that
class for its keeping subclass; the earlier joint's own query then named the node by the new class, missed,
and took the user's None for framejit's: the eager layer in front kept `.grad` None and was never decayed
(review revAC HIGH-1 on 956c624; HIGH-2, the same with the blocks' outputs passed straight on, pre-existing on
the first call of each signature)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.test_training_user_nones import _Decline, _Twice
from tests.backends.training_observe import assert_same, run_observed


def _chained(between):
    def program(compile_fn, observed):
        ea, eb, mid, m2, other = (nn.Linear(4, 4) for _ in range(5))
        params = [p for m in (ea, eb, mid, m2, other) for p in m.parameters()]
        opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
        cb = compile_fn(lambda a, b: (mid(a).tanh(), (b * 3).relu()))
        c2 = compile_fn(lambda u, v: (m2(u).sin(), (v * 2).exp()))
        for n in (2, 3, 2, 2):
            x = torch.randn(n, 4)
            a, b = _Twice.apply(ea(x)), _Twice.apply(eb(x))
            calls: list = []
            a.register_hook(lambda g: calls.append(("a", g is None)))
            b.register_hook(lambda g: calls.append(("b", g is None)))
            o1, o2 = cb(a, b)
            p1, _ = c2(o1, _Twice.apply(o2) if between else o2)
            _Decline.apply(other(x), p1).sum().backward()
            observed.append(sorted(calls))
            observed.append([None if p.grad is None else p.grad.clone() for p in (ea.weight, eb.weight, mid.weight)])
            opt.step()
            opt.zero_grad()
            observed.append([p.detach().clone() for p in params])
    return program


@pytest.mark.parametrize("between", [True, False], ids=["python_function_between", "outputs_passed_on"])
@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_chained_blocks_where_a_none_of_the_users_reaches_the_later_one(backend, between):
    eager, compiled = run_observed(_chained(between), backend, joint_calls=8 if backend != "eager" else 0,
                                   backwards=4 if backend != "eager" else 1)
    assert_same(eager, compiled)
