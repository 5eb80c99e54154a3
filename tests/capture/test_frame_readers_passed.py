"""A builtin frame reader passed to a library callable that calls it reads the user's frame.

NOTE [Frame readers passed to library callables] in framejit/capture/frame_locals.py (review revJ J4).
Differential: eager vs framejit.compile over three calls with changing shapes and values.
"""
import builtins
import operator

import pytest
import torch

import framejit

LC = locals
EV = eval
VS = vars


def _run(fn, x):
    out = fn(x)
    return [(tuple(v.shape), v.tolist()) if isinstance(v, torch.Tensor) else v for v in out]


def _helper(x):
    z = x * 3
    return sorted(operator.call(VS)), operator.call(EV, "float((z + 1).sum())")


def _root_after_a_break(x):
    y = x + 1
    print("step")
    d = operator.call(LC)
    return y * 2, sorted(d)


def _root_without_a_break(x):
    y = x + 1
    return y * 2, operator.call(EV, "float((y + x).sum())")


def _in_an_inlined_callee(x):
    y = x + 1
    a = _helper(y)
    return y * 2, a


def _reader_not_called(x):
    y = x + 1
    return y, callable(LC), getattr(builtins, "locals") is LC


CASES = [_root_after_a_break, _root_without_a_break, _in_an_inlined_callee, _reader_not_called]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_reader_passed_to_a_library_callable(fn, capsys):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for i, n in enumerate((2, 4, 3)):
        x = torch.randn(n) + i
        assert _run(compiled, x) == _run(fn, x), (fn.__name__, n)


def test_the_callee_case_keeps_the_root_frame_compiled():
    framejit.reset()
    before = framejit.stats()
    compiled = framejit.compile(_in_an_inlined_callee, backend="eager")
    for n in (2, 3):
        compiled(torch.randn(n))
    after = framejit.stats()
    assert after["eager_frames"] == before["eager_frames"]
    assert after["graphs"] - before["graphs"] >= 2
