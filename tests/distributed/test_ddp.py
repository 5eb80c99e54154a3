"""Compiled modules under torch.nn.parallel.DistributedDataParallel (gloo, CPU, spawned ranks).

Each configuration is one spawn: every rank trains the same initial model for 3 steps on its own data
shard (a rank-seeded generator), eagerly under DDP and compiled both ways
(`framejit.compile(DDP(m))` and `DDP(framejit.compile(m))`), then compares parameters with the eager
run. A recording DDP comm hook counts the bucket all-reduces of each step and checks each one was launched
from inside the autograd engine (during backward, as eager DDP's reducer does), and that the count equals
eager DDP's. Ranks report results through a queue; the parent asserts.
"""
from __future__ import annotations

import copy
import datetime
import os
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _recording_hook(calls: list):
    """A DDP comm hook: records each bucket's all-reduce and whether it ran inside a backward pass."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state, bucket):
        calls.append(torch._C._current_graph_task_id() != -1)  # -1: not inside the autograd engine
        return allreduce_hook(state, bucket)
    # DDP checks the annotations themselves (strings under `from __future__ import annotations`)
    hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook


def _train(rank: int, init: torch.nn.Module, mode: str, backend, opt_name: str):
    import framejit
    module = copy.deepcopy(init)
    if mode == "fsdp2":  # FSDP2 shards the parameters; gradients are reduce-scattered in its hooks
        from torch.distributed.fsdp import fully_shard
        fully_shard(module)
        return _steps(rank, module, framejit.compile(module, backend=backend), module.parameters(), None,
                      opt_name)
    if mode == "eager":
        ddp = DDP(module, bucket_cap_mb=0.001)
        step_fn = ddp
    elif mode == "outer":
        ddp = DDP(module, bucket_cap_mb=0.001)
        step_fn = framejit.compile(ddp, backend=backend)
    else:
        ddp = DDP(framejit.compile(module, backend=backend), bucket_cap_mb=0.001)
        step_fn = ddp
    all_calls: list[bool] = []
    ddp.register_comm_hook(None, _recording_hook(all_calls))
    return _steps(rank, module, step_fn, ddp.parameters(), all_calls, opt_name)


def _steps(rank: int, module, step_fn, params, all_calls, opt_name: str):
    params = list(params)
    opt = (torch.optim.SGD(params, lr=0.1, momentum=0.9) if opt_name == "sgd"
           else torch.optim.AdamW(params, lr=0.01))
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    per_step = []
    for step in range(STEPS):
        x = torch.randn(4 + step, 6, generator=gen)  # the batch size changes between steps
        target = torch.randn(4 + step, 3, generator=gen)
        before = len(all_calls) if all_calls is not None else 0
        loss = torch.nn.functional.mse_loss(step_fn(x), target)
        if all_calls is not None:
            assert len(all_calls) == before, "an all-reduce ran during the forward"
        loss.backward()
        if all_calls is not None:
            per_step.append(all_calls[before:])
        opt.step()
        opt.zero_grad()
    # plain lists: tensors sent through the queue would share memory with a rank that has exited
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in module.parameters()]  # FSDP2: DTensor
    return [p.detach().tolist() for p in full], per_step


class _Recording:
    """The named training backend (onnxrt, triton), keeping what it compiled to count backward runs."""

    def __init__(self, name: str) -> None:
        self.name, self.compiled = name, []

    def __call__(self, gm, example_inputs):
        import framejit
        compiled = framejit.lookup_backend(self.name)(gm, example_inputs)
        self.compiled.append(compiled)
        return compiled

    def compiled_backward_runs(self) -> int:
        """Backward runs through compiled joint graphs (backends/joint.py); 0 if every graph ran eagerly."""
        from framejit.backends.joint import JointGraph
        runs = 0
        for compiled in self.compiled:
            joint = compiled if isinstance(compiled, JointGraph) else (
                getattr(compiled, "_joint", None) or getattr(compiled, "_training", None))
            if joint is not None:
                runs += joint.stats["backward"]
        return runs


def _worker(rank: int, world: int, port: int, configs, queue) -> None:
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        torch.set_num_threads(1)  # several ranks share few cores
        import framejit
        framejit.config.cache_enabled = False
        from tests.helpers import CountingBackend
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
        torch.manual_seed(0)
        init = _model()  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        results = {}
        for opt_name in sorted({c[2] for c in configs}):
            results[("eager", None, opt_name)] = _train(rank, init, "eager", None, opt_name)
        for mode, backend_name, opt_name in configs:
            framejit.reset()
            before = framejit.stats()["graphs"]
            backend = CountingBackend() if backend_name == "counting" else _Recording(backend_name)
            params, calls = _train(rank, init, mode, backend, opt_name)
            graphs = (backend.graph_count if backend_name == "counting"
                      else framejit.stats()["graphs"] - before)
            backwards = None if backend_name == "counting" else backend.compiled_backward_runs()
            results[(mode, backend_name, opt_name)] = (params, calls, graphs, backwards)
        dist.destroy_process_group()
        queue.put((rank, results, None))
    except BaseException:  # reported to the parent, which fails the test with the traceback
        queue.put((rank, None, traceback.format_exc()))


def _run(world: int, configs) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_worker, args=(world, _free_port(), configs, queue), nprocs=world, join=True)
    out = {}
    for _ in range(world):
        rank, results, error = queue.get()
        assert error is None, f"rank {rank}:\n{error}"
        out[rank] = results
    return out


def _check_ranks(out: dict, configs, expected_graphs: dict) -> None:
    for rank, results in out.items():
        for mode, backend_name, opt_name in configs:
            eager_params, eager_calls = results[("eager", None, opt_name)]
            params, calls, graphs, backwards = results[(mode, backend_name, opt_name)]
            assert len(params) == len(eager_params)
            tol = dict(rtol=1e-5, atol=1e-6) if backend_name == "counting" else dict(rtol=2e-3, atol=2e-4)
            for p, e in zip(params, eager_params):
                torch.testing.assert_close(torch.tensor(p), torch.tensor(e), **tol)
            assert graphs == expected_graphs[mode], (rank, mode, backend_name, graphs)
            if backend_name != "counting":  # every step's backward ran through the compiled joint graph
                assert backwards == STEPS, (rank, mode, backend_name, backwards)
            if mode == "fsdp2":
                continue
            # the same bucket all-reduces per step as eager DDP, each launched from inside the backward
            assert [len(c) for c in calls] == [len(c) for c in eager_calls], (rank, mode)
            # DDP's first step runs with one bucket, then rebuilds the buckets in gradient-ready order
            assert all(len(c) > 1 for c in calls[1:]), "expected several buckets"
            assert all(all(c) for c in calls), (rank, mode, calls)
    # the parameters agree across ranks (DDP averaged the gradients of different shards)
    for rank in out:
        for key, value in out[rank].items():
            for p, q in zip(value[0], out[0][key][0]):
                torch.testing.assert_close(torch.tensor(p), torch.tensor(q), rtol=2e-3, atol=2e-4)


FSDP2_GRAPHS = 2  # measured; see NOTE [Graphs per rank under DDP]

# NOTE [Graphs per rank under DDP]
# DDP(framejit.compile(m)): DDP's forward (its Python logic: _pre_forward, the reducer, buckets) runs
#   eagerly and calls the compiled module: 2 graphs per rank, each the whole model; the first for the
#   step-0 batch size, the second the dynamic-batch recompile after step 1 changes it (step 2 reuses it).
# framejit.compile(DDP(m)): 0 graphs per rank today. DDP.forward's frames are traced, but each call into
#   the C++ Logger/Reducer (set_runtime_stats_and_log, prepare_for_forward, _rebuild_buckets,
#   prepare_for_backward) is a graph break (opaque pybind objects), and the user module is called inside
#   `with self._inside_ddp_forward():`, a @contextmanager that capture does not enter (the break on it
#   runs the whole with-block eagerly), so the model's forward runs uncompiled. Training is still exactly
#   eager DDP's, which is what this asserts; the graph count is asserted so a change is noticed.
# framejit.compile(fully_shard(m)) (FSDP2): 2 graphs per rank, measured (the same count and batch-size
#   pattern as the inner wrapping; FSDP2's unshard/reshard run in its module hooks).


def test_ddp_two_ranks_sgd_both_wrappings_onnxrt_and_fsdp2():
    # onnxrt: forward and backward compiled (backends/joint.py); the reducer's autograd hooks still fire
    # per parameter as the joint's backward returns the gradients, so the same buckets all-reduce.
    # fsdp2: `framejit.compile(fully_shard(m))` matches eager DDP (both average the shards' gradients).
    configs = [("outer", "counting", "sgd"), ("inner", "counting", "sgd"), ("inner", "onnxrt", "sgd"),
               ("fsdp2", "counting", "sgd")]
    out = _run(2, configs)
    _check_ranks(out, configs, {"outer": 0, "inner": 2, "fsdp2": FSDP2_GRAPHS})


def test_ddp_four_ranks_adamw_both_wrappings():
    configs = [("outer", "counting", "adamw"), ("inner", "counting", "adamw")]
    out = _run(4, configs)
    _check_ranks(out, configs, {"outer": 0, "inner": 2})
