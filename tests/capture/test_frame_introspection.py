"""Code that reads the frame stack (sys._getframe, inspect, traceback) sees the user's frames and locals.

NOTE [Frames read through the frame stack] in framejit/capture/frame_locals.py. Differential: eager vs
framejit.compile(backend="eager") over three calls with changing shapes and values; values, exception
types and what the code reads from frames (locals, names, lines) must agree.
"""
import inspect
import io
import sys
import traceback

import torch

import framejit


def _run(fn, x):
    try:
        return ("ok", fn(x))
    except Exception as e:  # the exception's type is compared
        return ("raised", type(e).__name__)


def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape \
            and torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return a == b


def _check(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 5, 4):
        x = torch.randn(n) + n
        eager, got = _run(fn, x), _run(compiled, x)
        assert eager[0] == "ok", eager
        assert _same(eager, got), (n, eager, got)


def _caller_y():
    return sys._getframe(1).f_locals["y"]


def test_callee_reads_callers_local_through_getframe():
    def f(x):
        y = x * 2
        return _caller_y() + 1
    _check(f)


def test_function_reads_its_own_locals_through_getframe():
    def f(x):
        y = x * 2
        z = y + 1
        return sys._getframe().f_locals["z"] * 3, sys._getframe().f_locals["y"]
    _check(f)


def _currentframe_back():
    return inspect.currentframe().f_back.f_locals["y"]


def _outer_frames():
    return inspect.getouterframes(inspect.currentframe())[1].frame.f_locals["y"]


def test_inspect_currentframe_and_getouterframes():
    def f(x):
        y = x.sin()
        return _currentframe_back() + 1, _outer_frames() * 2
    _check(f)


def _stack_caller():
    st = inspect.stack()
    return st[1].function, st[1].frame.f_locals["y"], st[1].code_context[0].strip()


def test_inspect_stack_names_the_caller_and_its_locals():
    def f(x):
        y = x * 2
        name, v, line = _stack_caller()
        return v + 1, name, line
    _check(f)


def _extract_stack_caller():
    s = traceback.extract_stack()
    return s[-2].name, s[-2].line


def _print_stack_caller():
    buf = io.StringIO()
    traceback.print_stack(file=buf, limit=2)
    return buf.getvalue().splitlines()[:2]


def test_traceback_extract_and_print_stack_name_the_user_frame():
    def f(x):
        y = x * 2
        name, line = _extract_stack_caller()
        printed = _print_stack_caller()
        return y + 1, name, line, printed[0].split(", in ")[-1], printed[1].strip()
    _check(f)


def _caller_line_and_name():
    frame = sys._getframe(1)
    return frame.f_lineno - frame.f_code.co_firstlineno, frame.f_code.co_name


def test_lineno_and_code_name_of_the_caller_after_a_break():
    def f(x):
        y = x * 2
        frame = sys._getframe()
        print("break")
        line, name = _caller_line_and_name()
        return y + 1, frame.f_lineno - f.__code__.co_firstlineno, frame.f_code.co_name, line, name
    _check(f)


def _two_up():
    return sys._getframe(1).f_locals["y"] + sys._getframe(2).f_locals["w"]


def _middle(x):
    y = x + 1
    return _two_up() * 2


def test_frames_read_two_levels_up_through_an_inlined_callee():
    def f(x):
        w = x * 3
        return _middle(x) - 1
    _check(f)


def test_module_forward_whose_helper_reads_its_locals():
    class M(torch.nn.Module):
        def forward(self, x):
            y = x.relu()
            return _caller_y() * 2 + x
    _check(M())
