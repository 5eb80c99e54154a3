"""Real HuggingFace models: graphs, breaks, eager frames and latency of framejit vs torch.compile.

Usage:
    .venv/bin/python benchmarks/models.py [--models gpt2,llama,bert] [--repeats 30] [--no-inductor]
        [--no-onnxrt] [--threads 1]

For each catalog model (tests/models/hf/catalog.py), under `torch.no_grad()`, with the inputs of seed 0:
1. compile five variants: eager; framejit with a counting eager backend (graphs, graph breaks from the
   `graph_breaks` log, frames run wholly eagerly); framejit + onnxrt (no spinning threads, NOTE
   [No spinning]); torch.compile with the eager backend (its graph count is the reference); torch.compile
   with inductor (compile_threads=1, so no compile workers disturb the timings);
2. check each variant's output against eager (a mismatch or crash shows as "err" and is not timed);
3. time them round-robin (`--repeats` rounds after 3 warm-up calls), so that load from other processes
   hits every column alike, and print medians in ms with ratios to eager (> 1: slower than eager).
torch._dynamo and framejit are reset between models, so every model compiles cold and its code objects
do not share a recompile budget with the previous model's. The geometric mean of each ratio ends the
table. Benchmarks are never part of the test run.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models.hf import catalog, harness  # noqa: E402

COLUMNS = ("eager", "fj_eager", "fj_onnxrt", "tc_eager", "tc_inductor")


class _BreakCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.name.endswith("graph_breaks")


def _variants(model, args, fj_counter: CountingBackend, tc_counter: CountingBackend) -> dict:
    """name -> a function making the compiled callable (called once, cold, at compile time)."""
    import torch._dynamo  # the reference compiler (benchmarks only; framejit never imports it)

    makers = {"eager": lambda: model}
    makers["fj_eager"] = lambda: framejit.compile(model, backend=fj_counter)
    if not args.no_onnxrt:
        makers["fj_onnxrt"] = lambda: framejit.compile(model, backend="onnxrt", options={"allow_spinning": False})
    makers["tc_eager"] = lambda: torch.compile(model, backend=tc_counter)
    if not args.no_inductor:
        makers["tc_inductor"] = lambda: torch.compile(model)
    return makers


def _compile_all(model, kwargs: dict, expected, args, row: dict) -> dict:
    fns = {}
    fj_counter, tc_counter = CountingBackend(), CountingBackend()
    for key, make in _variants(model, args, fj_counter, tc_counter).items():
        start = time.perf_counter()
        try:
            fn = make()
            got = _first_call(fn, kwargs, row) if key == "fj_eager" else harness.run(fn, kwargs)
            harness.assert_outputs_close(got, expected, atol=1e-4, rtol=1e-4)
            fns[key] = fn
        except Exception as e:  # noqa: BLE001 - a failing variant is reported, not timed
            row.setdefault("errors", []).append(f"{key}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        row[key + "_compile_s"] = time.perf_counter() - start
    row.update(graphs=fj_counter.graph_count, stock=tc_counter.graph_count)
    return fns


def _first_call(fn, kwargs: dict, row: dict):
    """framejit's first call, counting graph breaks (the graph_breaks log) and wholly eager frames."""
    breaks = _BreakCounter()
    logging.getLogger("framejit").addHandler(breaks)
    framejit.set_logs("graph_breaks")
    eager_before = harness.eager_frame_count()
    try:
        return harness.run(fn, kwargs)
    finally:
        logging.getLogger("framejit").removeHandler(breaks)
        framejit.set_logs("")
        row.update(breaks=breaks.count, eager_frames=harness.eager_frame_count() - eager_before)


def _medians(fns: dict, kwargs: dict, repeats: int) -> dict:
    for fn in fns.values():
        for _ in range(3):
            harness.run(fn, kwargs)
    times: dict = {key: [] for key in fns}
    with torch.no_grad():
        for _ in range(repeats):
            for key, fn in fns.items():
                start = time.perf_counter()
                fn(**kwargs)
                times[key].append(time.perf_counter() - start)
    return {key: statistics.median(ts) * 1e3 for key, ts in times.items()}


def bench(name: str, args) -> dict:
    import torch._dynamo

    arch = catalog.get(name)
    model = arch.build()
    kwargs = arch.make_inputs(0)
    expected = harness.run(model, kwargs)
    framejit.reset()
    torch._dynamo.reset()
    row: dict = {"name": name, "breaks": -1, "eager_frames": -1}
    fns = _compile_all(model, kwargs, expected, args, row)
    row.update(_medians(fns, kwargs, args.repeats))
    framejit.reset()
    torch._dynamo.reset()
    return row


def _fmt(row: dict, key: str) -> str:
    return f"{row[key]:9.3f}" if key in row else f"{'err' if key + '_compile_s' in row else '-':>9s}"


def _ratio(row: dict, key: str) -> float | None:
    return row[key] / row["eager"] if key in row and "eager" in row else None


def print_table(rows: list[dict], args) -> None:
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, repeats {args.repeats}; "
          "median ms per call; ratios are time / eager time (> 1: slower than eager)")
    header = (f"{'model':18s} {'graphs':>6s} {'stock':>5s} {'breaks':>6s} {'eagerfr':>7s} "
              + " ".join(f"{c:>9s}" for c in COLUMNS) + " " + " ".join(f"{c[:9] + '/e':>11s}" for c in COLUMNS[1:]))
    print(header)
    print("-" * len(header))
    ratios: dict = {c: [] for c in COLUMNS[1:]}
    for r in rows:
        cells = []
        for c in COLUMNS[1:]:
            value = _ratio(r, c)
            if value is not None:
                ratios[c].append(value)
            cells.append(f"{value:11.2f}" if value is not None else f"{'-':>11s}")
        print(f"{r['name']:18s} {r['graphs']:6d} {r['stock']:5d} {r['breaks']:6d} {r['eager_frames']:7d} "
              + " ".join(_fmt(r, c) for c in COLUMNS) + " " + " ".join(cells))
    geo = {c: math.exp(statistics.fmean(map(math.log, v))) if v else float("nan") for c, v in ratios.items()}
    print("geomean ratio to eager: " + ", ".join(f"{c} {g:.2f} ({len(ratios[c])} models)" for c, g in geo.items()))
    for r in rows:
        for err in r.get("errors", []):
            print(f"  {r['name']}: {err}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated catalog names (default: all)")
    parser.add_argument("--repeats", type=int, default=30, help="timing rounds per model (default 30)")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile(inductor) (slow to compile)")
    parser.add_argument("--no-onnxrt", action="store_true", help="skip framejit + onnxrt")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for every column")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    harness.silence_transformers()
    import torch._inductor.config as inductor_config
    inductor_config.compile_threads = 1
    rows = []
    for name in (args.models.split(",") if args.models else catalog.names()):
        start = time.perf_counter()
        rows.append(bench(name, args))
        print(f"  {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    print_table(rows, args)


if __name__ == "__main__":
    main()
