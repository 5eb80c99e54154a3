"""More cases found missing by PyTorch's test_ctx_manager.py (issue 11).

- functions marked with torch's allow_in_graph are one graph node (NOTE [Allowed in graph]): they run when
  the graph runs, under the state the nodes before them set (SDPA backend flags of an `sdpa_kernel` block),
  and marking one after a compile recompiles;
- attribute stores on plain modules (`setattr(sys, "stdout", s)` in contextlib.redirect_stdout) are replayed
  stores that later reads in the trace see (NOTE [Module attribute stores]); a module class with its own
  `__setattr__` runs it.
"""
from __future__ import annotations

import types

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import framejit
from tests.helpers import CountingBackend, run_differential


@pytest.fixture
def allow_in_graph():
    """torch.compiler.allow_in_graph, its marks removed after the test (they would leak into later tests)."""
    marked = []

    def mark(fn):
        marked.append(fn)
        return torch.compiler.allow_in_graph(fn)
    yield mark
    import torch._dynamo.trace_rules as rules
    for fn in marked:
        rules._allowed_callable_ids.remove(id(fn))


def _targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_allow_in_graph_function_runs_under_the_flags_of_its_block(allow_in_graph):
    def scale_by_backend(t):
        # eager: called inside the block, where only MATH is enabled
        return t * (2.0 if torch.nn.attention._cur_sdpa_kernel_backends() == [SDPBackend.MATH] else 3.0)

    allow_in_graph(scale_by_backend)

    def fn(x):
        with sdpa_kernel([SDPBackend.MATH]):
            out = torch.nn.functional.scaled_dot_product_attention(x, x, x)
            out = scale_by_backend(out)
        return scale_by_backend(out) + 1  # outside the block: every backend enabled again

    backend = run_differential(fn, lambda seed: (torch.randn(2, 2, 3 + seed, 4),), fullgraph=True)
    assert backend.graph_count == 2  # the second size recompiles (dynamic)
    assert all(_targets(gm).count(scale_by_backend) == 2 for gm in backend.graphs)


def test_allow_in_graph_call_without_result_is_kept(allow_in_graph):
    seen = []

    def record_flags():
        seen.append(torch.nn.attention._cur_sdpa_kernel_backends())

    allow_in_graph(record_flags)

    def fn(x):
        with sdpa_kernel([SDPBackend.MATH]):
            record_flags()
        return x * 2

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    seen.clear()
    compiled(x)  # the first call traces (one run on fake tensors) and runs the graph
    assert seen == [[SDPBackend.MATH]] * 2
    seen.clear()
    torch.testing.assert_close(compiled(x), x * 2)
    assert seen == [[SDPBackend.MATH]]  # the node ran with the flags the block set
    assert backend.graph_count == 1


def test_marking_allow_in_graph_after_compiling_recompiles(allow_in_graph):
    def helper(t):
        return t.sin() * 2

    def fn(x):
        return helper(x + 1) - 1

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 1 and helper not in _targets(backend.graphs[0])
    assert any(n.target == "sin" for n in backend.graphs[0].graph.nodes)  # inlined
    allow_in_graph(helper)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 2  # the marks changed: a new trace, helper is one node
    assert helper in _targets(backend.graphs[-1])
    assert not any(n.target == "sin" for n in backend.graphs[-1].graph.nodes)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 2


def test_marks_guarded_per_function_once_some_are_marked(allow_in_graph):
    """NOTE [Guarding the marks]: with other functions marked (as importing transformers does), each
    function the trace considers is guarded on its own mark: marking it recompiles, unmarking it reuses
    the first entry, marking an unrelated function changes nothing."""
    def unrelated(t):
        return t

    def helper(t):
        return t.cos() + 2

    def fn(x):
        return helper(x * 3) - 1

    allow_in_graph(unrelated)
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for _ in range(2):
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 1 and helper not in _targets(backend.graphs[0])
    allow_in_graph(helper)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 2 and helper in _targets(backend.graphs[-1])
    import torch._dynamo.trace_rules as rules
    rules._allowed_callable_ids.remove(id(helper))
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 2  # the first entry's guards hold again

    def unrelated2(t):
        return t
    allow_in_graph(unrelated2)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.graph_count == 2


# ---- attribute stores on modules (NOTE [Module attribute stores]) ---------------------------------------
STATE = types.ModuleType("framejit_test_state")


class LoggingModule(types.ModuleType):
    def __setattr__(self, name, value):
        LOG.append(name)
        super().__setattr__(name, value)


LOG: list = []
LOGGED = LoggingModule("framejit_test_logged")


def _run_both(fn, reset, make_arg, state, calls=3, fullgraph=False):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for seed in range(calls):
        x = make_arg(seed)
        reset(seed)
        expected = fn(x.clone())
        expected_state = state()
        reset(seed)
        actual = compiled(x.clone())
        assert state() == expected_state
        torch.testing.assert_close(actual, expected)
    return backend


def test_module_attribute_store_is_seen_by_later_reads_and_replayed():
    def fn(x):
        STATE.scale = STATE.scale * 2
        y = x * STATE.scale
        STATE.last = y.shape[0]
        return y + STATE.last

    def reset(seed):
        STATE.scale = 1.5 + seed
        if hasattr(STATE, "last"):
            del STATE.last

    backend = _run_both(fn, reset, lambda seed: torch.randn(4), lambda: (STATE.scale, STATE.last), fullgraph=True)
    assert backend.graph_count >= 1


def test_module_attribute_store_before_a_break_is_replayed_before_it():
    def report():
        print("scale", STATE.scale)  # plain Python at the break must see the store

    framejit.disable(report)

    def fn(x):
        STATE.scale = STATE.scale + 1
        report()
        return x * STATE.scale

    def reset(seed):
        STATE.scale = float(seed)

    import contextlib
    import io
    out_eager, out_compiled = io.StringIO(), io.StringIO()
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in range(2):
        x = torch.randn(3)
        reset(seed)
        with contextlib.redirect_stdout(out_eager):
            expected = fn(x)
        reset(seed)
        with contextlib.redirect_stdout(out_compiled):
            actual = compiled(x)
        torch.testing.assert_close(actual, expected)
        assert out_compiled.getvalue() == out_eager.getvalue()
    assert backend.graph_count >= 1


def test_store_on_a_module_with_its_own_setattr_runs_it():
    def fn(x):
        LOGGED.flag = x.shape[0]
        return x + LOGGED.flag

    def reset(seed):
        LOG.clear()

    _run_both(fn, reset, lambda seed: torch.randn(2 + seed), lambda: (list(LOG), LOGGED.flag))
