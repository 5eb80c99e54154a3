"""A slice bounded by a tensor, live at a graph break, is rebuilt after the graph from its parts.

NOTE [Slices rebuilt at breaks] (capture/values/containers.py). `x[:n]` with `n` a 0-dim tensor computed in
the frame needs the tensor's data (a data-dependent break at the getitem), with the slice on the stack; it
could not be rebuilt and the whole frame ran eagerly (transformers' beam search `sequences[:, :output_length]`,
BLT's entropy patching). Differential over three calls with changing sizes and data; no frame runs wholly
eagerly and the code around the slice stays in graphs.
"""
import torch

import framejit
from tests.helpers import CountingBackend


def _check(fn, inputs):
    framejit.reset()
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    for args in inputs:
        expected, got = fn(*args), compiled(*args)
        for e, g in zip(expected if isinstance(expected, tuple) else (expected,),
                        got if isinstance(got, tuple) else (got,)):
            assert e.shape == g.shape and torch.allclose(e, g), (args, e, g)
    assert framejit.stats()["eager_frames"] == eager_before
    return backend


def _ops(backend):
    return {getattr(n.target, "__name__", str(n.target)) for gm in backend.graphs for n in gm.graph.nodes}


def _randn(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_tensor_stop_on_the_stack_at_the_break():
    def f(x):
        n = (x > 0).sum()
        return x[:n].sin()

    backend = _check(f, [(_randn(0, 6),), (_randn(1, 6),), (_randn(2, 9),)])
    assert backend.graph_count >= 2 and {"gt", "sum", "sin"} <= _ops(backend)


def test_tuple_of_slices_with_computed_tensor_bounds():
    def f(x, idx):
        y = x * 2
        n = ((idx + 1).bool()).sum(dim=1).max()
        y = y[:, 1:2 + n:1]
        return y.cos(), idx[:, n - 1:]

    def ints(seed, *shape):
        return torch.randint(-1, 3, shape, generator=torch.Generator().manual_seed(seed))

    backend = _check(f, [(_randn(0, 2, 7), ints(0, 2, 5)), (_randn(1, 2, 7), ints(1, 2, 5)),
                         (_randn(2, 3, 9), ints(2, 3, 7))])
    assert {"mul", "max", "cos"} <= _ops(backend)


def test_tensor_start_with_a_step():
    def f(x):
        n = (x < 0).sum()
        return (x[n::2] * 3).exp(), x.cos()

    backend = _check(f, [(_randn(0, 5),), (_randn(3, 5),), (_randn(2, 8),)])
    assert {"lt", "exp", "cos"} <= _ops(backend)


def test_slice_in_a_callee_breaks_inside_it():
    def crop(y, n):
        return y[:, :n]

    def f(x):
        n = (x > 0).sum(1).max()
        return crop(x * 2, n).cos()

    backend = _check(f, [(_randn(0, 2, 6),), (_randn(1, 2, 6),), (_randn(2, 3, 9),)])
    assert {"mul", "cos"} <= _ops(backend)
    # the break is placed inside crop, at its slice (2 graphs, then 1 at the same shapes, 2 at new ones);
    # not crop as a frame of its own, recompiled for each value of `int(n)` (10 graphs)
    assert backend.graph_count <= 5
