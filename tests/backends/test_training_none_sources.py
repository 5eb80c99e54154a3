"""Multi-grad hooks and hooks of a custom Function's None, where compiled blocks hand out None gradients
(NOTE [Multi-grad hooks over inputs no backward reaches], NOTE [A joint no gradient reaches] in
framejit/backends/joint_unreached.py), on the eager, onnxrt and triton backends.

`a, b = heads(x, trunk(x))` compiled separately, `a.backward()`-like losses: heads' node hands trunk's
output None and trunk's node gets no gradient. Before (review revJ H1), a mode "all" multi-grad hook over
weights including trunk's was never called (eager: once per backward, with None for trunk's weight); before
(revJ M1), a custom Function's None in the same backward had its leaf's hooks skipped (eager calls them with
None). Each program runs eagerly and compiled from the same data, 3-4 steps of sizes 2, 2, 3 (AOT's callable,
then lean calls); grads (None kept), parameters after SGD steps and the hooks' calls are compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import assert_same, grad_copy, run_observed

BACKENDS = ["eager", "onnxrt", "triton"]


class NoneBack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a.clone()

    @staticmethod
    def backward(ctx, go):
        return None


def _weights(n):
    return [torch.randn(4, requires_grad=True) for _ in range(n)]


def _multi_grad_all(compile_fn, observed):
    """One mode "all" multi-grad hook over w1 (heads), w2 (trunk, unreached), w3 (eager)."""
    w1, w2, w3 = ws = _weights(3)
    calls = []
    torch.autograd.graph.register_multi_grad_hook(
        ws, lambda gs: calls.append([None if g is None else round(float(g.sum()), 3) for g in gs]))
    trunk = compile_fn(lambda x: (x * w2).relu())
    heads = compile_fn(lambda x, z: ((x * w1).sum(), (z * 3).sum()))
    opt = torch.optim.SGD(ws, lr=0.1, momentum=0.9, weight_decay=0.1)
    for n in (2, 2, 3):
        x = torch.randn(n, 4)
        a, _ = heads(x, trunk(x))
        (a + (x * w3).sum()).backward()
        observed += [len(calls), calls[-1] if calls else None, [grad_copy(w.grad) for w in ws]]
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([w.detach().clone() for w in ws])


def _multi_grad_module_unreached(compile_fn, observed):
    """A multi-grad hook per module (FSDP-like); the module the step's loss does not use is never reported."""
    mods = trunk, mid, h0, h1 = [nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)]
    calls = []
    for k, m in enumerate(mods):
        torch.autograd.graph.register_multi_grad_hook(
            tuple(m.parameters()), lambda gs, k=k: calls.append((k, [g is None for g in gs])))
    ct, cm = compile_fn(trunk), compile_fn(mid)
    ch = compile_fn(lambda m, h: (h0(m), h1(h)))
    for used, n in (((1,), 2), ((1,), 2), ((0,), 3), ((1,), 3)):
        h = ct(torch.randn(n, 4))
        outs = ch(cm(h), h)
        sum(outs[i].sum() for i in used).backward()
        observed += [sorted(calls), [grad_copy(p.grad) for m in mods for p in m.parameters()]]
        calls.clear()
        for m in mods:
            m.zero_grad()


def _mixed_none_sources(compile_fn, observed):
    """A custom Function returning None and a compiled head handing None, in one backward: w3's hooks are called
    with None as in eager, trunk's w2's are not."""
    w1, w2, w3 = ws = _weights(3)
    calls = []
    for name, w in (("w2", w2), ("w3", w3)):
        w.register_hook(lambda g, name=name: calls.append((name, g is None)))
        w.register_post_accumulate_grad_hook(lambda p, name=name: calls.append(("post", name, p.grad is None)))
    trunk = compile_fn(lambda x: (x * w2).tanh())
    block = compile_fn(lambda x: (x * w3).sin())
    heads = compile_fn(lambda x, z: ((x * w1).sum(), (z * 3).sum()))
    for n in (2, 2, 3):
        x = torch.randn(n, 4)
        c = NoneBack.apply(block(x)).sum()
        a, _ = heads(x, trunk(x))
        (a + c).backward()
        observed += [list(calls), [grad_copy(w.grad) for w in ws]]
        calls.clear()
        for w in ws:
            w.grad = None


def _hook_after_call(compile_fn, observed):
    """A hook registered on mid's non-leaf input after mid's call; a loss that does not use mid's output leaves it
    uncalled, as in eager (was called with None)."""
    calls = []
    trunk, mid, h0, h1 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)
    ct, cm = compile_fn(trunk), compile_fn(mid)
    ch = compile_fn(lambda m, h: (h0(m), h1(h)))
    params = [p for m in (trunk, mid, h0, h1) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
    for used, n in (((0,), 2), ((1,), 2), ((1,), 3)):
        t = ct(torch.randn(n, 4))
        u = t * 3
        m = cm(u)
        u.register_hook(lambda g: calls.append(round(float(g.clamp(-1, 1).sum()), 3)))
        outs = ch(m, t)
        sum(outs[i].sum() for i in used).backward()
        observed += [list(calls), [grad_copy(p.grad) for p in params]]
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([p.detach().clone() for p in params])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", [_multi_grad_all, _multi_grad_module_unreached, _mixed_none_sources,
                                     _hook_after_call])
def test_hooks_where_compiled_blocks_hand_none(backend, program):
    eager, compiled = run_observed(program, backend, joint_calls=6, backwards=3, lean=True)
    assert_same(eager, compiled)
