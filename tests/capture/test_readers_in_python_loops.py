"""Frame-reading callees inside loops and comprehensions that run as Python see the user's frame.

NOTE [Callees routed in loops run as Python] (capture/python_loops.py). A loop run as Python (a loop over a
tensor's rows breaking on data; on 3.12+ an inlined comprehension with a break in its body: NOTE [Breaks
inside inlined comprehensions]) calls user functions of its body through their frame hooks; a callee that
reads its caller's frame (sys._getframe(1).f_locals, f_code, f_lineno) must instead be called directly by
the frame running the loop, and that frame must hold the user's locals only: what the reader sees equals
eager (3.11: the <listcomp> frame; 3.12+: the enclosing function's frame, the loop variable included), and
no frame runs wholly eagerly. Differential over three calls with changing shapes and values.
"""
import contextlib
import io
import sys

import torch

import framejit
from tests.capture.test_frame_readers2 import _Counter, _plain


def _view(*args, **kwargs):
    """What a frame reader sees of its caller: local names and values, function name, line offset."""
    frame = sys._getframe(1)
    local_view = {k: (_plain(v) if isinstance(v, (torch.Tensor, int, float, str, list, tuple)) else type(v).__name__)
                  for k, v in frame.f_locals.items()}
    return local_view, frame.f_code.co_name, frame.f_lineno - frame.f_code.co_firstlineno, len(args), sorted(kwargs)


def _run(fn, x):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            result = ("ok", _plain(fn(x)))
    except Exception as e:  # the exception's type and message are compared
        result = ("raised", type(e).__name__, str(e))
    return result, out.getvalue()


def _check(make, sizes=(3, 5, 4)):
    """Eager vs compiled; returns (graphs, frames run wholly eagerly)."""
    framejit.reset()
    fn, compiled_fn = make(), make()
    counter = _Counter()
    compiled = framejit.compile(compiled_fn, backend=counter)
    eager_before = framejit.stats()["eager_frames"]
    for n in sizes:
        x = torch.randn(n, 4) + (n - 4)
        expected, got = _run(fn, x), _run(compiled, x)
        assert expected[0][0] == "ok", expected
        assert got == expected, (n, expected, got)
    return counter.graphs, framejit.stats()["eager_frames"] - eager_before


def test_reader_called_in_a_comprehension_sees_the_users_frame():
    def make():
        def f(x):
            a = x.sin()
            y = a + 1  # noqa: F841 (dead: only the reader sees it)
            views = [_view(i) for i in range(2)]
            return a.cos(), views
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0
    assert graphs >= 2


def test_reader_reached_after_a_break_in_the_comprehension_body():
    # the break is the print; the reader is reached by the body's call when the comprehension runs as Python
    def make():
        def f(x):
            a = x.sin()
            views = [print(i) or _view(i) for i in range(2)]
            return a.cos(), views
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0
    assert graphs >= 2


def test_reader_with_keywords_in_a_dict_comprehension():
    def make():
        def f(x):
            a = x.sin()
            b = 3
            views = {i: _view(i, k=b) for i in range(2)}
            return a.cos() + b, views
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0
    assert graphs >= 2


def test_reader_in_a_nested_comprehension():
    def make():
        def f(x):
            a = x.sin()
            views = [[_view(i, j) for j in range(2)] for i in range(2)]
            return a.cos(), views
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0


def test_reader_in_a_loop_over_rows_breaking_on_data():
    # NOTE [Loops run as Python]: the data-dependent `if` runs the loop as Python; the reader sees the frame
    # running it, which held framejit's ___stack* arguments before
    def make():
        def f(x):
            a = x.sin()
            out = []
            for r in x:
                if r.sum() > 0:
                    out.append(_view(r))
            return a.cos(), out
        return f
    graphs, eager_frames = _check(make)
    assert eager_frames == 0
    assert graphs >= 2


def _writer(v):
    frame = sys._getframe(1)
    if sys.version_info >= (3, 13):  # a write-through f_locals proxy
        frame.f_locals["a"] = frame.f_locals["a"] + v
    return v


def test_reader_writing_its_callers_locals_in_a_comprehension():
    def make():
        def f(x):
            a = x.sin()
            v = [_writer(i) for i in range(1, 3)]
            return a.cos() * 2, v, a
        return f
    _, eager_frames = _check(make)
    assert eager_frames == 0


def _numbers(n):
    for i in range(n):
        yield i


def test_generator_function_in_a_comprehension_run_as_python():
    # NOTE [Generator functions at breaks]: called directly, not through a hook that would run its frame eagerly
    def make():
        def f(x):
            a = x.sin()
            vals = [print(i) or sum(_numbers(i)) for i in range(3)]
            return a.cos() + vals[-1], vals
        return f
    _, eager_frames = _check(make)
    assert eager_frames == 0


class _Scale(torch.nn.Module):
    def forward(self, t):
        return t * 2


def _double(t):
    return t + t


def test_modules_and_functions_in_a_loop_run_as_python_are_still_captured():
    # routed through their frame hooks: each is traced as a frame of its own (stats()["frames"] names them)
    def make():
        scale = _Scale()

        def f(x):
            out = []
            for r in x:
                if r.sum() > 0:
                    out.append(scale(_double(r)))
            return torch.stack(out)
        return f
    framejit.reset()
    compiled, eager = framejit.compile(make(), backend="eager"), make()
    frames_before = len(framejit.stats()["frames"])
    for n in (6, 7):
        x = torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) * torch.tensor([[-1.0], [1.0]]).repeat(n, 1)[:n]
        torch.testing.assert_close(compiled(x), eager(x))
    traced = {frame["function"] for frame in framejit.stats()["frames"][frames_before:]}
    assert {"_double", "_Scale.forward"} <= traced or {"_double", "forward"} <= traced, traced
