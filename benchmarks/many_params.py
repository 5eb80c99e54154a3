"""Trace time and per-call time of frames over many parameters, framejit vs stock torch.compile (eager backend).

Workloads (N parameters, small tensors, so the per-call time is mostly the guard check):
  sgd     `for p in params: p.data.add_(p.grad, alpha=-lr)` over a module's parameters
  detach  the same with `p.detach().add_(...)`
  adamw   `framejit.compile(opt.step)` of torch.optim.AdamW (foreach=False)
  forward an nn.Sequential of L Linear(4, 4) layers, forward only

Each workload runs in a fresh process per compiler (first call = trace + compile); the per-call time is the median
of --calls calls after it. Usage: python benchmarks/many_params.py [--layers 100 200] [--calls 20] [--only sgd]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WORKLOADS = ("sgd", "detach", "adamw", "forward")


def _setup(workload: str, layers: int):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(layers)])
    x = torch.ones(2, 4)
    if workload == "forward":
        return model, (x,)
    model(x).sum().backward()
    if workload == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
        opt.step()  # state made eagerly, as after a first training step
        return opt.step, ()

    def sgd(m):
        for p in m.parameters():
            p.data.add_(p.grad, alpha=-0.1)

    def detach(m):
        for p in m.parameters():
            p.detach().add_(p.grad, alpha=-0.1)

    return (sgd if workload == "sgd" else detach), (model,)


def _child(workload: str, layers: int, compiler: str, calls: int) -> None:
    import torch
    fn, args = _setup(workload, layers)
    if compiler == "framejit":
        import framejit
        compiled = framejit.compile(fn, backend="eager")
    else:
        compiled = torch.compile(fn, backend="eager")
    start = time.perf_counter()
    compiled(*args)
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        compiled(*args)
        times.append(time.perf_counter() - start)
    print(json.dumps({"first_s": first, "call_ms": statistics.median(times) * 1e3}))


def _run(workload: str, layers: int, compiler: str, calls: int) -> dict:
    env = dict(os.environ, FRAMEJIT_CACHE="0")
    out = subprocess.run([sys.executable, __file__, "--child", workload, str(layers), compiler, str(calls)],
                         capture_output=True, text=True, env=env, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:60]}
    return json.loads(lines[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--only", choices=WORKLOADS, nargs="+", default=list(WORKLOADS))
    ns = parser.parse_args()
    print(f"{'workload':<9}{'params':>7}  {'framejit first s':>17}{'stock first s':>14}"
          f"  {'framejit call ms':>17}{'stock call ms':>14}")
    for workload in ns.only:
        for layers in ns.layers:
            row = {c: _run(workload, layers, c, ns.calls) for c in ("framejit", "stock")}

            def cell(c, key, fmt):
                return format(row[c][key], fmt) if key in row[c] else row[c]["error"]

            print(f"{workload:<9}{2 * layers:>7}  {cell('framejit', 'first_s', '17.2f')}{cell('stock', 'first_s', '14.2f')}"
                  f"  {cell('framejit', 'call_ms', '17.2f')}{cell('stock', 'call_ms', '14.2f')}", flush=True)


if __name__ == "__main__":
    main()
