"""A torch manager entered by call whose exit is traced and then run again as Python after a break (review revC
HIGH-1, 3, 4, 6, 7, 8; NOTE [Traced exits re-run after a break] in framejit/capture/generator_ctx.py).

Each program is run eagerly and compiled on fresh inputs of changing shapes (size 4 takes the raising path where
there is one); after every call the grad mode, the autocast state and the results (values, dtype, requires_grad)
must be eager's. Before the fix the compiled calls left grad mode OFF for the rest of the process or raised
AttributeError("'autocast' object has no attribute 'prev'"), which eager never raises; an inference_mode(False)
entered by call inside an inference-mode block with a break made inference tensors (HIGH-5);
torch.get_autocast_dtype inside an autocast block answered the dtype from before the block (HIGH-2).
"""
from __future__ import annotations

import contextlib

import pytest
import torch

import framejit
from tests.helpers import shifted


@contextlib.contextmanager
def plain():
    try:
        yield
    finally:
        pass


def es_gen_ng_exc(x):  # HIGH-8
    try:
        with contextlib.ExitStack() as stack:
            a = stack.enter_context(shifted("a", x))
            stack.enter_context(torch.no_grad())
            y = a * 2
    except KeyError:
        y = x * 9
    return y, x * 2


def es_gen_pop_all(x):  # HIGH-8
    with contextlib.ExitStack() as stack:
        stack.enter_context(shifted("a", x))
        stack.enter_context(torch.no_grad())
        keep = stack.pop_all()
    y = x * 2
    keep.close()
    return y, x * 3


def es_gen_print_ng(x):  # HIGH-3
    with contextlib.ExitStack() as es:
        es.enter_context(plain())
        print("in")
        es.enter_context(torch.no_grad())
        z = x * 3
    return z, x * 4


def es_gen_print_ac(x):  # HIGH-3
    with contextlib.ExitStack() as es:
        es.enter_context(plain())
        print("in")
        es.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        z = x @ x
    return z, x * 4


def es_callback_ng(x):  # HIGH-4
    with contextlib.ExitStack() as es:
        es.callback(lambda: print("cb sees grad", torch.is_grad_enabled()))
        es.enter_context(torch.no_grad())
        y = x * 2
    return y, x * 3


def es_callback_ac(x):  # HIGH-7
    with contextlib.ExitStack() as es:
        es.callback(print, "cb")
        es.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
        y = x @ x
    return y, x * 3


class Wrap2:
    def __enter__(self):
        self.m = torch.no_grad()
        self.m.__enter__()

    def __exit__(self, *a):
        self.m.__exit__(*a)
        print("exited")


def wrap_exc(x):  # HIGH-6
    try:
        with Wrap2():
            y = x * 2
            if x.shape[0] == 4:
                raise KeyError
    except KeyError:
        y = x * 5
    return y, x * 3


def ng_raise_finally(x):  # HIGH-1
    m = torch.no_grad()
    m.__enter__()
    try:
        y = x * 2
        if x.shape[0] == 4:
            raise ValueError("v")
    finally:
        m.__exit__(None, None, None)
    return y, x * 3


def ng_raise_except(x):  # HIGH-1
    m = torch.no_grad()
    m.__enter__()
    try:
        y = x * 2
        if x.shape[0] == 4:
            raise ValueError("v")
    except ValueError:
        m.__exit__(None, None, None)
        raise
    m.__exit__(None, None, None)
    return y, x * 3


def ac_raise_finally(x):  # HIGH-7
    ac = torch.autocast("cpu", dtype=torch.bfloat16)
    ac.__enter__()
    try:
        y = x @ x
        if x.shape[0] == 4:
            raise ValueError("v")
    finally:
        ac.__exit__(None, None, None)
    return y, x * 3


def im_false_manual_break(x):  # HIGH-5
    with torch.inference_mode():
        m = torch.inference_mode(False)
        m.__enter__()
        b = x.detach() * 2
        print("b", torch.is_inference_mode_enabled())
        c = x.detach() * 3
        m.__exit__(None, None, None)
        d = x.detach() + 1
    return b, c, d, torch.tensor([b.is_inference(), c.is_inference(), d.is_inference()])


def ac_dtype_branch(x):  # HIGH-2: NOTE [Autocast dtype inside traced blocks]
    before = torch.get_autocast_dtype("cpu")
    with torch.autocast("cpu", dtype=torch.float16):
        d = torch.get_autocast_dtype("cpu")
        y = x * 2 if d == torch.float16 else x * 3
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = x * 4 if torch.get_autocast_dtype("cpu") == torch.bfloat16 else x * 5
        v = x * 8 if torch.get_autocast_dtype("cpu") == torch.float16 else x * 9
    w = x * 6 if torch.get_autocast_dtype("cpu") == before else x * 7
    return y, z, v, w


def _state():
    return (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.is_inference_mode_enabled())


def _run(fn, n, capsys):
    x = torch.randn(n, requires_grad=True)
    try:
        out = ("ok", [(t.detach().float(), t.dtype, t.requires_grad) for t in fn(x)])
    except Exception as e:  # noqa: BLE001 - the exception is part of the compared behaviour
        out = ("raised", type(e).__name__, str(e))
    state = _state()
    torch.set_grad_enabled(True)
    return out, state, capsys.readouterr().out


def _same(a, b):
    assert a[0] == b[0]
    if a[0] == "raised":
        assert a[1:] == b[1:]
    if a[0] == "ok":
        assert len(a[1]) == len(b[1])
        for (va, da, ra), (vb, db, rb) in zip(a[1], b[1]):
            assert (da, ra) == (db, rb)
            torch.testing.assert_close(va, vb, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("fn", [es_gen_ng_exc, es_gen_pop_all, es_gen_print_ng, es_gen_print_ac, es_callback_ng,
                                es_callback_ac, wrap_exc, ng_raise_finally, ng_raise_except, ac_raise_finally,
                                im_false_manual_break, ac_dtype_branch])
def test_traced_exit_rerun_matches_eager(fn, capsys):
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 4, 3, 5, 4):
        torch.manual_seed(n)
        want = _run(fn, n, capsys)
        torch.manual_seed(n)
        got = _run(compiled, n, capsys)
        _same(want[0], got[0])
        assert got[1] == want[1], (n, got[1], want[1])
        assert got[2] == want[2]
    assert _state() == (True, False, torch.get_autocast_dtype("cpu"), False)


def ng_prev_after_break(x):  # LOW-1: NOTE [Prev of managers made here]
    m = torch.no_grad()
    m.__enter__()
    y = x * 2
    m.__exit__(None, None, None)
    print("b")
    return y, torch.tensor(m.prev)


def eg_exit_again_after_break(x):  # LOW-1
    m = torch.enable_grad()
    m.__enter__()
    y = x * 2
    m.__exit__(None, None, None)
    print("b")
    m.__exit__(None, None, None)
    return y, x * 3


def ng_exit_again_after_break(x):  # LOW-1
    m = torch.no_grad()
    m.__enter__()
    y = x * 2
    m.__exit__(None, None, None)
    print("b")
    torch.set_grad_enabled(False)
    m.__exit__(None, None, None)
    return y, x * 3


@pytest.mark.parametrize("caller_grad", [True, False])
@pytest.mark.parametrize("fn", [ng_prev_after_break, eg_exit_again_after_break, ng_exit_again_after_break])
def test_rebuilt_manager_keeps_prev_of_its_traced_entry(fn, caller_grad, capsys):
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 4, 3):
        results = []
        for f in (fn, compiled):
            torch.manual_seed(n)
            x = torch.randn(n, requires_grad=True)
            torch.set_grad_enabled(caller_grad)
            try:
                out = ("ok", [(t.detach().float(), t.dtype, t.requires_grad) for t in f(x)])
            except Exception as e:  # noqa: BLE001 - the exception is part of the compared behaviour
                out = ("raised", type(e).__name__, str(e))
            results.append((out, _state(), capsys.readouterr().out))
            torch.set_grad_enabled(True)
        (want, want_state, want_out), (got, got_state, got_out) = results
        _same(want, got)
        assert (got_state, got_out) == (want_state, want_out)
