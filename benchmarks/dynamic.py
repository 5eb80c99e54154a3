"""Dynamic shapes on the backends: one compilation for every size vs per-size compilation vs inductor.

Usage:
    .venv/bin/python benchmarks/dynamic.py [--backend onnxrt|triton] [--device cpu|cuda]
        [--batches 2,3,5,8,13] [--seqs 8,32,64] [--seconds 0.2] [--no-inductor] [--clock cpu|wall]

Workload: a small attention block (LayerNorm, QKV Linear, softmax attention through views that read the
batch and sequence sizes, GELU MLP; hidden 64) for onnxrt, a LayerNorm/GELU/softmax row block for triton,
called with every (batch, sequence) pair. Columns, measured round-robin at each size:
- eager: the module itself;
- dyn: the backend on a graph whose placeholders have symbolic batch and sequence sizes (as framejit's
  capture frontend hands them over), ONE compilation for all sizes (backends/symbolic.py);
- static: the backend on the same graph without symbolic sizes, compiled once per size (what a
  specialised entry costs per call);
- inductor: stock torch.compile(dynamic=True) (counted compilations: unique graphs).
Prints per size the medians (ms; CPU time of the calling thread by default on CPU, see NOTE [CPU clock] in
recompiles.py) and ratios, then compilations and total compile seconds per column and
geometric means. Everything runs under torch.no_grad().
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.backends import interleaved_medians  # noqa: E402
from benchmarks.recompiles import CLOCKS, STATS, median_ms  # noqa: E402
from framejit.backends import lookup_backend  # noqa: E402
from tests.backends.symbolic_graphs import symbolic_graph  # noqa: E402

D = 64


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.GELU(), torch.nn.Linear(2 * D, D))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, 4, D // 4).permute(2, 0, 3, 1, 4).unbind(0)
        att = (q @ k.transpose(-1, -2) / (D // 4) ** 0.5).softmax(-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, D))
        return x + self.mlp(x)


class RowBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(D)

    def forward(self, x):
        return F.gelu(self.norm(x)) * 2 + x.softmax(-1)


def _geomean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def run(args) -> None:
    device = torch.device(args.device)
    model = (Attention() if args.backend == "onnxrt" else RowBlock()).eval().to(device)
    backend = lookup_backend(args.backend)
    options = {"allow_spinning": False} if args.backend == "onnxrt" else None
    sizes = [(b, s) for b in map(int, args.batches.split(",")) for s in map(int, args.seqs.split(","))]
    example = torch.randn(3, 5, D, device=device)
    compile_s = {"dyn": 0.0, "static": 0.0, "inductor": 0.0}
    with torch.no_grad():
        start = time.perf_counter()
        dyn = backend(symbolic_graph(model, [example], static={0: [2]}), [example], options)
        dyn(example)
        compile_s["dyn"] += time.perf_counter() - start
        static_gm = torch.fx.symbolic_trace(model)
        statics = {}
        inductor = None
        if not args.no_inductor:
            import torch._dynamo as dynamo

            dynamo.reset()
            inductor = torch.compile(model, dynamic=True)
        header = (f"{'size':>8} {'eager':>8} {'dyn':>8} {'static':>8} {'inductor':>9} "
                  f"{'dyn/eager':>9} {'dyn/static':>10} {'dyn/ind':>8}")
        print(f"backend={args.backend} device={args.device} hidden={D} threads={torch.get_num_threads()} "
              f"clock={args.clock} stat={args.stat if args.clock == 'cpu' else 'median'}")
        print(header)
        ratios = {"dyn/eager": [], "dyn/static": [], "dyn/ind": [], "static/eager": [], "ind/eager": []}
        for b, s in sizes:
            x = torch.randn(b, s, D, device=device)
            start = time.perf_counter()
            statics[(b, s)] = backend(static_gm, [x], options)
            statics[(b, s)](x)
            compile_s["static"] += time.perf_counter() - start
            fns = {"eager": model, "dyn": dyn, "static": statics[(b, s)]}
            if inductor is not None:
                start = time.perf_counter()
                inductor(x)
                compile_s["inductor"] += time.perf_counter() - start
                fns["inductor"] = inductor
            torch.testing.assert_close(dyn(x), model(x), atol=1e-4, rtol=1e-4)
            if args.clock == "cpu":  # NOTE [CPU clock] in recompiles.py
                med = median_ms(fns, (x,), args.seconds, CLOCKS["cpu"], STATS[args.stat])
            else:
                med = interleaved_medians(fns, (x,), args.seconds, args.device)
            ind = med.get("inductor", float("nan"))
            ratios["dyn/eager"].append(med["dyn"] / med["eager"])
            ratios["dyn/static"].append(med["dyn"] / med["static"])
            ratios["static/eager"].append(med["static"] / med["eager"])
            if inductor is not None:
                ratios["dyn/ind"].append(med["dyn"] / ind)
                ratios["ind/eager"].append(ind / med["eager"])
            print(f"{b:>3}x{s:<4} {med['eager']:8.3f} {med['dyn']:8.3f} {med['static']:8.3f} {ind:9.3f} "
                  f"{med['dyn'] / med['eager']:9.2f} {med['dyn'] / med['static']:10.2f} {med['dyn'] / ind:8.2f}")
        print(f"geomean ratios: " + ", ".join(f"{k} {_geomean(v):.2f}" for k, v in ratios.items() if v))
        print(f"compilations: dyn {_compilations(dyn)}, static {len(statics)}, inductor {_inductor_graphs()}")
        print("compile seconds (first calls, all sizes): " + ", ".join(f"{k} {v:.1f}" for k, v in compile_s.items()))


def _compilations(compiled) -> str:
    if hasattr(compiled, "dynamic_programs"):
        programs = sum(len(v) for v in compiled.dynamic_programs.values()) + len(compiled.programs)
        return f"{programs} program(s), {compiled.session_count()} ORT session(s)"
    specialised = getattr(getattr(compiled, "specialised", None), "compiled", {})
    return f"{getattr(compiled, 'modules', 0)} module(s) + {len(specialised)} specialisation(s)"


def _inductor_graphs() -> str:
    try:
        from torch._dynamo.utils import counters

        return f"{counters['stats']['unique_graphs']} graph(s)"
    except Exception:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="onnxrt", choices=["onnxrt", "triton"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="2,3,5,8,13")
    parser.add_argument("--seqs", default="8,32,64")
    parser.add_argument("--seconds", type=float, default=0.2)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the machine is shared)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default=None,
                        help="cpu: the calling thread's CPU time (default on CPU; NOTE [CPU clock] in "
                             "recompiles.py), wall: wall time (default on CUDA)")
    parser.add_argument("--stat", choices=sorted(STATS), default="median",
                        help="per-column statistic of the CPU-clock timings (min: least noisy on a loaded machine)")
    args = parser.parse_args()
    args.clock = args.clock or ("cpu" if args.device == "cpu" else "wall")
    torch.set_num_threads(args.threads)
    if args.backend == "triton" and args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--backend triton needs --device cuda (or TRITON_INTERPRET=1, very slow)")
    run(args)


if __name__ == "__main__":
    main()
