"""Context-manager and graph-break cases found missing by PyTorch's test_ctx_manager.py (issue 11).

Each case runs eagerly and compiled (tests/helpers.run_differential: values, printed output, exceptions,
inputs and torch's global state after the call, on fresh inputs for each seed) and asserts the graph
counts that say how much was captured.

- a break inside a nested function guarded by its code (defined inside the caller) whose code has no
  free variables: the call at the break goes through its frame hook, so the callee's rest is captured;
- breaks in a frame that pytest's assertion rewriting gave `@py_assert` locals (this module is
  rewritten by pytest): resume functions rename them (NOTE [Locals that are not identifiers]).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def pause(x):
    print("pause", torch.is_grad_enabled())
    return x


def test_break_inside_nested_function_without_cells_is_captured():
    def inner(z):
        with torch.no_grad():
            z = pause(z * 2)
            return torch.sin(z)

    def outer(x, y, z):
        a = torch.mm(x, y)
        z = inner(z)
        return a, z

    framejit.disable(pause)
    backend = run_differential(outer, lambda seed: (torch.randn(3, 3, requires_grad=True),
                                                   torch.randn(3, 3 + seed, requires_grad=True), torch.randn(4 + seed)),
                               fullgraph=False)
    # per call shape: outer's graph (mm), inner's graph before the pause (mul), inner's resume (sin)
    ops = sorted(op for gm in backend.graphs for op in
                 [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function" and not
                  n.target.__name__.startswith("_set_grad")])
    assert ops.count("mm") == 2 and ops.count("sin") == 2 and ops.count("mul") == 2


def test_breaks_after_rewritten_asserts_are_taken():
    def fn(x):
        before = torch.is_grad_enabled()
        assert x.dim() == 2, "two dimensions"
        with torch.set_grad_enabled(False):
            x = pause(x + 1)
            with torch.set_grad_enabled(True):
                x = torch.mul(x, 5)
                x = pause(x)
                x = torch.sqrt(x.abs())
                assert torch.is_grad_enabled()
            assert not torch.is_grad_enabled()
        assert torch.is_grad_enabled() == before
        return x

    # the module is rewritten by pytest: fn has `@py_assert` locals, live at the second break
    assert any(not name.isidentifier() for name in fn.__code__.co_varnames)
    framejit.disable(pause)
    backend = run_differential(fn, lambda seed: (torch.randn(3, 4 + seed),), fullgraph=False)
    assert backend.graph_count == 6  # per call: add, mul, sqrt


# ---- profiler ranges are null blocks (NOTE [Profiler blocks]) ----

def test_profiler_blocks_are_captured_with_a_break_inside():
    def fn(x):
        y = x ** 2
        with torch.profiler.profile():
            y = y + 2
            with torch.autograd.profiler.record_function("range"):
                z = y ** 3
                z = pause(z)
                z = z + 1
        with torch.autograd.profiler.profile():
            z = z * 2
        return z

    framejit.disable(pause)
    backend = run_differential(fn, lambda seed: (torch.randn(2, 2 + seed, requires_grad=True),), fullgraph=False)
    assert backend.graph_count == 4  # per call: before and after the pause


def test_profiler_object_used_breaks_where_it_is_made():
    def fn(x):
        x = x.sin() * 2
        with torch.profiler.profile() as p:
            y = x + 1
        print(type(p).__name__)
        return y

    backend = run_differential(fn, lambda seed: (torch.randn(3 + seed),), fullgraph=False)
    # NOTE [Profiler objects used]: the profiler object cannot be modelled; the break moves to the call that
    # makes it, so the code before it is one graph per shape (sin, mul), and a real profiler is entered as
    # Python, inside which the block resumes captured (add; NOTE [Breaks at BEFORE_WITH])
    assert [backend.op_count(i) for i in range(backend.graph_count)] == [2, 1, 2, 1]
    explained = framejit.explain(fn)(torch.randn(3))
    assert explained.graph_count == 2 and not explained.eager_frames  # the whole frame ran eagerly before


def test_profiler_attribute_read_after_the_block_breaks_where_it_is_made():
    def fn(x):
        y = x.cos() - 1
        with torch.profiler.profile() as p:
            y = y * 3
        events = p.profiler.kineto_results.experimental_event_tree()  # the real profiler's results
        return y + len(events) * 0

    before = framejit.stats()["eager_frames"]
    backend = run_differential(fn, lambda seed: (torch.randn(4),), seeds=(0, 1, 2), fullgraph=False)
    # cos, sub; the block inside the real profiler (mul); after the read of its results, `y + len(events) * 0`
    # (add) once per number of events recorded
    assert [backend.op_count(i) for i in range(backend.graph_count)][:3] == [2, 1, 1]
    assert framejit.stats()["eager_frames"] == before


def test_profiler_with_a_callback_is_not_a_null_block():
    seen = []

    def fn(x):
        with torch.profiler.profile(on_trace_ready=seen.append):
            y = x + 1
        return y

    run_differential(fn, lambda seed: (torch.randn(3 + seed),), fullgraph=False)
    assert len(seen) == 4  # eager and compiled both ran the profiler, twice each


# ---- disable_saved_tensors_hooks (NOTE [Saved-tensors-hooks blocks]) ----

_message = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message


def test_saved_hooks_block_whole_graph_and_restored_state():
    def fn(x):
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks"):
            y = x.sin()
            inside = _message()
        return y * 2, inside, _message()

    backend = run_differential(fn, lambda seed: (torch.randn(3, requires_grad=True),))
    assert backend.graph_count == 1
    with torch.autograd.graph.disable_saved_tensors_hooks("outer message"):
        compiled = framejit.compile(fn, backend=backend, fullgraph=True)
        x = torch.randn(3)
        result = compiled(x)
        assert result[1:] == ("no hooks", "outer message") == fn(x)[1:]
        assert _message() == "outer message"
    assert backend.graph_count == 2  # the message in force at entry is guarded
    assert _message() is None


def test_saved_hooks_decorator_nested():
    def fn(x):
        @torch.autograd.graph.disable_saved_tensors_hooks("outer")
        def f(a):
            @torch.autograd.graph.disable_saved_tensors_hooks("inner")
            def g(b):
                return b + 1, _message()
            return g(a)[0] * 2, g(a)[1], _message()
        out = f(x)
        return out, _message()

    backend = run_differential(fn, lambda seed: (torch.randn(2 + seed),))
    assert backend.graph_count == 2


def test_saved_hooks_block_with_a_break_inside():
    def fn(x):
        with torch.autograd.graph.disable_saved_tensors_hooks("msg"):
            y = x + 1
            print("inside", _message())
            z = y * 2
        print("after", _message())
        return z

    backend = run_differential(fn, lambda seed: (torch.randn(2 + seed),), fullgraph=False)
    assert backend.graph_count == 4
    for gm in backend.graphs:  # each graph ends in the state it started with
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert targets[0] is torch._C._autograd._saved_tensors_hooks_disable
        assert targets[-1] is torch._C._autograd._saved_tensors_hooks_enable


def test_saved_hooks_really_disabled_in_graph():
    def fn(x):
        with torch.autograd.graph.disable_saved_tensors_hooks("hooks are off here"):
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                return x * 2

    run_differential(fn, lambda seed: (torch.randn(2 + seed, requires_grad=True),), fullgraph=False)


# ---- nonlocal stores into cells of closures guarded by their code ----

def make_counter_pair(start):
    total = start

    def bump(x):
        nonlocal total
        total = total + 1
        return x + total

    def read():
        return total

    return bump, read


def test_nonlocal_store_into_a_closure_passed_in_writes_that_closure():
    def fn(bump, x):
        return bump(x) * 2

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for start in (5, 5, 5):  # a new closure (new cells) each time, guarded by code: one trace
        bump_e, read_e = make_counter_pair(start)
        bump_c, read_c = make_counter_pair(start)
        x = torch.randn(3)
        expected = fn(bump_e, x)
        actual = compiled(bump_c, x)
        torch.testing.assert_close(actual, expected)
        assert read_c() == read_e() == start + 1
    assert backend.graph_count == 1


def test_nonlocal_store_in_a_generator_context_manager_made_by_a_factory():
    def test_like():
        z, k = 0, 0

        def create_ctx():
            import contextlib

            @contextlib.contextmanager
            def ctx(x):
                nonlocal k
                try:
                    k = 100 + x.shape[0]
                    yield x.sin()
                finally:
                    pass
            return ctx

        def run_ctx(ctx, x):
            nonlocal z
            with ctx(x) as y:
                z = k
                return y.cos()

        def fn(x):
            return run_ctx(create_ctx(), x)
        return fn, lambda: (z, k)

    fn_e, state_e = test_like()
    fn_c, state_c = test_like()
    compiled = framejit.compile(fn_c, fullgraph=True)
    for n in (2, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), fn_e(x))
        assert state_c() == state_e() == (100 + n, 100 + n)


# ---- torch.set_default_dtype inside the region (NOTE [Default dtype changes]) ----

from tests.capture.test_contextlib import default_dtype  # noqa: E402  (a user context manager, traced)


def _run_both(fn, make_args, backend, fullgraph=True, calls=2):
    """Eager and compiled calls, each from float32; returns the results with the dtype each left."""
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    try:
        for seed in range(calls):
            torch.set_default_dtype(torch.float32)
            args = make_args(seed)
            expected = fn(*args), torch.get_default_dtype()
            torch.set_default_dtype(torch.float32)
            actual = compiled(*args), torch.get_default_dtype()
            assert actual[1] is expected[1]
            torch.testing.assert_close(actual[0], expected[0])
    finally:
        torch.set_default_dtype(torch.float32)


def test_default_dtype_block_in_a_generator_context_manager():
    def fn(x):
        with default_dtype(torch.float64):
            y = torch.tensor([3.0, 3.0 + 5.0j])
            z = x + torch.ones(x.shape) + 0.5
            inside = torch.get_default_dtype()
        return y, z, torch.full((2,), 1.5), inside is torch.float64

    backend = CountingBackend()
    _run_both(fn, lambda seed: (torch.arange(3 + seed),), backend)
    assert backend.graph_count == 2  # two shapes, no break (assert_close compared the dtypes too)


def test_default_dtype_left_changed_and_across_a_break():
    def fn(x):
        torch.set_default_dtype(torch.float64)
        y = x + torch.ones(2)
        y = pause(y)
        return y + torch.tensor([1.5]), torch.get_default_dtype() is torch.float64

    framejit.disable(pause)
    backend = CountingBackend()
    _run_both(fn, lambda seed: (torch.randn(2),), backend, fullgraph=False)
    assert backend.graph_count == 2


def test_default_dtype_change_is_guarded_at_entry():
    def fn(x):
        return x + torch.tensor([0.25]) * 3

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    try:
        x = torch.randn(1, dtype=torch.float64)
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            assert compiled(x).dtype == fn(x).dtype == torch.float64
            assert compiled(torch.arange(2)).dtype == fn(torch.arange(2)).dtype == dtype
    finally:
        torch.set_default_dtype(torch.float32)
    assert backend.graph_count == 4


def test_inputs_found_mid_trace_are_placeholders_before_every_op():
    scale = torch.tensor([2.0])

    def fn(x, y):
        a = x.sin()
        b = a + y  # y becomes an input after the sin
        return b * scale  # a tensor from the closure, later still

    backend = run_differential(fn, lambda seed: (torch.randn(3), torch.randn(3)))
    ops = [n.op for n in backend.graphs[0].graph.nodes]
    assert ops.count("placeholder") == 3
    assert ops[:3] == ["placeholder"] * 3
    assert [n.target for n in backend.graphs[0].graph.nodes][:3] == ["L_x_", "L_y_", "closure_scale_"]


def test_nodes_named_after_the_first_local_they_are_stored_to():
    def fn(x):
        y = x + 1
        z = y
        w = torch.sin(z) * 2
        return w + y, x * 3

    backend = run_differential(fn, lambda seed: (torch.randn(3),))
    names = [n.name for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    # y names the add (z is its second name), w the mul; unnamed results keep their op names
    assert names == ["y", "sin", "w", "add_1", "mul_1"]
