"""A process that imports torch and framejit once and runs each test program in a forked child of itself
(tests.helpers.run_cache_program's server; see NOTE [Programs in forked children] there).

Protocol, one JSON line each way: the test writes {"script", "argv", "stdout", "stderr"}; the server forks,
the child runs the script as `python script argv...` would (`__main__`, sys.argv, sys.path[0], normal
interpreter exit with atexit handlers), its output going to the two files; the server answers {"rc": exit
status} once the child has ended. Extra modules to import up front come as arguments.
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import threading
import traceback

import torch  # noqa: F401  (imported once, before any fork)
import torch._dynamo.config  # noqa: F401  (what a cold trace imports: FakeTensorMode() imports it)

import framejit  # noqa: F401


def _child(request: dict) -> None:
    """Runs one program in this (forked) process; never returns (SystemExit ends the process normally)."""
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


def main() -> None:
    for name in sys.argv[1:]:
        importlib.import_module(name)
    # fork copies only the calling thread: a second thread here (a pool started by an import) could hold a
    # lock the child then waits on forever
    assert threading.active_count() == 1, threading.enumerate()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
