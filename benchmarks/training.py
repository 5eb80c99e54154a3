"""Training step time: eager vs framejit (each backend) vs torch.compile (inductor), per zoo model.

Usage:
    .venv/bin/python benchmarks/training.py [--device cpu|cuda] [--size small|bench] [--models mlp,cnn]
        [--backends onnxrt,triton] [--seconds 1.0] [--no-inductor] [--threads 1] [--repeats 3]
        [--clock cpu|wall]

One training step is: forward, a loss (mean of squares of the model's float outputs), backward, AdamW
step, zero_grad. Every column trains its own copy of the model (same weights, same batch, dropout off);
columns are timed round-robin, step by step, after three warm-up steps that absorb compilation; that
timing phase is repeated `--repeats` times. Prints per model the median over repeats of each column's
median step time (ms) and each column's speed relative to eager (eager time / column time: >1 is faster)
with its lowest and highest per-repeat value (the spread), then the geometric mean of the ratios.

NOTE [Training clock]
`--clock cpu` (the default on CPU) times each step with the CPU time of the calling thread
(`time.thread_time`): with `--threads 1` every part of a step runs on that thread (torch's CPU kernels
and autograd engine, ORT sessions, whose intra-op thread count follows torch's: onnxrt options.py), and
the time other processes take from the shared 2-core machine is not counted. `--clock wall` uses
`time.perf_counter` (use it with more threads, and on CUDA, where it is the only meaningful clock).
framejit's backends train through joint graphs (framejit/backends/joint.py): forward and backward both
compiled. The triton column needs a GPU (`--device cuda`); on CPU it would time Triton's interpreter, so it
is left out there unless named in --backends. Inductor is torch.compile's default backend (the
reference, never used by framejit itself).
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import framejit  # noqa: E402
from tests.helpers import without_dropout  # noqa: E402
from tests.models import zoo  # noqa: E402


def _loss(out) -> torch.Tensor:
    return sum(t.square().mean() for t in zoo.output_tensors(out) if t.is_floating_point() and t.requires_grad)


def training_step(model: torch.nn.Module, run):
    """A callable doing one training step of `model` through `run` (the model itself or a compiled one)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(*inputs):
        _loss(run(*inputs)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def columns(case, device: str, backends: list[str], inductor: bool) -> dict:
    base = without_dropout(case.model.train()).to(device)
    steps = {"eager": training_step(base, base)}
    for backend in backends:
        model = copy.deepcopy(base)
        steps[f"framejit-{backend}"] = training_step(model, framejit.compile(model, backend=backend))
    if inductor:
        model = copy.deepcopy(base)
        steps["inductor"] = training_step(model, torch.compile(model))
    return steps


def interleaved_step_times(steps: dict, inputs, seconds: float, device: str, clock) -> dict:
    """Median ms per column, timing the columns round-robin, step by step (NOTE [Training clock])."""
    times: dict = {key: [] for key in steps}
    deadline = time.perf_counter() + seconds * len(steps)
    rounds = 0
    while rounds < 10 or (time.perf_counter() < deadline and rounds < 2000):
        for key, step in steps.items():
            start = clock()
            step(*inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            times[key].append(clock() - start)
        rounds += 1
    return {key: statistics.median(ts) * 1e3 for key, ts in times.items()}


def _geomean(values) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", default="small", choices=list(zoo.SIZES))
    parser.add_argument("--models", default=",".join(zoo.names()))
    parser.add_argument("--backends", default=None, help="default: onnxrt on cpu, onnxrt,triton on cuda")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per column, model and repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timing phases per model (medians and spread)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default=None,
                        help="cpu: CPU time of the calling thread (default on cpu), wall: perf_counter")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: on a shared 2-core machine more threads made eager "
                             "steps 40x slower from contention)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock_name = args.clock or ("cpu" if args.device == "cpu" else "wall")
    clock = time.thread_time if clock_name == "cpu" else time.perf_counter
    backends = (args.backends or ("onnxrt,triton" if args.device == "cuda" else "onnxrt")).split(",")
    print(f"clock {clock_name}, {args.repeats} repeats, threads {args.threads}, size {args.size}, "
          f"load average {os.getloadavg()[0]:.1f}")
    ratios: dict[str, list[float]] = {}
    header = None
    for name in args.models.split(","):
        case = zoo.get(name, args.size)
        inputs = tuple(v.to(args.device) if isinstance(v, torch.Tensor) else v for v in case.make_inputs(0))
        try:
            steps = columns(case, args.device, backends, not args.no_inductor)
            for step in steps.values():  # warm-up: compilation
                for _ in range(3):
                    step(*inputs)
            runs = [interleaved_step_times(steps, inputs, args.seconds, args.device, clock)
                    for _ in range(args.repeats)]
        except Exception as exc:  # a column that cannot train is reported, the rest of the table goes on
            print(f"{name:10s} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            continue
        medians = {key: statistics.median(run[key] for run in runs) for key in steps}
        if header is None:
            header = list(medians)
            print(f"{'model':10s} " + " ".join(f"{k + ' ms':>18s}" for k in header) + "  "
                  + " ".join(f"{k + ' x (min-max)':>30s}" for k in header[1:]))
        row = [f"{medians[k]:18.3f}" for k in header]
        speedups = []
        for key in header[1:]:
            ratio = medians["eager"] / medians[key]
            per_repeat = [run["eager"] / run[key] for run in runs]
            ratios.setdefault(key, []).append(ratio)
            speedups.append(f"{ratio:17.2f} ({min(per_repeat):.2f}-{max(per_repeat):.2f})")
        print(f"{name:10s} " + " ".join(row) + "  " + " ".join(speedups), flush=True)
    print("geomean speed vs eager: " + ", ".join(f"{key} {_geomean(values):.2f}x" for key, values in ratios.items()))
    print(f"load average after: {os.getloadavg()[0]:.1f} (a shared machine: compare columns of one run)")


if __name__ == "__main__":
    main()
