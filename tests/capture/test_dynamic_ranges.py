"""Dynamic shapes, issue 13: for loops over a range whose length is symbolic (a size, an int argument that
changes) run as Python instead of unrolling (NOTE [Loops over symbolic ranges] in python_loops.py).
Unrolled, the loop specialised the length, so the frame compiled once per length until the recompile
limit ran it eagerly (stock torch.compile: 8 graphs over these sizes, then eager). Differential: eager vs
compiled on fresh inputs of changing sizes (1 and 0 included where eager accepts them); compile counts
asserted."""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

SIZES = [3, 5, 7, 4, 9, 6, 11, 2, 1, 8]  # more lengths than the recompile limit (8), 1 included


def _frames(before: int, name: str) -> int:
    return sum(1 for row in framejit.stats()["frames"][before:] if row["function"] == name)


def _sum_rows(x):
    acc = x[0] * 0
    for i in range(x.size(0)):
        acc = acc + x[i] * i
    return acc.relu()


def _every_other_row(x):
    acc = x.sum(0) * 0
    for i in range(1, x.size(0), 2):
        acc = acc + x[i]
    return acc.relu() + x.sum(0), len(range(1, x.size(0), 2))


def _nested(x):
    acc = x.sum() * 0
    for i in range(x.size(0)):
        for j in range(1, x.size(1)):
            acc = acc + x[i, j] * j
    return acc


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", [_sum_rows, _every_other_row, _nested], ids=lambda f: f.__name__)
def test_a_loop_over_a_symbolic_size_compiles_once_for_every_length(fn, dynamic):
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    for n in SIZES + [3, 12, 13]:
        torch.manual_seed(n)
        x = torch.randn(n, 3)
        assert_same(compiled(x), fn(x))
    # before: one entry per length (the range unrolled, the size guarded by value) until the recompile
    # limit ran the frame eagerly. Now: static (automatic only), symbolic, and size 1 (0/1 specialise)
    assert _frames(before, fn.__name__) == (3 if dynamic is None else 2)
    assert framejit.stats()["eager_frames"] == eager
    assert backend.graph_count <= 6


def _repeat(x, n):
    for i in range(n):
        x = x * 2 + i
    return x - 1


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_a_loop_over_an_int_argument_compiles_once_for_every_count(dynamic):
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(_repeat, backend="eager", dynamic=dynamic)
    for n in SIZES + [0, 12, 0, 2]:
        x = torch.randn(4)
        assert_same(compiled(x, n), _repeat(x, n))
    # before: one entry per count; now static (automatic only), symbolic, 0 and 1
    assert _frames(before, "_repeat") <= (4 if dynamic is None else 3)
    assert framejit.stats()["eager_frames"] == eager


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


class _Layers(torch.nn.Module):
    """A variable number of layers per call (early exit, layer dropping)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block() for _ in range(12)])

    def forward(self, x, n):
        x = x * 0.5
        for i in range(n):
            x = self.layers[i](x)
        return x * 2


def test_a_variable_count_of_layers_compiles_each_layer_once():
    torch.manual_seed(0)
    model = _Layers()
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(model, backend="eager")
    with torch.no_grad():
        for n in SIZES + [0, 12]:
            x = torch.randn(2, 4)
            assert_same(compiled(x, n), model(x, n))
    # the loop runs as Python; each step calls a layer through its frame hook, whose one entry serves all
    # twelve layers (before: the forward compiled once per count, until the recompile limit)
    assert _frames(before, "_Block.forward") == 1
    assert _frames(before, "_Layers.forward") <= 4  # static, symbolic, 0 and 1
    assert framejit.stats()["eager_frames"] == eager


def _helper(x):
    acc = x[0] * 0
    for i in range(x.size(0)):
        acc = acc + x[i]
    return acc


def _caller(x):
    return _helper(x * 2) + 1


def test_a_loop_in_an_inlined_callee_runs_in_the_callee_frame():
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(_caller, backend="eager")
    for n in SIZES + [12, 13]:
        x = torch.randn(n, 3)
        assert_same(compiled(x), _caller(x))
    assert _frames(before, "_caller") <= 3 and _frames(before, "_helper") <= 3
    assert framejit.stats()["eager_frames"] == eager


def _floor_steps(x, t):
    for i in range(math.floor(t)):
        x = x + i
    return x * t


def test_a_loop_over_the_floor_of_a_float_compiles_once_for_every_count():
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(_floor_steps, backend="eager")
    for t in [0.5, 2.25, 2.5, 2.75, 1.1, 1.9, 2.0, 1.0, 3.5, 3.25, 4.5, 5.5, 6.5, 7.5, 9.25, -1.5]:
        x = torch.zeros(3)
        assert_same(compiled(x, t), _floor_steps(x, t))
    # before: one entry per floor (NOTE [Ints of dynamic floats]) until the recompile limit ran it eagerly.
    # Now: static 0.5, then t a graph input and the loop run as Python
    assert _frames(before, "_floor_steps") == 2
    assert framejit.stats()["eager_frames"] == eager


# ---- NOTE [Locals first bound in a loop run as Python] ----------------------------------------------------
def _reads_the_loop_variable(x):
    acc = x[0] * 0
    for i in range(1, x.size(0)):
        if i % 2:
            continue
        acc = acc + x[i]
    else:
        acc = acc - 1
    return acc, i


def _prints_then_reads(x):
    acc = x.sum(0)
    for i in range(x.size(0)):
        acc = acc + x[i]
        print("step", i)  # a break of another kind in the body
    return acc, i


def _breaks_on_data_then_reads(x):
    acc = x[0]
    for i in range(1, x.shape[0]):
        if acc.sum() > 1e9:  # a data-dependent break in the body
            acc = acc * 0
        last = x[i] * i
        acc = acc + last
    return acc * 2, last


@pytest.mark.parametrize("fn", [_reads_the_loop_variable, _prints_then_reads, _breaks_on_data_then_reads],
                         ids=lambda f: f.__name__)
def test_a_local_first_bound_in_the_loop_is_read_after_it(fn, capsys):
    # before: the resume function after a loop run as Python did not get `i` / `last` (bound only in the
    # body): UnboundLocalError where eager returns them
    compiled = framejit.compile(fn, backend="eager")
    for n in [3, 5, 7, 4, 9, 6, 2]:
        torch.manual_seed(n)
        x = torch.randn(n, 3)
        expected = fn(x)
        printed = capsys.readouterr().out
        assert_same(compiled(x), expected)
        assert capsys.readouterr().out == printed


# ---- torch.tensor(range(...)) of a symbolic range (NOTE [Tensors of symbolic ints] in sym_arith.py) ------
def _ids_from_range(x, n):
    positions = torch.tensor(range(x.size(1)))
    return x + positions, torch.as_tensor(range(n, 0, -2)), torch.tensor(range(n - 6))


def test_a_tensor_of_a_symbolic_range_is_an_arange():
    before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
    compiled = framejit.compile(_ids_from_range, backend="eager")
    for n in [3, 5, 7, 4, 9, 6, 11, 2, 8, 12, 13, 1, 0]:
        torch.manual_seed(n)
        x = torch.randn(2, n)
        assert_same(compiled(x, n), _ids_from_range(x, n))  # dtypes too: an empty range gives float32
    # before: torch.tensor read the range's ints (one entry per size until the recompile limit)
    assert _frames(before, "_ids_from_range") <= 6
    assert framejit.stats()["eager_frames"] == eager
