"""Triton backend on a GPU: eager vs framejit+triton vs torch.compile(inductor), per model and pattern.

Usage (needs CUDA; without it the script stops with a clear message):
    .venv/bin/python benchmarks/_triton_bench.py [--size bench] [--models mlp,gpt] [--patterns softmax]
        [--seconds 1.0] [--autotune]
or through `benchmarks/backends.py --backend triton --device cuda`, which dispatches here.

For every zoo model and every pattern (pointwise chain, softmax, layer norm, linear+GELU, ...) it
prints median latencies measured with CUDA events (eager, framejit+triton, inductor, ms), the ratios
eager/framejit and framejit/inductor (< 1.0: framejit faster), first-call compile times, and
framejit's kernel and extern counts; then geometric means. Everything runs under torch.no_grad().
Phases as in backends.py: framejit compiles, inductor compiles, then round-robin timings.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tests.models import zoo  # noqa: E402


def _patterns(device: str) -> dict:
    """name -> (fn, inputs): the fusion patterns the backend is built around, at GPU-sized shapes."""
    def r(*shape):
        return torch.randn(*shape, device=device)

    return {
        "pointwise5": (lambda x, y: torch.sigmoid((x + y) * 3 - 1).abs(), (r(4096, 1024), r(1024))),
        "softmax": (lambda x: torch.softmax(x, -1), (r(4096, 1024),)),
        "softmax_long": (lambda x: torch.softmax(x, -1), (r(256, 16384),)),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, (1024,), w, b), (r(4096, 1024), r(1024), r(1024))),
        "rms_norm": (lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (r(4096, 1024), r(1024))),
        "linear_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), (r(4096, 1024), r(4096, 1024), r(4096))),
        "sum_dim0": (lambda x: x.sum(0), (r(8192, 1024),)),
    }


def _flat_model_graph(case, inputs):
    return make_fx(lambda *args: zoo.output_tensors(case.model(*args)))(*inputs)


def _median_ms(fns: dict, inputs, seconds: float) -> dict:
    """Median ms per callable from CUDA events, round-robin so that drift hits every column alike."""
    for fn in fns.values():
        for _ in range(3):
            fn(*inputs)
    torch.cuda.synchronize()
    times = {key: [] for key in fns}
    deadline = time.perf_counter() + seconds * len(fns)
    while time.perf_counter() < deadline or min(len(t) for t in times.values()) < 5:
        for key, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            end.synchronize()
            times[key].append(start.elapsed_time(end))
    return {key: statistics.median(values) for key, values in times.items()}


def _compile_timed(make, inputs):
    start = time.perf_counter()
    fn = make()
    fn(*inputs)
    torch.cuda.synchronize()
    return fn, time.perf_counter() - start


def _workloads(args) -> dict:
    work = {}
    names = args.models.split(",") if args.models else zoo.names()
    for name in names:
        case = zoo.get(name, size=args.size)
        case.model.to("cuda")
        inputs = tuple(t.to("cuda") if isinstance(t, torch.Tensor) else t for t in case.make_inputs(0))
        work[name] = (case.model, inputs, lambda c=case, i=inputs: _flat_model_graph(c, i))
    patterns = _patterns("cuda")
    chosen = getattr(args, "patterns", "").split(",") if getattr(args, "patterns", "") else list(patterns)
    for name in chosen:
        fn, inputs = patterns[name]
        work[f"pattern:{name}"] = (fn, inputs, lambda f=fn: torch.fx.symbolic_trace(f))
    return work


def run(args) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("triton benchmark: --device cuda needs a CUDA GPU, and none is available here")
    from framejit.backends.triton import triton as triton_backend

    options = {"autotune": True} if getattr(args, "autotune", False) else None
    rows, failed = {}, {}
    with torch.no_grad():
        for name, (eager, inputs, make_graph) in _workloads(args).items():  # phase 1
            try:  # one workload that cannot be traced or compiled is reported, not the end of the run
                gm = make_graph()
                fj, seconds = _compile_timed(lambda: triton_backend(gm, list(inputs), options), inputs)
            except Exception as exc:
                failed[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                print(f"  {name}: not measured ({failed[name]})", file=sys.stderr)
                continue
            rows[name] = {"fns": {"eager": eager, "fj": fj}, "inputs": inputs, "fj_compile": seconds}
            print(f"  framejit+triton compiled {name} in {seconds:.2f} s "
                  f"({fj.kernel_count} kernels, {fj.extern_count} externs)", file=sys.stderr)
        if not args.no_inductor:  # phase 2
            for name, row in rows.items():
                row["fns"]["ind"], row["ind_compile"] = _compile_timed(
                    lambda: torch.compile(row["fns"]["eager"]), row["inputs"])
        for row in rows.values():  # phase 3
            row.update(_median_ms(row["fns"], row["inputs"], args.seconds))
    _print_table(rows, args)
    for name, why in failed.items():
        print(f"not measured: {name} ({why})")


def _print_table(rows: dict, args) -> None:
    print(f"\nbackend=triton device=cuda size={args.size} torch={torch.__version__} "
          f"gpu={torch.cuda.get_device_name()}")
    header = (f"{'workload':22s} {'eager ms':>9s} {'fj ms':>9s} {'ind ms':>9s} {'eager/fj':>9s} {'fj/ind':>7s} "
              f"{'kernels':>7s} {'externs':>7s} {'fj comp s':>9s} {'ind comp s':>10s}")
    print(header)
    print("-" * len(header))
    speedups, vs_inductor = [], []
    for name, r in rows.items():
        ind = r.get("ind", float("nan"))
        fj = r["fns"]["fj"]
        speedups.append(r["eager"] / r["fj"])
        if "ind" in r:
            vs_inductor.append(r["fj"] / ind)
        print(f"{name:22s} {r['eager']:9.3f} {r['fj']:9.3f} {ind:9.3f} {r['eager'] / r['fj']:9.2f} "
              f"{r['fj'] / ind:7.2f} {fj.kernel_count:7d} {fj.extern_count:7d} {r['fj_compile']:9.2f} "
              f"{r.get('ind_compile', float('nan')):10.2f}")
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")  # noqa: E731
    print(f"geomean speedup eager/framejit: {geo(speedups):.2f}x; framejit/inductor latency: {geo(vs_inductor):.2f} "
          f"(target: <= 1.11, i.e. >= 0.9x inductor's speed)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="bench", choices=list(zoo.SIZES))
    parser.add_argument("--models", default="", help="comma list of zoo names (default: all)")
    parser.add_argument("--patterns", default="", help="comma list of pattern names (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per workload and column")
    parser.add_argument("--autotune", action="store_true", help="options={'autotune': True}")
    parser.add_argument("--no-inductor", action="store_true", help="skip the torch.compile column")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
