"""Issue 12: context-manager objects whose class framejit reads as a torch block must leave the same
global state after a compiled call as eager does (NOTE [set_grad_enabled objects from outside], NOTE
[Subclasses of torch context classes] in capture/context.py). Every test calls the compiled function
first, then eager, over changing shapes, and compares the state each leaves behind."""
import warnings

import torch

import framejit

LOG = []


class OwnExitNoGrad(torch.no_grad):
    def __exit__(self, *exc):
        LOG.append("exit")
        torch.set_grad_enabled(False)


class OwnEnterNoGrad(torch.no_grad):
    def __enter__(self):
        LOG.append("enter")
        super().__enter__()


class OwnExitSetGrad(torch.set_grad_enabled):
    def __exit__(self, *exc):
        LOG.append("sgexit")


class OwnExitAutocast(torch.autocast):
    def __exit__(self, *exc):
        LOG.append("acexit")
        return super().__exit__(*exc)


def with_obj(x, ctx):
    with ctx:
        return x @ x.T


def run_passed_in(fn, make, grad_before):
    """(state after, result's requires_grad and dtype, LOG) for each of 3 calls."""
    rows = []
    for i in range(3):
        torch.set_grad_enabled(grad_before)
        LOG.clear()
        ctx = make()
        out = fn(torch.randn(2 + i, 3, requires_grad=True), ctx)
        state = (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"))
        rows.append((state, out.requires_grad, out.dtype, list(LOG)))
    torch.set_grad_enabled(True)
    return rows


def check_passed_in(make, grad_before=True):
    compiled = framejit.compile(with_obj, backend="eager")
    got = run_passed_in(compiled, make, grad_before)
    want = run_passed_in(with_obj, make, grad_before)
    assert got == want


def test_set_grad_enabled_object_restores_mode_of_its_construction():
    # set_grad_enabled(False) switches at construction; its __exit__ restores the mode read then (True),
    # compiled left grad disabled after the call
    check_passed_in(lambda: torch.set_grad_enabled(False))
    check_passed_in(lambda: torch.set_grad_enabled(True), grad_before=False)


def test_set_grad_enabled_object_prev_changes_between_calls():
    compiled = framejit.compile(with_obj, backend="eager")
    for prev in (True, False, True):
        for fn in (compiled, with_obj):
            torch.set_grad_enabled(prev)
            ctx = torch.set_grad_enabled(False)
            torch.set_grad_enabled(True)
            fn(torch.randn(3, 2, requires_grad=True), ctx)
            if fn is compiled:
                got = torch.is_grad_enabled()
            else:
                assert got == torch.is_grad_enabled() == prev
    torch.set_grad_enabled(True)


def test_subclass_objects_with_own_methods_passed_in():
    check_passed_in(OwnExitNoGrad)
    check_passed_in(OwnEnterNoGrad)
    check_passed_in(lambda: OwnExitSetGrad(False))
    check_passed_in(lambda: OwnExitAutocast("cpu"))  # not read as torch.autocast (exact type) before either


def made_inside(x):
    with OwnExitNoGrad():
        y = x * 2
    with OwnExitAutocast("cpu"):
        z = x @ x.T
    return y, z


def run_made_inside(fn):
    rows = []
    for i in range(3):
        torch.set_grad_enabled(True)
        LOG.clear()
        y, z = fn(torch.randn(2 + i, 3, requires_grad=True))
        rows.append((torch.is_grad_enabled(), y.requires_grad, z.dtype, z.requires_grad, list(LOG)))
    torch.set_grad_enabled(True)
    return rows


def test_subclasses_with_own_methods_made_inside():
    compiled = framejit.compile(made_inside, backend="eager")
    got = run_made_inside(compiled)
    assert got == run_made_inside(made_inside)
    assert got[0][-1] == ["exit", "acexit"]


def test_device_autocast_object_passed_in_leaves_autocast_off():
    # the reproducer of 48ca1b2 (a regression test here: it passes at the parent of this change)
    compiled = framejit.compile(with_obj, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn in (compiled, with_obj, compiled):
            for kwargs in ({}, {"dtype": torch.float16}, {"enabled": False}):
                x = torch.randn(4, 2)
                out = fn(x, torch.cpu.amp.autocast(**kwargs))
                assert not torch.is_autocast_enabled("cpu")
                assert torch.get_autocast_dtype("cpu") == torch.bfloat16
                assert out.dtype == with_obj(x, torch.cpu.amp.autocast(**kwargs)).dtype


def count_exits(fn, make, code):
    """Calls of the Python function with code object `code` (an `__exit__`) over 3 calls of fn."""
    import sys
    counts = []
    for i in range(3):
        seen = []

        def profile(frame, event, arg):
            if event == "call" and frame.f_code is code:
                seen.append(1)
        ctx = make(i)
        sys.setprofile(profile)
        try:
            fn(torch.randn(2 + i, 3), ctx)
        finally:
            sys.setprofile(None)
        counts.append(len(seen))
    return counts


def test_exit_of_an_opaque_torch_context_object_runs():
    # record_function objects are opaque: the with-block is a break, and the resume function's call of
    # the bound __exit__ was folded to None (the range never closed); the exit must run once per call
    # (evaluated once while tracing, its result baked in: a call that hits the cache never ran it).
    # One object reused over the calls, as a module attribute would be.
    rf = torch.autograd.profiler.record_function
    compiled = framejit.compile(with_obj, backend="eager")
    for make in (lambda i, obj=rf("blk"): obj, lambda i: rf("blk%d" % i)):
        got = count_exits(compiled, make, rf.__exit__.__code__)
        want = count_exits(with_obj, make, rf.__exit__.__code__)
        assert got == want == [1, 1, 1]
