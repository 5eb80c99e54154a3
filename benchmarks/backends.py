"""Backend benchmark: eager vs framejit+<backend> vs torch.compile(inductor) over the model zoo.

Usage:
    .venv/bin/python benchmarks/backends.py --backend onnxrt [--device cpu] [--size bench]
        [--models mlp,cnn] [--no-inductor] [--seconds 1.0]

Prints one table row per model: median latency of eager, framejit+backend and inductor (ms), the
speedup of framejit over eager, framejit's latency relative to inductor (< 1.0: faster), and first-call
(compile) times; then the geometric means. Everything runs under `torch.no_grad()`.

Phases (NOTES.md: inductor's compile workers disturb measurements taken right after a cold compile):
1. per model: eager timing, framejit compile + timing; 2. inductor compiles for all models;
3. inductor timings. The framejit column uses `framejit.compile(model, backend=...)` when the frontend
works, else the backend called directly on a torch.fx.symbolic_trace / make_fx graph of the model (the
"via" column says which). To add a backend, add an entry to `BACKEND_SETUP` (options per backend) and,
if it needs one, a device check in `check_device`.
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
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from framejit.backends import lookup_backend  # noqa: E402
from tests.models import zoo  # noqa: E402

# backend name -> options passed to it (NOTE [No spinning]: onnxrt keeps ORT threads from spinning)
BACKEND_SETUP: dict[str, dict] = {
    "onnxrt": {"allow_spinning": False},
    "triton": {},
}


def check_device(backend: str, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    if backend not in BACKEND_SETUP:
        raise SystemExit(f"--backend {backend!r}: accepted: {', '.join(BACKEND_SETUP)}")


def median_ms(fn, inputs, seconds: float, device: str) -> float:
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        fn(*inputs)
    sync()
    times = []
    deadline = time.perf_counter() + seconds
    while len(times) < 10 or (time.perf_counter() < deadline and len(times) < 2000):
        start = time.perf_counter()
        fn(*inputs)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def to_device(values, device):
    return tuple(v.to(device) if isinstance(v, torch.Tensor) else v for v in values)


def framejit_callable(case, backend: str, inputs):
    """(callable, how) — framejit.compile when the frontend works, else the backend on an FX graph."""
    options = BACKEND_SETUP[backend]
    try:
        import framejit

        compiled = framejit.compile(case.model, backend=backend, options=options)
        compiled(*inputs)
        return compiled, "framejit.compile"
    except NotImplementedError:
        pass
    if case.fx_traceable:
        gm, how = torch.fx.symbolic_trace(case.model), "fx.symbolic_trace"
    else:
        gm = make_fx(lambda *args: zoo.output_tensors(case.model(*args)))(*inputs)
        how = "make_fx"
    return lookup_backend(backend)(gm, list(inputs), options), how


def first_call_seconds(make, inputs):
    start = time.perf_counter()
    fn = make()
    fn(*inputs)
    return fn, time.perf_counter() - start


def run(args) -> None:
    names = args.models.split(",") if args.models else zoo.names()
    rows = {}
    with torch.no_grad():
        for name in names:
            case = zoo.get(name, size=args.size)
            case.model.to(args.device)
            inputs = to_device(case.make_inputs(0), args.device)
            row = rows[name] = {"model": case.model, "inputs": inputs}
            row["eager"] = median_ms(case.model, inputs, args.seconds, args.device)
            start = time.perf_counter()
            fj, row["via"] = framejit_callable(case, args.backend, inputs)
            fj(*inputs)
            row["fj_compile"] = time.perf_counter() - start
            row["fj"] = median_ms(fj, inputs, args.seconds, args.device)
            print(f"  measured {name}: eager {row['eager']:.3f} ms, framejit {row['fj']:.3f} ms", file=sys.stderr)
        if not args.no_inductor:
            import torch._inductor.config as inductor_config

            inductor_config.compile_threads = 1
            for name, row in rows.items():
                row["ind_fn"], row["ind_compile"] = first_call_seconds(
                    lambda: torch.compile(row["model"]), row["inputs"])
                print(f"  compiled {name} with inductor in {row['ind_compile']:.1f} s", file=sys.stderr)
            for row in rows.values():
                row["ind"] = median_ms(row["ind_fn"], row["inputs"], args.seconds, args.device)
    print_table(rows, args)


def print_table(rows, args) -> None:
    print(f"\nbackend={args.backend} device={args.device} size={args.size} torch={torch.__version__} "
          f"threads={torch.get_num_threads()}")
    header = (f"{'model':10s} {'via':18s} {'eager ms':>9s} {'fj ms':>9s} {'ind ms':>9s} "
              f"{'eager/fj':>9s} {'fj/ind':>8s} {'fj comp s':>10s} {'ind comp s':>10s}")
    print(header)
    print("-" * len(header))
    speedups, vs_inductor = [], []
    for name, r in rows.items():
        ind = r.get("ind")
        speedups.append(r["eager"] / r["fj"])
        if ind:
            vs_inductor.append(r["fj"] / ind)
        print(f"{name:10s} {r['via']:18s} {r['eager']:9.3f} {r['fj']:9.3f} "
              f"{ind if ind else float('nan'):9.3f} {r['eager'] / r['fj']:9.2f} "
              f"{r['fj'] / ind if ind else float('nan'):8.2f} {r['fj_compile']:10.2f} "
              f"{r.get('ind_compile', float('nan')):10.2f}")
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")  # noqa: E731
    print(f"geomean speedup eager/framejit: {geo(speedups):.2f}x; "
          f"framejit/inductor latency: {geo(vs_inductor):.2f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="onnxrt", help=f"one of {', '.join(BACKEND_SETUP)}")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", default="bench", choices=list(zoo.SIZES))
    parser.add_argument("--models", default="", help="comma list of zoo names (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per measurement")
    parser.add_argument("--no-inductor", action="store_true", help="skip the torch.compile column")
    args = parser.parse_args(argv)
    check_device(args.backend, args.device)
    run(args)


if __name__ == "__main__":
    main()
