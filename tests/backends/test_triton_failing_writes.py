"""NOTE [Input writes of a failing kernel program]: a triton program that raises at run time leaves its
inputs as eager leaves them (written up to the failing op) and raises eager's exception."""
import pytest
import torch

import framejit
from framejit.backends.triton import triton as triton_backend
from framejit.backends.triton.runtime import CompiledGraph


class _State:
    n = 0


def _run(fn, length: int, idx: list, state: _State):
    x = torch.arange(float(length))
    state.n = 0
    try:
        out, error = fn(x, torch.tensor(idx)).tolist(), None
    except IndexError as e:
        out, error = None, str(e).splitlines()[0]
    return x.tolist(), out, error, state.n


def test_writes_before_an_index_out_of_range_are_made_as_in_eager():
    state = _State()

    def f(x, idx):
        x.add_(1)
        state.n += 1
        return x[idx] * 2

    compiled = framejit.compile(f, backend="triton")
    # same sizes twice, then other sizes (the size-generic program); every second call raises
    for length, idx in ((6, [1, 2]), (6, [0, 9]), (6, [3, 4]), (6, [7, 1]), (9, [2, 8]), (9, [12]), (11, [-20])):
        expected = _run(f, length, idx, state)
        assert _run(compiled, length, idx, state) == expected


def test_the_program_itself_runs_and_a_failure_reruns_the_graph():
    def f(x, idx):
        x.mul_(3)
        return x[idx] + 1

    gm = torch.fx.symbolic_trace(f)
    compiled = triton_backend(gm, [torch.ones(5), torch.tensor([0, 1])])
    assert isinstance(compiled, CompiledGraph) and compiled.rerun_on_error
    x = torch.arange(5.)
    assert compiled(x, torch.tensor([1, 4])).tolist() == [4.0, 13.0] and x.tolist() == [0., 3., 6., 9., 12.]
    assert compiled.runs == 1
    x = torch.arange(5.)
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        compiled(x, torch.tensor([1, 5]))
    assert x.tolist() == [0., 3., 6., 9., 12.]  # eager's write before the failing index


def test_a_graph_that_writes_nothing_is_not_rerun():
    def f(x, idx):
        return x[idx] + 1

    compiled = triton_backend(torch.fx.symbolic_trace(f), [torch.ones(5), torch.tensor([0, 1])])
    assert isinstance(compiled, CompiledGraph) and not compiled.rerun_on_error
