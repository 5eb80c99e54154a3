"""Automatic dynamic when a float and a size change in the same call (NOTE [Automatic dynamic] in hook.py):
the float's guard fails first, and the recompile makes the changed dimension symbolic too (as torch does),
instead of compiling once more for the size on a later call."""
import torch

import framejit
from tests.helpers import CountingBackend


def test_float_and_batch_changing_together_recompile_once():
    def fn(x, scale):
        return x * scale + x.sum(0)

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for batch, scale in [(2, 1.0), (4, 1.5), (5, 2.0), (7, 2.5), (3, 0.5)]:
        x = torch.randn(batch, 3)
        torch.testing.assert_close(compiled(x, scale), fn(x, scale))
    assert backend.graph_count == 2
    vals = [n.meta["val"] for n in backend.graphs[1].graph.find_nodes(op="placeholder")]
    assert [isinstance(v.shape[0], torch.SymInt) for v in vals if isinstance(v, torch.Tensor)] == [True]


def test_float_change_alone_keeps_static_sizes():
    def fn(x, scale):
        return x * scale

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    x = torch.randn(4, 3)
    for scale in (1.0, 2.0, 3.0):
        torch.testing.assert_close(compiled(x, scale), fn(x, scale))
    assert backend.graph_count == 2
    vals = [n.meta["val"] for n in backend.graphs[1].graph.find_nodes(op="placeholder")]
    assert all(isinstance(d, int) for v in vals if isinstance(v, torch.Tensor) for d in v.shape)


def test_int_passing_through_one_stays_symbolic():
    # a step counter 0, 1, 2, ...: once it changed (0 -> 1) it is symbolic, 1 included (as torch's
    # unspecialised ints), so 2, 3, ... reuse that entry instead of compiling again for 2
    def fn(x, step):
        return x * step + step

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    x = torch.randn(3)
    for step in range(6):
        torch.testing.assert_close(compiled(x, step), fn(x, step))
    assert backend.graph_count == 2
