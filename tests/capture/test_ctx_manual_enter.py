"""Torch grad-mode managers entered and exited by calling `__enter__`/`__exit__` (issue 11: context managers),
differential (eager vs compiled on fresh inputs, under both caller grad modes, tests/helpers.run_differential).

NOTE [Torch managers entered by call] (framejit/capture/generator_ctx.py): `ng.__enter__()` /
`ng.__exit__(None, None, None)` of a no_grad/enable_grad/set_grad_enabled made in the frame do what a
with-block's entry and exit do. NOTE [One manager object across a break] (codegen.py): a manager made in
the trace and rebuilt at a graph break is one object, so the `__enter__` run as Python and the `__exit__`
in the resume function act on the same manager (before: two objects were built; the one exited was a fresh
`no_grad()` whose `prev` is False, so the grad mode stayed off after the call and later results lost their
grad_fn).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential


def make_args(seed):
    return (torch.randn(3 + seed, requires_grad=True),)


def run_under_both_grad_modes(fn, *, fullgraph):
    backends = []
    for mode in (True, False):
        with torch.set_grad_enabled(mode):
            backends.append(run_differential(fn, make_args, fullgraph=fullgraph))
        assert torch.is_grad_enabled()
    return backends


def manual_no_grad(x):
    ng = torch.no_grad()
    ng.__enter__()
    y = x * 2
    ng.__exit__(None, None, None)
    return y, x * 3, torch.is_grad_enabled()


def test_manual_enter_exit_is_one_graph():
    # before: a graph break at `ng.__enter__` (attribute '__enter__' of no_grad) and at `ng.__exit__`
    for backend in run_under_both_grad_modes(manual_no_grad, fullgraph=True):
        assert backend.graph_count == 2  # one per call (two calls, two shapes)


def manual_no_grad_with_break(x):
    ng = torch.no_grad()
    alias = ng
    ng.__enter__()
    y = x * 2
    print("inside", torch.is_grad_enabled())
    z = x * 4
    alias.__exit__(None, None, None)
    return y, z, x * 3, torch.is_grad_enabled()


def test_manual_enter_exit_across_a_break_exits_the_manager_entered():
    # before: the grad mode stayed off after the compiled call and `x * 3` had no grad_fn
    for backend in run_under_both_grad_modes(manual_no_grad_with_break, fullgraph=False):
        assert backend.graph_count >= 2  # the code on both sides of the print stays captured


def manual_enable_grad_with_break(x):
    eg = torch.enable_grad()
    eg.__enter__()
    print("entered")
    y = x * 2
    eg.__exit__(None, None, None)
    return y, x.sin(), torch.is_grad_enabled()


def test_manual_enable_grad_across_a_break():
    for backend in run_under_both_grad_modes(manual_enable_grad_with_break, fullgraph=False):
        assert backend.graph_count >= 2


def set_grad_enabled_object_with_break(x, mode):
    sg = torch.set_grad_enabled(mode)  # acts when made
    y = x * 2
    print("made")
    sg.__exit__(None, None, None)
    return y, x * 3, torch.is_grad_enabled()


def test_set_grad_enabled_object_exited_after_a_break():
    for mode in (False, True):
        for outer in (True, False):
            with torch.set_grad_enabled(outer):
                run_differential(set_grad_enabled_object_with_break, lambda s: (*make_args(s), mode),
                                 fullgraph=False)


def with_outside_manager(x, manager):
    with manager:
        y = x * 2
    return y, x * 3, torch.is_grad_enabled()


def exit_stack_outside_manager(x, manager):
    import contextlib
    with contextlib.ExitStack() as stack:
        stack.enter_context(manager)
        y = x * 2
    return y, x * 3


def test_outside_manager_keeps_the_prev_its_enter_stored():
    # NOTE [Entering managers from outside] (context.py): before, no_grad's `prev` kept its __init__ value
    # (False) and enable_grad had none (AttributeError when read after the compiled call)
    for program in (with_outside_manager, exit_stack_outside_manager):
        for cls in (torch.no_grad, torch.enable_grad):
            backend = CountingBackend()
            compiled = framejit.compile(program, backend=backend)
            for outer in (True, False, True):
                eager_manager, compiled_manager = cls(), cls()
                x = torch.randn(3, requires_grad=True)
                with torch.set_grad_enabled(outer):
                    assert_same(compiled(x, compiled_manager), program(x, eager_manager))
                    assert torch.is_grad_enabled() == outer
                assert compiled_manager.prev == eager_manager.prev == outer
            assert backend.graph_count == 2  # one per caller grad mode


def mm(x):
    return torch.mm(x.view(1, -1), x.view(-1, 1))


def manual_autocast(x):
    ac = torch.autocast("cpu", dtype=torch.bfloat16)
    entered = ac.__enter__()
    y = mm(x)
    exited = ac.__exit__(None, None, None)
    return y, mm(x), entered is ac, exited


def exit_stack_of_torch_managers(x):
    import contextlib
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        y = mm(x)
    return y, mm(x)


def test_autocast_entered_by_call_is_one_graph():
    # before: the frame ran eagerly ("attribute '__enter__' of autocast", "assignment to the attribute
    # 'prev_cache_enabled' of autocast"), so fullgraph=True raised
    for program in (manual_autocast, exit_stack_of_torch_managers):
        for backend in run_under_both_grad_modes(program, fullgraph=True):
            assert backend.graph_count == 2  # one per call


def exit_stack_of_torch_managers_with_break(x):
    import contextlib
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode())
        stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        y = mm(x) * 2
        print("inside", torch.is_autocast_enabled("cpu"), torch.is_inference_mode_enabled())
        z = mm(x) + 1
    return y, z, mm(x), torch.is_inference_mode_enabled()


def autocast_exited_inside_a_later_block(x):
    ac = torch.autocast("cpu", dtype=torch.bfloat16)
    ac.__enter__()
    with torch.autocast("cpu", dtype=torch.float16):
        y = mm(x)
        ac.__exit__(None, None, None)  # restores what ac saw: autocast off inside the float16 block
        z = mm(x)
    torch.set_autocast_enabled("cpu", False)  # the float16 block's exit turned on what ac had entered
    return y, z, mm(x)


def test_autocast_entered_by_call_across_a_break_and_out_of_order():
    # before: the frames ran wholly eagerly; now the first is captured on both sides of the print and the
    # second (an exit out of block order) still runs eagerly, with eager's dtypes
    before = framejit.stats()["eager_frames"]
    for backend in run_under_both_grad_modes(exit_stack_of_torch_managers_with_break, fullgraph=False):
        assert backend.graph_count >= 2
    assert framejit.stats()["eager_frames"] == before
    run_under_both_grad_modes(autocast_exited_inside_a_later_block, fullgraph=False)


def exit_outside_autocast_inside_a_block(x, ac):
    with torch.autocast("cpu", dtype=torch.float16):
        y = mm(x)
        ac.__exit__(None, None, None)  # the caller entered ac: autocast off inside the float16 block
        z = mm(x)
    torch.set_autocast_enabled("cpu", False)
    return y, z, mm(x)


def test_outside_autocast_exited_inside_a_block():
    # NOTE [Exits of outside managers] (context.py): before, `z` was float16 (eager: float32)
    compiled = framejit.compile(exit_outside_autocast_inside_a_block, backend=CountingBackend())
    for seed in (0, 1):
        results, x = [], make_args(seed)[0].detach()
        for fn in (exit_outside_autocast_inside_a_block, compiled):
            ac = torch.autocast("cpu", dtype=torch.bfloat16)
            ac.__enter__()
            results.append(fn(x.clone(), ac))
            assert not torch.is_autocast_enabled("cpu")
        assert_same(results[1], results[0])
        assert [t.dtype for t in results[1]] == [torch.float16, torch.float32, torch.float32]


def switch_autocast(enabled, dtype):
    print("switch", enabled, dtype)  # a graph break: this runs as Python inside the re-entered block
    torch.set_autocast_enabled("cpu", enabled)
    torch.set_autocast_dtype("cpu", dtype)


def autocast_changed_by_a_callee_at_a_break(x, enabled, dtype):
    with torch.autocast("cpu", dtype=torch.float16):
        y = mm(x)
        switch_autocast(enabled, dtype)
        z = mm(x)
        with torch.no_grad():
            w = mm(x)
    return y, z, w, mm(x)


def test_autocast_changed_by_a_step_at_a_break_stays_changed():
    # NOTE [Autocast changed by a step in blocks] (context.py): before, `z` and `w` were float16 (eager:
    # float32 when the callee turned autocast off, bfloat16 when it switched the dtype)
    for enabled, dtype in ((False, torch.float16), (True, torch.bfloat16)):
        for backend in run_under_both_grad_modes(
                lambda x: autocast_changed_by_a_callee_at_a_break(x, enabled, dtype), fullgraph=False):
            assert backend.graph_count >= 2


def autocast_bound_by_with(x):
    with torch.autocast("cpu", dtype=torch.bfloat16) as ac:
        y = mm(x)
    with torch.no_grad() as ng:
        z = x * 3
    return y, z, ac is None, type(ac).__name__, ng is None


def test_with_autocast_binds_the_manager():
    # before: `ac` was None (torch.autocast.__enter__ returns the manager; no_grad's returns None)
    for backend in run_under_both_grad_modes(autocast_bound_by_with, fullgraph=True):
        assert backend.graph_count == 2
