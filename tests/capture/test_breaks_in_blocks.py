"""Graph breaks inside with-blocks: autocast, inference mode, grad mode (nested and mixed) and user
context managers (NOTE [Breaks inside with-blocks] in framejit/capture/graph_break.py).

Each case runs eagerly and compiled on three fresh input sets through tests/helpers.run_differential,
which compares results (dtypes, requires_grad, is_inference), printed output (which here includes the
autocast/grad/inference state seen by the code at and after the break), exceptions, inputs after the call
and torch's global state after the call. The graph counts say the code on both sides of the break was
captured: the graph before the break, and the resume function's graph after it (which re-enters the
blocks in its prologue).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, global_state, run_differential

BF16 = torch.bfloat16


def one(*shape, requires_grad=False):
    return lambda seed: (torch.randn(*shape, requires_grad=requires_grad),)


def noisy(x):
    print("noisy", torch.is_autocast_enabled("cpu"), torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    return x


def failing(x):
    print("about to fail")
    raise ValueError("failing inside the block")


def state():
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_grad_enabled(),
            torch.is_inference_mode_enabled())


# ---- autocast --------------------------------------------------------------------------------------------
def ac_print(x):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ x
        print("inside", y.dtype, state())
        z = y @ y
    return z, z.float() @ x, state()
def ac_call_helper(x):
    with torch.autocast("cpu", dtype=BF16):
        y = noisy(x @ x)
        z = y @ x
    return y, z
def ac_item(x):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ x
        s = (y - y).sum().item()
        z = (y + s) @ x
    return z, s
def ac_branch(x):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ x
        if (y - y).sum() >= 0:
            y = y @ x
        z = y * 2
    return z
def ac_two_breaks(x):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ x
        print("one")
        y = y @ x
        print("two", state())
        y = y @ x
    return y
def ac_nested_dtypes(x):
    with torch.autocast("cpu", dtype=BF16):
        a = x @ x
        with torch.autocast("cpu", enabled=False):
            b = x @ x
            print("inner off", state())
            c = b @ x
        d = a @ c.to(BF16)
        print("outer on", state())
        e = d @ x
    return a, b, c, d, e
def ac_in_loop(x):
    outs = []
    for i in range(3):
        with torch.autocast("cpu", dtype=BF16):
            y = x @ x
            print(i, y.dtype)
        outs.append(y.float() + i)
    return outs
def ac_cache_disabled(x):
    with torch.autocast("cpu", dtype=BF16, cache_enabled=False):
        y = x @ x
        print("no cache", torch.is_autocast_cache_enabled())
        z = y @ x
    return z
def ac_exit_then_more(x):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ x
        print("in")
    z = y.float() @ x  # float32: autocast is off again after the block
    return z, state()
def ac_exception(x):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ x
        failing(y)
    return y
def ac_inlined_callee_breaks(x):
    return ac_print(x)[0] + 1


# ---- inference mode ------------------------------------------------------------------------------------
def inf_print(x):
    with torch.inference_mode():
        y = x * 2
        print("inference", state())
        z = y + 1
    return z, state()
def inf_false_inside_no_grad(x):
    with torch.no_grad():
        with torch.inference_mode(False):
            y = x * 2
            print("grad", torch.is_grad_enabled())
            z = y * 3
        w = x * 4
    return y, z, w
def inf_then_grad_block(x):
    with torch.inference_mode():
        y = x * 2
        print("inference")
        with torch.enable_grad():
            print("enable_grad inside inference", state())
            z = y + 1
    return z
def inf_exception(x):
    with torch.inference_mode():
        failing(x * 2)
    return x


# ---- grad mode mixed with the others ---------------------------------------------------------------------
def mix_no_grad_autocast_branch(x):
    with torch.no_grad():
        with torch.autocast("cpu", dtype=BF16):
            y = x @ x
            if (y - y).sum() >= 0:
                y = y * 2
            z = y @ y
        u = x * 3
    return z, u, state()
def mix_set_grad_statement(x):
    with torch.autocast("cpu", dtype=BF16):
        torch.set_grad_enabled(False)
        y = x @ x
        print("grad off inside", state())
        z = y @ x
        torch.set_grad_enabled(True)
    return y, z, x * 2
def mix_enable_grad_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        with torch.enable_grad():
            z = x * 3
            print("enabled", torch.is_grad_enabled())
            w = z * 2
        v = w * 2
    return y, z, w, v
def mix_exception_in_no_grad_autocast(x):
    with torch.no_grad():
        with torch.autocast("cpu", dtype=BF16):
            failing(x @ x)
    return x


# ---- user context managers -------------------------------------------------------------------------------
class Recorder:
    """Appends "enter"/"exit <exception type>" to a list; never suppresses."""

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append(f"exit {exc_type.__name__ if exc_type else None}")
        return False


class Suppressor:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.log.append("suppressed" if exc_type else "clean")
        return True


def user_ctx_print(x, log):
    with Recorder(log):
        y = x * 2
        print("inside recorder")
        z = y + 1
    return z
def user_ctx_exception(x, log):
    with Recorder(log):
        y = x * 2
        failing(y)
    return y
def user_ctx_suppressing(x, log):
    with Suppressor(log):
        y = x * 2
        failing(y)
        y = y * 100  # skipped: the exception is suppressed at the block's end
    return y + 1
def user_ctx_with_autocast(x, log):
    with Recorder(log):
        with torch.autocast("cpu", dtype=BF16):
            y = x @ x
            print("both")
            z = y @ x
    return z


def with_log(*shape):
    return lambda seed: (torch.randn(*shape), [])


CASES = [
    # (fn, make_args, graphs): graphs is the number compiled over the three calls
    # before the print: enter, matmul, exit; after it (resume): enter, matmul, exit, float, matmul
    (ac_print, one(4, 4), 2),
    # noisy is a user function called at the break: it is traced through its hook (no tensor op: no graph)
    (ac_call_helper, one(4, 4), 2),
    # .item() breaks; s is +0.0 on every call, so one resume graph
    (ac_item, one(4, 4), 2),
    # the branch on a tensor breaks; the taken branch's resume graph
    (ac_branch, one(4, 4), 2),
    (ac_two_breaks, one(4, 4), 3),
    (ac_nested_dtypes, one(4, 4), 3),
    # the frame's graph up to the first print, then one resume graph per remaining range ([1, 2], [2], []):
    # each runs the rest of an iteration and the next one up to its print
    (ac_in_loop, one(4, 4), 4),
    (ac_cache_disabled, one(4, 4), 2),
    (ac_exit_then_more, one(4, 4), 2),
    # the graph before the failing call; the exception leaves autocast as eager does
    (ac_exception, one(4, 4), 1),
    # the break inside ac_print surfaces at the outer call: ac_print runs through its hook (2 graphs) and
    # the outer frame's `+ 1` is its resume graph
    (ac_inlined_callee_breaks, one(4, 4), 3),
    (inf_print, one(3), 2),
    (inf_false_inside_no_grad, one(3, requires_grad=True), 2),
    (inf_then_grad_block, one(3), 2),
    (inf_exception, one(3), 1),
    (mix_no_grad_autocast_branch, one(4, 4, requires_grad=True), 2),
    (mix_set_grad_statement, one(4, 4, requires_grad=True), 2),
    (mix_enable_grad_in_no_grad, one(3, requires_grad=True), 2),
    (mix_exception_in_no_grad_autocast, one(4, 4, requires_grad=True), 1),
    (user_ctx_print, with_log(3), 2),
    (user_ctx_exception, with_log(3), 1),
    # an __exit__ that may suppress: the rest of the frame runs as plain Python (tail form)
    (user_ctx_suppressing, with_log(3), 1),
    (user_ctx_with_autocast, with_log(4, 4), 2),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_break_inside_blocks(fn, make_args, graphs):
    backend = run_differential(fn, make_args, fullgraph=False, seeds=(0, 1, 2))
    assert backend.graph_count == graphs


def test_resume_graph_runs_under_the_reentered_autocast():
    """The resume function's graph itself enters autocast (its matmul is bf16 by autocast, not by a cast)."""
    backend = run_differential(ac_print, one(4, 4), fullgraph=False)
    resume = backend.graphs[1]
    targets = [n.target for n in resume.graph.nodes if n.op == "call_function"]
    assert torch.amp.autocast_mode._enter_autocast in targets and torch.amp.autocast_mode._exit_autocast in targets
    # every graph leaves autocast as it found it: each enter has its exit
    for gm in backend.graphs:
        nodes = [n.target for n in gm.graph.nodes]
        assert nodes.count(torch.amp.autocast_mode._enter_autocast) == nodes.count(torch.amp.autocast_mode._exit_autocast)


def test_exception_at_break_restores_global_state():
    before = global_state()
    compiled = framejit.compile(mix_exception_in_no_grad_autocast, backend=CountingBackend())
    for _ in range(2):
        with pytest.raises(ValueError, match="failing inside the block"):
            compiled(torch.randn(4, 4, requires_grad=True))
        assert global_state() == before


def test_user_exit_runs_once_on_exception():
    log = []
    compiled = framejit.compile(user_ctx_exception, backend="eager")
    with pytest.raises(ValueError):
        compiled(torch.randn(3), log)
    assert log == ["enter", "exit ValueError"]


def test_break_explained_inside_autocast():
    explanation = framejit.explain(ac_print)(torch.randn(4, 4))
    assert explanation.graph_count == 2 and explanation.graph_break_count == 1
    assert explanation.break_reasons[0].user_stack[-1].line.strip().startswith('print("inside"')


def test_ambient_inference_mode_with_inference_inputs():
    """A compiled function called under torch.inference_mode() with inference tensors: compiled, guarded on
    inference mode (a call outside it recompiles), and its outputs are inference tensors as in eager."""
    def f(x):
        return x * 2 + 1, torch.is_inference_mode_enabled()

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    with torch.inference_mode():
        for _ in range(2):
            x = torch.randn(3)
            out, flag = compiled(x)
            ref, ref_flag = f(x)
            assert flag is ref_flag is True and out.is_inference() and torch.equal(out, ref)
    assert backend.graph_count == 1
    with torch.no_grad():  # same grad mode, not inference mode: the inference-mode guard fails
        out, flag = compiled(torch.randn(3))
        assert flag is False and not out.is_inference()
    assert backend.graph_count == 2


def test_inplace_on_inference_input_is_kept():
    def f(x):
        x.add_(1)
        x[0] = 5.0
        return x * 2

    with torch.inference_mode():
        run_differential(f, lambda s: (torch.randn(3),), fullgraph=True)
