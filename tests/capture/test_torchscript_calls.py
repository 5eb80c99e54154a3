"""A function made by torch.jit.trace called in compiled code (NOTE [TorchScript functions are not graph ops] in
capture/calls.py): before, recording it as a graph node failed inside framejit (FX names a node after its
target's __name__, which a traced ScriptFunction lacks) and the whole frame ran eagerly; now its call is a graph
break and the tensor code around it is captured. A torch.jit.script function stays a node of one graph."""

import pytest
import torch

import framejit
from tests.helpers import run_differential


def _scaled_sum(a, b):
    return a + b * 0.5


def _made(kind):
    if kind == "trace":
        return torch.jit.trace(_scaled_sum, [torch.zeros(4), torch.zeros(4)])
    return torch.jit.script(_scaled_sum)


@pytest.mark.parametrize("kind", ["trace", "script"])
def test_torchscript_function_call_is_a_break_not_an_eager_frame(kind):
    # a traced function is a break (2 graphs); a scripted one has a __name__ and stays one graph node
    scripted = _made(kind)

    def fn(a, b):
        c = a.sin() * 2
        return scripted(c, b).cos() + 1

    before = framejit.stats()["eager_frames"]
    backend = run_differential(fn, lambda seed: (torch.randn(4) + seed, torch.randn(4)), seeds=(0, 1, 2),
                               fullgraph=False)
    assert framejit.stats()["eager_frames"] == before
    assert backend.graph_count == (2 if kind == "trace" else 1)  # traced: sin/mul before the call, cos/add after
