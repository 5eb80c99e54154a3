"""A process that imports torch once and runs each test program in a forked child of itself
(tests.helpers.run_program's server; see NOTE [Programs in forked children] there).

Protocol, one JSON line each way: the test writes {"runs": [{"script", "argv", "stdout", "stderr", "env"},
...]}; the server forks one child per run, all at once (they run concurrently), each child takes `env` as
its whole environment and runs the script as `python script argv...` would (`__main__`, sys.argv,
sys.path[0], normal interpreter exit with atexit handlers), its output going to the two files; the server
answers {"rcs": [exit status, ...]} once every child has ended. Extra modules to import up front come as
arguments; never framejit's own (it reads FRAMEJIT_* when imported: a child imports it after taking `env`).
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import sys
import threading
import traceback

import torch  # noqa: F401  (imported once, before any fork)
import torch._dynamo.config  # noqa: F401  (what a cold trace imports: FakeTensorMode() imports it)

# NOTE [Compile-path imports in the server]: what the onnxrt backend's compile paths import lazily from torch
# and its libraries, imported once here (in a server whose test preloads onnxscript: tests.helpers.
# BACKEND_MODULES["onnxrt"]) instead of in every child: torchlib's ops and the exporter pieces the translation
# uses (~1 s), and for a training compile (a joint graph, also rebuilt when a warm process loads a persisted
# one) AOT autograd and the min-cut partitioner, which pulls in torch._inductor (~2.5 s). The eager backend
# imports none of them (a server without onnxscript skips them: its start stays cheap). None is framejit's,
# none reads FRAMEJIT_*, none starts a thread (main() checks). Measured on 3.11 (loaded): the warm child of
# test_guard_gaps' onnxrt program (one Linear, a joint entry) ~5 -> ~2.5 s CPU; the server start +3.5 s.
ONNX_MODULES = ("onnxscript.function_libs.torch_lib.ops", "onnxscript._framework_apis.torch_2_5",
                "onnxscript.rewriter.onnx_fusions", "onnxscript.evaluator", "torch.onnx._internal.exporter._core",
                "torch.onnx._internal.exporter._registration", "torch._functorch.aot_autograd",
                "torch._functorch.partitioners", "torch._inductor.compile_fx", "torch.fx.passes.infra.partitioner",
                "torch.fx.experimental.validator")


def _child(request: dict) -> None:
    """Runs one program in this (forked) process; never returns (SystemExit ends the process normally)."""
    os.environ.clear()
    os.environ.update(request["env"])
    _shift_addresses()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    script = request["script"]
    sys.argv = [script, *request["argv"]]
    sys.path[0] = os.path.dirname(script)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException:  # as the interpreter does for an uncaught exception
        traceback.print_exc()
        sys.exit(1)
    sys.exit(0)


# NOTE [Addresses in forked children]: children forked from one server state would allocate the script's
# objects at the same addresses (same heap, same allocation sequence), so an id() persisted by one run could
# match by accident in the next, which new interpreters (address-space randomisation) never allow. Each child
# first keeps a random number of objects of every small size class and a random-sized block alive.
_KEPT: list = []


def _shift_addresses() -> None:
    noise = os.urandom(90)
    for size, count in zip(range(0, 640, 8), noise):
        _KEPT.extend(bytes(size) + bytes([i]) for i in range(count % 24))
    kinds = (lambda i: object(), lambda i: i + 0.5, lambda i: [i], lambda i: (i, i), lambda i: {i: i},
             lambda i: {i}, str)  # the smallest sizes, and the types with free lists of their own
    for make, count in zip(kinds, noise[80:]):
        _KEPT.extend(make(i) for i in range(count % 64))
    _KEPT.append(bytearray(4096 * (1 + noise[0] % 64)))


def _fork(request: dict) -> int:
    pid = os.fork()
    if pid == 0:
        _child(request)
    return pid


def main() -> None:
    for name in sys.argv[1:]:
        assert not name.startswith("framejit"), name  # read FRAMEJIT_* only in the child, from its env
        importlib.import_module(name)
    for name in ONNX_MODULES if "onnxscript" in sys.modules else ():
        importlib.import_module(name)
    assert "framejit" not in sys.modules
    # fork copies only the calling thread: a second thread here (a pool started by an import) could hold a
    # lock the child then waits on forever
    assert threading.active_count() == 1, threading.enumerate()
    gc.freeze()  # NOTE [Imports frozen out of the collector] in tests/conftest.py: children never walk them
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        pids = [_fork(run) for run in json.loads(line)["runs"]]
        rcs = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        print(json.dumps({"rcs": rcs}), flush=True)


if __name__ == "__main__":
    main()
