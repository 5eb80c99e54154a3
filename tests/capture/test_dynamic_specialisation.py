"""Dynamic shapes, issue 13: where a trace specialises what was meant to stay symbolic. A loop over a
symbolic range whose body breaks on data (the owner frame recompiled per size), and `mark_dynamic`
contracts the code breaks (a ConstraintViolationError at compile time, as torch.compile raises).
Differential: eager vs compiled on fresh inputs of changing sizes; compile counts asserted."""
from __future__ import annotations

import logging

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

import framejit
from tests.helpers import CountingBackend, assert_same

SIZES = [3, 5, 7, 4, 9, 6, 11, 12, 13, 14]  # more sizes than the recompile limit (8)


def _frames(before: int, name: str) -> int:
    return sum(1 for row in framejit.stats()["frames"][before:] if row["function"] == name)


def _loop_with_a_break(x):
    acc = x[0]
    for i in range(1, x.shape[0]):
        if acc.sum() > 1e9:  # data-dependent: a break inside the loop's body
            acc = acc * 0
        acc = acc + x[i] * i
    return acc * 2


def _loop_that_breaks_out(x):
    y = x * 2
    out = []
    for i in range(x.size(0)):
        if y[i].sum() > 0:
            break
        out.append(y[i] + 1)
    return y.sum() + len(out), out


def test_loop_over_a_symbolic_range_that_breaks_does_not_recompile_per_size():
    for fn in (_loop_with_a_break, _loop_that_breaks_out):
        before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
        compiled = framejit.compile(fn, backend="eager")
        for i, n in enumerate(SIZES):
            torch.manual_seed(i)
            x = torch.randn(n, 3)
            assert_same(compiled(x), fn(x))
        # before: the owner frame unrolled the range (size guarded by value) and recompiled per size
        # until the recompile limit sent it to eager (8 entries, 1 eager frame); stock runs it eagerly
        assert _frames(before, fn.__qualname__) == 2  # static, then symbolic: the loop runs as Python
        assert framejit.stats()["eager_frames"] == eager


def _loop_that_prints(x):
    acc = x.sum(0)
    for i in range(x.size(0)):
        acc = acc + x[i]
        print("step", i)  # a graph break of another kind than data in the body
        acc = acc * 0.5
    return acc + 1


@framejit.disable
def _record(log, i):
    log.append(i)


def _loop_that_calls_a_disabled_function(x, log):
    acc = x[0]
    for i in range(1, x.shape[0]):
        _record(log, i)
        acc = acc + x[i] * i
    return acc * 2


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_a_loop_over_a_symbolic_range_with_any_break_does_not_recompile_per_size(dynamic, capsys):
    for fn in (_loop_that_prints, _loop_that_calls_a_disabled_function):
        before, eager = len(framejit.stats()["frames"]), framejit.stats()["eager_frames"]
        compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
        for i, n in enumerate(SIZES + [1, 2]):
            torch.manual_seed(i)
            x = torch.randn(n, 3)
            args, eager_args = ((x, []), (x, [])) if fn is _loop_that_calls_a_disabled_function else ((x,), (x,))
            expected = fn(*eager_args)
            printed = capsys.readouterr().out
            assert_same(compiled(*args), expected)
            assert capsys.readouterr().out == printed and args[1:] == eager_args[1:]
        # before: the owner frame unrolled the range (the size guarded by value: the stepped loop's iterator
        # is rebuilt from a constant range) and recompiled per size until the recompile limit sent it to
        # eager (8 entries, 1 eager frame). Now: static, symbolic, then size 1 (dynamic=True: no static)
        assert _frames(before, fn.__qualname__) == (3 if dynamic is None else 2)
        assert framejit.stats()["eager_frames"] == eager


# ---- mark_dynamic contracts (stock torch.compile 2.13 raises ConstraintViolationError in each case) ----
def _marked(n, low=None, high=None, dims=(0,)):
    x = torch.randn(n, 3)
    framejit.mark_dynamic(x, list(dims), min=low, max=high)
    return x


def _equal_to_four(x):
    if x.size(0) == 4:  # the line named by the error
        return x + 1
    return x - 1


def _view_as_four(x):
    return x.view(2, 2, 3)


def _broadcast_with_four(x):
    return x + torch.ones(4, 3)


@pytest.mark.parametrize("fn", [_equal_to_four, _view_as_four, _broadcast_with_four], ids=lambda f: f.__name__)
def test_specialising_a_marked_dimension_raises_naming_the_line(fn):
    compiled = framejit.compile(fn, backend=CountingBackend())
    line = fn.__code__.co_firstlineno + 1
    with pytest.raises(framejit.ConstraintViolationError,
                       match=rf"L\['x'\]\.size\(0\) was marked dynamic but the code specialised it to the constant "
                             rf"4 at .*test_dynamic_specialisation\.py:{line}:") as info:
        compiled(_marked(4))
    assert isinstance(info.value, ConstraintViolationError)  # torch's type: code written for torch.compile
    for n in (4, 5, 6):  # the weak marker lets the code specialise: no error, as in torch
        x = torch.randn(n, 3)
        framejit.maybe_mark_dynamic(x, 0)
        if fn is _equal_to_four or n == 4:
            assert_same(compiled(x), fn(x))


def test_a_marked_tensor_does_not_hit_an_entry_that_specialised_its_dimension():
    backend = CountingBackend()
    compiled = framejit.compile(_equal_to_four, backend=backend)
    assert_same(compiled(torch.ones(4, 3)), _equal_to_four(torch.ones(4, 3)))  # static: 4 is a constant
    # stock: the marked tensor fails the entry's DYNAMIC_INDICES guard, retraces and raises
    with pytest.raises(framejit.ConstraintViolationError, match="specialised it to the constant 4"):
        compiled(_marked(4))
    twice = framejit.compile(lambda x: x * 2, backend=backend)
    before = backend.graph_count
    for x in (torch.randn(4, 3), _marked(4), _marked(6), _marked(7), _marked(9)):
        assert_same(twice(x), x * 2)
    assert backend.graph_count - before == 2  # static for 4, then one for the marked sizes (stock: 2 as well)


def test_sizes_outside_the_declared_range_raise():
    backend = CountingBackend()
    compiled = framejit.compile(lambda x: x * 2, backend=backend)
    for n in (8, 4, 16, 11):
        x = _marked(n, 4, 16)
        assert_same(compiled(x), x * 2)
    assert backend.graph_count == 1
    for n in (32, 3, 1):  # as torch: "32 not in range [4, 16]" (for 1 torch 2.13 fails with an AssertionError)
        with pytest.raises(framejit.ConstraintViolationError, match=rf"size\(0\) is {n}, not in the range \[4, 16\]"):
            compiled(_marked(n, 4, 16))
    with pytest.raises(framejit.ConstraintViolationError, match=r"is 32, not in the range"):
        framejit.compile(lambda x: x + 1, backend=backend)(_marked(32, 4, 16))  # on the first call too


def test_a_relation_that_narrows_the_declared_range_raises():
    def fn(x):
        if x.size(0) > 10:
            return x + 1
        return x - 1

    with pytest.raises(framejit.ConstraintViolationError,
                       match=r"not all values of L\['x'\]\.size\(0\) in the range 4 <= L\['x'\]\.size\(0\) <= 16 .* "
                             r"satisfy the guard 4 <= L\['x'\]\.size\(0\) <= 10 \(from .*: if x\.size\(0\) > 10:"):
        framejit.compile(fn, backend="eager")(_marked(8, 4, 16))
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in (8, 6, 9):  # without a range a relation is a guard, not a violation (as torch)
        x = _marked(n)
        assert_same(compiled(x), fn(x))
    assert backend.graph_count == 1


def test_what_torch_does_not_count_as_a_violation():
    def fn(x, y):
        return (x + y).view(-1, 2, 3)  # unifies two marked sizes; needs an even size (a guard)

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in (4, 6, 8, 10):
        x, y = _marked(n), _marked(n)
        assert_same(compiled(x, y), fn(x, y))
    assert backend.graph_count == 1
    x = _marked(1)  # a marked size 1 is specialised by rule, not by the code
    assert_same(framejit.compile(lambda t: t * 2, backend="eager")(x), x * 2)


def test_recompile_log_names_the_line_that_specialised(caplog):
    def fn(x):
        acc = x[0] * 0
        for i in range(x.size(0)):  # unrolled (fullgraph: NOTE [Loops over symbolic ranges]): specialises the size
            acc = acc + x[i]
        return acc

    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            for n in (3, 4, 5, 6):
                x = torch.randn(n, 2)
                assert_same(compiled(x), fn(x))
    finally:
        framejit.set_logs("")
    messages = [r.getMessage() for r in caplog.records if "SHAPE_ENV" in r.getMessage()]
    line = fn.__code__.co_firstlineno + 2
    assert messages and all(f"test_dynamic_specialisation.py:{line}: for i in range(x.size(0)):" in m
                            for m in messages), messages


# ---- dynamic floats in comparisons (NOTE [Float relations]) --------------------------------------------
def _threshold(x, t):
    if t > 0.5:
        return x * t
    return x - t


def _two_floats(x, t, u):
    y = x * t - u
    return y + 1 if t < u else y - 1


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_a_float_compared_with_a_constant_is_a_guarded_relation(backend):
    counting = CountingBackend() if backend == "eager" else None
    compiled = framejit.compile(_threshold, backend=counting or backend)
    before = len(framejit.stats()["frames"])
    for t in (0.3, 0.7, 1.2, 2.5, 3.9, 1.7, 0.9):
        x = torch.randn(4)
        assert_same(compiled(x, t), _threshold(x, t))
    # before: 7 (each value guarded by value after the comparison specialised it); stock torch.compile: 2
    assert len(framejit.stats()["frames"]) - before == 2
    source = compiled.entries[0].guard.source
    assert "t > 0.5" in source or "0.5 < t" in source


def test_two_float_inputs_compared():
    backend = CountingBackend()
    compiled = framejit.compile(_two_floats, backend=backend)
    for t, u in ((0.5, 1.0), (0.25, 2.0), (1.5, 3.0), (3.0, 1.0), (2.0, 0.5), (1.0, 1.0)):
        x = torch.randn(4)
        assert_same(compiled(x, t, u), _two_floats(x, t, u))
    assert backend.graph_count == 3  # the first values; then t < u; then t >= u (before: 6)


def test_a_computed_float_compared_still_specialises():
    def fn(x, t):
        return x + 1 if t * 3 > 0.9 else x - 1  # 0.3 * 3 == 0.8999999999999999: eager takes the else branch

    compiled = framejit.compile(fn, backend="eager")
    for t in (0.5, 0.25, 0.3, 0.30000000000000004, 0.7):
        x = torch.randn(4)
        assert_same(compiled(x, t), fn(x, t))
