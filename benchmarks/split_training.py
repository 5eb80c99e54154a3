"""Training step time of models whose forward a graph break splits: eager vs framejit on onnxrt, with the graph
before the break keeping its joint (NOTE [Joints kept across a plain break], capture/kept_joints.py) and with it
run as its own code (the rule before it: NOTE [Autograd state observed after a break], `--old` column).

Usage:
    .venv/bin/python benchmarks/split_training.py [--width 64] [--batch 32] [--steps 200] [--backend onnxrt]

One step: forward, loss (mean of squares), backward, SGD step, zero_grad. Each column trains its own copy of
the model (same weights, same batches); columns are timed round-robin, step by step, after 3 warm-up steps
that absorb compilation, with the calling thread's CPU time (`time.thread_time`, torch and ORT on one thread:
NOTE [Training clock] in benchmarks/training.py). Prints the median step time per column (ms), the compiled
backward runs per step of each framejit column, and checks that the gradients of every column equal eager's.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import framejit  # noqa: E402
from benchmarks.break_models import Branchy  # noqa: E402
from framejit.backends import joint as joint_mod  # noqa: E402
from framejit.backends.checks import unchecked  # noqa: E402


class Printy(nn.Module):
    """Three linear layers, a print between the first two (a graph break)."""

    def __init__(self, width: int):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        print("step")
        return self.c(torch.relu(self.b(h)))


class Recording:
    """The backend, keeping what it made so that compiled backward runs can be counted."""

    def __init__(self, name: str) -> None:
        self.name, self.made = name, []

    def __call__(self, gm, example_inputs):
        compiled = framejit.lookup_backend(self.name)(gm, example_inputs)
        self.made.append(compiled)
        return compiled

    def backward_runs(self) -> int:
        runs = 0
        for compiled in map(unchecked, self.made):
            joint = compiled if isinstance(compiled, joint_mod.JointGraph) else (
                getattr(compiled, "_joint", None) or getattr(compiled, "_training", None))
            runs += joint.stats["backward"] if joint is not None else 0
        return runs


def _step(model, opt, x):
    loss = model(x).square().mean()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    opt.zero_grad(set_to_none=True)
    return grads


def run(cls, args) -> str:
    torch.manual_seed(0)
    base = cls(args.width)
    columns = {"eager": (base, None)}
    for name in ("framejit", "framejit --old"):
        recording = Recording(args.backend)
        model = copy.deepcopy(base)
        columns[name] = (framejit.compile(model, backend=recording), recording)
    opts = {name: torch.optim.SGD(model.parameters(), lr=1e-3) for name, (model, _) in columns.items()}
    batches = [torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    from framejit.capture import kept_joints
    speculable = kept_joints.speculable
    times: dict[str, list[float]] = {name: [] for name in columns}
    worst = 0.0
    for i in range(3 + args.steps):
        x = batches[i % len(batches)]
        grads = {}
        for name, (model, _) in columns.items():
            if name == "framejit --old":  # decided when each graph compiles (the warm-up steps)
                kept_joints.speculable = lambda *a: False
            start = time.thread_time()
            grads[name] = _step(model, opts[name], x)
            elapsed = time.thread_time() - start
            kept_joints.speculable = speculable
            if i >= 3:
                times[name].append(elapsed)
        for name in columns:
            worst = max([worst] + [float((g - e).abs().max()) for g, e in zip(grads[name], grads["eager"])])
    steps = 3 + args.steps
    cells = [f"{name} {statistics.median(ts) * 1e3:.3f} ms" +
             (f" ({columns[name][1].backward_runs() / steps:.0f} compiled backward/step)" if columns[name][1] else "")
             for name, ts in times.items()]
    return f"{cls.__name__:8s} width {args.width}: " + " | ".join(cells) + f" | max |grad - eager| {worst:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backend", default="onnxrt")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for cls in (Printy, Branchy):
        with contextlib.redirect_stdout(io.StringIO()):  # the model's own prints
            line = run(cls, args)
        print(line)


if __name__ == "__main__":
    main()
