"""Per-call overhead and first-call (capture) time: eager vs framejit vs torch.compile, side by side.

    python benchmarks/overhead.py [--repeats 7] [--threads 1]

Prints medians over `--repeats` timing rounds. Both compilers use their "eager" backends, so the
numbers measure the frontends (guards, wrappers, graph call), not kernel generation. First-call time is
measured on a fresh function after each compiler's own import/warm-up (torch.compile imports its
machinery when `torch.compile(...)` is called; framejit warms fake tensors in `framejit.compile(...)`).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import framejit  # noqa: E402


def per_call_us(fn, args, inner: int, repeats: int) -> float:
    for _ in range(max(10, inner // 10)):
        fn(*args)
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        rounds.append((time.perf_counter() - start) / inner * 1e6)
    return statistics.median(rounds)


def first_call_ms(compile_fn, make_fn, args) -> float:
    fn = make_fn()
    compiled = compile_fn(fn)
    start = time.perf_counter()
    compiled(*args)
    return (time.perf_counter() - start) * 1e3


_fresh = [0]


def tiny():
    """A new code object each time: both compilers cache per code object, so first calls must not share."""
    def add(x, y):
        return x + y
    _fresh[0] += 1
    return types.FunctionType(add.__code__.replace(co_name=f"add_{_fresh[0]}"), globals(), f"add_{_fresh[0]}")


def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fj = lambda f: framejit.compile(f, backend="eager")  # noqa: E731
    tc = lambda f: torch.compile(f, backend="eager")  # noqa: E731
    # warm-up of each compiler's machinery (imports: both load parts of torch._dynamo, framejit for fake
    # tensors), outside the measurements
    fj(tiny())(torch.randn(4), torch.randn(4))
    tc(tiny())(torch.randn(4), torch.randn(4))

    x, y = torch.randn(4), torch.randn(4)
    inp = torch.randn(8, 64)
    rows = []
    first = {
        "tiny": (first_call_ms(fj, tiny, (x, y)), first_call_ms(tc, tiny, (x, y))),
        "mlp12": (first_call_ms(fj, mlp, (inp,)), first_call_ms(tc, mlp, (inp,))),
    }
    for name, make, call_args, inner in (("tiny x+y (4 elems)", tiny, (x, y), 20000),
                                         ("12x Linear+ReLU (8x64)", mlp, (inp,), 2000)):
        fn = make()
        eager = per_call_us(fn, call_args, inner, args.repeats)
        ours = per_call_us(fj(fn), call_args, inner, args.repeats)
        theirs = per_call_us(tc(fn), call_args, inner, args.repeats)
        rows.append((name, eager, ours, theirs))

    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, threads {args.threads}, "
          f"medians of {args.repeats} rounds")
    print(f"{'per call (us)':26s} {'eager':>9s} {'framejit':>9s} {'torch.compile':>14s} "
          f"{'fj overhead':>12s} {'tc overhead':>12s} {'fj/eager':>9s} {'tc/eager':>9s}")
    for name, eager, ours, theirs in rows:
        print(f"{name:26s} {eager:9.2f} {ours:9.2f} {theirs:14.2f} {ours - eager:12.2f} {theirs - eager:12.2f} "
              f"{ours / eager:9.3f} {theirs / eager:9.3f}")
    print(f"\n{'first call (ms)':26s} {'framejit':>9s} {'torch.compile':>14s} {'fj/tc':>9s}")
    for name, (ours, theirs) in first.items():
        print(f"{name:26s} {ours:9.1f} {theirs:14.1f} {ours / theirs:9.3f}")


if __name__ == "__main__":
    main()
