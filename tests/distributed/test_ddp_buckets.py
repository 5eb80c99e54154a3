"""The parts a graph is split into under DDP hold the parameters DDP's own bucketing puts in one bucket
(NOTE [Graphs split at DDP's buckets]); pure FX, no process group: the oracle is torch's C++
`_compute_bucket_assignment_by_size`, the function DDP's reducer assigns (and rebuilds) buckets with."""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.distributed as dist

import framejit
from framejit.capture import ddp_buckets
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


@contextlib.contextmanager
def _one_rank(tmp_path):
    """A world-size-1 gloo group in this process (no spawn)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'group'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _splits(monkeypatch) -> list:
    """The assignments of the graphs split at DDP's buckets from now on (compiled or restored)."""
    made, bucketed = [], ddp_buckets._bucketed

    def spy(split, assignment, compiled):
        made.append(assignment)
        return bucketed(split, assignment, compiled)
    monkeypatch.setattr(ddp_buckets, "_bucketed", spy)
    return made


@pytest.mark.parametrize("make, parts, backend", [(_two_layers, 2, "eager"), (_NoGradRegion, 1, "eager"),
                                                  (_two_layers, 2, "onnxrt")],
                         ids=["split", "no_grad_whole", "split_onnxrt"])
def test_one_rank_ddp_matches_eager_and_split_entries_are_persisted(make, parts, backend, tmp_path, monkeypatch):
    # in-process, world size 1 (no spawn): compiled DDP computes eager DDP's gradients (the eager backend bit
    # for bit); with 1-byte buckets each Linear layer is a part, unless the graph switches grad mode. A split
    # entry is persisted with its parts: after framejit.reset() (in-memory entries gone, the frame cache
    # kept) a warm run traces and compiles nothing, and splits the graphs as the cold run did
    # (NOTE [Graphs split at DDP's buckets])
    from torch.nn.parallel import DistributedDataParallel as DDP

    from framejit import config
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "cache_enabled", True)
    splits = _splits(monkeypatch)
    tol = dict(rtol=0, atol=0) if backend == "eager" else dict(rtol=1e-5, atol=1e-6)
    with _one_rank(tmp_path):
        torch.manual_seed(0)
        init = make()
        framejit.reset()
        for warm in (False, True):
            if warm:
                framejit.reset()
            model, reference = copy.deepcopy(init), DDP(copy.deepcopy(init), bucket_cap_mb=1e-6)
            before = framejit.stats()
            compiled = framejit.compile(DDP(model, bucket_cap_mb=1e-6), backend=backend)
            for batch in (4, 7):
                x = torch.randn(batch, 6)
                compiled(x).square().sum().backward()
                reference(x).square().sum().backward()
            for p, q in zip(model.parameters(), reference.module.parameters()):
                torch.testing.assert_close(p.grad, q.grad, **tol)
            after = framejit.stats()
            delta = {k: after[k] - before[k] for k in ("frames_traced", "graphs", "backend_compiles", "frames_loaded")}
            # cold: two captured graphs (batch 4, then the dynamic-batch recompile), each in `parts`
            assert delta == ({"frames_traced": 0, "graphs": 0, "backend_compiles": 0, "frames_loaded": 2} if warm
                             else {"frames_traced": 2, "graphs": 2, "backend_compiles": 2 * parts, "frames_loaded": 0})
        split = (2 if parts > 1 else 0)
        assert len(splits) == 2 * split and splits[split:] == splits[:split], splits
        assert all(len(set(s)) == parts for s in splits)


def test_entries_are_guarded_on_ddp(tmp_path):
    # an entry compiled outside DDP is not served inside DDP's forward (it would run whole, its gradients
    # all ready at the end of its backward), and a split entry is not served outside DDP
    # (NOTE [Entries guarded on DDP]); each is served again where it was compiled
    from torch.nn.parallel import DistributedDataParallel as DDP
    with _one_rank(tmp_path):
        torch.manual_seed(0)
        model = _two_layers()
        framejit.reset()
        backend = CountingBackend()
        compiled = framejit.compile(model, backend=backend)
        ddp = DDP(compiled, bucket_cap_mb=1e-6)
        for k, call in enumerate([compiled, ddp, compiled, ddp, ddp.module]):
            x = torch.randn(5, 6)
            torch.testing.assert_close(call(x), model(x), rtol=0, atol=0)
            # compiled whole outside DDP, in its 2 parts inside: 3 graphs, each served again after
            assert len(backend.graphs) == (1 if k == 0 else 3), k
