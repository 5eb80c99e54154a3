"""split/chunk read piece by piece as one ONNX Split on onnxrt (NOTE [Splits as one multi-output Split] in
framejit/backends/onnxrt/splits.py): values equal eager's; no sequence ops left where the pieces are static."""
import torch
from torch import nn

import framejit


def _compiled(fn, **kwargs):
    framejit.reset()
    return framejit.compile(fn, backend="onnxrt", **kwargs)


def _check(fn, make, calls=2, **kwargs):
    fast = _compiled(fn, **kwargs)
    for i in range(calls):
        args = make(i)
        expected, got = fn(*args), fast(*args)
        for e, g in zip(expected if isinstance(expected, tuple) else (expected,),
                        got if isinstance(got, tuple) else (got,)):
            assert e.dtype == g.dtype and e.shape == g.shape
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


def pieces(x):
    a, b, c = x.chunk(3, dim=-1)  # 10 -> 4, 4, 2
    d, e = x.split([3, 7], dim=1)
    return a * 2 + b.sum(-1, keepdim=True), c.sigmoid(), d.exp(), e - 1


def test_chunks_and_split_with_sizes_are_one_split_each(optimized):
    _check(pieces, lambda i: (torch.randn(4, 10) + i,))
    ops = optimized()
    assert ops["Split"] == 2 and ops["SplitToSequence"] == 0 and ops["SequenceAt"] == 0, ops


def int_pieces(x, y):
    a, b = x.split(2, dim=0)
    p, q = y.unbind(0)[0].chunk(2)
    return a + b, (p & q)


def test_integer_and_bool_pieces(optimized):
    _check(int_pieces, lambda i: (torch.arange(8).view(4, -1) * (i + 1), torch.rand(2, 6) > 0.3))
    assert optimized()["SequenceAt"] == 0


def as_list(x):
    parts = x.split(2, dim=1)  # the list itself is read: stays a sequence
    return torch.cat(parts[::-1], dim=1) * 3, parts[0].sum()


def test_split_read_as_a_list_and_symbolic_sizes_keep_values():
    _check(as_list, lambda i: (torch.randn(3, 6),))
    _check(pieces, lambda i: (torch.randn(3 + i, 10),), calls=3, dynamic=True)


def test_gru_cell_loop(optimized):
    torch.manual_seed(0)
    cell = nn.GRUCell(4, 8).eval()

    def run(x, h):
        for t in range(x.size(1)):
            h = cell(x[:, t], h)
        return h

    with torch.no_grad():
        _check(run, lambda i: (torch.randn(2, 3, 4), torch.randn(2, 8) * i))
    ops = optimized()
    assert ops["Split"] >= 3 and ops["SequenceAt"] == 0 and ops["SplitToSequence"] == 0, ops
