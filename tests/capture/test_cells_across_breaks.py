"""A closure made before a graph break shares a cell the frame assigns again later (or writes itself with
`nonlocal`): the resume function gets the frame's real cell (NOTE [Cells passed to resume functions] in
resume.py), so the frame is captured around the break instead of running eagerly, with eager's values."""
import contextlib
import io
import types

import torch

import framejit


def _counts():
    s = framejit.stats()
    return s["eager_frames"], s["graphs"]


def _run(fn, make_args, calls=3):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    eager0, graphs0 = _counts()
    for _ in range(calls):
        args = make_args()
        out_e, out_c = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out_e):
            expected = fn(*args)
        with contextlib.redirect_stdout(out_c):
            got = compiled(*args)
        assert out_c.getvalue() == out_e.getvalue()
        yield expected, got
    eager1, graphs1 = _counts()
    _run.delta = (eager1 - eager0, graphs1 - graphs0)


def _rebound_lambda(x, y):
    one = lambda a, b: a + b  # noqa: E731
    def inner():
        print("inner")
        return one(x, y)
    r = inner()
    one = lambda a, b: a - b  # noqa: E731
    return r + inner()


def _comprehension_then_store(x):
    c = 1
    def get():
        return c
    y = [print(i) or x * get() for i in range(2)]
    c = 2
    return get() * x + y[0]


def _nonlocal_writer(x):
    n = 0
    def bump(k=1):
        nonlocal n
        n += k
        return n
    bump()
    print("break")
    r = x * n
    bump(2)
    return r + n * x, bump


def _two_breaks(x):
    scale = 2.0
    def apply(t):
        return t * scale
    a = apply(x)
    print("one")
    scale = scale + 1.0
    b = apply(x)
    print("two")
    scale = 10.0
    return a + b + apply(x), apply


def test_rebound_lambda_is_seen_by_the_closure():
    for expected, got in _run(_rebound_lambda, lambda: (torch.randn(3), torch.randn(3))):
        torch.testing.assert_close(got, expected)
    eager_frames, graphs = _run.delta
    assert eager_frames == 0
    assert graphs >= 2


def test_store_after_a_comprehension_break():
    for expected, got in _run(_comprehension_then_store, lambda: (torch.randn(4),)):
        torch.testing.assert_close(got, expected)
    assert _run.delta[0] == 0


def test_nonlocal_writes_are_seen_by_the_frame_and_the_returned_closure():
    for (expected, bump_e), (got, bump_c) in _run(_nonlocal_writer, lambda: (torch.randn(2),)):
        torch.testing.assert_close(got, expected)
        assert bump_c() == bump_e() == 4  # the closure returned holds the frame's cell, at 3
        assert bump_c.__closure__[0].cell_contents == 4
    eager_frames, graphs = _run.delta
    assert eager_frames == 0
    assert graphs >= 1  # the part before the break has no tensor op


def test_a_cell_passed_on_across_two_breaks():
    for (expected, apply_e), (got, apply_c) in _run(_two_breaks, lambda: (torch.randn(5),)):
        torch.testing.assert_close(got, expected)
        x = torch.randn(5)
        torch.testing.assert_close(apply_c(x), apply_e(x))  # scale is 10.0 in both
    eager_frames, graphs = _run.delta
    assert eager_frames == 0
    assert graphs >= 3


_SAVED = []


def _maybe_foreign(x, reuse):
    one = 1
    def mine():
        return one
    inner = _SAVED[0] if reuse else mine
    print("b")
    one = 2
    return inner() * x + mine() * 0


def test_a_closure_that_shares_the_passed_cell_on_one_call_only():
    """The resume function's trace reads `one` through `inner`'s cell; whether that is the cell it got
    is guarded: a later call with a foreign closure of the same code (its own cell holding 7) retraces."""
    framejit.reset()
    compiled = framejit.compile(_maybe_foreign, backend="eager")
    eager0 = framejit.stats()["eager_frames"]
    mine_code = next(c for c in _maybe_foreign.__code__.co_consts if isinstance(c, types.CodeType)
                     and c.co_name == "mine")
    for reuse, seed in ((False, 7), (True, 7), (False, 3), (True, 5)):
        _SAVED[:] = [types.FunctionType(mine_code, globals(), "mine", None, (types.CellType(seed),))]
        x = torch.randn(2)
        with contextlib.redirect_stdout(io.StringIO()):
            expected, got = _maybe_foreign(x, reuse), compiled(x, reuse)
        torch.testing.assert_close(got, expected)
    assert framejit.stats()["eager_frames"] == eager0
