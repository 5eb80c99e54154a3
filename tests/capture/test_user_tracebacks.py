"""Exceptions leaving compiled code carry eager's traceback entries: no framejit frame (hook.py's `__call__`/`miss`,
`call_through_hook`), a frame that broke is one entry at eager's line, not the transformed function at the
break plus its resume function, and a module call has torch's entries (NOTE [Tracebacks past the hook],
capture/user_tracebacks.py)."""
from __future__ import annotations

import contextlib
import io
import traceback

import pytest
import torch

import framejit


def _inner(x):
    raise ValueError(f"boom {x.shape[0]}")


def _mid(x):
    print("break")
    return _inner(x)


def _helper(x):
    return _callee(x)


def _callee(x):
    y = x + 1
    raise KeyError(y.shape[0])


def reraised_after_a_break(x):
    y = x + 1
    print("break")
    try:
        _inner(y)
    except ValueError:
        raise


def raise_e_in_a_handler_that_breaks(x):
    y = x + 1
    try:
        _inner(y)
    except ValueError as e:
        print("break")
        raise e


def break_inside_the_try(x):
    y = x + 1
    try:
        print("break")
        _inner(y)
    except ValueError:
        raise


def raised_below_two_breaks(x):
    y = x * 2
    print("break")
    z = y + 1
    print("break")
    _mid(z)


def stored_and_raised_after_a_break(x):
    y = x * 2
    try:
        _inner(y)  # inlined: the trace follows the handler, the exception is rebuilt with the callee's entry
    except ValueError as e:
        err = e
    print("break")
    raise err


def loop_run_as_python(x):
    s = x
    for _ in range(3):
        s = s + 1
        if s.sum() > 5:  # a data-dependent break in the loop
            _inner(s)
    return s


def recursion_through_breaks(x):
    def rec(n, x):
        print("break")
        if n == 0:
            raise KeyError(n)
        return rec(n - 1, x + 1)
    return rec(2, x)


def eager_frame_with_routed_callees(x):
    seen = locals()  # the frame runs eagerly; its callees go through their hooks
    return _helper(x) + len(seen)


def handler_reads_the_traceback(x):
    y = x + 1
    print("break")
    try:
        _mid(y)
    except ValueError as e:
        return [(t.name, t.lineno) for t in traceback.extract_tb(e.__traceback__)]


def routed_handler_reads_the_traceback(x):
    seen = locals()
    try:
        _helper(x)
    except KeyError as e:
        return [(t.name, t.lineno) for t in traceback.extract_tb(e.__traceback__)], len(seen)


def _outcome(fn, x):
    """What the caller sees: the returned traceback entries, or the entries and text of what it raised."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return "returned", fn(x)
    except Exception as e:
        text = "".join(traceback.format_exception(e))
        entries = [(t.name, t.lineno, t.line) for t in traceback.extract_tb(e.__traceback__)][1:]
        return "raised", type(e), entries, "framejit" in text, [line for line in text.splitlines()
                                                                if line.startswith("  File")][1:]


CASES = [reraised_after_a_break, raise_e_in_a_handler_that_breaks, break_inside_the_try, raised_below_two_breaks,
         stored_and_raised_after_a_break,
         loop_run_as_python, recursion_through_breaks, eager_frame_with_routed_callees, handler_reads_the_traceback,
         routed_handler_reads_the_traceback]


@pytest.mark.parametrize("fn", CASES, ids=[fn.__name__ for fn in CASES])
def test_traceback_entries_as_eager(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 3, 4, 5):
        x = torch.randn(n).abs() + 2
        expected = _outcome(fn, x.clone())
        assert _outcome(compiled, x.clone()) == expected


class _Sub(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("break")
        return _helper(y)


class _Outer(torch.nn.Module):
    def __init__(self, hooked):
        super().__init__()
        self.sub = _Sub()
        if hooked:  # called at the break through framejit's copy of _call_impl (module_hooks.py)
            self.sub.register_forward_pre_hook(lambda module, args: None)

    def forward(self, x):
        y = x + 1
        print("break")
        return self.sub(y)


@pytest.mark.parametrize("make", [_Sub, lambda: _Outer(False), lambda: _Outer(True)], ids=["forward", "submodule",
                                                                                          "hooked_submodule"])
def test_module_calls_have_torchs_entries(make):
    # eager's entries hold torch's Module._wrapped_call_impl and _call_impl (and inner with hooks) per call
    framejit.reset()
    module = make()
    compiled = framejit.compile(module, backend="eager")
    for n in (2, 2, 3):
        x = torch.randn(n)
        assert _outcome(compiled, x.clone()) == _outcome(module, x.clone())


def _interrupted(x):
    y = x * 2
    print("before", y.sum() > 0)
    raise KeyboardInterrupt("stop")


def test_keyboard_interrupt_has_eagers_entries():
    """A BaseException that is no Exception (Ctrl-C in a compiled loop) loses framejit's entries too (review
    revN N1: the hooks cleaned `except Exception` only, and a KeyboardInterrupt listed hook.py frames)."""
    def outcome(fn, x):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                fn(x)
        except KeyboardInterrupt as e:
            text = "".join(traceback.format_exception(e))
            return [(t.name, t.lineno) for t in traceback.extract_tb(e.__traceback__)][1:], "framejit" in text
        raise AssertionError("no KeyboardInterrupt")

    compiled = framejit.compile(_interrupted, backend="eager")
    for n in (3, 4):
        x = torch.ones(n)
        assert outcome(compiled, x) == outcome(_interrupted, x)


def test_framejits_own_errors_keep_their_frames(monkeypatch):
    """Review revN N7: an error raised by framejit's own code at run time lost every framejit entry (the user's
    call line and a message with no location were left); NOTE [framejit's own errors keep their frames]."""
    from framejit.capture import hook as hook_module
    monkeypatch.setattr(hook_module, "COMPILE_LOCK", None)  # `with COMPILE_LOCK:` fails inside framejit
    compiled = framejit.compile(_interrupted, backend="eager")
    with pytest.raises((TypeError, AttributeError)) as info:
        compiled(torch.ones(2))
    names = [t.name for t in traceback.extract_tb(info.value.__traceback__)]
    assert names[-1] == "_find_or_compile" and "miss" in names, names
