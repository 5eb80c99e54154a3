"""A stored caught exception keeps no framejit temporary alive (review revG G3; NOTE [Temporaries cleared before
return] in capture/caught_exceptions.py).

Differential: the same function eagerly and compiled over three calls with new sizes; after the call and a
collection, an object the function dropped (`t = None`) is dead in eager although the stored exception lives;
it must be dead under framejit too, and the traceback's frame lists no `___` local.
"""
import gc
import weakref

import torch

import framejit


class _Tracked:
    pass


_REFS: list = []
_STORED: list = []


def _drops_then_returns(x):
    t = _Tracked()
    _REFS.append(weakref.ref(t))
    try:
        raise KeyError(1)
    except KeyError as e:
        _STORED.append(e)
    t = None
    return x + 1


def _run(fn, n):
    _REFS.clear()
    _STORED.clear()
    out = fn(torch.arange(float(n)))
    gc.collect()
    frame = _STORED[0].__traceback__.tb_frame
    return out.tolist(), [r() is None for r in _REFS], sorted(k for k in frame.f_locals if k.startswith("___"))


def test_a_stored_caught_exception_keeps_no_temporaries(own_objects):
    compiled = framejit.compile(_drops_then_returns, backend="eager")
    for n in (2, 3, 4):
        want = _run(_drops_then_returns, n)
        got = _run(compiled, n)
        assert got == want
        assert want[1] == [True]  # eager: dead while the exception lives
