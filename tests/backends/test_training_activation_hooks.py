"""Tensor hooks on eager activations between compiled blocks that no gradient reaches (NOTE [Hooks of activations
a None reaches] in framejit/backends/hook_dicts.py), on the eager, onnxrt and triton backends.

`t = ct(x); u = t.relu() * 2; u.register_hook(h); m = cm(u + 1); outs = ch(m, t)`, ct, cm, ch compiled
separately, and a loss of the head that does not use m: eager's backward never reaches u. The compiled heads'
node hands m None, mid's node hands none on, and the engine still runs the eager nodes above: u's hook was
called with None, and a grad-clipping hook (`g.clamp(-1, 1)`) raised AttributeError in the user's backward
(review revJ H2). Each program runs eagerly and compiled from the same data, 4 steps whose losses use other
heads; hook calls, grads (None kept) and parameters after AdamW steps are compared."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tests.backends.training_observe import assert_same, grad_copy, run_observed

PLAN = (((0,), 2), ((1,), 2), ((0, 1), 3), ((1,), 3))


def _blocks(compile_fn):
    trunk, mid, h0, h1 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)
    params = [p for m in (trunk, mid, h0, h1) for p in m.parameters()]
    return params, compile_fn(trunk), compile_fn(mid), compile_fn(lambda m, h: (h0(m), h1(h)))


def _logged(calls, tag, clamp=False, strict=True):
    def hook(g):
        if g is None and not strict:  # eager's call for the output of a node reached through another output
            calls.append((tag, None))
            return None
        calls.append((tag, round(float(g.sum()), 3)))  # AttributeError on None, as a user's hook
        return g.clamp(-1, 1) if clamp else None
    return hook


def _train(observed, params, calls, step):
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.1)
    for used, n in PLAN:
        outs = step(n, calls)
        sum(outs[i].sum() for i in used).backward()
        observed += [list(calls), [grad_copy(p.grad) for p in params]]
        calls.clear()
        opt.step()
        opt.zero_grad()
        observed.append([p.detach().clone() for p in params])


def _clamp_between(compile_fn, observed):
    """revJ H2: a clamping hook on u, two eager ops above mid's input."""
    params, ct, cm, ch = _blocks(compile_fn)

    def step(n, calls):
        t = ct(torch.randn(n, 4))
        u = t.relu() * 2
        u.register_hook(_logged(calls, "u", clamp=True))
        return ch(cm(u + 1), t)
    _train(observed, params, [], step)


def _block(t, calls):
    u = t.tanh() * 2
    u.register_hook(_logged(calls, "dead"))
    w = u.sigmoid()
    w.register_hook(_logged(calls, "w", clamp=True))
    return w - 1


def _gone_and_chained(compile_fn, observed):
    """Hooks registered in a helper on activations that are gone by the backward, two levels up."""
    params, ct, cm, ch = _blocks(compile_fn)

    def step(n, calls):
        t = ct(torch.randn(n, 4))
        return ch(cm(_block(t, calls)), t)
    _train(observed, params, [], step)


def _after_call_and_parts(compile_fn, observed):
    """Hooks on the two parts of an eager split, registered after mid's call; one part also in the loss
    through the heads' other input."""
    params, ct, cm, ch = _blocks(compile_fn)

    def step(n, calls):
        t = ct(torch.randn(2 * n, 4))
        a, b = (t * 2).split(n)
        m = cm(torch.cat([b, a]).relu())
        a.register_hook(_logged(calls, "a", strict=False))  # eager: called with None where only b gets one
        b.register_hook(_logged(calls, "b", clamp=True))
        return ch(m, torch.cat([t[n:], b]))
    _train(observed, params, [], step)


def _multi_grad_between(compile_fn, observed):
    """Multi-grad hooks (modes "all" and "any") over eager activations that no gradient reaches."""
    params, ct, cm, ch = _blocks(compile_fn)

    def step(n, calls):
        t = ct(torch.randn(n, 4))
        u, w = t.relu() * 2, t.sigmoid()
        torch.autograd.graph.register_multi_grad_hook(
            (u, w), lambda gs: calls.append(("all", [None if g is None else round(float(g.sum()), 3) for g in gs])))
        torch.autograd.graph.register_multi_grad_hook(
            (u, w), lambda g: calls.append(("any", round(float(g.sum()), 3))), mode="any")
        return ch(cm(u + w), t)
    _train(observed, params, [], step)


def _grad_and_retained(compile_fn, observed):
    """torch.autograd.grad(allow_unused=True) over u and mid's weight, then backwards with retain_graph: the
    first misses mid (u's hook not called), the second reaches it."""
    params, ct, cm, ch = _blocks(compile_fn)
    calls = []
    for n in (2, 2, 3):
        t = ct(torch.randn(n, 4))
        u = t.relu() * 2
        u.register_hook(_logged(calls, "u", clamp=True))
        a, b = ch(cm(u + 1), t)
        got = torch.autograd.grad(b.sum(), [u, params[2], params[0]], retain_graph=True, allow_unused=True)
        observed += [list(calls), [grad_copy(g) for g in got]]
        b.sum().backward(retain_graph=True)
        calls.append("---")
        a.sum().backward()
        observed += [list(calls), [grad_copy(p.grad) for p in params]]
        calls.clear()
        for p in params:
            p.grad = None


def _module_hooks_between(compile_fn, observed):
    """Full backward hooks and pre-hooks of an eager module between trunk and mid (NOTE [Module backward hooks a
    None reaches]); they were called with None grad_output and a zero grad_input."""
    params, ct, cm, ch = _blocks(compile_fn)
    em = nn.Linear(4, 4)
    params += list(em.parameters())

    def sums(xs):
        return [round(float(x.sum()), 3) for x in xs]  # AttributeError on None, as a user's hook
    em.register_full_backward_pre_hook(lambda m, go: calls.append(("pre", sums(go))))
    em.register_full_backward_hook(lambda m, gi, go: (calls.append(("full", sums(gi), sums(go))),
                                                      tuple(g.clamp(-1, 1) for g in gi))[1])
    calls = []

    def step(n, calls):
        t = ct(torch.randn(n, 4))
        return ch(cm(em(t).tanh()), t)
    _train(observed, params, calls, step)


class _Twice(torch.autograd.Function):
    """A user Function with torch's defaults (materialize_grads on)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


@torch.library.custom_op("framejit_test_hooks::scale3", mutates_args=())
def _scale3(x: torch.Tensor) -> torch.Tensor:
    return x * 3


_scale3.register_fake(lambda x: torch.empty_like(x))
_scale3.register_autograd(lambda ctx, g: g * 3, setup_context=lambda ctx, inputs, output: None)


def _python_functions_between(compile_fn, observed):
    """revN HIGH-1: a user Function, a reentrant checkpoint and a torch.library custom op, each above an eager
    Linear, between trunk and mid (NOTE [Python Function nodes a None reaches]): their backwards ran on the
    materialised zeros, the Linears got zero .grad and AdamW's weight decay moved them."""
    from torch.utils.checkpoint import checkpoint
    params, ct, cm, ch = _blocks(compile_fn)
    e1, e2, e3 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
    params += [p for m in (e1, e2, e3) for p in m.parameters()]

    def block(t, calls):
        calls.append("fwd")
        return e2(t).relu()

    def step(n, calls):
        t = ct(torch.randn(n, 4))
        z = _Twice.apply(e1(t))
        z.register_hook(_logged(calls, "z"))
        z = z + checkpoint(block, t, calls, use_reentrant=True) + _scale3(e3(t))
        return ch(cm(z), t)
    _train(observed, params, [], step)


class _NoneBack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        return None


def _armed_then_other_backward(compile_fn, observed):
    """revN MED-3 p_c1: autograd.grad over the heads' second weights sets up u's skip without running u's node;
    a later backward brings u only a user Function's None, with which eager calls u's hook."""
    params, ct, _, ch = _blocks(compile_fn)
    calls = []
    for n in (2, 3, 3):
        t = ct(torch.randn(n, 4))
        u = t.relu() * 2
        u.register_hook(_logged(calls, "u", strict=False))
        z = _NoneBack.apply(u)
        outs = ch(u + 1, t)
        got = torch.autograd.grad(outs[1].sum(), params[6:], retain_graph=True)
        calls.append("--")
        (z.sum() + t.sum()).backward()
        observed += [list(calls), [grad_copy(g) for g in got], [grad_copy(p.grad) for p in params]]
        calls.clear()
        for p in params:
            p.grad = None


@pytest.mark.parametrize("program, backend", [
    (_python_functions_between, "triton"), (_python_functions_between, "eager"), (_clamp_between, "onnxrt"),
    (_module_hooks_between, "triton"), (_clamp_between, "triton"), (_gone_and_chained, "triton"),
    (_after_call_and_parts, "triton"), (_multi_grad_between, "triton"), (_grad_and_retained, "triton"),
    (_armed_then_other_backward, "triton")])
def test_activation_hooks_where_no_gradient_reaches(backend, program):
    """The joints are lean on both compiling backends (the mechanism is the backend's joint node, not its code):
    each program on one of them, the new one also on the eager backend."""
    eager, compiled = run_observed(program, backend, joint_calls=6, backwards=3, lean=True)
    assert_same(eager, compiled)


def test_module_hooks_of_never_compiled_modules_are_torchs():
    """revN MED-2: after framejit.compile, a module no compiled block touches runs its hooks as torch registered
    them: torch's warning points at the user's backward line, and a hook's traceback has no framejit frame."""
    import sys
    import traceback
    import warnings

    import framejit
    framejit.compile(lambda x: x + 1)(torch.randn(2))
    lin = nn.Linear(3, 3)
    lin.register_full_backward_hook(lambda m, gi, go: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        lin(torch.randn(2, 3)).sum().backward()
    assert [(w.filename, w.lineno) for w in caught if "Full backward hook" in str(w.message)] == [(__file__, line)]

    def bad(m, gi, go):
        raise ValueError("boom")
    lin.register_full_backward_hook(bad)
    with pytest.raises(ValueError) as info:
        lin(torch.randn(2, 3, requires_grad=True)).sum().backward()
    files = [f.filename for f in traceback.extract_tb(info.tb)]
    assert not any("framejit" in f for f in files) and files[-1] == __file__


def test_register_hook_read_from_the_class_is_torchs():
    """The wrapper is a descriptor: the class entry reads as torch's function (a subclass's __torch_function__
    gets it), and a bound call registers as before."""
    import framejit
    framejit.compile(lambda x: x)
    seen = []

    class Sub(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})
    from framejit.backends.hook_dicts import _ORIGINAL
    assert torch.Tensor.register_hook is _ORIGINAL and _ORIGINAL.__module__ == "torch._tensor"
    x = torch.randn(3, requires_grad=True).as_subclass(Sub)
    (x * 2).register_hook(lambda g: None)
    assert any(f is torch.Tensor.register_hook for f in seen)
    y = torch.randn(3, requires_grad=True).as_subclass(Sub) * 2
    seen.clear()
    y.register_hook(lambda g: None)  # revN LOW-1: no reads of its own through __torch_function__
    assert seen == [torch.Tensor.register_hook]
    assert (y.register_hook.__name__, y.register_hook.__doc__) == ("register_hook", _ORIGINAL.__doc__)
    y = torch.randn(3, requires_grad=True)
    z = y * 3
    z.register_hook(lambda g: g * 2)
    z.sum().backward()
    torch.testing.assert_close(y.grad, torch.full((3,), 6.0))
