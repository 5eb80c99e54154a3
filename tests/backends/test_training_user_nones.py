"""A None that the user's backward sends into a compiled block's output (NOTE [Nones the user's backward sends]
in framejit/backends/user_none.py), on the eager, onnxrt and triton backends.

`t = ct(x); z = Twice.apply(em(t)); outs = ch(cm(z), t)` with ct, cm, ch compiled separately and em an eager
Linear; the loss takes outs[0] only through a user Function whose backward returns None for it, or a reentrant
checkpoint whose block detaches it. Eager's engine runs outs[0]'s history with undefined gradients and Twice
materialises zeros: em gets zero `.grad` and AdamW's weight decay moves it. framejit took that None for one of
its own (no gradient reached the joint's slot) and skipped Twice: em's `.grad` stayed None (review revR
HIGH-R1). Steps whose loss leaves outs[0] out altogether (eager never reaches em) are mixed in."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import assert_same, grad_copy, run_observed


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


class _Decline(torch.autograd.Function):
    """a * b; its backward declines b's gradient (None)."""
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        b, = ctx.saved_tensors
        return g * b, None


def _declined(a, b):
    return _Decline.apply(a, b)


def _checkpointed(a, b):
    from torch.utils.checkpoint import checkpoint
    return checkpoint(lambda p, q: p.tanh() + q.detach(), a, b, use_reentrant=True)


def _logged(calls, tag):
    def hook(g):
        calls.append((tag, None if g is None else round(float(g.sum()), 3)))
    return hook


def _program(decline):
    def program(compile_fn, observed):
        trunk, mid, h0, h1, em = (nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2),
                                  nn.Linear(4, 4))
        params = [p for m in (trunk, mid, h0, h1, em) for p in m.parameters()]
        ct, cm, ch = compile_fn(trunk), compile_fn(mid), compile_fn(lambda m, h: (h0(m), h1(h)))
        opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
        calls = []
        for n, loss in ((2, "user"), (2, "one"), (3, "user"), (3, "both"), (3, "user")):
            t = ct(torch.randn(n, 4))
            z = _Twice.apply(em(t))
            z.register_hook(_logged(calls, "z"))
            outs = ch(cm(z), t)
            if loss == "user":  # outs[0] reached, with a None of the user's
                total = decline(outs[1], outs[0]).sum()
            else:  # outs[0] not reached at all (framejit's None), or with a gradient
                total = outs[1].sum() + (outs[0].sum() if loss == "both" else 0)
            total.backward()
            observed += [list(calls), [grad_copy(p.grad) for p in params]]
            calls.clear()
            opt.step()
            opt.zero_grad()
            observed.append([p.detach().clone() for p in params])
    return program


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
@pytest.mark.parametrize("decline", [_declined, _checkpointed])
def test_a_none_of_the_users_runs_the_layers_above_as_eager(backend, decline):
    eager, compiled = run_observed(_program(decline), backend, joint_calls=10, backwards=5, lean=None)
    assert_same(eager, compiled)


def _noted(calls, tag):
    def hook(*args):
        grads = args[-1] if len(args) > 1 or isinstance(args[0], tuple) else args
        calls.append((tag, [None if g is None else round(float(g.sum()), 3) for g in grads]))
    return hook


def _every_spelling(compile_fn, observed):
    """Hooks registered through the class (`torch.Tensor.register_hook(u, h)`, `type(v).register_hook`, a
    functools.partial of the class entry) and on nodes (a C++ node's and a Python Function node's pre-hooks and
    post-hooks), between trunk and mid (NOTE [Hook dicts made through the class], NOTE [Node hooks a None
    reaches]): eager calls none of them on the steps whose loss leaves outs[0] out; framejit called them with None
    (a clamping hook raised AttributeError in the user's backward; review revN MED-1, revR p_x15). The steps
    where a None of the user's reaches outs[0] call them with None in eager too."""
    import functools
    trunk, mid, h0, h1, em = (nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2), nn.Linear(4, 4))
    params = [p for m in (trunk, mid, h0, h1, em) for p in m.parameters()]
    ct, cm, ch = compile_fn(trunk), compile_fn(mid), compile_fn(lambda m, h: (h0(m), h1(h)))
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
    calls = []
    for n, loss in ((2, "one"), (2, "both"), (3, "user"), (3, "one"), (2, "zero")):
        t = ct(torch.randn(n, 4))
        u = em(t).relu() * 2
        torch.Tensor.register_hook(u, _noted(calls, "u"))
        v = u.sigmoid()
        type(v).register_hook(v, _noted(calls, "v"))
        w = v * 3
        functools.partial(torch.Tensor.register_hook, w)(_noted(calls, "w"))
        w.grad_fn.register_prehook(_noted(calls, "w-pre"))
        w.grad_fn.register_hook(_noted(calls, "w-post"))
        z = _Twice.apply(w + 1)
        z.grad_fn.register_prehook(_noted(calls, "z-pre"))
        z.grad_fn.register_hook(_noted(calls, "z-post"))
        outs = ch(cm(z), t)
        if loss == "user":
            total = _Decline.apply(outs[1], outs[0]).sum()
        else:
            total = outs[1].sum() + (outs[0].sum() if loss == "both" else 0)
        total.backward()
        observed += [list(calls), [grad_copy(p.grad) for p in params]]
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([p.detach().clone() for p in params])


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_hooks_registered_every_way_where_no_gradient_reaches(backend):
    eager, compiled = run_observed(_every_spelling, backend, joint_calls=10, backwards=5, lean=None)
    assert_same(eager, compiled)


def test_a_clamping_hook_registered_through_the_class_is_not_called_with_none():
    """revN MED-1 p_a1: the user's backward raised AttributeError on None.clamp."""
    def program(compile_fn, observed):
        trunk, mid, h0, h1 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)
        ct, cm, ch = compile_fn(trunk), compile_fn(mid), compile_fn(lambda m, h: (h0(m), h1(h)))
        for n in (2, 3):
            t = ct(torch.randn(n, 4))
            u = t.relu() * 2
            torch.Tensor.register_hook(u, lambda g: g.clamp(-1, 1))
            u.grad_fn.register_prehook(lambda go: (go[0].clamp(-1, 1),))
            ch(cm(u + 1), t)[1].sum().backward()
            observed.append([grad_copy(p.grad) for m in (trunk, mid, h0, h1) for p in m.parameters()])
    eager, compiled = run_observed(program, "onnxrt", joint_calls=4, backwards=2, lean=None)
    assert_same(eager, compiled)


def _module_hooks_and_user_none(compile_fn, observed):
    """revN p_m9: em (module full backward hooks) feeds mid and a user Function returning None. Eager runs em's
    output-side hook node on zeros, the Linear turns them into undefined gradients and the input-side node runs
    the full hook with zeros; framejit's walk from the heads' None skipped the input-side node."""
    trunk, mid, h0, h1, em = (nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2), nn.Linear(4, 4))
    params = [p for m in (trunk, mid, h0, h1, em) for p in m.parameters()]
    ct, cm, ch = compile_fn(trunk), compile_fn(mid), compile_fn(lambda m, h: (h0(m), h1(h)))
    calls = []
    em.register_full_backward_hook(lambda m, gi, go: calls.append(("full", _noted_list(gi), _noted_list(go))))
    em.register_full_backward_pre_hook(lambda m, go: calls.append(("pre", _noted_list(go))))
    for n, both in ((2, False), (3, True), (3, False)):
        t = ct(torch.randn(n, 4))
        e = em(t)
        outs = ch(cm(e), t)
        (outs[1].sum() + (outs[0].sum() if both else 0) + _NoneBack.apply(e).sum()).backward()
        observed += [list(calls), [grad_copy(p.grad) for p in params]]
        calls.clear()
        for p in params:
            p.grad = None


def _noted_list(grads):
    return [None if g is None else round(float(g.sum()), 3) for g in grads]


class _NoneBack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        return None


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_module_hooks_a_none_of_the_users_reaches_run_as_eager(backend):
    eager, compiled = run_observed(_module_hooks_and_user_none, backend, joint_calls=6, backwards=3, lean=None)
    assert_same(eager, compiled)


def test_backwards_that_raise_do_not_keep_their_graphs_alive():
    """review revAA MED-1: a backward that raises runs no end-of-task callback, so the Nones noted in it (here a
    reentrant checkpoint's for an argument its block detaches) kept their nodes, saved tensors and the graph above
    alive for good, in any process that had called framejit.compile once: 12 of 12 skipped batches stayed alive.
    Now at most the newest few graph tasks keep state."""
    import gc
    import weakref

    import framejit
    from torch.utils.checkpoint import checkpoint

    framejit.compile(lambda x: x + 1, backend="eager")(torch.ones(1))  # installs the process-wide recording
    m, refs = nn.Linear(16, 16), []

    def nan_check(g):
        raise FloatingPointError("skip this batch")

    for _ in range(12):
        x, mask = torch.randn(8, 16, requires_grad=True), torch.rand(8, 16, requires_grad=True)
        h = m(x)
        h.register_hook(nan_check)
        y = checkpoint(lambda a, b: a.relu() * b.detach(), h, mask, use_reentrant=True)
        refs.append(weakref.ref(mask))
        with pytest.raises(FloatingPointError):
            y.sum().backward()
        del x, mask, h, y
    gc.collect()
    assert sum(r() is not None for r in refs) <= 4
    assert refs[0]() is None


def _two_graphs_then_two_backwards(compile_fn):
    torch.manual_seed(0)
    trunk, mid, h0, h1, em = (nn.Linear(4, 4) for _ in range(5))
    ct, cm, ch = compile_fn(trunk), compile_fn(mid), compile_fn(lambda m, h: (h0(m), h1(h)))
    calls, graphs, results = [], [], []

    def clamp(grads):  # assumes tensors: eager never calls it (its node gets no gradient)
        calls.append("pre")
        return tuple(g.clamp(-1, 1) for g in grads)

    for n in (2, 3):
        t = ct(torch.randn(n, 4))
        z = _Twice.apply(em(t))
        z.grad_fn.register_prehook(clamp)
        graphs.append(ch(cm(z), t))
    for outs in graphs:
        outs[1].sum().backward()
        results.append(list(calls))
    return results, [None if p.grad is None else p.grad.clone() for m in (trunk, em, h1) for p in m.parameters()]


@pytest.mark.parametrize("backend", ["onnxrt"])
def test_a_node_hook_is_skipped_in_every_backward_that_never_reaches_it(backend):
    """review revAA HIGH-1: two graphs built before either backward, a node pre-hook between compiled blocks in
    each: the first backward wrapped both hooks for itself, the second found the first one's stale wrapper and
    called the user's hook with None (AttributeError: 'NoneType' object has no attribute 'clamp')."""
    import framejit
    expected = _two_graphs_then_two_backwards(lambda f: f)
    got = _two_graphs_then_two_backwards(lambda f: framejit.compile(f, backend=backend))
    assert got[0] == expected[0]
    assert_same([got[1]], [expected[1]])


def _unused_second_output(compile_fn, observed):
    """review revAA MED-2: `o1, o2 = cb(a, b)`, the loss takes o1 through a Function returning None for it and
    leaves o2 out. Eager's engine runs o1's history (Twice above a materialises zeros: ea gets zero `.grad`),
    never b's (eb's `.grad` stays None, b's hook is not called). framejit noted every input of cb's joint as
    reached by the user's None: eb got zero `.grad` and AdamW's weight decay moved it. eb is compiled too on one
    side (its joint is above b)."""
    ea, eb, mid, other = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
    params = [p for m in (ea, eb, mid, other) for p in m.parameters()]
    cb = compile_fn(lambda a, b: (mid(a).tanh(), (b * 3).relu()))
    ceb = compile_fn(eb)
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
    calls = []
    for n, loss in ((2, "user"), (3, "user"), (2, "both"), (3, "user"), (2, "user")):
        x = torch.randn(n, 4)
        a, b = _Twice.apply(ea(x)), _Twice.apply(ceb(x))
        a.register_hook(_logged(calls, "a"))
        b.register_hook(_logged(calls, "b"))
        o1, o2 = cb(a, b)
        total = _Decline.apply(other(x), o1).sum() + (o2.sum() if loss == "both" else 0)
        total.backward()
        observed += [list(calls), [grad_copy(p.grad) for p in params]]
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([p.detach().clone() for p in params])


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "triton"])
def test_an_output_no_loss_uses_beside_one_a_none_of_the_users_reaches(backend):
    eager, compiled = run_observed(_unused_second_output, backend, joint_calls=10, backwards=5, lean=None)
    assert_same(eager, compiled)


def test_python_function_backwards_are_noted_only_while_a_joint_lives():
    """NOTE [Noting Nones only while a joint lives] (user_none.py): one framejit.compile made every Python Function
    backward of the process go through framejit's noting wrapper (review revAA: +12-18% backward on an eager model
    of 50 hooked layers). Now only while a joint's node lives: a None of the user's into a compiled block's output
    is still noted then, and the eager layer above gets eager's zero .grad."""
    import subprocess
    import sys
    program = r'''
import torch, torch.nn as nn, framejit
from framejit.backends import user_none
seen = []
original = user_none._note_nones
user_none._note_nones = lambda node, result: (seen.append(type(node).__name__), original(node, result))[1]

class Decline(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a * b.detach()
    @staticmethod
    def backward(ctx, g):
        return g, None

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2

def eager_step():
    x = torch.randn(2, 4, requires_grad=True)
    Decline.apply(x, x * 2).sum().backward()

def train(compile_fn):
    torch.manual_seed(0)
    em, cl = nn.Linear(4, 4), nn.Linear(4, 4)
    cm, grads, noted = compile_fn(cl), [], []
    for _ in range(3):
        seen.clear()
        e = em(torch.randn(2, 4))
        out = cm(Twice.apply(e))
        Decline.apply(torch.ones(2, requires_grad=True), out.sum(1)).sum().backward()
        noted.append(seen.count("DeclineBackward"))
        grads += [None if p.grad is None else p.grad.clone() for p in em.parameters()]
        del e, out
    return grads, noted

framejit.compile(lambda x: x + 1)(torch.ones(1))
eager_step()
print("eager-only", len(seen))
eager, _ = train(lambda m: m)
compiled, noted = train(lambda m: framejit.compile(m, backend="onnxrt"))
print("joint live", noted, all(torch.equal(a, b) for a, b in zip(eager, compiled)), float(eager[0].abs().sum()))
seen.clear()
eager_step()
print("joint gone", len(seen))
'''
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["eager-only 0", "joint live [1, 1, 1] True 0.0", "joint gone 0"]
