"""Recompilations under varying shapes and scalars: framejit vs stock torch.compile, and what dynamic costs.

Usage:
    .venv/bin/python benchmarks/recompiles.py [--quick] [--models mlp,gpt,hf:llama,...] [--calls 10]
        [--seconds 0.3] [--no-latency] [--no-torch] [--threads 1] [--clock cpu|wall] [--stat median|min]

Workload: each model is called through one step function, `step(inputs, scale, offset)`, which runs the
model and returns it output plus `first_output * scale + offset`, so a Python float and a Python int change
on every call with the shapes. Models: the zoo (tests/models/zoo.py, size "small"; batch varies, and the
sequence length for sequence models, by slicing and stacking `make_inputs` of several seeds) and five
transformers models from the tiny HF catalog (tests/models/hf/catalog.py, `hf:<name>`; batch and sequence
vary through the catalog's own input makers). The call sizes go through `--calls` (batch, sequence)
pairs of sizes >= 2, then one call with batch 1 (where eager broadcasting semantics differ, both compilers
may specialise once more).

Printed per model, for framejit (`fj`, dynamic=None: automatic dynamic) and torch.compile (`tc`, default
automatic dynamic), both with a counting eager backend so that only capture is compared:
- `graphs`: graphs handed to the backend over the workload (every compilation of every frame, including
  graphs split by breaks), `frames`: frames compiled, `compile s`: total wall time of the calls that
  compiled something (capture plus one run);
- with latency on: the median per-call latency (ms) at the first call's fixed shape of framejit compiled
  with dynamic=False (static) and dynamic=True (dyn), on the eager and onnxrt backends, measured
  in interleaved blocks of warm calls (NOTE [Blocks of warm calls]), and dyn/static ratios. Every compiled result is checked against eager; a mismatch or a
  crash shows as "err" with the reason below the table.
The `--quick` preset (a few minutes on a 2-core machine) takes 6 calls, 2 zoo models and 5 HF models,
0.15 s of timing per column. Benchmarks are never part of the test run.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# every compilation is measured cold: entries persisted by an earlier run (or by another column, a
# static entry for dynamic=True) would otherwise be loaded instead of compiled
os.environ["FRAMEJIT_CACHE"] = "0"

import torch  # noqa: E402

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models import zoo  # noqa: E402
from tests.models.hf import catalog, harness  # noqa: E402

HF_MODELS = ("gpt2", "llama", "bert", "distilbert", "qwen2")
QUICK_ZOO = ("mlp", "gpt")
# zoo models whose dimension 1 is a sequence that may vary (the others vary in batch only: image sizes are
# fixed by their patch/conv geometry, gru_cell unrolls a Python loop over time steps)
_SEQ_MODELS = {"gpt", "gpt_loss", "bert", "lstm", "moe"}
BATCHES = (2, 4, 3, 6, 5, 2, 7, 3, 8, 4, 5, 6)
SEQS = (8, 5, 7, 4, 6, 3, 8, 5, 2, 7, 6, 4)
HF_SEQS = (8, 12, 5, 16, 9, 6, 11, 14, 7, 10, 13, 4)


@dataclasses.dataclass
class Workload:
    name: str
    model: torch.nn.Module
    calls: list  # (inputs (tuple or dict), scale, offset)
    tolerance: dict


def _first_tensor_path(out) -> list:
    """Keys, indices and attribute names leading to the first tensor of a model output (found eagerly)."""
    path = []
    while not isinstance(out, torch.Tensor):
        if isinstance(out, dict):
            key = next(k for k, v in out.items() if v is not None)
            path.append(("item", key))
            out = out[key]
        elif dataclasses.is_dataclass(out):
            name = dataclasses.fields(out)[0].name
            path.append(("attr", name))
            out = getattr(out, name)
        else:
            path.append(("item", 0))
            out = out[0]
    return path


def make_step(model, path: list):
    def step(inputs, scale, offset):
        out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
        first = out
        for kind, key in path:
            first = first[key] if kind == "item" else getattr(first, key)
        return out, first * scale + offset
    return step


def _zoo_inputs(case, seed: int, batch: int, seq: int | None) -> tuple:
    """`case.make_inputs` stacked over seeds to `batch` rows, cut to `seq` along dimension 1."""
    parts, k = [], 0
    while sum(p[0].shape[0] for p in parts) < batch:
        parts.append(case.make_inputs(seed * 100 + k))
        k += 1
    stacked = [torch.cat(ts, 0)[:batch] for ts in zip(*parts)]
    if seq is not None:
        stacked = [t[:, :seq] for t in stacked]
    return tuple(t.contiguous() for t in stacked)


def zoo_workload(name: str, calls: int) -> Workload:
    case = zoo.get(name, "small")
    seq_varies = name in _SEQ_MODELS
    sizes = [(b, s if seq_varies else None) for b, s in zip(BATCHES[:calls], SEQS[:calls])]
    sizes.append((1, sizes[0][1]))
    items = [(_zoo_inputs(case, i, b, s), 1.0 + 0.25 * i, i) for i, (b, s) in enumerate(sizes)]
    return Workload(name, case.model, items, case.tolerance)


def hf_workload(name: str, calls: int) -> Workload:
    arch = catalog.get(name)
    sizes = list(zip(BATCHES[:calls], HF_SEQS[:calls])) + [(1, HF_SEQS[0])]
    items = [(arch.make_inputs(i, batch=b, seq=s), 1.0 + 0.25 * i, i) for i, (b, s) in enumerate(sizes)]
    return Workload("hf:" + name, arch.build(), items, {"atol": 1e-4, "rtol": 1e-4, "hf": True})


def workload(name: str, calls: int) -> Workload:
    return hf_workload(name[3:], calls) if name.startswith("hf:") else zoo_workload(name, calls)


def _check(got, expected, tolerance: dict) -> None:
    if tolerance.get("hf"):  # ModelOutputs with KV caches
        harness.assert_outputs_close(got, expected, atol=tolerance["atol"], rtol=tolerance["rtol"])
        return
    got_t, exp_t = zoo.output_tensors(got), zoo.output_tensors(expected)
    assert len(got_t) == len(exp_t), f"{len(got_t)} output tensors, eager has {len(exp_t)}"
    for g, e in zip(got_t, exp_t):
        torch.testing.assert_close(g, e, **tolerance)


def _dynamo():
    import importlib

    return importlib.import_module("torch._dynamo")  # the reference compiler (benchmarks only)


def _torch_frames() -> int:
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def count_compilations(work: Workload, step, expected: list, compiler: str) -> dict:
    """Run the workload through `compiler` ("fj" or "tc"): graphs, frames and compile seconds."""
    backend = CountingBackend()
    if compiler == "fj":
        framejit.reset()
        compiled = framejit.compile(step, backend=backend)
        frames = lambda: framejit.stats()["frames_compiled"]  # noqa: E731
    else:
        _dynamo().reset()
        compiled = torch.compile(step, backend=backend)
        frames = _torch_frames
    frames_before, seconds = frames(), 0.0
    with torch.no_grad():
        for (inputs, scale, offset), want in zip(work.calls, expected):
            graphs_before, frames_at = backend.graph_count, frames()
            start = time.perf_counter()
            got = compiled(inputs, scale, offset)
            elapsed = time.perf_counter() - start
            if backend.graph_count != graphs_before or frames() != frames_at:
                seconds += elapsed
            _check(got, want, work.tolerance)
    return {"graphs": backend.graph_count, "frames": frames() - frames_before, "seconds": seconds}


# NOTE [CPU clock]: on a machine shared with other busy processes, a wall-clock median of a ~1 ms call
# includes the time the process waited for a core (with a load average of 12 on 2 cores, medians of
# the same ORT session swung between 2 and 10 ms from one block of calls to the next). torch and ORT run
# on the calling thread here (1 intra-op thread, no inter-op pool), so the calling thread's CPU time
# (`time.thread_time`) measures the work itself; `--clock wall` measures wall time instead.
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


STATS = {"median": statistics.median, "min": min}


# NOTE [Blocks of warm calls]: timing one call of each callable in turn (A B C D A B C D ...) measured
# mostly which callable ran just before: a call after another callable of the same model (same weights,
# same Python code) found the caches warm, one after another model's ORT session did not. With the
# columns in the order static, dyn, the dyn column came out 0.5-0.9x of static on every model, eager
# backend included; listing dyn first turned the same programs into 1.2-1.8x (zoo gpt, mlp, cnn, loaded
# 2-core machine). So each round runs every callable for a block of `block` timed calls, after one untimed
# call that warms the caches after the previous callable, and the order of the callables rotates from
# round to round: the blocks still interleave (load from other processes hits every column alike), and
# what is timed is the steady state of a loop that calls one compiled function, as a serving loop does.
def median_ms(fns: dict, args: tuple, seconds: float, clock=time.thread_time, stat=statistics.median,
              block: int = 8) -> dict:
    """Median (or `stat`) ms per callable over warm calls timed in interleaved blocks (NOTE [Blocks of warm
    calls]). `min` is the least noisy estimate of the work a deterministic call does on a loaded machine."""
    times: dict = {key: [] for key in fns}
    keys = list(fns)
    deadline = time.perf_counter() + seconds * len(fns)
    rounds = 0
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(3):
                fn(*args)
        while rounds < 4 or (time.perf_counter() < deadline and rounds < 1000):
            shift = rounds % len(keys)
            for key in keys[shift:] + keys[:shift]:
                fn = fns[key]
                fn(*args)  # warms the caches after the previous callable: not timed
                for _ in range(block):
                    start = clock()
                    fn(*args)
                    times[key].append(clock() - start)
            rounds += 1
    return {key: stat(ts) * 1e3 for key, ts in times.items()}


def latencies(work: Workload, step, expected, args, errors: list) -> dict:
    """Per-call ms at the first call's shape: eager, and framejit static/dynamic on eager and onnxrt."""
    inputs, scale, offset = work.calls[0]
    fns = {"eager": step}
    framejit.reset()  # (not between the variants: reset() makes every compiled wrapper recompile)
    for backend in ("eager", "onnxrt"):
        options = {"allow_spinning": False} if backend == "onnxrt" else None
        for label, dynamic in (("static", False), ("dyn", True)):
            key = f"{backend}_{label}"
            try:
                fn = framejit.compile(step, backend=backend, dynamic=dynamic, options=options)
                with torch.no_grad():
                    for _ in range(2):
                        _check(fn(inputs, scale, offset), expected, work.tolerance)
                fns[key] = fn
            except Exception as exc:  # noqa: BLE001 - reported, not timed
                errors.append(f"{key}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    return median_ms(fns, (inputs, scale, offset), args.seconds, CLOCKS[args.clock], STATS[args.stat])


def bench(name: str, args) -> dict:
    work = workload(name, args.calls)
    path = _first_tensor_path(work.model(**work.calls[0][0]) if isinstance(work.calls[0][0], dict)
                              else work.model(*work.calls[0][0]))
    step = make_step(work.model, path)
    with torch.no_grad():
        expected = [step(inputs, scale, offset) for inputs, scale, offset in work.calls]
    row: dict = {"name": name, "calls": len(work.calls), "errors": []}
    for compiler in ("fj",) + (() if args.no_torch else ("tc",)):
        try:
            row[compiler] = count_compilations(work, step, expected, compiler)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            row["errors"].append(f"{compiler}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    if not args.no_latency:
        row["ms"] = latencies(work, step, expected[0], args, row["errors"])
    framejit.reset()
    if not args.no_torch:
        _dynamo().reset()
    return row


def _geomean(values: list) -> float:
    return math.exp(statistics.fmean(map(math.log, values))) if values else float("nan")


def _cell(row: dict, compiler: str, key: str, fmt: str) -> str:
    if compiler not in row:
        return f"{'err' if any(e.startswith(compiler + ':') for e in row['errors']) else '-':>9s}"
    return format(row[compiler][key], fmt)


def print_table(rows: list, args) -> None:
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, {rows[0]['calls'] if rows else 0} "
          "calls per model (varying batch/sequence, a float and an int; the last at batch 1)")
    print(f"{'model':14s} {'fj graphs':>9s} {'tc graphs':>9s} {'fj frames':>9s} {'tc frames':>9s} "
          f"{'fj comp s':>9s} {'tc comp s':>9s}")
    for r in rows:
        print(f"{r['name']:14s} {_cell(r, 'fj', 'graphs', '9d')} {_cell(r, 'tc', 'graphs', '9d')} "
              f"{_cell(r, 'fj', 'frames', '9d')} {_cell(r, 'tc', 'frames', '9d')} "
              f"{_cell(r, 'fj', 'seconds', '9.2f')} {_cell(r, 'tc', 'seconds', '9.2f')}")
    fewer = sum(1 for r in rows if "fj" in r and "tc" in r and r["fj"]["graphs"] <= r["tc"]["graphs"])
    both = sum(1 for r in rows if "fj" in r and "tc" in r)
    print(f"framejit compiled no more graphs than torch.compile on {fewer} of {both} models")
    if not args.no_latency:
        cols = ("eager", "eager_static", "eager_dyn", "onnxrt_static", "onnxrt_dyn")
        print(f"\nper-call latency at a fixed shape, {args.stat} ms of {args.clock} time (framejit static = dynamic=False, "
              "dyn = dynamic=True)")
        print(f"{'model':14s} " + " ".join(f"{c:>13s}" for c in cols) + f" {'eager d/s':>9s} {'onnxrt d/s':>10s}")
        ratios: dict = {"eager": [], "onnxrt": []}
        for r in rows:
            ms = r.get("ms", {})
            cells = " ".join(f"{ms[c]:13.3f}" if c in ms else f"{'err':>13s}" for c in cols)
            rs = []
            for backend in ("eager", "onnxrt"):
                if f"{backend}_dyn" in ms and f"{backend}_static" in ms:
                    ratio = ms[f"{backend}_dyn"] / ms[f"{backend}_static"]
                    ratios[backend].append(ratio)
                    rs.append(f"{ratio:9.2f}")
                else:
                    rs.append(f"{'-':>9s}")
            print(f"{r['name']:14s} {cells} {rs[0]} {rs[1]:>10s}")
        print("geomean dyn/static: " + ", ".join(f"{b} {_geomean(v):.2f} ({len(v)} models)" for b, v in ratios.items()))
    for r in rows:
        for err in r["errors"]:
            print(f"  {r['name']}: {err}")


def main(argv: list[str] | None = None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names and hf:<catalog name> (default: all zoo "
                        f"models and hf:{', hf:'.join(HF_MODELS)})")
    parser.add_argument("--quick", action="store_true", help="6 calls, 2 zoo + 5 HF models, short timings")
    parser.add_argument("--calls", type=int, default=None, help="calls with sizes >= 2 per model (max 12; default 10)")
    parser.add_argument("--seconds", type=float, default=None, help="timing seconds per latency column (default 0.3)")
    parser.add_argument("--no-latency", action="store_true", help="skip the static vs dynamic latency columns")
    parser.add_argument("--no-torch", action="store_true", help="skip torch.compile")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the machine is shared)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="latency clock: the calling thread's CPU time (default, NOTE [CPU clock]) or wall time")
    parser.add_argument("--stat", choices=sorted(STATS), default="median",
                        help="latency statistic over the timed calls (min: least noisy on a loaded machine)")
    args = parser.parse_args(argv)
    args.calls = min(args.calls or (6 if args.quick else 10), len(BATCHES))
    args.seconds = args.seconds if args.seconds is not None else (0.15 if args.quick else 0.3)
    torch.set_num_threads(args.threads)
    harness.silence_transformers()
    if args.models:
        names = args.models.split(",")
    else:
        names = list(QUICK_ZOO if args.quick else zoo.names()) + [f"hf:{n}" for n in HF_MODELS]
    from framejit import config

    rows, cache_enabled, config.cache_enabled = [], config.cache_enabled, False  # see FRAMEJIT_CACHE above
    try:
        for name in names:
            start = time.perf_counter()
            rows.append(bench(name, args))
            print(f"  {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    finally:
        config.cache_enabled = cache_enabled
    print_table(rows, args)
    return rows


if __name__ == "__main__":
    main()
