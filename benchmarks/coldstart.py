"""Cold-start benchmark: time to the first result of a compiled model in a fresh process.

Usage:
    .venv/bin/python benchmarks/coldstart.py [--backend eager|onnxrt] [--size small|bench]
        [--models mlp,cnn] [--repeats 3] [--no-torch-compile] [--remote] [--clock wall|cpu]

For every zoo model, each measurement is a new Python process (this script with `--child`) that
imports torch, builds the model and its inputs, then times one step: create the compiled callable and
call it once ("first result"). Columns (medians over `--repeats`, milliseconds):

| column  | process                                                                             |
|---------|-------------------------------------------------------------------------------------|
| eager   | the model's first call, no compiler                                                 |
| fj cold | `framejit.compile(model, backend=B)`, empty FRAMEJIT_CACHE_DIR                       |
| fj warm | the same, a second process on the cache directory the cold process filled           |
| tc cold | `torch.compile(model, backend=T)`, empty TORCHINDUCTOR_CACHE_DIR (and Triton cache) |
| tc warm | the same, a second process on the cache directories the cold process filled         |

| fj remote | `--remote`: the same, a process with an EMPTY cache directory whose FRAMEJIT_REMOTE_CACHE is  |
|           | the Redis server the cold process also wrote to (a fresh machine of a fleet)             |

With `--remote` the parent starts a private redis-server (/usr/bin/redis-server, a free loopback port,
flushed before each repeat) and every framejit process gets FRAMEJIT_REMOTE_CACHE and a signing key;
the columns then include "fj remote", "remote/cold" (the issue-16 target is <= 0.15) and "remote
tr/bc" (frames traced / backend compiles in the remote-warm process, 0/0 when it started warm).
Besides the zoo, `--models` accepts models with graph breaks (BREAK_MODELS below: a data-dependent
branch, and an nn.MultiheadAttention block with such a branch).

Backend pairing (as in benchmarks/backends.py): `--backend eager` compares framejit's eager backend
with `torch.compile(backend="eager")`; `--backend onnxrt` compares framejit's onnxrt backend with
`torch.compile` (inductor). Every repeat uses new temporary cache directories. The ratios are
fj warm / fj cold and fj warm / tc warm (the issue-7 targets are <= 0.1 and <= 0.25). "warm tr/bc"
shows frames traced / backend compiles in the warm framejit process (from `framejit.stats()`), and
"ok" says whether every compiled first result matched eager (the zoo's tolerance); "fj imp" and
"tc imp" are the part of the warm first result spent importing the compiler. A second table
gives the time from process launch to the first result (interpreter start and `import torch`
included), the number a user waiting at a prompt sees.

NOTE [Cold-start clock]
`--clock wall` (default) times the first result with the wall clock; `--clock cpu` with the CPU time the
child process used for it (time.process_time: all its threads, so OpenMP or ORT threads spinning count
too). On the shared 2-core machine with a load of 10 or more, a child gets a fraction of a core and wall
times of the same process varied 3-7x between runs (the zoo's lstm: its eager first call took 0.8-3.6 s
wall, 0.13-0.52 s CPU); CPU time is what the compiler costs, not what the neighbours cost. The launch
table is wall time either way.

NOTE [What the first result includes]
The timed step starts after `import torch` and the model build, which are the same for every column,
and includes the compiler's own lazy imports (`torch._dynamo` on `torch.compile`, framejit's capture
package on first use of `framejit.compile`), since a user pays them in each new process. Inductor
compiles with one thread (TORCHINDUCTOR_COMPILE_THREADS=1): on this 2-core machine a worker pool costs
more than it saves, and it would outlive the measurement.

NOTE [Bytecode files]
Children run with PYTHONDONTWRITEBYTECODE removed from their environment. With it set (as in this
project's sandbox), no process ever finds framejit's .pyc files, and every warm process compiled all of
framejit's imported sources again (measured: 0.49 s of a 1.0 s warm first call for mlp); an installed
package (pip compiles the bytecode) or any second run without the variable does not pay it. The cold
process of each repeat writes them (or finds them), so warm columns measure what a user's warm process does.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_BACKEND = {"eager": "eager", "onnxrt": "inductor"}
MODES = ("eager", "fj_cold", "fj_warm", "fj_remote", "tc_cold", "tc_warm")
REMOTE_KEY = "coldstart-benchmark-signing-key"


# -- models with graph breaks (beside the zoo) -----------------------------------------------------
def _break_case(name: str, size: str):
    import torch

    from tests.models._case import Case

    from benchmarks.break_models import AttnBranch, Branchy

    width = 32 if size == "small" else 256
    torch.manual_seed(1234)
    model = (Branchy(width) if name == "brk_branch" else AttnBranch(width)).eval()
    shape = (4, width) if name == "brk_branch" else (2, 8, width)

    def make_inputs(seed: int):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(*shape, generator=g),)

    return Case(name, size, model, make_inputs, False, False, {"atol": 1e-5, "rtol": 1e-4})


BREAK_MODELS = ("brk_branch", "brk_mha")


def get_case(name: str, size: str):
    from tests.models import zoo

    return _break_case(name, size) if name in BREAK_MODELS else zoo.get(name, size=size)


# -- the child process -----------------------------------------------------------------------------
def child(args: argparse.Namespace) -> None:
    launched = float(os.environ["COLDSTART_LAUNCHED"])
    sys.path.insert(0, REPO)
    import torch

    case = get_case(args.model, args.size)
    inputs = case.make_inputs(0)
    if args.train:
        return _child_train(args, case, inputs, launched)
    with torch.no_grad():
        start, start_cpu = time.perf_counter(), time.process_time()
        _import_compiler(args.mode)
        imported = time.perf_counter()
        fn = _make_callable(args.mode, case.model, args.backend)
        out = fn(*inputs)
        first_s, first_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
        since_launch_s = time.time() - launched
        ok = _matches(out, case, inputs)
    report = {"first_s": first_s, "first_cpu_s": first_cpu_s, "import_s": imported - start,
              "since_launch_s": since_launch_s, "ok": ok}
    if args.mode.startswith("fj"):
        import framejit

        report["stats"] = {k: v for k, v in framejit.stats().items() if isinstance(v, (int, float))}
    print(json.dumps(report), flush=True)


# NOTE [First training step]: with --train a child times compile + the first forward and backward (grad on,
# the zoo model's weights require grad), the step a training rank pays at start. framejit's warm process loads
# the frame and the joint (NOTE [Persisted joints] in framejit/backends/joint_cache.py): the joint columns
# ("jt/pb": joints AOT-traced / training programs built) are 0/0 there. "ok" compares the outputs and every
# weight's gradient with an eager copy of the model.
def _child_train(args: argparse.Namespace, case, inputs, launched: float) -> None:
    import copy

    import torch

    ref = copy.deepcopy(case.model)
    start, start_cpu = time.perf_counter(), time.process_time()
    _import_compiler(args.mode)
    imported = time.perf_counter()
    fn = _make_callable(args.mode, case.model, args.backend)
    out = fn(*inputs)
    _loss(out).backward()
    first_s, first_cpu_s = time.perf_counter() - start, time.process_time() - start_cpu
    since_launch_s = time.time() - launched
    want = ref(*inputs)
    _loss(want).backward()
    ok = _matches(out, case, inputs, want)
    for a, b in zip(case.model.parameters(), ref.parameters()):
        try:
            torch.testing.assert_close(a.grad, b.grad, **case.tolerance)
        except AssertionError:
            ok = False
    report = {"first_s": first_s, "first_cpu_s": first_cpu_s, "import_s": imported - start,
              "since_launch_s": since_launch_s, "ok": ok}
    if args.mode.startswith("fj"):
        import framejit
        from framejit.backends import joint

        report["stats"] = {k: v for k, v in framejit.stats().items() if isinstance(v, (int, float))}
        report["stats"].update(joints_traced=joint.STATS["traced"], programs_built=joint.STATS["half_programs_built"])
    print(json.dumps(report), flush=True)


def _loss(out):
    from tests.models import zoo

    return sum(t.float().sum() for t in zoo.output_tensors(out) if t.requires_grad)


def _import_compiler(mode: str) -> None:
    """What the first compile imports lazily (timed apart as well: the "imp" columns)."""
    if mode.startswith("fj"):
        import framejit.api  # noqa: F401  (framejit.compile resolves to it)
    elif mode.startswith("tc"):
        import torch._dynamo  # noqa: F401  (torch.compile imports it on its first call)


def _make_callable(mode: str, model, backend: str):
    if mode == "eager":
        return model
    if mode.startswith("fj"):
        import framejit

        return framejit.compile(model, backend=backend)
    import torch

    return torch.compile(model, backend=TORCH_BACKEND[backend])


def _matches(out, case, inputs, expected=None) -> bool:
    import torch

    from tests.models import zoo

    expected = case.model(*inputs) if expected is None else expected
    got, want = zoo.output_tensors(out), zoo.output_tensors(expected)
    if len(got) != len(want):
        return False
    try:
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **case.tolerance)
    except AssertionError:
        return False
    return True


# -- the parent: one process per measurement --------------------------------------------------------
def run_child(model: str, mode: str, args: argparse.Namespace, cache_root: str) -> dict:
    local = "framejit_remote_machine" if mode == "fj_remote" else "framejit"  # fj_remote: an empty directory
    env = dict(os.environ, PYTHONPATH=REPO, COLDSTART_LAUNCHED=repr(time.time()),
               FRAMEJIT_CACHE_DIR=os.path.join(cache_root, local),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_root, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache_root, "triton"),
               TORCHINDUCTOR_COMPILE_THREADS="1")
    for name in ("FRAMEJIT_LOGS", "TORCH_LOGS", "FRAMEJIT_CACHE", "FRAMEJIT_DISABLE", "FRAMEJIT_REMOTE_CACHE",
                 "FRAMEJIT_CACHE_KEY", "FRAMEJIT_CACHE_KEY_FILE", "PYTHONDONTWRITEBYTECODE"):  # NOTE [Bytecode files]
        env.pop(name, None)
    if args.redis is not None and mode.startswith("fj"):
        env.update(FRAMEJIT_REMOTE_CACHE=args.redis.url, FRAMEJIT_CACHE_KEY=REMOTE_KEY)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--mode", mode, "--model", model,
           "--size", args.size, "--backend", args.backend] + (["--train"] if args.train else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"{mode} exited {done.returncode}: {tail[0][:160]}"}
    return json.loads(lines[-1])


def measure_model(model: str, args: argparse.Namespace) -> dict[str, list[dict]]:
    modes = [m for m in MODES if not (args.no_torch_compile and m.startswith("tc"))
             and (m != "fj_remote" or args.redis is not None)]
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.repeats):
        if args.redis is not None:
            args.redis.flush()
        with tempfile.TemporaryDirectory(prefix="framejit-coldstart-") as root:
            for mode in modes:  # cold before warm, on the same directories
                results[mode].append(run_child(model, mode, args, root))
    return results


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values and len(values) == len(runs) else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


class RedisServer:
    """A private redis-server for `--remote` (free loopback port, no persistence)."""

    def __init__(self, workdir: str):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                      workdir, "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.flush()
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.05)

    def flush(self) -> None:
        import redis

        redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5).flushall()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _warm_counts(runs: list[dict]) -> str:
    stats = [r.get("stats", {}) for r in runs if "stats" in r]
    if not stats:
        return "-"
    traced = max(s.get("frames_traced", 0) for s in stats)
    compiles = max(s.get("backend_compiles", 0) for s in stats)
    if any("joints_traced" in s for s in stats):  # NOTE [First training step]
        joints = max(s.get("joints_traced", 0) for s in stats)
        built = max(s.get("programs_built", 0) for s in stats)
        return f"{traced}/{compiles} jt/pb {joints}/{built}"
    return f"{traced}/{compiles}"


def table_rows(model: str, results: dict[str, list[dict]], key: str) -> list[str]:
    med = {mode: _median(runs, key) for mode, runs in results.items()}
    oks = [r.get("ok") for mode, runs in results.items() if mode != "eager" for r in runs]
    remote = "fj_remote" in results
    cells = [model] + [_ms(med.get(m)) for m in MODES if remote or m != "fj_remote"]
    cells += [_ratio(med.get("fj_warm"), med.get("fj_cold")), _ratio(med.get("fj_warm"), med.get("tc_warm"))]
    if remote:
        cells += [_ratio(med.get("fj_remote"), med.get("fj_cold"))]
    cells += [_warm_counts(results.get("fj_warm", []))]
    if remote:
        cells += [_warm_counts(results["fj_remote"])]
    cells += ["yes" if all(oks) else "NO"]
    if key != "since_launch_s":
        cells += [_ms(_median(results.get(mode, []), "import_s")) for mode in ("fj_warm", "tc_warm")]
    return [cells]


def print_table(title: str, rows: list[list[str]], remote: bool = False) -> None:
    if remote:
        head = ["model", "eager", "fj cold", "fj warm", "fj remote", "tc cold", "tc warm", "warm/cold", "fj/tc warm",
                "remote/cold", "warm tr/bc", "remote tr/bc", "ok", "fj imp", "tc imp"][:len(rows[0])]
    else:
        head = ["model", "eager", "fj cold", "fj warm", "tc cold", "tc warm", "warm/cold", "fj/tc warm",
                "warm tr/bc", "ok", "fj imp", "tc imp"][:len(rows[0])]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for row in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths))))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=sorted(TORCH_BACKEND), default="eager")
    parser.add_argument("--size", choices=["small", "bench"], default="small")
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per child process")
    parser.add_argument("--no-torch-compile", action="store_true", help="skip the torch.compile columns")
    parser.add_argument("--remote", action="store_true",
                        help="add the remote-warm column (a private redis-server shared through FRAMEJIT_REMOTE_CACHE)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time the first result in wall or CPU time (NOTE [Cold-start clock])")
    parser.add_argument("--train", action="store_true",
                        help="time the first training step (forward + backward) instead of the first inference "
                             "call (NOTE [First training step])")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.redis = None  # the RedisServer of --remote, started by main
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args)
        return 0
    sys.path.insert(0, REPO)
    from tests.models import zoo

    names = [n for n in args.models.split(",") if n] or zoo.names()
    unknown = sorted(set(names) - set(zoo.names()) - set(BREAK_MODELS))
    if unknown:
        raise SystemExit(f"--models: unknown {unknown}; accepted: {', '.join(zoo.names() + list(BREAK_MODELS))}")
    redis_dir = tempfile.TemporaryDirectory(prefix="framejit-coldstart-redis-") if args.remote else None
    args.redis = RedisServer(redis_dir.name) if redis_dir is not None else None
    try:
        return _measure_all(names, args)
    finally:
        if args.redis is not None:
            args.redis.stop()
            redis_dir.cleanup()


def _measure_all(names: list[str], args: argparse.Namespace) -> int:
    print(f"cold start{' of the first training step' if args.train else ''}, size={args.size}, "
          f"framejit backend={args.backend} vs torch.compile "
          f"backend={TORCH_BACKEND[args.backend]}, medians of {args.repeats} fresh processes per cell (ms); "
          f"load average {os.getloadavg()[0]:.1f}")
    first_rows, launch_rows, errors = [], [], []
    first_key = "first_cpu_s" if args.clock == "cpu" else "first_s"
    for name in names:
        results = measure_model(name, args)
        errors += [f"{name}: {r['error']}" for runs in results.values() for r in runs if "error" in r]
        first_rows += table_rows(name, results, first_key)
        launch_rows += table_rows(name, results, "since_launch_s")
        print(f"  {name}: done", file=sys.stderr, flush=True)
    print_table(f"time to first result ({args.clock} clock): compile + first call, after import torch and model "
                "build (ms)", first_rows, args.remote)
    print_table("time from process launch to first result (ms)", launch_rows, args.remote)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    for line in errors:
        print(f"error: {line}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
