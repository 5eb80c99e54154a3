"""Nested graph breaks with the persistent cache on (NOTE [Nested breaks persisted] in nested_persist.py).

A break inside an inlined callee makes one graph for every frame up to it (NOTE [Nested graph breaks]); its
entries, and those of the resume function R0 whose trace inlines R1..Rn, are persisted like any other, so
with the cache on (the user default) a cold process makes the nested break's graphs (2 for `outer(x) =
inner(x + 1) * 2` with a print in `inner`, where the plain break made 4) and a warm process sharing its cache
folder traces nothing and compiles nothing. Before, nested breaks were taken only with the cache off: a cold
process with the cache on made the plain break's graphs.

Each program runs compiled and eagerly side by side (values and printed text compared) in a cold process,
then in a warm one. An edited callee (its code hash) or a Python value the guards never saw makes the warm
process trace again, with eager's results.
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

PROGRAM = textwrap.dedent('''
    import contextlib, functools, io, json, sys
    import torch
    import framejit

    VARIANT = len(sys.argv) > 2 and sys.argv[2] == "variant"
    RESULTS = {}
    COUNTS = ("frames_traced", "frames_loaded", "graphs", "backend_compiles", "eager_frames")

    def run(fn, args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            value = fn(*args)
        return value, out.getvalue()

    def check(name, fn, calls):
        before = framejit.stats()
        c = framejit.compile(fn, backend=sys.argv[1])
        ok, printed = True, 0
        for args in calls:
            got, got_text = run(c, args)
            want, want_text = run(fn, args)
            ok = ok and torch.allclose(got, want, atol=1e-5) and got_text == want_text
            printed += got_text.count("\\n")
        after = framejit.stats()
        RESULTS[name] = {"equal": ok, "printed": printed, **{k: after[k] - before[k] for k in COUNTS}}

    def rand(s, *shape):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(s))

    def seeded(*shape):
        return [(rand(s, *shape),) for s in (0, 1)]

    # depth 2 (the variant: the innermost callee is edited)
    if VARIANT:
        def inner(x):
            y = x.sin()
            print("inner", y.shape)
            return y.cos() + 2
    else:
        def inner(x):
            y = x.sin()
            print("inner", y.shape)
            return y.cos() + 1
    def outer(x):
        return inner(x + 1) * 2
    check("depth_two", outer, seeded(3))

    # depth 3 (the variant: the middle frame is edited)
    def inner3(x, k):
        y = x.sin() * k
        print("inner3", k)
        return y.cos() + 1
    if VARIANT:
        def mid(x):
            return inner3(x * 3, 2.0) - 2
    else:
        def mid(x):
            return inner3(x * 3, 2.0) - 1
    def top(x):
        z = x + 2
        return mid(z) / 2 + z
    check("depth_three", top, seeded(4))

    # a method called with *args and a keyword; the break is print(*args, sep=...)
    class Scaler:
        def __init__(self, k):
            self.k = k
        def apply(self, x, *rest, shift=1.0):
            y = x * self.k + shift
            print("apply", len(rest), *rest, sep=",")
            return y.relu() - sum(rest)
    S = Scaler(3.0)
    def calls_method(x):
        h = x.exp()
        return S.apply(h, 1, 2, shift=0.5) + h
    check("method_and_star_args", calls_method, seeded(2, 3))

    # two breaks in the callee: the second is nested again inside R0's trace
    def breaks_twice(x):
        y = x.sin()
        print("first")
        y = y * 2
        print("second")
        return y + 1
    def calls_twice(x):
        return breaks_twice(x - 1).sum(0)
    check("callee_breaks_twice", calls_twice, seeded(2, 3))

    # a root under a functools.wraps decorator (a closure: R0 takes the root's cells)
    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper
    def inner_tanh(x):
        print("inner_tanh")
        return x.tanh()
    @logged
    def decorated(x):
        return inner_tanh(x * 2) + 1
    check("decorated_root", decorated, seeded(5))

    # guards hold in the warm process: the variant also calls with float64 inputs, which no guard accepted
    def inner_n(x, n):
        print("n", n)
        return x * n
    def calls_n(x, n):
        return inner_n(x.sin(), n) + n
    check("guarded", calls_n, [(rand(s, 3), n) for n in (2, 3) for s in (0, 1)] +
          ([(rand(0, 3).double(), 2)] if VARIANT else []))

    print(json.dumps(RESULTS))
''')

# the nested break's graphs per program (the plain break made 4 for depth_two, depth_three, decorated_root,
# method_and_star_args)
GRAPHS = {"depth_two": 2, "depth_three": 2, "method_and_star_args": 2, "callee_breaks_twice": 3, "decorated_root": 2,
          "guarded": 4}


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A copy of framejit shared by the module's tests (one program server for all of them)."""
    return copy_framejit(tmp_path_factory.mktemp("install"))


def _cold_then_warm(tmp_path, install, backend: str) -> tuple[dict, dict]:
    cold = run_warm(tmp_path, install, PROGRAM, backend=backend)
    warm = run_warm(tmp_path, install, PROGRAM, backend=backend)
    for name, graphs in GRAPHS.items():
        got = cold[name]
        assert got["equal"] and got["eager_frames"] == 0 and got["graphs"] == graphs, (name, got)
        assert got["printed"] > 0 and got["frames_traced"] > 0, (name, got)
        w = warm[name]
        assert w["equal"] and w["printed"] == got["printed"], (name, w)
        assert (w["frames_traced"], w["graphs"], w["backend_compiles"], w["eager_frames"]) == (0, 0, 0, 0), (name, w)
        assert w["frames_loaded"] >= got["frames_traced"], (name, got, w)
    return cold, warm


def test_onnxrt_warm_process_runs_nested_breaks_without_tracing(tmp_path, install):
    _cold_then_warm(tmp_path, install, "onnxrt")


def test_eager_warm_process_runs_nested_breaks_without_tracing_and_an_edited_callee_retraces(tmp_path, install):
    _cold_then_warm(tmp_path, install, "eager")
    variant = run_warm(tmp_path, install, PROGRAM, "variant", backend="eager")
    assert all(v["equal"] and v["eager_frames"] == 0 for v in variant.values()), variant
    # an edited callee (depth_two) or middle frame (depth_three): a new code hash of an inlined frame, so the
    # edited program's nested break is traced again, as in a cold process
    for name in ("depth_two", "depth_three"):
        assert variant[name]["frames_traced"] > 0 and variant[name]["graphs"] == GRAPHS[name], variant[name]
    # float64 inputs: the persisted entries' guards reject them (traced again), the rest is loaded
    assert variant["guarded"]["frames_traced"] > 0 and variant["guarded"]["frames_loaded"] > 0, variant["guarded"]
    for name in ("method_and_star_args", "callee_breaks_twice", "decorated_root"):
        assert variant[name]["frames_traced"] == 0, variant[name]
