"""A `with` whose manager's `__enter__` cannot be traced (issue 11; NOTE [Breaks at BEFORE_WITH] in
graph_break.py): the manager is entered as plain Python by the frame's own instruction and the frame resumes
inside the block, so the block and the code after it are captured, while the manager's `__exit__` still runs
on every path out (normal end, return inside the block, an exception it swallows or lets through, a loop's
break/continue). Each case runs eagerly and compiled over several inputs (values, the manager's log, the
exception) and counts the graphs and the frames run wholly eagerly.
"""
from __future__ import annotations

import io
import threading

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential, eager_frames


@framejit.disable
def _untraced(log: list, what: str) -> None:
    log.append(what)


class Managed:
    """A manager whose `__enter__` calls a function framejit does not trace; `swallow` names the
    exception type its `__exit__` suppresses."""

    def __init__(self, log: list, swallow: type | None = None) -> None:
        self.log, self.swallow = log, swallow

    def __enter__(self):
        _untraced(self.log, "enter")
        return len(self.log)

    def __exit__(self, kind, value, tb):
        self.log.append(("exit", kind.__name__ if kind else None))
        return self.swallow is not None and kind is not None and issubclass(kind, self.swallow)


def _ops(backend) -> list[int]:
    return [backend.op_count(i) for i in range(backend.graph_count)]


def _args(seed: int):
    return torch.randn(3 + seed % 2, generator=torch.Generator().manual_seed(seed)), [], seed % 3


def test_the_block_and_the_code_after_it_are_captured():
    def f(x, log, k):
        y = x.sin() * 2
        with Managed(log) as n:
            z = y.cos() + n
        log.append("after")
        return z * 3 - k

    before = eager_frames()
    backend = run_differential(f, _args, seeds=(0, 6, 3), fullgraph=False)  # k = 0; shapes 3, 3, 4
    # before the with (sin, mul); the block, the traced __exit__ and the code after it (cos, add, mul, sub);
    # the second call reuses both, the third (a new size) compiles again
    assert _ops(backend)[:2] == [2, 4] and backend.graph_count <= 4
    assert eager_frames() == before


@pytest.mark.parametrize("swallow", [None, ValueError])
def test_an_exception_in_the_block_reaches_the_managers_exit(swallow):
    def f(x, log, k):
        y = x.exp()
        with Managed(log, swallow):
            y = y - 1
            if k == 1:
                raise ValueError("from the block")
            y = y * 2
        log.append("after")
        return y.tanh()

    before = eager_frames()
    backend = run_differential(f, _args, seeds=(0, 1, 3, 4), fullgraph=False)  # k = 0, 1, 0, 1
    assert backend.graph_count >= 3 and backend.op_count(0) == 1  # exp; the block and the rest captured
    assert eager_frames() == before


def test_a_return_inside_the_block_runs_the_exit():
    def f(x, log, k):
        y = x.abs()
        with Managed(log):
            y = y + 1
            if k == 2:
                return y * 10
            y = y * 2
        return y

    backend = run_differential(f, _args, seeds=(0, 2, 5), fullgraph=False)  # k = 0, 2, 2
    assert backend.graph_count >= 3 and backend.op_count(0) == 1


def test_a_with_inside_a_loop_with_break_and_continue():
    def f(x, log, k):
        total = x * 0
        for i in range(4):
            with Managed(log) as n:
                if i == k:
                    continue
                total = total + x * i + n
                if i == 3 - k:
                    break
        return total

    before = eager_frames()
    run_differential(f, _args, seeds=(0, 1, 2, 3), fullgraph=False)
    assert eager_frames() == before


def test_an_untraceable_manager_inside_a_torch_block_is_exact():
    # inside another with-block the instruction is covered by an exception region: the tail form
    def f(x, log, k):
        with torch.no_grad():
            y = x * 2
            with Managed(log):
                y = y + k
        return y.sin(), torch.is_grad_enabled()

    run_differential(f, lambda seed: (torch.randn(3, requires_grad=True), [], seed), seeds=(0, 1), fullgraph=False)


def test_the_profiler_records_the_captured_block():
    def f(x):
        y = x.sin()
        with torch.profiler.profile() as p:
            y = torch.mm(y, y.t())
        names = {e.key for e in p.key_averages()}
        return y.relu(), "aten::mm" in names

    before = len(framejit.stats()["frames"])
    backend = run_differential(f, lambda seed: (torch.randn(3, 3),), seeds=(0, 1), fullgraph=False)
    assert backend.graph_count >= 2 and 1 in _ops(backend)  # the block's mm is a graph of its own
    # NOTE [Torch internals at breaks]: the profiler's own code (key_averages, __exit__) runs as it is: only f
    # and its resume functions are traced (before: key_averages, _ensure_function_events, FunctionEventAvg.add
    # up to the recompile limit, ~70 s)
    traced = {frame["function"].partition(".<resume")[0] for frame in framejit.stats()["frames"][before:]}
    assert traced == {f.__qualname__}, traced


@torch.no_grad()
def _decorated_helper(x, log):
    log.append(x.shape[0])  # a break: the list is the caller's
    print("helper", x.shape[0])
    return x.sin() * 2


def test_a_grad_mode_decorated_function_called_at_a_break_is_captured(capsys):
    # NOTE [Torch internals at breaks]: torch/utils/_contextlib.py's wrapper around a @torch.no_grad() function
    # still goes through a hook at a break, so the function's own ops are captured
    def f(x, log):
        y = x.cos()
        print("f", y.shape[0])
        return _decorated_helper(y, log) + 1

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for n in (3, 4):
        x = torch.randn(n, requires_grad=True)
        want_log, got_log = [], []
        want = f(x, want_log)
        want_out = capsys.readouterr().out
        got = compiled(x, got_log)
        assert capsys.readouterr().out == want_out
        assert_same(got, want)
        assert got.requires_grad == want.requires_grad and got_log == want_log
    assert 2 in _ops(backend)  # the helper's sin, mul (called directly: graphs of 1 op only)


_LOCK = threading.Lock()


@pytest.mark.parametrize("make", [lambda: _LOCK, lambda: io.StringIO("text")], ids=["lock", "stringio"])
def test_a_c_managers_exit_does_not_recompile(make):
    # BEFORE_WITH leaves a bound C method (`lock.__exit__`), a new object on every call, for the resume
    # function: it is guarded by its parts (NOTE [Bound builtin methods by their parts] in builder.py)
    def f(x, log, k):
        y = x.sin() * 2
        with make() as m:
            y = y.cos() + 1
            log.append(type(m).__name__)
        return y.tanh() - k

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    args = lambda seed: (torch.randn(4), [], 1)  # noqa: E731
    run_differential(f, args, seeds=(0,), compiled=compiled, backend=backend)
    traced = framejit.stats()["frames_traced"]
    run_differential(f, args, seeds=(1, 2, 3), compiled=compiled, backend=backend)
    assert framejit.stats()["frames_traced"] == traced  # no recompiles
    assert _ops(backend) == [2, 2, 2]  # sin, mul | cos, add (the block) | tanh, sub


def test_a_bound_c_method_argument_follows_its_object():
    def f(x, add):
        add(x.sum().item())
        return x * 2

    first, second = [], []
    compiled = framejit.compile(f, backend="eager")
    for target in (first, first, second, first):
        expected = []
        f(torch.ones(2), expected.append)
        compiled(torch.ones(2), target.append)
        assert expected == [2.0]
    assert first == [2.0, 2.0, 2.0] and second == [2.0]


def test_a_bound_method_of_an_equal_number_does_not_recompile(capsys):
    # NOTE [Bound builtin methods by their parts]: a number's method is guarded by the number's value
    def f(x, add):
        y = x * 2
        print("break")
        return y + add(1)

    compiled = framejit.compile(f, backend="eager")
    x = torch.randn(3)
    assert_same(compiled(x, int("1000").__add__), f(x, int("1000").__add__))
    traced = framejit.stats()["frames_traced"]
    for text in ("1000", "1000", "1000"):  # equal values, new int objects (outside the small-int cache)
        assert_same(compiled(x, int(text).__add__), f(x, int(text).__add__))
    assert framejit.stats()["frames_traced"] == traced
    assert_same(compiled(x, int("2000").__add__), f(x, int("2000").__add__))  # traced again, right answer
