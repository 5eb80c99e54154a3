"""The parts a graph is split into under DDP hold the parameters DDP's own bucketing puts in one bucket
(NOTE [Graphs split at DDP's buckets]); pure FX, no process group: the oracle is torch's C++
`_compute_bucket_assignment_by_size`, the function DDP's reducer assigns (and rebuilds) buckets with."""
from __future__ import annotations

import copy

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



class _NoGradRegion(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.Linear(6, 16), torch.nn.Linear(16, 3)

    def forward(self, x):
        h = self.first(x)
        with torch.no_grad():  # grad-mode switches in the graph: compiled whole (NOTE [Graphs split at DDP's buckets])
            scale = h.abs().mean()
        return self.second(torch.relu(h)) * scale


def _two_layers():
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


@pytest.mark.parametrize("make, parts", [(_two_layers, 2), (_NoGradRegion, 1)], ids=["split", "no_grad_whole"])
def test_one_rank_ddp_matches_eager_and_split_entries_stay_in_memory(make, parts, tmp_path, monkeypatch, caplog):
    # in-process, world size 1 (no spawn): compiled DDP computes eager DDP's gradients bit for bit; with
    # 1-byte buckets each Linear layer is a part, unless the graph switches grad mode; a split entry is not
    # persisted (NOTE [Graphs split at DDP's buckets]), saying so on the `cache` log
    import logging

    from torch.nn.parallel import DistributedDataParallel as DDP

    from framejit import config, logs
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "cache_enabled", True)
    logs.set_logs("cache")
    caplog.set_level(logging.INFO, logger="framejit.cache")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = make()
        reference = DDP(copy.deepcopy(model), bucket_cap_mb=1e-6)
        framejit.reset()
        before = framejit.stats()["backend_compiles"]
        compiled = framejit.compile(DDP(model, bucket_cap_mb=1e-6), backend="eager")
        for batch in (4, 7):
            x = torch.randn(batch, 6)
            compiled(x).square().sum().backward()
            reference(x).square().sum().backward()
        for p, q in zip(model.parameters(), reference.module.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
        # two captured graphs (batch 4, then the dynamic-batch recompile), each in `parts`
        assert framejit.stats()["backend_compiles"] - before == 2 * parts
        messages = [r.getMessage() for r in caplog.records if r.name == "framejit.cache"]
        assert sum("split at DDP's buckets" in m for m in messages) == (2 if parts > 1 else 0), messages
    finally:
        dist.destroy_process_group()
        logs.set_logs(config.logs)
