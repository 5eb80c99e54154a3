"""NOTE [Closures made per call share a hook through their cells] (closure_hooks.py), NOTE [Aliased cells are
guarded] (closure_cells.py), NOTE [Closures rebuilt over cells found through sources] (codegen.py).

Closures made anew on each call and called at a graph break (3.12 steps an inlined comprehension at a break
and calls the closure through its hook): eager vs compiled over several calls with changing values, cells
rebound and written while the closure runs, closures escaping and called later, loop variables, cells shared
between closures, a closure redefined with other code, cells aliased in other ways than at trace time.
"""
from __future__ import annotations

import types

import pytest
import torch

import framejit
from framejit import config


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


@framejit.disable
def _opaque(t):
    return t * 1


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.shape == want.shape and torch.allclose(got, want)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


def _run(fn, calls):
    """`calls`: functions making fresh arguments (the same for the eager and the compiled run)."""
    compiled = framejit.compile(fn, backend="eager")
    start = framejit.stats()
    for make in calls:
        want = fn(*make())
        _same(compiled(*make()), want)
    now = framejit.stats()
    return {k: now[k] - start[k] for k in ("frames_traced", "graphs", "eager_frames")}


def _xk(rows, k, seed):
    return lambda: (torch.randn(rows, generator=torch.Generator().manual_seed(seed)), k)


def per_call(x, k):
    t = x + k

    def add(a):
        return a + t

    return [add(_opaque(x * i)) for i in range(2)]


def test_a_closure_made_per_call_is_traced_once():
    counts = _run(per_call, [_xk(3, 1.0, 1), _xk(3, 1.0, 2), _xk(3, 1.0, 3)])
    assert counts["eager_frames"] == 0
    # stock torch.compile: 3 frames, 2 graphs; before the shared hook 3.12 traced `add` once per call (5 / 4)
    assert counts["frames_traced"] <= 3 and counts["graphs"] <= 2, counts


def rebound(x, k):
    t = x + k

    def add(a):
        return a * t

    first = [add(_opaque(x + i)) for i in range(2)]
    t = t * 2 + k  # the same closure object, its cell rebound: the entry must read it anew
    second = [add(_opaque(x - i)) for i in range(2)]
    return first, second


def test_a_cell_rebound_after_the_closure_was_made():
    counts = _run(rebound, [_xk(3, 1.0, 1), _xk(3, 2.0, 2), _xk(4, 3.0, 3)])
    assert counts["eager_frames"] == 0


def counter(x, k):
    count = 0

    def bump():
        nonlocal count
        count += 1

    def step(a):
        bump()
        return a * count

    return [step(_opaque(x * k)) for _ in range(3)], count


def accumulate(x, k):
    total = x * 0

    def acc(a):
        nonlocal total
        total = total + a
        return total * k

    return [acc(_opaque(x + i)) for i in range(3)], total


def setter_reader(x, k):
    t = x + k

    def setter(v):
        nonlocal t
        t = v

    def reader(a):
        setter(a * 10)  # writes the cell reader reads next (review revC C6)
        return a + t

    return [reader(_opaque(x * i)) for i in range(3)], t


@pytest.mark.parametrize("fn", [counter, accumulate, setter_reader])
def test_nonlocal_writes_during_the_call_reach_the_original_cells(fn):
    counts = _run(fn, [_xk(2, 1.0, 1), _xk(2, 2.0, 2), _xk(3, 1.0, 3), _xk(2, 3.0, 4)])
    assert counts["eager_frames"] == 0


def _make(v):
    def scaled(a):
        return a * v

    def rebind(w):
        nonlocal v
        v = w

    return scaled, rebind


def call_each(fns, x):
    return [f(_opaque(x)) for f in fns]


def test_closures_of_one_code_made_elsewhere_share_one_trace():
    def args(seed):
        def make():
            g = torch.Generator().manual_seed(seed)
            return [_make(torch.randn(3, generator=g))[0] for _ in range(3)], torch.randn(3, generator=g)
        return make
    counts = _run(call_each, [args(1), args(2), args(3)])
    assert counts["eager_frames"] == 0
    # `call_each` and its resume function once, `scaled` once for all nine objects (on 3.12, where the
    # comprehension is stepped at its break; 3.11 and 3.13 run `scaled` inside the loop run as Python)
    assert counts["frames_traced"] <= 3, counts


def test_closures_escaping_and_called_later():
    def args(seed, rows):
        def make():
            g = torch.Generator().manual_seed(seed)
            return [_make(torch.randn(rows, generator=g))[0], _make(2.0)[0], _make(torch.randn(rows, generator=g))[0],
                    _make(3)[0]], torch.randn(rows, generator=g)
        return make
    counts = _run(call_each, [args(1, 3), args(2, 3), args(3, 4), args(4, 3)])
    assert counts["eager_frames"] == 0


def test_an_escaped_closure_whose_cell_is_rebound_between_calls():
    scaled, rebind = _make(torch.ones(3))
    compiled = framejit.compile(call_each, backend="eager")
    x = torch.arange(3.0)
    for w in (torch.full((3,), 2.0), torch.full((3,), -1.0), torch.arange(3.0)):
        _same(compiled([scaled, scaled], x), call_each([scaled, scaled], x))
        rebind(w)
        _same(compiled([scaled], x), [x * w])


def loop_vars(x, k):
    out = []
    for i in range(3):
        def g(a):
            return a + i * k
        out.append(g(_opaque(x)))
    return out


def late_binding(x, k):
    fs = [lambda a: a * i + k for i in range(3)]
    return [f(_opaque(x)) for f in fs]


@pytest.mark.parametrize("fn", [loop_vars, late_binding])
def test_closures_over_loop_variables(fn):
    """loop_vars: the resume function rebuilt `g` over the first call's cell of `i` (a constant), so from
    the second call on `g` read that cell's last value (eager [x, x + k, x + 2k], framejit [x, x + 2k, x + 2k])."""
    _run(fn, [_xk(2, 1.0, 1), _xk(2, 2.0, 2), _xk(2, 1.0, 3), _xk(3, 3.0, 4)])


def shared_by_two(x, k):
    t = x + k

    def first(a):
        return a + t

    def second(a):
        nonlocal t
        t = t * 2
        return a - t

    return [first(_opaque(x)) + second(_opaque(x)) for _ in range(3)], t


def redefined(x, k):
    t = x + k
    out = []
    for i in range(4):
        if i % 2:
            def h(a):
                return a + t
        else:
            def h(a):
                return a - t
        out.append(h(_opaque(x)))
    return out


@pytest.mark.parametrize("fn", [shared_by_two, redefined])
def test_cells_shared_between_closures_and_closures_of_other_code(fn):
    counts = _run(fn, [_xk(2, 1.0, 1), _xk(2, 2.0, 2), _xk(3, 1.0, 3)])
    assert counts["eager_frames"] == 0


def _pair(x):
    t = x + 1

    def setter(v):
        nonlocal t
        t = v

    def reader(a):
        setter(a * 10)
        return a + t

    return reader


def test_a_closure_whose_cells_alias_otherwise_than_when_traced():
    """`mixed` has reader's code with r1's `t` but another reader's `setter` (whose `t` is another cell):
    setter's store must not be what mixed reads next (NOTE [Aliased cells are guarded])."""
    def args():
        x = torch.arange(3.0)
        r1, r2 = _pair(x), _pair(x * 2)
        names = r1.__code__.co_freevars
        cells = dict(zip(names, r1.__closure__))
        cells["setter"] = r2.__closure__[names.index("setter")]
        mixed = types.FunctionType(r1.__code__, r1.__globals__, "reader", None, tuple(cells[n] for n in names))
        return [mixed, r1, _pair(x - 1), mixed, r1], x
    _run(call_each, [args, args, args])


def _minus_code():
    v = None

    def scaled(a):
        return a - v
    return scaled.__code__


def test_a_closure_with_its_code_replaced():
    """One object of `scaled`'s code gets other code (the same free variable) between the calls."""
    def args(seed):
        def make():
            g = torch.Generator().manual_seed(seed)
            fns = [_make(torch.randn(2, generator=g))[0] for _ in range(3)]
            fns[1].__code__ = _minus_code()
            return fns, torch.randn(2, generator=g)
        return make
    _run(call_each, [args(1), args(2), args(3)])


def empty_then_set(x, k):
    def add(a):
        return a + t

    out = []
    try:
        out.append(add(_opaque(x)))
    except NameError as e:
        out.append(str(e))
    t = x * k
    out.append([add(_opaque(x)) for _ in range(2)])
    return out


def test_a_closure_over_a_cell_empty_at_its_first_call():
    _run(empty_then_set, [_xk(2, 1.0, 1), _xk(2, 2.0, 2), _xk(3, 1.0, 3)])


def walrus_in_comprehension(x, k):
    ys = [y for i in range(3) if (y := _opaque(x * i + k)).sum() >= -100]
    return len(ys), sum(ys), y


def set_after_the_break(x, k):
    get = lambda: n  # noqa: E731 - `n` is not set at the break below
    y = x * 2
    print("a break")
    n = k
    return y * get()


def walrus_read_by_a_closure_later(x, k):
    out = [(z := _opaque(x + i)) * k for i in range(2)]
    g = lambda: z  # noqa: E731
    return out, g() + 1


def read_before_it_is_set(x, k):
    get = lambda: n  # noqa: E731
    y = x * 2
    print("a break")
    try:
        y = y + get()
    except NameError as e:
        print(e)
    n = k
    return y * get()


@pytest.mark.parametrize("fn", [walrus_in_comprehension, set_after_the_break, walrus_read_by_a_closure_later])
def test_a_closure_over_a_variable_not_set_at_the_break(fn, capsys):
    """NOTE [Closures over cells not set yet] (break_callees.py): before, the frame ran wholly eagerly (3.11:
    all three; 3.12/3.13: set_after_the_break)."""
    counts = _run(fn, [_xk(3, 1.0, 1), _xk(3, 2.0, 2), _xk(4, 1.0, 3)])
    assert counts["eager_frames"] == 0 and counts["graphs"] > 0, counts


def test_a_closure_read_before_its_variable_is_set(capsys):
    _run(read_before_it_is_set, [_xk(3, 1.0, 1), _xk(3, 2.0, 2), _xk(4, 1.0, 3)])
    out = capsys.readouterr().out
    assert out.count("cannot access free variable 'n'") == 6  # eager's and the compiled run's, 3 calls each


def _noting(x):
    seen = []

    def note(v):
        seen.append(len(seen))
        return v + len(seen)
    return tuple(note(x[i]) for i in range(x.size(0))), list(seen)


def _factored(x, m):
    def chol(v):
        return torch.linalg.cholesky(m) @ v
    return tuple(chol(x[i]) for i in range(x.size(0)))


def test_past_the_limit_and_on_a_rerun_the_closure_called_now_runs(monkeypatch):
    # NOTE [A shared closure hook runs the object called now]: past the recompile limit the first call's `note`
    # ran (its dead `seen`); a graph error's eager rerun ran the first `chol` (call 1's m: no exception)
    monkeypatch.setattr(config, "recompile_limit", 2)
    compiled = framejit.compile(_noting, dynamic=True)
    for n in (2, 3, 5):
        x = torch.randn(n, 1)
        _same(compiled(x), _noting(x))
    compiled = framejit.compile(_factored, dynamic=True)
    for m in (torch.eye(2) * 4, torch.tensor([[1., 2.], [2., 1.]]), torch.eye(2)):
        x = torch.randn(2, 2)
        try:
            want = _factored(x, m)
        except Exception as e:  # noqa: BLE001
            want = type(e)
        try:
            got = compiled(x, m)
        except Exception as e:  # noqa: BLE001
            got = type(e)
        if isinstance(want, type):
            assert got is want
        else:
            _same(got, want)
