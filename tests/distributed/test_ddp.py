"""Compiled modules under torch.nn.parallel.DistributedDataParallel (gloo, CPU, one process per rank).

Each test starts its ranks at once, each a forked child of the program server (tests/helpers.py
run_programs): every rank trains the same initial model for 3 steps on its own data shard (a
rank-seeded generator), eagerly under DDP and compiled both ways (`framejit.compile(DDP(m))` and
`DDP(framejit.compile(m))`), for each configuration (wrapping, backend, optimizer, bucket_cap_mb), then
compares parameters with the eager DDP run of the same bucket cap. A recording DDP comm hook counts the
bucket all-reduces of each step and checks each one was launched from inside the autograd engine (during
backward, as eager DDP's reducer does), and that the count equals eager DDP's; with a backend that compiles
the backward it also records how many compiled backward parts had run when each all-reduce was launched
(NOTE [Graphs split at DDP's buckets]: an all-reduce launched before the last part's backward overlaps it).
A "warm" configuration trains the outer wrapping twice on a frame cache the ranks share, cold and then
warm after framejit.reset(): the warm run loads the split entries and traces nothing.
Ranks report results through a file each; the parent asserts.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
import pathlib
import pickle
import socket
import tempfile
import traceback

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests.helpers import BACKEND_MODULES, run_programs

STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _recording_hook(calls: list, progress):
    """A DDP comm hook: records for each bucket's all-reduce whether it ran inside a backward pass, and
    `progress()` (compiled backward runs so far; None for a backend that compiles no backward)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state, bucket):
        calls.append((torch._C._current_graph_task_id() != -1, progress()))  # -1: not inside the autograd engine
        return allreduce_hook(state, bucket)
    # DDP checks the annotations themselves (strings under `from __future__ import annotations`)
    hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook


def _train(rank: int, init: torch.nn.Module, mode: str, backend, opt_name: str, cap_mb: float, progress=None):
    import framejit
    module = copy.deepcopy(init)
    progress = progress or getattr(backend, "compiled_backward_runs", lambda: None)
    if mode == "fsdp2":  # FSDP2 shards the parameters; gradients are reduce-scattered in its hooks
        from torch.distributed.fsdp import fully_shard
        fully_shard(module)
        return _steps(rank, module, framejit.compile(module, backend=backend), module.parameters(), None,
                      opt_name, progress)
    if mode == "eager":
        ddp = DDP(module, bucket_cap_mb=cap_mb)
        step_fn = ddp
    elif mode == "outer":
        ddp = DDP(module, bucket_cap_mb=cap_mb)
        step_fn = framejit.compile(ddp, backend=backend)
    else:
        ddp = DDP(framejit.compile(module, backend=backend), bucket_cap_mb=cap_mb)
        step_fn = ddp
    all_calls: list[tuple] = []
    ddp.register_comm_hook(None, _recording_hook(all_calls, progress))
    result = _steps(rank, module, step_fn, ddp.parameters(), all_calls, opt_name, progress)
    if mode == "outer":  # NOTE [Compiling a DistributedDataParallel module]: the swap is undone after each call
        assert ddp.module is module and not getattr(type(ddp.module), "_framejit_compiled", False)
    return result


def _steps(rank: int, module, step_fn, params, all_calls, opt_name: str, progress):
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
        start = progress()
        loss.backward()
        if all_calls is not None:  # (inside the backward, compiled backward parts run before it in this step)
            per_step.append([(inside, None if start is None else runs - start) for inside, runs in all_calls[before:]])
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


class _AllJoints:
    """Counts backward runs through every joint graph (backends/joint.py) made while it is installed, by
    a backend compile or by loading a persisted entry (whose compiled objects no backend callable sees)."""

    def __init__(self) -> None:
        from framejit.backends.joint import JointGraph
        self.joints, init = [], JointGraph.__init__

        def record(joint, *args, **kwargs):
            init(joint, *args, **kwargs)
            self.joints.append(joint)
        JointGraph.__init__ = record
        self.uninstall = lambda: setattr(JointGraph, "__init__", init)

    def compiled_backward_runs(self) -> int:
        return sum(joint.stats["backward"] for joint in self.joints)


def _cold_then_warm(rank: int, init, backend_name: str, opt_name: str, cap_mb: float, cache_dir: str) -> dict:
    """The outer wrapping trained twice on a frame cache shared by the ranks: cold, then after
    framejit.reset() (in-memory entries gone) warm, loading the split entries the cold run persisted
    (NOTE [Graphs split at DDP's buckets])."""
    import framejit
    framejit.config.cache_enabled, framejit.config.cache_dir = True, cache_dir
    results = {}
    try:
        for mode in ("outer", "warm"):
            framejit.reset()
            before, joints = framejit.stats(), _AllJoints()
            try:
                params, calls = _train(rank, init, "outer", backend_name, opt_name, cap_mb, joints.compiled_backward_runs)
            finally:
                joints.uninstall()
            after = framejit.stats()
            graphs = (after["graphs"] - before["graphs"], after["backend_compiles"] - before["backend_compiles"])
            traced = after["frames_traced"] - before["frames_traced"]
            results[(mode, backend_name, opt_name, cap_mb)] = (params, calls, graphs, joints.compiled_backward_runs(),
                                                               traced)
    finally:
        framejit.config.cache_enabled = False
    return results


def _worker(rank: int, world: int, port: int, configs, queue, cache_dir: str) -> None:
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        torch.set_num_threads(1)  # several ranks share few cores
        os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU: Triton's interpreter (as tests/backends)
        import framejit
        framejit.config.cache_enabled = False
        from tests.helpers import CountingBackend
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
        torch.manual_seed(0)
        init = _model()  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        results = {}
        for opt_name, cap_mb in sorted({(c[2], c[3]) for c in configs}):
            results[("eager", None, opt_name, cap_mb)] = _train(rank, init, "eager", None, opt_name, cap_mb)
        for mode, backend_name, opt_name, cap_mb in configs:
            if mode == "warm":
                results.update(_cold_then_warm(rank, init, backend_name, opt_name, cap_mb, cache_dir))
                continue
            framejit.reset()
            before = framejit.stats()
            backend = CountingBackend() if backend_name == "counting" else _Recording(backend_name)
            params, calls = _train(rank, init, mode, backend, opt_name, cap_mb)
            after = framejit.stats()
            graphs = (after["graphs"] - before["graphs"], after["backend_compiles"] - before["backend_compiles"])
            backwards = None if backend_name == "counting" else backend.compiled_backward_runs()
            results[(mode, backend_name, opt_name, cap_mb)] = (params, calls, graphs, backwards, None)
        dist.barrier()  # no rank tears its gloo group down while another still talks to it (CI at c19c2d4: one
        dist.destroy_process_group()  # rank of 4 died with SIGABRT, 'terminate called without an active exception')
        queue.put((rank, results, None))
    except BaseException:  # reported to the parent, which fails the test with the traceback
        queue.put((rank, None, traceback.format_exc()))


class _ResultFile:
    """What a rank reports (rank, results, error), pickled to its own file (the queue of a rank process)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def put(self, item) -> None:
        with open(self.path, "wb") as f:
            pickle.dump(item, f)


_RANK = """
import json, sys
from tests.distributed.test_ddp import _ResultFile, _worker
rank, world, port, configs, out, cache_dir = sys.argv[1:]
_worker(int(rank), int(world), int(port), [tuple(c) for c in json.loads(configs)], _ResultFile(out), cache_dir)
"""


def _run(world: int, configs) -> dict:
    """Runs `world` ranks at once, each in a forked child of the program server (NOTE [Programs in forked
    children] in tests/helpers.py: torch is imported once, not once per spawned rank), and returns each
    rank's results."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        script, cache_dir, port = tmp / "rank.py", tmp / "cache", _free_port()
        script.write_text(_RANK)
        results = [tmp / f"rank{rank}.pickle" for rank in range(world)]
        # no GPU: Triton's interpreter, set before the server imports anything (as tests/backends/conftest.py
        # sets it for the whole session when collected)
        env = dict(os.environ, TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"))
        done = run_programs(tmp, [(script, (rank, world, port, json.dumps(configs), results[rank], cache_dir))
                                  for rank in range(world)], env=env, preload=BACKEND_MODULES["onnxrt"])
        for rank, (rc, _, err) in enumerate(done):
            assert rc == 0, f"rank {rank} exited with {rc}:\n{err[-4000:]}"
            with open(results[rank], "rb") as f:
                reported, result, error = pickle.load(f)
            assert reported == rank and error is None, f"rank {rank}:\n{error}"
            out[rank] = result
    return out


def _check_ranks(out: dict, configs) -> None:
    for rank, results in out.items():
        for config in configs:
            _check_rank(rank, results, *config)
            if config[0] == "warm":  # the cold run before it
                _check_rank(rank, results, "outer", *config[1:])
    # the parameters agree across ranks (DDP averaged the gradients of different shards)
    for rank in out:
        for key, value in out[rank].items():
            for p, q in zip(value[0], out[0][key][0]):
                torch.testing.assert_close(torch.tensor(p), torch.tensor(q), rtol=2e-3, atol=2e-4)


def _check_rank(rank: int, results: dict, mode: str, backend_name: str, opt_name: str, cap_mb: float) -> None:
    eager_params, eager_calls = results[("eager", None, opt_name, cap_mb)]
    params, calls, graphs, backwards, traced = results[(mode, backend_name, opt_name, cap_mb)]
    assert len(params) == len(eager_params)
    # the eager backend runs the same aten ops in the same order: bit for bit eager DDP's parameters
    tol = dict(rtol=0, atol=0) if backend_name == "counting" else dict(rtol=2e-3, atol=2e-4)
    for p, e in zip(params, eager_params):
        torch.testing.assert_close(torch.tensor(p), torch.tensor(e), **tol)
    parts = 1 if mode == "fsdp2" else PARTS[cap_mb]
    # captured graphs, and backend compiles: each captured graph in parts; none when warm
    expected = (0, 0) if mode == "warm" else (GRAPHS, GRAPHS * parts)
    assert graphs == expected, (rank, mode, backend_name, cap_mb, graphs)
    assert traced in (None, 0 if mode == "warm" else GRAPHS), (rank, mode, traced)
    if backend_name != "counting" and mode != "fsdp2":  # every step's backward ran through the compiled joints
        assert backwards == STEPS * parts, (rank, mode, backend_name, backwards)
    if backend_name != "counting" and mode == "fsdp2":
        # NOTE [Autograd state observed after a break] (capture/tensor_hooks.py): FSDP2's forward hooks break the
        # frame and receive the forward's results, which require grad, so the graph before the break runs as
        # its own code (eager autograd) and no compiled joint runs a backward; the parameters still match eager
        assert backwards == 0, (rank, mode, backend_name, backwards)
    if mode == "fsdp2":
        return
    # the same bucket all-reduces per step as eager DDP, each launched from inside the backward
    assert [len(c) for c in calls] == [len(c) for c in eager_calls], (rank, mode)
    # DDP's first step runs with one bucket, then rebuilds the buckets in gradient-ready order
    # (with a 25 MiB cap, one bucket holds every parameter)
    assert len(calls[0]) == 1 and all((len(c) > 1) == (cap_mb < 1) for c in calls[1:]), (rank, mode, calls)
    assert all(inside for c in calls for inside, _ in c), (rank, mode, calls)
    if backend_name != "counting":  # NOTE [Graphs split at DDP's buckets]: compiled backward parts
        _check_overlap(calls, parts)


def _check_overlap(calls: list, parts: int) -> None:
    """Each step's all-reduces, as (inside backward, compiled backward parts run before it): the first step
    has one bucket, reduced after every part; later steps launch their first all-reduce while a part's
    backward is still to run (it overlaps that part), unless the graph is one part."""
    assert [runs for _, runs in calls[0]] == [parts], calls
    for step in calls[1:]:
        runs = [r for _, r in step]
        assert runs == sorted(runs) and runs[-1] == parts, calls
        assert runs[0] < parts if parts > 1 else runs[0] == 1, calls


GRAPHS = 2  # captured graphs per configuration and rank; see NOTE [Graphs per rank under DDP]
# Parts per captured graph for each bucket_cap_mb (NOTE [Graphs split at DDP's buckets]), from the model's
# parameter bytes: Linear(6, 16) 448, Linear(16, 16) 1088, Linear(16, 3) 204 (float32). A bucket closes once
# it reaches the cap: 25 MiB holds them all (1 part); 0.001 MiB (1048 bytes) closes after the last two
# layers (204 + 1088), leaving the first (2 parts); 1e-6 MiB (1 byte) closes after each layer (3 parts).
PARTS = {25: 1, 0.001: 2, 1e-6: 3}

# NOTE [Graphs per rank under DDP]
# Both wrappings capture the same graphs: DDP's forward (its Python logic: _pre_forward, the C++ reducer,
# buckets, _post_forward) runs as plain Python, and the inner module's forward is captured whole.
# DDP(framejit.compile(m)): DDP calls the compiled module. framejit.compile(DDP(m)): the compiled DDP
#   module runs DDP's forward with `self.module` resolving to the compiled inner module (NOTE [Compiling a
#   DistributedDataParallel module] in api.py); before that, DDP.forward was traced, every reducer call was
#   a graph break and the `with self._inside_ddp_forward():` block holding the model call ran eagerly: 0 graphs.
# Either way 2 captured graphs per rank, each the whole model: the first for the step-0 batch size, the
#   second the dynamic-batch recompile after step 1 changes it (step 2 reuses it). Each is split at DDP's
#   buckets into PARTS[bucket_cap_mb] parts, each compiled by the backend as its own graph (NOTE [Graphs
#   split at DDP's buckets] in capture/ddp_buckets.py): 2 * parts backend compiles per rank. On onnxrt and
#   triton each part is a joint (forward and backward compiled, backends/joint.py); the reducer's
#   per-parameter autograd hooks fire as each part's backward hands its gradients back, so a bucket
#   all-reduces while earlier parts' backward still runs, as in eager DDP.
# framejit.compile(fully_shard(m)) (FSDP2): 2 graphs per rank, measured (the same count and batch-size
#   pattern; FSDP2's unshard/reshard run in its module hooks; no DDP forward runs, so no split).


def test_ddp_two_ranks_sgd_both_wrappings_training_backends_and_fsdp2():
    # onnxrt and triton: forward and backward compiled (backends/joint.py), split at the buckets, their
    # all-reduces overlapping the backward. Run through the outer wrapping only: it calls the very
    # compiled inner module DDP(framejit.compile(m)) calls (NOTE [Compiling a DistributedDataParallel
    # module]), and each backend costs seconds per rank here.
    # fsdp2: `framejit.compile(fully_shard(m))` matches eager DDP (both average the shards' gradients), also
    # on onnxrt, whose frozen weights leave FSDP2's parameter storages resizable (NOTE [Arrays over tensors
    # leave storages resizable] in backends/onnxrt/runtime.py: it raised at the first backward before).
    configs = [("outer", "counting", "sgd", 0.001), ("inner", "counting", "sgd", 0.001),
               ("outer", "onnxrt", "sgd", 0.001), ("outer", "triton", "sgd", 0.001),
               ("fsdp2", "counting", "sgd", 0.001), ("fsdp2", "onnxrt", "sgd", 0.001)]
    out = _run(2, configs)
    _check_ranks(out, configs)


def test_ddp_parts_follow_bucket_cap():
    # one part (not split) and three (PARTS; two in the test above); onnxrt compiles each part's backward,
    # and launches an all-reduce while two parts' backward are still to run. "warm": onnxrt in the outer
    # wrapping cold, then warm from the frame cache the ranks share: no frame traced, no backend compile,
    # the same parts (the same overlap) and parameters
    configs = [("outer", "counting", "sgd", 25), ("inner", "counting", "sgd", 1e-6), ("warm", "onnxrt", "sgd", 1e-6)]
    out = _run(2, configs)
    _check_ranks(out, configs)


def test_ddp_four_ranks_adamw_both_wrappings():
    configs = [("outer", "counting", "adamw", 0.001), ("inner", "counting", "adamw", 0.001)]
    out = _run(4, configs)
    _check_ranks(out, configs)
