"""The parts a graph is split into under DDP hold the parameters DDP's own bucketing puts in one bucket
(NOTE [Graphs split at DDP's buckets]); pure FX, no process group: the oracle is torch's C++
`_compute_bucket_assignment_by_size`, the function DDP's reducer assigns (and rebuilds) buckets with."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import framejit
from framejit.capture.ddp_buckets import bucket_parts
from tests.helpers import CountingBackend


def _captured(model: torch.nn.Module, x: torch.Tensor):
    backend = CountingBackend()
    framejit.compile(model, backend=backend)(x)
    return backend.graphs[-1], backend.example_inputs[-1]


def _ddp_buckets(params: list, caps: list[int]) -> list[set[int]]:
    """DDP's buckets (parameter ids) for gradients arriving in reverse parameter order."""
    ordered = list(reversed(params))
    indices, _ = dist._compute_bucket_assignment_by_size(ordered, caps, [False] * len(ordered))
    return sorted(({id(ordered[i]) for i in bucket} for bucket in indices), key=sorted)


@pytest.mark.parametrize("caps", [[2 ** 20, 25 * 2 ** 20], [1200], [4096], [600, 5000], [10 ** 9]],
                         ids=["default", "1200", "4096", "first600", "huge"])
def test_parts_hold_ddp_buckets(caps):
    # the biases (64-128 bytes) are below every cap: DDP never closes a bucket between a layer's bias and
    # its weight, so its buckets are unions of whole layers, as the parts are
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    framejit.reset()
    gm, examples = _captured(model, torch.randn(3, 8))
    params = list(model.parameters())
    parts = bucket_parts(gm, examples, {id(p) for p in params}, caps)
    param_ids = {id(p) for p in params}
    value_of = dict(zip((n for n in gm.graph.nodes if n.op == "placeholder"), examples))
    held = [{id(value_of[a]) for node in part for a in node.all_input_nodes if id(value_of.get(a)) in param_ids}
            for part in parts]
    assert sorted(held, key=sorted) == _ddp_buckets(params, caps)
    # the parts cover every computing node once, in graph order
    assert [n for part in parts for n in part] == [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
