"""A tensor's size beside a dynamic float stays symbolic (NOTE [Sizes beside dynamic floats] in sym_arith.py):
`x.size(0) + a`, `x * (x.shape[0] * scale)` compile once per regime, not once per size.

Each program runs eagerly and compiled over calls whose size and float both change, results compared exactly
(type, value; exceptions by type). Sizes 0 and 1 are specialised (as in torch), so over sizes of 2 and more
the traces are at most 2 under automatic dynamic and 1 under dynamic=True. Before, the size specialised: one
trace per size, under dynamic=True too (stock torch.compile: 1 frame). Programs that change the tensor's
metadata in place around the read check that the float rebuilt after the graph is the size eager read.
"""
from __future__ import annotations

import pytest
import torch

import framejit

_SIZES = [3, 5, 7, 4, 6, 9]
_FLOATS = [0.5, 1.75, -2.25, 3.0, 1e300, 0.125]


def _with_break(x, a):
    r = x.size(0) * a
    print("", end="")  # a graph break: the float is carried into the resume function
    return r + x.size(0), x.sum()


def _stored(x, a):
    _BOX["v"] = x.shape[0] * a
    return x + 1


_BOX: dict = {}

_PROGRAMS = {
    "add": lambda x, a: x.size(0) + a,
    "rsub_mul_div": lambda x, a: (a - x.shape[0], a * x.size(0), x.size(0) / (a + 10.0)),
    "div_by_size": lambda x, a: a / x.size(0),
    "scaled_tensor": lambda x, a: (x * (x.size(0) + a), x.size(0) + a),
    "tensor_times_product": lambda x, a: x * (x.shape[0] * a),
    "negative_dims": lambda x, a: (x.size(-2) * a, x.size(-1) * a),
    "list_of_tensors": lambda x, a: [t.size(0) * a for t in (x, x.t(), x.unsqueeze(0))],
    "with_break": _with_break,
    "stored": _stored,
}


def _outcome(fn, *args):
    try:
        return "value", fn(*args)
    except Exception as e:  # noqa: BLE001 (compared with eager's)
        return "raised", type(e)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or a != a and b != b)


def _run(fn, dynamic, sizes, floats) -> dict:
    framejit.reset()
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, dynamic=dynamic)
    for size, a in zip(sizes, floats):
        x = torch.arange(size * 2.0).view(size, 2)
        _BOX.clear()
        want = _outcome(fn, x.clone(), a), dict(_BOX)
        _BOX.clear()
        got = _outcome(compiled, x.clone(), a), dict(_BOX)
        assert want[0][0] == got[0][0] and _same(want[0][1], got[0][1]) and want[1] == got[1], (size, a, want, got)
    traces = {}
    for f in framejit.stats()["frames"][before:]:
        if f["cache"] == "miss":
            traces[f["function"]] = traces.get(f["function"], 0) + 1
    return traces


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", list(_PROGRAMS))
def test_a_size_beside_a_dynamic_float_compiles_once_per_regime(name, dynamic):
    traces = _run(_PROGRAMS[name], dynamic, _SIZES, _FLOATS)
    assert traces and max(traces.values()) <= (2 if dynamic is None else 1), traces


@pytest.mark.parametrize("dynamic", [None, True])
def test_sizes_zero_and_one_stay_specialised_and_raise_as_eager(dynamic):
    # a / x.size(0) at size 0 raises ZeroDivisionError; 0 and 1 get entries of their own
    traces = _run(_PROGRAMS["div_by_size"], dynamic, [3, 0, 5, 1, 7, 0, 4], [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5])
    assert max(traces.values()) <= (4 if dynamic is None else 3), traces


def _transposed_after(x, a):
    r = x.size(0) + a
    x.t_()  # the graph changes x's sizes: a float rebuilt after it must not read x.size(0) again
    return r, x.shape


def _unsqueezed_before(x, a):
    x.unsqueeze_(0)  # the symbol of the caller's dim 0 is dim 1 now
    return x.size(1) * a, x.shape


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [_transposed_after, _unsqueezed_before])
def test_sizes_changed_in_place_by_the_graph_read_what_eager_read(fn, dynamic):
    _run(fn, dynamic, _SIZES, _FLOATS)
