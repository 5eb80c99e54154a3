"""Nested breaks through module calls with the persistent cache on (NOTE [Nested breaks through module calls]
in nested_breaks.py, NOTE [Function constants hashed by their code] in locators.py).

One call site calls a submodule (`self.inner(x)`: torch's `_wrapped_call_impl` and `_call_impl` between the
frames) in one process and its bound `forward` (no such levels) in another, sharing a cache folder: each
process's warnings and tracebacks after the submodule's break are eager's (review revL HIGH-2: the resume
function calling the submodule's had one cache key for both, so the second process ran the first one's
entries: warnings at module.py:1789 and tracebacks without torch's entries). A resume function whose plain
break calls a nested break's Rk (a logging call after the break breaks again in a frame reader) is persisted:
a warm process traces nothing (review revI LOW-3: it was kept in memory only, "cannot be imported by name").
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

PROGRAM = textwrap.dedent('''
    import contextlib, io, json, logging, os, sys, traceback, warnings
    import torch
    import framejit

    USE_FORWARD = sys.argv[2] == "forward"
    RESULTS = {}
    COUNTS = ("frames_traced", "frames_loaded", "graphs", "eager_frames")
    LOG = logging.getLogger("warm_nested_module_calls")
    RECORDS = []

    class Records(logging.Handler):
        def emit(self, record):
            RECORDS.append((os.path.basename(record.pathname), record.lineno, record.funcName))

    LOG.addHandler(Records())
    LOG.propagate = False

    def caller(f, x):
        return f(x)

    def observe(f, x):
        out = io.StringIO()
        RECORDS.clear()
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            try:
                result = caller(f, x).tolist()
            except KeyError as e:
                result = [(os.path.basename(t.filename), t.lineno, t.name) for t in traceback.extract_tb(e.__traceback__)]
        return result, [(os.path.basename(w.filename), w.lineno) for w in caught], list(RECORDS), out.getvalue()

    def check(name, eager, compiled, sizes):
        before = framejit.stats()
        equal = True
        for n in sizes:
            x = torch.randn(n)
            want, got = observe(eager, x), observe(compiled, x)
            equal = equal and str(want) == str(got)
        after = framejit.stats()
        RESULTS[name] = {"equal": equal, **{k: after[k] - before[k] for k in COUNTS}}

    class Inner(torch.nn.Module):
        def forward(self, x):
            y = x.sin()
            print("inner", y.shape)
            warnings.warn("after the break", stacklevel=3)
            if x.shape[0] == 4:
                raise KeyError("four")
            return y * 2

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            f = self.inner.forward if USE_FORWARD else self.inner
            y = f(x + 1)
            return y - 1

    eager, compiled = Outer(), framejit.compile(Outer(), backend=sys.argv[1])
    check("module_or_forward", eager, compiled, (3, 5, 3))
    check("raises", eager, compiled, (4, 3))  # (the entry raising KeyError is kept in memory only)

    def logs(x):
        y = x.cos()
        print("logs", y.shape)
        LOG.warning("after the break", stacklevel=2)
        return y + 1

    def calls_logs(x):
        return logs(x * 2) - 1

    check("plain_break_calls_nested", calls_logs, framejit.compile(calls_logs, backend=sys.argv[1]), (3, 5, 3))
    print(json.dumps(RESULTS))
''')


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    return copy_framejit(tmp_path_factory.mktemp("install"))


def test_module_and_forward_at_one_call_site_keep_their_own_entries_and_warm_runs_trace_nothing(tmp_path, install):
    runs = [run_warm(tmp_path, install, PROGRAM, mode, backend="eager")
            for mode in ("forward", "module", "module", "forward")]
    for k, run in enumerate(runs):
        assert all(r["equal"] and r["eager_frames"] == 0 for r in run.values()), (k, run)
    assert runs[0]["plain_break_calls_nested"]["frames_traced"] > 0
    # the same program again: every entry is loaded (the second process traced the module call's own)
    for run in runs[2:]:
        assert all(r["frames_traced"] == 0 and r["graphs"] == 0 for k, r in run.items() if k != "raises"), run
