"""A frame reader called after a graph break sees the user's code: arguments, varnames, name, line.

NOTE [User frames for readers in resume functions] in framejit/capture/user_frames.py (review revJ J6).
Differential: eager vs framejit.compile over three calls with changing shapes and values; what a call-logging
helper reads from its caller's frame (inspect.getargvalues / formatargvalues, f_code's argument counts and
varnames, name, line, f_locals) must agree, and the frames stay compiled (graphs on both sides of the break).
"""
import inspect
import sys

import pytest
import torch

import framejit
from tests.capture.test_frame_readers2 import _Counter, _plain  # the same counter and value form


def _run(fn, args, kwargs):
    try:
        return ("ok", _plain(fn(*args, **kwargs)))
    except Exception as e:  # the exception's type and message are compared
        return ("raised", type(e).__name__, str(e))


def _check(make, call_args):
    framejit.reset()
    fn = make()
    counter = _Counter()
    compiled = framejit.compile(make(), backend=counter)
    eager_before = framejit.stats()["eager_frames"]
    for i, n in enumerate((3, 5, 4)):
        args, kwargs = call_args(torch.randn(n) + i, i)
        expected, got = _run(fn, args, kwargs), _run(compiled, args, kwargs)
        assert expected[0] == "ok", expected
        assert got == expected, (n, expected, got)
    assert framejit.stats()["eager_frames"] == eager_before
    assert counter.graphs >= 2


@framejit.disable
def _log_call():
    """A call-logging helper: the caller's arguments by name, as inspect describes them."""
    frame = sys._getframe(1)
    info = inspect.getargvalues(frame)
    code = frame.f_code
    return ({a: type(info.locals.get(a, _log_call)).__name__ for a in info.args}, info.varargs, info.keywords,
            inspect.formatargvalues(*info, formatvalue=lambda v: "=" + type(v).__name__)
            if all(a in info.locals for a in info.args) else None,
            code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_varnames, code.co_freevars,
            code.co_name,
            frame.f_lineno - code.co_firstlineno, sorted(frame.f_locals))


def _f_back_reader(*, tag):
    frame = inspect.currentframe().f_back
    return tag, inspect.getargvalues(frame).args, sorted(frame.f_locals), inspect.getframeinfo(frame).function


def _writer():
    sys._getframe(1).f_locals["scale"] = 7  # written through on 3.13 (PEP 667), a snapshot before
    return 1


def _all_parameter_kinds():
    def f(x, n, *rest, k=2, **kw):
        y = x * n
        print("step")
        z = y + 1
        return z, _log_call()
    return f


def _positional_only_and_a_deleted_parameter():
    def f(x, /, n=3, *, scale):
        print("step")
        y = x * scale
        del n
        return y, _log_call()
    return f


def _closure():
    c = 5

    def f(x):
        y = x + c
        print("step")
        return y, _log_call(), c
    return f


def _rebound_parameter():
    def f(x, n):
        y = x * n
        print("step")
        n = "rebound"
        return y, _log_call(), n
    return f


def _reader_with_keywords():
    def f(x, n):
        y = x.sin() * n
        print("step")
        w = _f_back_reader(tag="t")
        return y, w
    return f


def _reader_writing_a_local():
    def f(x, n):
        scale = 2
        print("step")
        a = x * 2
        _writer()
        return a * scale, scale
    return f


CASES = {
    "all_parameter_kinds": (_all_parameter_kinds, lambda x, i: ((x, i, 7, 8), {"extra": i})),
    "positional_only_and_deleted": (_positional_only_and_a_deleted_parameter, lambda x, i: ((x,), {"scale": i + 1})),
    "closure": (_closure, lambda x, i: ((x,), {})),
    "rebound_parameter": (_rebound_parameter, lambda x, i: ((x, i), {})),
    "reader_with_keywords": (_reader_with_keywords, lambda x, i: ((x, i), {})),
    "reader_writing_a_local": (_reader_writing_a_local, lambda x, i: ((x, i), {})),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_frame_reader_after_a_break_sees_the_users_code(case, capsys):
    make, call_args = CASES[case]
    _check(make, call_args)


def test_method_with_super_after_a_break():
    class Base(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class M(Base):
        def forward(self, x):
            y = x + 1
            print("step")
            return super().forward(y), _log_call()

    def make():
        return M()
    _check(make, lambda x, i: ((x,), {}))
