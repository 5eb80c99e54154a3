"""Training step time: eager vs framejit (each backend) vs torch.compile (inductor), per zoo model.

Usage:
    .venv/bin/python benchmarks/training.py [--device cpu|cuda] [--size small|bench] [--models mlp,cnn]
        [--backends onnxrt,triton] [--seconds 1.0] [--no-inductor] [--threads 1]

One training step is: forward, a loss (mean of squares of the model's float outputs), backward, AdamW
step, zero_grad. Every column trains its own copy of the model (same weights, same batch, dropout off);
columns are timed round-robin (benchmarks/backends.py: interleaved_medians) after three warm-up steps
that absorb compilation. Prints per model the median step time (ms) per column and each column's speed
relative to eager (eager time / column time: >1 is faster), then the geometric mean of the ratios.
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
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import framejit  # noqa: E402
from benchmarks.backends import interleaved_medians  # noqa: E402
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", default="small", choices=list(zoo.SIZES))
    parser.add_argument("--models", default=",".join(zoo.names()))
    parser.add_argument("--backends", default=None, help="default: onnxrt on cpu, onnxrt,triton on cuda")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per column and model")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: on a shared 2-core machine more threads made eager "
                             "steps 40x slower from contention)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    backends = (args.backends or ("onnxrt,triton" if args.device == "cuda" else "onnxrt")).split(",")
    ratios: dict[str, list[float]] = {}
    header = None
    for name in args.models.split(","):
        case = zoo.get(name, args.size)
        inputs = tuple(v.to(args.device) if isinstance(v, torch.Tensor) else v for v in case.make_inputs(0))
        try:
            steps = columns(case, args.device, backends, not args.no_inductor)
            medians = interleaved_medians(steps, inputs, args.seconds, args.device)
        except Exception as exc:  # a column that cannot train is reported, the rest of the table goes on
            print(f"{name:10s} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
            continue
        if header is None:
            header = list(medians)
            print(f"{'model':10s} " + " ".join(f"{k + ' ms':>18s}" for k in header) + "  "
                  + " ".join(f"{k + ' x':>18s}" for k in header[1:]))
        row = [f"{medians[k]:18.3f}" for k in header]
        speedups = []
        for key in header[1:]:
            ratio = medians["eager"] / medians[key]
            ratios.setdefault(key, []).append(ratio)
            speedups.append(f"{ratio:18.2f}")
        print(f"{name:10s} " + " ".join(row) + "  " + " ".join(speedups), flush=True)
    print("geomean speed vs eager: " + ", ".join(
        f"{key} {math.exp(sum(map(math.log, values)) / len(values)):.2f}x" for key, values in ratios.items()))


if __name__ == "__main__":
    main()
