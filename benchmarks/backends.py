"""Backend benchmark: eager vs framejit+<backend> vs torch.compile(inductor) over the model zoo.

Usage:
    .venv/bin/python benchmarks/backends.py --backend onnxrt [--device cpu] [--size bench]
        [--models mlp,cnn] [--no-inductor] [--seconds 1.0] [--threads N|1,0] [--repeats 5] [--block 5] [--block-ms 20]
        [--clock cpu] [--hf bert,gpt2] [--hf-size bench] [--quick] [--fifo]

Prints one table per thread setting (default: 1 thread, then the machine's default), one row per model
(the transformer block of NOTE [The transformer block row], then the zoo): median latency of eager,
framejit+backend and inductor (ms), the speedup of framejit over eager, framejit's latency relative to inductor (< 1.0: faster), and first-call
(compile) times; then the geometric means. Everything runs under `torch.no_grad()`.
`--hf bert,gpt2` adds real transformers models from the HF catalog (tests/models/hf/catalog.py, built
offline from configs; NOTE [HF models in the backend benchmark]) as rows after the zoo's (`--models ""`
with `--hf`: only them; `--models none` skips the zoo).

NOTE [Honest timings]
All three columns run with the same thread count (`--threads`; the default `1,0` on CPU makes one table
at 1 thread and one at torch's default for this machine), set with `torch.set_num_threads` before
anything compiles: ORT sessions take their intra-op thread count from it (onnxrt options.py) and inductor's OpenMP code reads it. The timing phase is
repeated `--repeats` times; each repeat times the columns round-robin, in blocks of `--block`
consecutive calls per column (NOTE [Blocks of calls]), and keeps the median per column. The table shows the median over repeats of those medians and, for the ratios, the
lowest and highest per-repeat ratio (the spread). The machine load (`os.getloadavg()`) is printed
before and after, and beside each row (when its timings ended; each row is also printed to stderr as soon
as it is timed, so a run cut short keeps what it measured): on a shared machine the ratios of interleaved
runs are what can be compared. `--threads 1,0` runs one process per setting (ORT sessions and inductor's
code fix their thread count when they are made), one table each. Multi-threaded rows timed while the load
exceeded the core count are marked and left out of the geomeans (NOTE [Contended rows]); `--fifo` times
rows as on a quiet machine (NOTE [Timings under SCHED_FIFO]). `--quick` times
the transformer block, mlp and bert briefly (a few minutes with inductor's cold compiles).
`--clock cpu` (only with `--threads 1`) times the calling thread's CPU time instead of wall time: with 1
thread torch, ORT (no intra-op pool) and inductor's code all run on the calling thread, and on a machine
whose load average is many times its core count the wall-clock medians mostly measure waiting for a
core (NOTE [CPU clock] in benchmarks/recompiles.py).

NOTE [Blocks of calls]
torch's OpenMP workers (libgomp) spin for milliseconds after each parallel region, and ORT's intra-op
worker for up to 200 us (NOTE [Bounded spinning] in onnxrt/options.py). Timed call by call, each call
therefore starts while the previous column's threads still spin, and on a machine with as many cores as
threads the ORT worker loses its core to a spinning OpenMP worker for most of a call: measured (zoo bench
size, 2 threads, SCHED_FIFO so that the machine's load of 10-14 did not reach it, one process, medians of
40 calls per column), vit eager 12.03 / framejit 12.38 / inductor 11.50 ms call by call in the order
eager, framejit, inductor, against 11.05 / 10.36 / 10.78 ms timed in blocks of 5 (bert: 35.3 / 37.3 / 33.7
against 34.5 / 34.7 / 32.6); putting framejit after inductor did not help (12.34 ms: inductor's code runs on
the same OpenMP pool as eager). A program calls one model repeatedly; the blocks measure that. A block is
at least `--block` calls (default 5) and at least `--block-ms` milliseconds (default 20): libgomp's workers
spin for several milliseconds, so for sub-millisecond models more than the block's first call paid for
them. Measured (2 threads, --fifo, load ~10 on 2 CPUs, medians of 3 repeats): transformer block eager
0.393 / framejit 0.320 / inductor 0.372 ms in blocks of 5 calls, 0.393 / 0.194 / 0.367 ms in blocks of 20
ms; mlp 0.739 / 0.624 / 0.736 against 0.734 / 0.342 / 0.720 (framejit at 1 thread: 0.309 and 0.600 ms,
so in blocks of 5 calls ORT's second thread hardly ever got its core). With the block a few times longer
than the spinning, each column's median is its steady state. `--block 1 --block-ms 0` times call by call.

Phases (NOTES.md: inductor's compile workers disturb measurements taken right after a cold compile):
1. framejit compiles; 2. inductor compiles (compile_threads=1); 3. timings, with eager, framejit and
inductor called round-robin so that load from other processes affects all columns alike. framejit
compiles into a fresh, empty persistent cache, so its compile column is a cold compile. The framejit column uses `framejit.compile(model, backend=...)` when the frontend
works on the model (`--via auto`, the default), else the backend called directly on a
torch.fx.symbolic_trace / make_fx graph of the model (the "via" column says which; `--via fx` forces it). To add a backend, add an entry to `BACKEND_SETUP` (options per backend) and,
if it needs one, a device check in `check_device`.
"""
from __future__ import annotations

import argparse
import contextlib
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

# NOTE [HF models in the backend benchmark]
# The zoo's bert and gpt are written for this repository; `--hf` also times the transformers library's own
# BertModel and GPT2LMHeadModel (any catalog name), with their decorators, masks and ModelOutput. The
# catalog's configs are tiny (hidden 32: a call is mostly per-op overhead); `--hf-size bench` (the default)
# widens them to hidden 256, 4 heads, FFN 1024, 2 layers, with batch 4 x 64 tokens (an attention mask with
# padding, as users pass it), `tiny` keeps the catalog's sizes and its batch 2 x 8. Decoders run without a
# KV cache (use_cache=False). Each column calls the model with the catalog's keyword inputs and returns
# every tensor of its output (pooler included), so no column can skip work another does.
HF_BENCH = {"hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "num_hidden_layers": 2,
            "max_position_embeddings": 128, "n_embd": 256, "n_head": 4, "n_layer": 2, "n_positions": 128}
HF_SIZES = {"tiny": (None, 2, 8), "bench": (HF_BENCH, 4, 64)}


class HFCall(torch.nn.Module):
    """A catalog model called with keyword inputs given positionally; returns its output's tensors."""

    def __init__(self, model: torch.nn.Module, keys: tuple, extra: dict):
        super().__init__()
        self.model, self.keys, self.extra = model, keys, extra

    def forward(self, *values):
        out = self.model(**dict(zip(self.keys, values)), **self.extra)
        return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))


def make_case(name: str, size: str):
    """This benchmark's own case `name` (BENCH_CASES) or the zoo's."""
    return BENCH_CASES[name](size) if name in BENCH_CASES else zoo.get(name, size=size)


def hf_case(name: str, size: str):
    """A zoo-like case (name, model, make_inputs, fx_traceable, tolerance) for catalog model `name`."""
    import dataclasses
    import types

    from tests.models.hf import catalog

    arch = catalog.get(name)
    overrides, batch, seq = HF_SIZES[size]
    if overrides:
        arch = dataclasses.replace(arch, config_kwargs={**arch.config_kwargs, **{
            k: v for k, v in overrides.items() if k in arch.config_kwargs}})
    keys = tuple(arch.make_inputs(0, batch, seq))
    extra = {"use_cache": False} if arch.family == "decoder" else {}
    model = HFCall(arch.build(), keys, extra)
    return types.SimpleNamespace(name=f"hf_{name}", model=model, fx_traceable=False,
                                 make_inputs=lambda seed: tuple(arch.make_inputs(seed, batch, seq).values()))

# NOTE [The transformer block row]
# Issue 17's headline program: one pre-LN transformer block (LayerNorm, one QKV Linear, 4-head attention
# written out as softmax(q k^T / sqrt(d)) v, output projection, LayerNorm, GELU MLP of width 4d) on a
# 4 x 32 x 128 batch. Its row (`block`, first by default) is what the table measured; onnxrt
# should give it one ORT program of LayerNormalization, Attention, Gelu and Gemm nodes
# (tests/backends/test_backends_bench.py checks that at a smaller width).
class TransformerBlock(torch.nn.Module):
    def __init__(self, width: int = 128, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.fc1, self.fc2 = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)  # unpacked: torch.fx.symbolic_trace traces it
        q, k, v = [t.view(batch, seq, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v)]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(width // self.heads))
        y = (scores.softmax(-1) @ v).transpose(1, 2).contiguous().view(batch, seq, width)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def block_case(size: str = "bench", width: int = 128):
    """A zoo-like case for the transformer block (NOTE [The transformer block row]); `size` is ignored:
    the block has the issue's one size (4 x 32 x `width`)."""
    import types

    generator = torch.Generator().manual_seed(1234)
    model = TransformerBlock(width)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return types.SimpleNamespace(name="block", model=model.eval(), fx_traceable=True, make_inputs=lambda seed: (
        torch.randn(4, 32, width, generator=torch.Generator().manual_seed(seed)),))


BENCH_CASES = {"block": block_case}  # rows of this benchmark besides the zoo's


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


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def interleaved_repeats(fns: dict, inputs, seconds: float, device: str, repeats: int, clock=time.perf_counter,
                        block: int = 1, block_ms: float = 0.0) -> dict:
    """Per callable, the list of per-repeat medians (ms): NOTE [Honest timings]."""
    runs = [interleaved_medians(fns, inputs, seconds / repeats, device, clock, block, block_ms) for _ in range(repeats)]
    return {key: [run[key] for run in runs] for key in fns}


def interleaved_medians(fns: dict, inputs, seconds: float, device: str, clock=time.perf_counter,
                        block: int = 1, block_ms: float = 0.0) -> dict:
    """Median ms per callable, timing them round-robin in blocks of at least `block` calls and `block_ms`
    ms (NOTE [Blocks of calls]) so that load from other processes (this machine's 2 cores are shared) hits
    every column alike."""
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for fn in fns.values():
        for _ in range(3):
            fn(*inputs)
    sync()
    times: dict = {key: [] for key in fns}
    deadline = time.perf_counter() + seconds * len(fns)
    rounds = 0
    while rounds < 10 or (time.perf_counter() < deadline and rounds < 2000):
        for key, fn in fns.items():
            calls, block_end = 0, time.perf_counter() + block_ms / 1e3
            while calls < block or time.perf_counter() < block_end:
                start = clock()
                fn(*inputs)
                sync()
                times[key].append(clock() - start)
                calls += 1
        rounds += block
    return {key: statistics.median(ts) * 1e3 for key, ts in times.items()}


def to_device(values, device):
    return tuple(v.to(device) if isinstance(v, torch.Tensor) else v for v in values)


def framejit_callable(case, backend: str, inputs, via: str):
    """(callable, how): framejit.compile when asked and it works, else the backend on an FX graph."""
    options = BACKEND_SETUP[backend]
    if via in ("auto", "compile"):
        try:
            import framejit

            compiled = framejit.compile(case.model, backend=backend, options=options)
            compiled(*inputs)
            return compiled, "framejit.compile"
        except Exception as exc:  # the frontend is young: say so and measure the backend alone
            if via == "compile":
                raise
            print(f"  framejit.compile failed on {case.name} ({type(exc).__name__}: {exc}); "
                  "timing the backend on an FX graph", file=sys.stderr)
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
    names = args.models.split(",") if args.models else ([] if args.hf else [*BENCH_CASES, *zoo.names()])
    names = [] if names == ["none"] else names
    cases = [(name, lambda name=name: make_case(name, args.size)) for name in names]
    cases += [(f"hf_{name}", lambda name=name: hf_case(name, args.hf_size)) for name in args.hf.split(",") if name]
    rows = {}
    with torch.no_grad():
        for name, build in cases:  # phase 1: framejit compiles
            case = build()
            case.model.to(args.device)
            inputs = to_device(case.make_inputs(0), args.device)
            row = rows[name] = {"fns": {"eager": case.model}, "inputs": inputs}
            start = time.perf_counter()
            row["fns"]["fj"], row["via"] = framejit_callable(case, args.backend, inputs, args.via)
            row["fns"]["fj"](*inputs)
            row["fj_compile"] = time.perf_counter() - start
            print(f"  framejit+{args.backend} compiled {name} in {row['fj_compile']:.2f} s", file=sys.stderr)
        if not args.no_inductor:  # phase 2: inductor compiles
            import torch._inductor.config as inductor_config

            inductor_config.compile_threads = 1
            for name, row in rows.items():
                row["fns"]["ind"], row["ind_compile"] = first_call_seconds(
                    lambda: torch.compile(row["fns"]["eager"]), row["inputs"])
                print(f"  inductor compiled {name} in {row['ind_compile']:.1f} s", file=sys.stderr)
        for name, row in rows.items():  # phase 3: timings, interleaved
            with realtime(args.fifo):  # NOTE [Timings under SCHED_FIFO]
                row["runs"] = interleaved_repeats(row["fns"], row["inputs"], args.seconds, args.device, args.repeats,
                                                  CLOCKS[args.clock], args.block, args.block_ms)
            row.update({key: statistics.median(ms) for key, ms in row["runs"].items()})
            row["load"] = os.getloadavg()[0]  # NOTE [Honest timings]: the load beside every row
            row["contended"] = not args.fifo and contended(row["load"], torch.get_num_threads(), os.cpu_count() or 1)
            print(f"  timed {name}: {_row_text(name, row)}", file=sys.stderr, flush=True)
    print_table(rows, args)


# NOTE [Contended rows]
# With more runnable threads than cores, a thread that torch's OpenMP runtime waits for at the end of every
# parallel region is often not running: each of eager's (and inductor's) small parallel ops then takes a
# scheduler time slice, while ORT's pool lets the calling thread do the work its worker has not started.
# On this 2-core machine at load 5-8 the zoo's mlp ran eagerly in 55 ms at 2 threads against 1.4 ms at 1
# thread (framejit 1.05 and 0.77 ms): a 2-thread ratio measured so says nothing about speed. A row timed
# with more than one thread while the 1-minute load average exceeded the core count is marked `!` and its
# ratios are left out of the geomeans; the 1-thread table (`--threads 1,0`, the default, prints both), a
# quiet machine or `--fifo` (NOTE [Timings under SCHED_FIFO]; its rows are never marked) is the measurement
# to use.
def contended(load: float, threads: int, cpus: int) -> bool:
    """Whether a row timed with `threads` threads at 1-minute load `load` on `cpus` cores is contended."""
    return threads > 1 and load > cpus


# NOTE [Timings under SCHED_FIFO]
# `--fifo` times each row with every thread of this process (the caller, torch's OpenMP workers, ORT's
# intra-op workers, all made by then: the columns ran before the timing) under the real-time policy
# SCHED_FIFO, so that other processes of a shared machine wait while a row is timed instead of taking the
# cores from it: what a quiet machine would measure, at any load. Measured (transformer block, 2 threads,
# load 9.4 on 2 CPUs): eager 397 us, onnxrt 182 us (spread 180-297), against 556 / 328 us without it and
# a 323 ms worst repeat of eager. The policy is set per thread (Linux: /proc/self/task) and put back to
# SCHED_OTHER after each row, so compiles and printing run as before; it needs root or CAP_SYS_NICE. Other
# processes get only the kernel's real-time throttling share (5% by default) while a row is timed: use it
# for short runs.
@contextlib.contextmanager
def realtime(enabled: bool):
    """Every thread of this process under SCHED_FIFO for the block (no-op unless `enabled`)."""
    if not enabled:
        yield
        return
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    try:
        for tid in tids:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, ProcessLookupError) as exc:
        _set_normal(tids)
        raise SystemExit(f"--fifo: cannot use SCHED_FIFO here ({exc}); run as root or without --fifo")
    try:
        yield
    finally:
        _set_normal(tids)


def _set_normal(tids) -> None:
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        except (PermissionError, ProcessLookupError):
            pass


def _ratio_spread(row, top: str, bottom: str) -> str:
    """'lo-hi' of the per-repeat ratios top/bottom (NOTE [Honest timings])."""
    ratios = [a / b for a, b in zip(row["runs"][top], row["runs"][bottom])]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def _row_text(name: str, r: dict) -> str:
    """One table row; `load` is the 1-minute load average when the row's timings ended."""
    ind, nan = r.get("ind"), float("nan")
    return (f"{name:10s} {r['via']:16s} {r['eager']:9.3f} {r['fj']:9.3f} "
            f"{ind if ind else nan:9.3f} {r['eager'] / r['fj']:8.2f} {_ratio_spread(r, 'eager', 'fj'):>11s} "
            f"{r['fj'] / ind if ind else nan:7.2f} {_ratio_spread(r, 'fj', 'ind') if ind else '':>11s} "
            f"{r['fj_compile']:9.2f} {r.get('ind_compile', nan):10.2f} {r.get('load', nan):5.1f}"
            f"{'!' if r.get('contended') else ''}")


def print_table(rows, args) -> None:
    load = os.getloadavg()
    print(f"\nbackend={args.backend} device={args.device} size={args.size} torch={torch.__version__} "
          f"threads={torch.get_num_threads()} repeats={args.repeats} "
          f"block={args.block} calls/{args.block_ms:g} ms clock={args.clock} "
          f"{'sched=fifo ' if getattr(args, 'fifo', False) else ''}"
          f"load avg before={args.load_before[0]:.2f} after={load[0]:.2f} (1 min; {os.cpu_count()} CPUs)")
    header = (f"{'model':10s} {'via':16s} {'eager ms':>9s} {'fj ms':>9s} {'ind ms':>9s} "
              f"{'eager/fj':>8s} {'(spread)':>11s} {'fj/ind':>7s} {'(spread)':>11s} {'fj comp s':>9s} "
              f"{'ind comp s':>10s} {'load':>5s}")
    print(header)
    print("-" * len(header))
    speedups, vs_inductor = [], []
    for name, r in rows.items():
        ind = r.get("ind")
        if not r.get("contended"):  # NOTE [Contended rows]
            speedups.append(r["eager"] / r["fj"])
            if ind:
                vs_inductor.append(r["fj"] / ind)
        print(_row_text(name, r))
    marked = sum(1 for r in rows.values() if r.get("contended"))
    if marked:
        print(f"! {marked} row(s) timed with {torch.get_num_threads()} threads at a load above {os.cpu_count()} "
              "CPUs: threads waited for cores, so they are left out of the geomeans (NOTE [Contended rows])")
    nan = float("nan")
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else nan  # noqa: E731
    print(f"geomean speedup eager/framejit: {geo(speedups):.2f}x; "
          f"framejit/inductor latency: {geo(vs_inductor):.2f} ({len(speedups)} of {len(rows)} rows)")


QUICK_MODELS = "block,mlp,bert"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="onnxrt", help=f"one of {', '.join(BACKEND_SETUP)}")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", default="bench", choices=list(zoo.SIZES))
    parser.add_argument("--models", default="", help="comma list of zoo names (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing budget per measurement")
    parser.add_argument("--hf", default="", help="comma list of HF catalog names to add (NOTE [HF models in the backend benchmark])")
    parser.add_argument("--hf-size", default="bench", choices=sorted(HF_SIZES), help="sizes of the --hf models")
    parser.add_argument("--via", default="auto", choices=["auto", "compile", "fx"],
                        help="framejit column: framejit.compile, the backend on an FX graph, or auto")
    parser.add_argument("--no-inductor", action="store_true", help="skip the torch.compile column")
    parser.add_argument("--threads", default=None,
                        help="torch (and so ORT and inductor) threads for every column; 0: the machine's default; "
                             "a comma list (1,0) runs one process per setting, one table each "
                             "(default: 1,0 on cpu, 0 on cuda)")
    parser.add_argument("--fifo", action="store_true",
                        help="time each row under SCHED_FIFO, as on a quiet machine (NOTE [Timings under SCHED_FIFO]; root)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a run of a few minutes: --models {QUICK_MODELS} (unless given) --seconds 0.3 --repeats 3")
    parser.add_argument("--repeats", type=int, default=5, help="timing repeats (the spread columns)")
    parser.add_argument("--block", type=int, default=5,
                        help="consecutive calls per column before the next column (NOTE [Blocks of calls]); 1: call by call")
    parser.add_argument("--block-ms", type=float, default=20.0,
                        help="a block also lasts at least this long (NOTE [Blocks of calls])")
    parser.add_argument("--clock", default="wall", choices=sorted(CLOCKS),
                        help="wall time, or the calling thread's CPU time (only with --threads 1; NOTE [Honest timings])")
    args = parser.parse_args(argv)
    if args.threads is None:
        args.threads = "1,0" if args.device == "cpu" else "0"
    if args.quick:
        args.models, args.seconds, args.repeats = args.models or QUICK_MODELS, 0.3, 3
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if "," in args.threads:  # one process per thread setting: sessions and inductor's code fix it when made
        return _per_thread_setting(argv if argv is not None else sys.argv[1:], args.threads.split(","))
    args.threads = int(args.threads)
    if args.clock == "cpu" and (args.threads != 1 or args.device != "cpu"):
        raise SystemExit("--clock cpu needs --threads 1 and --device cpu (other threads' work would not be counted)")
    args.load_before = os.getloadavg()
    if args.threads:
        torch.set_num_threads(args.threads)  # NOTE [Honest timings]: before anything compiles
    # compile times are cold compile times: a fresh persistent cache, not what earlier runs stored
    import tempfile
    import framejit
    framejit.config.cache_dir = tempfile.mkdtemp(prefix="framejit-bench-cache-")
    check_device(args.backend, args.device)
    if args.backend == "triton" and args.device == "cuda":
        import _triton_bench  # the CUDA-event benchmark of the triton backend (benchmarks/_triton_bench.py)
        return _triton_bench.run(args)
    run(args)


def _per_thread_setting(argv: list[str], settings: list[str]) -> None:
    """Run this script once per `--threads` setting, in turn (NOTE [Honest timings])."""
    import subprocess

    rest, skip = [], False
    for k, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg == "--threads":
            skip = True
        elif not arg.startswith("--threads="):
            rest.append(arg)
    for setting in settings:
        subprocess.run([sys.executable, os.path.abspath(__file__), *rest, "--threads", setting.strip()], check=False)


if __name__ == "__main__":
    main()
