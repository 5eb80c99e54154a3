"""A returned view of a temporary is a view as in eager on onnxrt, after sizes went symbolic too (hhuntG6 H1,
NOTE [Returned views stay views] in onnxrt/partition.py).

`(x * 2)[::2]` returned ORT's fresh contiguous copy once the frame was recompiled with symbolic sizes (the
first, static call was right): stride (2, 1) instead of (4, 1), `_base` None, and `c.view(-1)` succeeded where
eager raises; `(x + 1).expand(2, -1)` came back materialised, so `add_` succeeded where eager raises. Every
test calls eager and framejit on fresh inputs of several sizes (a static call, then dynamic ones) and compares
the result's metadata and what a following `view(-1)` and `add_(1)` do. The warm test restores the symbolic
program as a warm process does (persist.py).
"""
import pytest
import torch

import framejit
from framejit.backends.onnxrt import load, onnxrt, save
from framejit.capture import frame_cache
from tests.backends.symbolic_graphs import symbolic_graph

SIZES = (3, 4, 5, 6)

PROGRAMS = {
    "step_slice": lambda x: (x * 2)[::2],
    "slice": lambda x: (x * 2)[1:],
    "select": lambda x: (x * 2)[:, 0],
    "expand": lambda x: (x.sum(1) + 1).expand(2, -1),
    "expand3d": lambda x: (x + 1).expand(2, -1, -1),
    "unsqueeze": lambda x: (x * 2).unsqueeze(1),
    "narrow": lambda x: (x * 2).narrow(0, 1, 2),
    "sym_narrow": lambda x: (x * 2).narrow(0, 1, x.shape[0] - 2),
    "transpose_slice": lambda x: (x * 2).t()[:, 1:],
    "chunk": lambda x: (x * 2).chunk(2, -1)[1],
    "also_read": lambda x: ((x * 2)[::2], (x * 2)[::2].sum()),
}


def _outcome(op, t):
    try:
        return ("ok", op(t).tolist())
    except RuntimeError as exc:
        return ("raised", str(exc).split("\n")[0])


def _observed(result):
    """Everything eager code can see of each returned tensor, then the outcome of a view(-1) and an add_."""
    tensors = result if isinstance(result, tuple) else (result,)
    return [(tuple(t.shape), t.stride(), t.storage_offset(), t.is_contiguous(), t._is_view(), t.tolist(),
             _outcome(lambda c: c.view(-1), t), _outcome(lambda c: c.add_(1), t)) for t in tensors]


def _rows(n):
    return torch.arange(float(n * 2)).reshape(n, 2)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_returned_views_of_temporaries_after_sizes_go_symbolic(name):
    fn = PROGRAMS[name]
    framejit.reset()
    compiled = framejit.compile(fn, backend="onnxrt")
    before = framejit.stats()["graphs"]
    for n in SIZES:
        assert _observed(compiled(_rows(n))) == _observed(fn(_rows(n))), (name, n)
    assert framejit.stats()["graphs"] - before == 2  # the static graph, then one symbolic graph for the rest


def test_a_restored_symbolic_program_returns_views_of_temporaries():
    fn = PROGRAMS["step_slice"]
    gm = symbolic_graph(fn, [_rows(4)])
    data = save(onnxrt(gm, [_rows(4)]))
    assert data is not None
    restored = load(data, frame_cache.load_graph(frame_cache.dump_graph(gm)))
    for n in (5, 4, 7):
        assert _observed(restored(_rows(n))) == _observed(fn(_rows(n))), n
    assert sum(len(v) for v in restored.dynamic_programs.values()) == 1
