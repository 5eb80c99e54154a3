"""Runs a fuzzer program eagerly and compiled, call by call, with the same mutations between calls, and
reports the first difference; shrinks a failing program; renders a standalone reproducer.

# NOTE [Two namespaces]
The program's source file is imported twice, as an eager module and a compiled module (both registered
in sys.modules, as user code is), so each side has its own objects (config instances, lists, modules with identical parameters: the source seeds torch
before building them) and the side effects of one side never leak into the other. `f` of the compiled
namespace is compiled; mutations of scope "ns" run in both namespaces, global ones once (see
NOTE [Mutation scopes] in program.py). Before each call both sides build fresh arguments with
`make_args(i)`; after it they are compared on: exception type, printed output, return value, arguments
(mutated in place), `state()`, storage shared between the result and the arguments, and torch's global
state. A mutation that raises must raise on both sides.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import os
import sys
import tempfile
import traceback
from typing import Any

import torch

import framejit

from .compare import diff, global_state, storage_links
from .program import Program, render

TOLERANCE = {"eager": (1e-6, 1e-7), "onnxrt": (1e-4, 1e-5), "triton": (1e-4, 1e-5)}
_SOURCE_DIR = tempfile.mkdtemp(prefix="framejit-soundness-")


@dataclasses.dataclass
class Difference:
    program: Program
    backend: str
    call: int
    what: str                      # value / exception / stdout / args / state / aliasing / global_state / mutation
    message: str
    compile_fn: Any = None         # the planted compiler, if any (shrink reruns with it)
    warm: bool = False             # found in a warm run (NOTE [Warm runs])

    def headline(self) -> str:
        return f"seed {self.program.seed} [{self.backend}] {','.join(self.program.families)}: " \
               f"call {self.call}: {self.what}: {self.message}"


def _load(program: Program, src: str) -> tuple[dict, dict]:
    """The program imported twice from one file, as two modules (NOTE [Two namespaces])."""
    key = f"{program.seed}_{hashlib.sha256(src.encode()).hexdigest()[:12]}"
    path = os.path.join(_SOURCE_DIR, f"prog_{key}.py")
    with open(path, "w") as fh:
        fh.write(src)
    return _import(f"soundness_eager_{key}", path), _import(f"soundness_compiled_{key}", path)


def _import(name: str, path: str) -> dict:
    """A fresh module `name` from `path` (registered in sys.modules, as user code is)."""
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.__dict__


def _prime(compiled_ns: dict, backend) -> dict:
    """NOTE [Warm runs]: one compiled call in a first copy of the module fills the persistent cache;
    then the module is imported again, fresh, as a new process would, and only that copy is compared."""
    framejit.reset()
    state = global_state()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            framejit.compile(_target(compiled_ns), backend=backend)(*compiled_ns["make_args"](0))
        except Exception:  # noqa: BLE001 - the compared run reports what matters
            pass
    _restore(state)
    framejit.reset()
    return _import(compiled_ns["__name__"], compiled_ns["__file__"])


def _call(fn, args) -> tuple[Any, type | None, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            return fn(*args), None, out.getvalue()
        except Exception as e:  # noqa: BLE001 - the exception type is what we compare
            return e, type(e), out.getvalue()


def _exec(code: str, ns: dict) -> str | None:
    try:
        exec(code, ns)
        return None
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


def _snapshot(ns: dict) -> Any:
    try:
        return ns["state"]()
    except Exception as e:  # noqa: BLE001
        return f"state() raised {type(e).__name__}"


def run_program(program: Program, backend, *, compile_fn=None, counters: dict | None = None,
                warm: bool = False) -> Difference | None:
    """The first difference between eager and compiled runs of `program` on `backend`, or None.

    `compile_fn(f, backend)` replaces framejit.compile (the fuzzer's own tests plant broken compilers);
    `counters` accumulates framejit.stats() numbers (graphs, frames traced, eager entries); `warm` runs
    against a persistent cache filled by a first copy of the program (NOTE [Warm runs]): the compared
    calls start after the first mutation, so the first one loads an entry made for other state."""
    eager_ns, compiled_ns = _load(program, render(program))
    if warm:
        compiled_ns = _prime(compiled_ns, backend)
    scratch: dict = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    scratch["G"] = scratch
    framejit.reset()
    stats_before = framejit.stats()
    compiled = (compile_fn or _framejit_compile)(_target(compiled_ns), backend)
    rtol, atol = TOLERANCE.get(backend, TOLERANCE["onnxrt"])
    start_state = global_state()
    try:
        for call in range(len(program.steps) + 1):
            if call:
                found = _mutate(program, call, eager_ns, compiled_ns, scratch)
                if found:
                    return Difference(program, backend, call, "mutation", found, compile_fn, warm)
            found = None if warm and call == 0 else _compare_call(eager_ns, compiled_ns, compiled, call, rtol, atol)
            if found:
                return Difference(program, backend, call, *found, compile_fn, warm)
        return None
    finally:
        for block in program.blocks:
            if block.teardown:
                exec(block.teardown, scratch)
        _restore(start_state)
        if counters is not None:
            _count(counters, stats_before)
        framejit.reset()
        sys.modules.pop(eager_ns["__name__"], None)
        sys.modules.pop(compiled_ns["__name__"], None)


def _count(counters: dict, before: dict) -> None:
    stats = framejit.stats()
    for key in ("frames_traced", "frames_loaded", "graphs", "eager_entries", "eager_frames"):
        counters[key] = counters.get(key, 0) + stats.get(key, 0) - before.get(key, 0)
    counters["programs without a graph"] = counters.get("programs without a graph", 0) + (
        stats.get("graphs", 0) == before.get("graphs", 0))


def _target(ns: dict):
    """What the program compiles: `model` if it defines one (the compiled_module family), else `f`."""
    return ns.get("model", ns["f"])


def _framejit_compile(fn, backend):
    return framejit.compile(fn, backend=backend)


def _mutate(program, call, eager_ns, compiled_ns, scratch) -> str | None:
    mutation = program.mutation(program.steps[call - 1])
    if mutation is None:
        return None
    if mutation.scope == "global":
        _exec(mutation.code, scratch)
        return None
    torch.manual_seed(1000 + call)  # a mutation that builds a module draws the same parameters on both sides
    expected = _exec(mutation.code, eager_ns)
    torch.manual_seed(1000 + call)
    actual = _exec(mutation.code, compiled_ns)
    if expected != actual:
        return f"mutation {mutation.code!r}: eager raised {expected}, compiled namespace raised {actual}"
    return None


def _compare_call(eager_ns, compiled_ns, compiled, call, rtol, atol) -> tuple[str, str] | None:
    torch.manual_seed(call)
    eager_args = eager_ns["make_args"](call)
    compiled_args = compiled_ns["make_args"](call)
    before = global_state()
    expected, expected_exc, expected_out = _call(_target(eager_ns), eager_args)
    expected_state = global_state()
    _restore(before)
    torch.manual_seed(call)
    actual, actual_exc, actual_out = _call(compiled, compiled_args)
    actual_state = global_state()
    _restore(expected_state)
    if actual_exc is not expected_exc:
        detail = "".join(traceback.format_exception_only(actual)).strip() if actual_exc else repr(actual)[:300]
        return "exception", f"eager raised {expected_exc and expected_exc.__name__}, compiled: {detail}"
    if expected_exc is not None and str(actual) != str(expected):
        return "exception", f"{expected_exc.__name__} message {str(actual)!r} != {str(expected)!r}"
    if actual_out != expected_out:
        return "stdout", f"printed {actual_out!r} != {expected_out!r}"
    if actual_state != expected_state:
        return "global_state", f"{actual_state} != {expected_state}"
    checks = [("value", lambda: None if expected_exc else diff(actual, expected, rtol=rtol, atol=atol, path="result")),
              ("args", lambda: diff(compiled_args, eager_args, rtol=rtol, atol=atol, path="args")),
              ("state", lambda: diff(_snapshot(compiled_ns), _snapshot(eager_ns), rtol=rtol, atol=atol,
                                     path="state()")),
              ("aliasing", lambda: None if expected_exc else diff(
                  storage_links(actual, compiled_args), storage_links(expected, eager_args), rtol=0, atol=0,
                  path="storage shared with args"))]
    for what, check in checks:
        found = check()
        if found:
            return what, found
    return None


def _restore(state: tuple) -> None:
    grad, _inference, autocast, autocast_dtype, dtype = state
    torch.set_grad_enabled(grad)
    torch.set_autocast_enabled("cpu", autocast)
    torch.set_autocast_dtype("cpu", autocast_dtype)
    torch.set_default_dtype(dtype)


def shrink(found: Difference, *, budget: int = 40) -> Difference:
    """A smaller program with a difference of the same kind: drop later calls, then blocks, then steps."""
    best = found
    candidate = dataclasses.replace(best.program, steps=best.program.steps[:best.call])
    tries = 0

    def attempt(program):
        nonlocal best, tries
        tries += 1
        again = run_program(program, best.backend, compile_fn=best.compile_fn, warm=best.warm)
        if again is not None and again.what == best.what:
            best = again
            return True
        return False

    attempt(candidate)
    while tries < budget and _shrink_once(best.program, attempt):
        pass
    return best


def _shrink_once(program: Program, attempt) -> bool:
    """One successful simplification (a block dropped, placed plainly, a step dropped), or False."""
    for index in range(len(program.blocks)):
        if len(program.blocks) > 1 and attempt(program.without_block(index)):
            return True
    for index in range(len(program.blocks)):
        plainer = program.plainer(index)
        if plainer is not None and attempt(plainer):
            return True
    return any(attempt(program.without_step(index)) for index in range(len(program.steps)))


_DRIVER = '''
import contextlib, importlib.util, io, os, sys, tempfile, torch, framejit

G = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
G["G"] = G
folder = tempfile.mkdtemp()
with open(os.path.join(folder, "prog.py"), "w") as fh:
    fh.write(SRC)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "prog.py"))
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.__dict__


eager_ns, compiled_ns = load("prog_eager"), load("prog_compiled")
if WARM:  # a first copy fills the persistent cache; the compared copy is imported fresh, as in a new process
    framejit.config.cache_enabled, framejit.config.cache_dir = True, tempfile.mkdtemp()
    framejit.compile(compiled_ns.get("model", compiled_ns["f"]), backend=BACKEND)(*compiled_ns["make_args"](0))
    framejit.reset()
    compiled_ns = load("prog_compiled")
compiled = framejit.compile(compiled_ns.get("model", compiled_ns["f"]), backend=BACKEND)


def call(fn, ns, i):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            result = fn(*ns["make_args"](i))
        except Exception as e:
            result = f"raised {type(e).__name__}"
    return result, out.getvalue(), ns["state"]()


for i in range(len(STEPS) + 1):
    if i:
        scope, code = STEPS[i - 1]
        for ns in ([G] if scope == "global" else [eager_ns, compiled_ns]):
            torch.manual_seed(1000 + i)
            try:
                exec(code, ns)
            except Exception as e:
                print("mutation raised", type(e).__name__)
    if WARM and i == 0:
        continue
    grad = torch.is_grad_enabled()
    torch.manual_seed(i)
    print(f"call {i} eager:   ", call(eager_ns.get("model", eager_ns["f"]), eager_ns, i))
    torch.set_grad_enabled(grad)
    torch.manual_seed(i)
    print(f"call {i} compiled:", call(compiled, compiled_ns, i))
'''


def reproducer(found: Difference) -> str:
    """A standalone script: the program's source, its mutations, and a driver printing both sides."""
    program = found.program
    steps = []
    for step in program.steps:
        mutation = program.mutation(step)
        steps.append(("ns", "pass") if mutation is None else (mutation.scope, mutation.code))
    head = f"# soundness fuzzer: {found.headline()}\n"
    return (head + f"SRC = '''\n{render(program)}'''\nSTEPS = {steps!r}\nBACKEND = {found.backend!r}\n"
            f"WARM = {found.warm!r}\n" + _DRIVER)
