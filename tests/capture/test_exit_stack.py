"""`contextlib.ExitStack` inside the compiled region, and what it needs: `type(cm).__enter__(cm)` over a
`@contextmanager` manager made here (call_cm_method) or a grad-mode manager (NOTE [Torch managers entered
by call]), `types.MethodType(f, obj)` (how ExitStack binds a
manager's `__exit__`) and `sys.exc_info()` (read by every `ExitStack.__exit__`, NOTE [sys.exc_info while
tracing]).

Differential: eager and compiled runs over fresh inputs, two or more calls, comparing results, the log the
managers write (order of enters and exits) and graph/break counts.
"""
from __future__ import annotations

import contextlib
import sys
import types

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


@pytest.fixture(autouse=True)
def _fresh():
    framejit.reset()
    yield
    framejit.reset()


LOG: list = []


@contextlib.contextmanager
def tagged(name, scale=1.0):
    LOG.append(("enter", name))
    try:
        yield scale * 2
    finally:
        LOG.append(("exit", name))


def _run_both(fn, make_args, seeds=(0, 1, 2)):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for seed in seeds:
        torch.manual_seed(seed)
        args = make_args()
        LOG.clear()
        expected = fn(*args)
        eager_log = list(LOG)
        LOG.clear()
        actual = compiled(*args)
        assert_same(actual, expected)
        assert LOG == eager_log
    return backend


def test_generator_managers_entered_through_an_exit_stack_are_one_graph():
    def fn(x):
        with contextlib.ExitStack() as stack:
            a = stack.enter_context(tagged("a"))
            b = stack.enter_context(tagged("b", scale=3.0))
            y = x.sin() * a + b
        return y.cos()

    backend = _run_both(fn, lambda: (torch.randn(4),))
    assert backend.graph_count == 1
    explanation = framejit.explain(fn)(torch.randn(4))
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0


def test_exit_stack_in_a_loop_exits_in_reverse_order():
    def fn(x, names):
        with contextlib.ExitStack() as stack:
            for name in names:
                x = x + stack.enter_context(tagged(name))
        return x * 2

    backend = _run_both(fn, lambda: (torch.randn(3), ("p", "q", "r")))
    assert backend.graph_count == 1


class Scaled:
    """A context manager class of the user's: its __enter__/__exit__ are inlined through ExitStack."""

    def __init__(self, k):
        self.k = k

    def __enter__(self):
        LOG.append(("enter", self.k))
        return self.k

    def __exit__(self, *exc):
        LOG.append(("exit", self.k))
        return False


def test_exit_stack_with_user_and_null_managers():
    def fn(x):
        with contextlib.ExitStack() as stack:
            k = stack.enter_context(Scaled(3.0))
            z = stack.enter_context(contextlib.nullcontext(x.exp()))
            y = x * k + z
        return y

    backend = _run_both(fn, lambda: (torch.randn(3),))
    assert backend.graph_count == 1


def test_grad_mode_managers_entered_through_an_exit_stack_are_one_graph():
    def fn(x):
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            y = x * 2
            stack.enter_context(torch.enable_grad())
            z = x * 3
        return y, z, torch.is_grad_enabled(), x.exp()

    for outer in (True, False):
        with torch.set_grad_enabled(outer):
            backend = _run_both(fn, lambda: (torch.randn(3, requires_grad=True),))
            assert backend.graph_count == 1
            explanation = framejit.explain(fn)(torch.randn(3, requires_grad=True))
            assert explanation.graph_count == 1 and explanation.graph_break_count == 0
        framejit.reset()


def test_break_while_an_exit_stack_holds_a_grad_mode_manager():
    def fn(x):
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            y = x * 2
            print("break")
            inside = torch.is_grad_enabled()
            z = x * 3
        return y, z, inside, torch.is_grad_enabled()

    _run_both(fn, lambda: (torch.randn(3, requires_grad=True),))


def test_exit_stack_returned_with_a_grad_mode_manager_still_entered():
    def fn(x):
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        return x * 2, stack

    compiled = framejit.compile(fn, backend="eager")
    for run in (fn, compiled, compiled):
        y, stack = run(torch.randn(3, requires_grad=True))
        assert not torch.is_grad_enabled() and not y.requires_grad  # left entered, as eager leaves it
        stack.close()
        assert torch.is_grad_enabled()


def test_exception_inside_an_exit_stack_block_reaches_the_managers():
    def fn(x):
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(tagged("a"))
                x = x + 1
                raise ValueError("boom")
        except ValueError:
            x = x * 4
        return x

    _run_both(fn, lambda: (torch.randn(2),))


def test_method_type_binds_a_function_to_an_object():
    class Box:
        def __init__(self, k):
            self.k = k

    def scaled(self, t):
        return t * self.k

    def fn(x, box):
        m = types.MethodType(scaled, box)
        return m(x), m

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for k in (2.0, 3.0):
        box = Box(k)
        x = torch.randn(3)
        (expected, m_eager), (actual, m_compiled) = fn(x, box), compiled(x, box)
        assert_same(actual, expected)
        assert type(m_compiled) is types.MethodType
        assert m_compiled.__func__ is scaled and m_compiled.__self__ is box
    assert framejit.explain(fn)(torch.randn(3), Box(4.0)).graph_break_count == 0


def _handled_state(x):
    info = sys.exc_info()
    return x + (1 if info[1] is None else 10), info[0]


def test_exc_info_outside_any_handler_is_none_and_guarded():
    backend = CountingBackend()
    compiled = framejit.compile(_handled_state, backend=backend)
    x = torch.randn(3)
    assert_same(compiled(x), _handled_state(x))
    assert backend.graph_count == 1
    assert framejit.explain(_handled_state)(x).graph_break_count == 0
    try:
        raise KeyError("caller's")
    except KeyError:  # the caller handles an exception: the answer differs, so the entry must not be reused
        assert_same(compiled(x), _handled_state(x))
    assert_same(compiled(x), _handled_state(x))


def test_exc_info_inside_a_traced_except_clause_matches_eager():
    def fn(x, d):
        try:
            v = d["missing"]
        except KeyError:
            kind = sys.exc_info()[0]
            v = 5
        return x + v, kind

    compiled = framejit.compile(fn, backend="eager")
    for _ in range(2):
        x = torch.randn(2)
        assert_same(compiled(x, {}), fn(x, {}))


def _dispatch_state():
    return str(torch._C._dispatch_tls_local_include_set()), str(torch._C._dispatch_tls_local_exclude_set())


def test_inference_mode_through_an_exit_stack_leaves_no_dispatch_state_behind():
    # NOTE [torch._C guards are never run while tracing]: inference_mode.__enter__ makes torch._C._InferenceMode
    def fn(x):
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode())
            y = x * 2
        return y, y.is_inference(), torch.is_inference_mode_enabled()

    before = _dispatch_state()
    _run_both(fn, lambda: (torch.randn(3),))
    assert _dispatch_state() == before
    assert_same(torch.ones(2) + 1, torch.full((2,), 2.0))


def test_a_dispatch_guard_made_in_the_region_runs_as_python():
    def fn(x):
        guard = torch._C._InferenceMode(True)
        guard.__enter__()
        y = x * 2
        inside = torch.is_inference_mode_enabled()
        guard.__exit__(None, None, None)
        return y, y.is_inference(), inside, torch.is_inference_mode_enabled()

    before = _dispatch_state()
    _run_both(fn, lambda: (torch.randn(3),))
    assert _dispatch_state() == before
