"""NOTE [Cells generators close over] (capture/generator_reach.py): a generator, generator expression or map over a
closure, run ahead of its consumer while tracing, must see a closure variable rebound or deleted between its creation
and its iteration as eager's lazy iteration does (review revA F4/F5: the old value was returned, and `del` lost the
NameError)."""
import pytest
import torch

import framejit


def rebound_before_iteration(x):
    t = x
    def gen():
        yield t
    g = gen()
    t = x * 3
    return list(g)


def deleted_then_rebound(x):
    t = x
    def gen():
        yield t + 1
    g = gen()
    del t
    t = x * 3
    return list(g)


def deleted_before_iteration(x):
    t = x
    def gen():
        yield t
    g = gen()
    del t
    try:
        return list(g)
    except NameError as e:
        return str(e)


def map_over_a_lambda(x):
    t = x
    m = map(lambda a: a + t, [x])
    t = x * 3
    return list(m)


def generator_expression(x):
    t = x
    g = (a + t for a in [x])
    t = x * 3
    return list(g)


def unchanged_cell(x):  # nothing rebinds t: the generator still runs ahead, in the graph
    t = x * 2
    def gen():
        for k in range(3):
            yield t + k
    return sum(gen())


PROGRAMS = [rebound_before_iteration, deleted_then_rebound, deleted_before_iteration, map_over_a_lambda,
            generator_expression, unchanged_cell]


def _same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("fn", PROGRAMS, ids=[f.__name__ for f in PROGRAMS])
def test_the_closure_variable_is_read_when_eager_reads_it(fn):
    compiled = framejit.compile(fn, backend="eager")
    eager_frames = framejit.stats()["eager_frames"]
    for n in (2, 3, 2):
        x = torch.arange(float(n))
        _same(compiled(x), fn(x))
    assert framejit.stats()["eager_frames"] == eager_frames


def test_a_generator_over_an_unchanged_cell_stays_in_one_graph():
    compiled = framejit.compile(unchanged_cell, backend="eager")
    report = framejit.explain(unchanged_cell)(torch.ones(3))
    assert report.graph_count == 1 and report.graph_break_count == 0
    _same(compiled(torch.ones(4)), unchanged_cell(torch.ones(4)))


# NOTE [Cells written after a yield] (issue 12): a closure a generator yields over one of its own cells, called while
# the generator is suspended, reads the cell's value at that yield, not the one the rest of the body writes later.
def _scaled():
    s = 1.5
    yield lambda t: (t * s).sin()
    s = 3.0
    yield None


def _per_step():
    for i in range(3):
        yield lambda t: t * i


def closure_never_resumed(x):
    g = _scaled()
    f = next(g)
    return f(x).sum()


def closure_around_a_resume(x):
    g = _scaled()
    f = next(g)
    y = f(x)
    next(g)
    return y.sum(), f(x).sum()


def closure_per_step(x):
    return [f(x) for f in _per_step()]


def closures_after_the_end(x):
    return [f(x) for f in list(_per_step())]


def closure_over_a_cell_set_before_the_yield(x):
    def gen():
        s = 2.0
        yield lambda t: t * s
    return next(gen())(x)


WRITTEN_AFTER = [closure_never_resumed, closure_around_a_resume, closure_per_step, closures_after_the_end,
                 closure_over_a_cell_set_before_the_yield]


@pytest.mark.parametrize("fn", WRITTEN_AFTER, ids=[f.__name__ for f in WRITTEN_AFTER])
def test_a_yielded_closure_reads_the_cell_as_the_suspended_generator_left_it(fn):
    compiled = framejit.compile(fn, backend="eager")
    for n in (2, 3, 2):
        x = torch.arange(float(n)) / 3 + n
        a, b = compiled(x), fn(x)
        _same(list(a) if isinstance(a, tuple) else a, list(b) if isinstance(b, tuple) else b)
    report = framejit.explain(fn)(torch.ones(3))  # traced lazily, still in one graph
    assert report.graph_count == 1 and report.graph_break_count == 0
