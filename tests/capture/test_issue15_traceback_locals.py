"""A stored caught exception's traceback frame holds the user's locals as eager's does.

NOTE [Locals of a frame in a traceback] in framejit/capture/caught_exceptions.py (review revJ J3, J5).
Differential: eager vs framejit.compile over three calls with changing shapes and values; after the call,
with the exception still stored: `tb_frame.f_locals` (names and values), TracebackException(capture_locals=True),
and which objects only the frame keeps alive (weakrefs); after dropping the exception, none.
"""
import traceback
import weakref

import pytest
import torch

import framejit

STORE = []
REFS = []


class Tracked:
    pass


def _plain(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), v.tolist())
    if isinstance(v, (list, tuple)):
        return [_plain(a) for a in v]
    return type(v).__name__ if isinstance(v, Tracked) else v


def _probe(fn, x, n):
    STORE.clear()
    REFS.clear()
    result = fn(x, n)
    seen = []
    for e in STORE:
        frame = e.__traceback__.tb_frame
        stack = traceback.TracebackException.from_exception(e, capture_locals=True).stack
        seen.append(({k: _plain(v) for k, v in sorted(frame.f_locals.items())}, frame.f_code.co_name,
                     e.__traceback__.tb_lineno - frame.f_code.co_firstlineno, [sorted(s.locals) for s in stack]))
    alive = [r() is not None for r in REFS]
    STORE.clear()  # frees the frame by reference counting, as in eager (no collection needed)
    return _plain(result), seen, alive, [r() is not None for r in REFS]


def _rebound_and_aliased(x, n):
    a = Tracked()
    REFS.append(weakref.ref(a))
    x = x * 2
    y = x + n
    b = y
    try:
        raise KeyError(n)
    except KeyError as e:
        STORE.append(e)
    c = [n, 3]
    a = None
    return y * 2


def _deleted_parameter(x, n):
    y = x + 1
    del n
    try:
        raise ValueError("v")
    except ValueError as e:
        STORE.append(e)
    return y


def _caught_in_a_loop(x, n):
    t = x.sum()
    held = Tracked()
    REFS.append(weakref.ref(held))
    for i in range(2):
        try:
            if i == 1:
                raise KeyError(i)
        except KeyError as e:
            STORE.append(e)
    return t + n


def _after_a_break(x, n):
    y = x * 3
    print("step")
    z = y + n
    try:
        raise KeyError(1)
    except KeyError as e:
        STORE.append(e)
    w = z * 2
    return w


@pytest.mark.parametrize("fn", [_rebound_and_aliased, _deleted_parameter, _caught_in_a_loop, _after_a_break],
                         ids=lambda f: f.__name__)
def test_traceback_frame_of_a_stored_exception(fn, capsys):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    before = framejit.stats()["eager_frames"]
    for i, size in enumerate((2, 4, 3)):
        x = torch.randn(size) + i
        expected, got = _probe(fn, x, i), _probe(compiled, x, i)
        assert got == expected, (size, expected, got)
    assert framejit.stats()["eager_frames"] == before
