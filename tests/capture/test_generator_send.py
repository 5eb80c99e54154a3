"""Generators driven with send(), traced step by step (NOTE [Generators driven by send]).

Differential: each program runs eagerly and under framejit.compile over calls with changing values (and
shapes where stated); results, raised exceptions and effects must agree. Graph counts and frames run
wholly eagerly are asserted where capturing the program in one graph (as stock torch.compile does with
backend=CompileCounter()) is the point.
"""
import pytest
import torch

import framejit
from tests.capture.test_frame_readers2 import _Counter


def _plain(v):
    if isinstance(v, torch.Tensor):
        return ("tensor", tuple(v.shape), [round(a, 5) for a in v.detach().reshape(-1).tolist()])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_plain(a) for a in v])
    if isinstance(v, dict):
        return ("dict", [(k, _plain(a)) for k, a in v.items()])
    return v


def _run(fn, *args):
    try:
        return ("ok", _plain(fn(*args)))
    except Exception as e:  # the same exception type and message as eager
        return ("raised", type(e).__name__, str(e))


def _compare(fn, make_args, calls=3):
    """Runs eagerly and compiled on the same fresh inputs; returns (graphs, eager frames) of the compiled run."""
    framejit.reset()
    counter = _Counter()
    before = framejit.stats().get("eager_frames", 0)
    compiled = framejit.compile(fn, backend=counter)
    for i in range(calls):
        torch.manual_seed(i)
        expected = _run(fn, *make_args(i))
        torch.manual_seed(i)
        got = _run(compiled, *make_args(i))
        assert got == expected, (i, got, expected)
    return counter.graphs, framejit.stats().get("eager_frames", 0) - before


def accumulator():
    total = 0
    while True:
        t = yield total
        total = total + t


def running_mean():
    s, n = None, 0
    while True:
        x = yield (None if s is None else s / n)
        s = x if s is None else s + x
        n += 1


def test_accumulator_made_in_the_frame_is_one_graph():
    def f(x):
        g = accumulator()
        next(g)
        ys = []
        for t in x.unbind(0):
            ys.append(g.send(t))
        return torch.stack(ys)
    graphs, eager = _compare(f, lambda i: (torch.randn(4, 3),))
    assert (graphs, eager) == (1, 0)  # stock torch.compile: 1 graph; before: 3 graphs and breaks


def test_running_mean_primed_with_send_none_over_changing_shapes():
    def f(x):
        g = running_mean()
        g.send(None)
        out = None
        for t in x:
            out = g.send(t * 2)
        return out + 1
    graphs, eager = _compare(f, lambda i: (torch.randn(3, 2),))
    assert (graphs, eager) == (1, 0)
    _compare(f, lambda i: (torch.randn(3 + i, 2 + i),))  # values only: the loop length changes


def test_next_and_send_interleaved_with_the_return_value_of_each():
    def f(x):
        def gen():
            i = 0
            while True:
                r = yield i
                i = i + (1 if r is None else r)
        g = gen()
        a = next(g)
        b = g.send(x)
        c = next(g)
        d = g.send(x * 3)
        e = g.__next__()
        return a, b, c, d, e
    graphs, eager = _compare(f, lambda i: (torch.randn(3),))
    assert (graphs, eager) == (1, 0)


def test_effects_of_the_body_interleave_with_the_consumer_in_eager_order():
    log = []

    def f(x, box):
        def gen():
            while True:
                v = yield
                log.append(("gen", len(box)))
                box.append(v * 2)
        g = gen()
        next(g)
        g.send(x)
        box.append(x - 1)
        log.append(("consumer", len(box)))
        g.send(x + 1)
        return x.sum()

    def run(fn, i):
        log.clear()
        box = []
        torch.manual_seed(i)
        out = fn(torch.randn(3), box)
        return _plain(out), _plain(box), list(log)
    framejit.reset()
    counter = _Counter()
    compiled = framejit.compile(f, backend=counter)
    for i in range(3):
        assert run(compiled, i) == run(f, i)
    assert counter.graphs == 1  # before: 2 graphs (the body ran ahead and raised at v * 2 with v None)


def test_a_generator_driven_by_a_helper_that_calls_send():
    def drive(g, xs):
        return [g.send(t) for t in xs]

    def f(x):
        g = accumulator()
        next(g)
        return drive(g, [x, x * 2, x + 1])
    graphs, eager = _compare(f, lambda i: (torch.randn(2, 3),))
    assert (graphs, eager) == (1, 0)


def test_for_loop_and_list_over_a_generator_written_for_send():
    def gen(n):
        i = 0
        while i < n:
            r = yield i
            i = i + 1 if r is None else r

    def f(x):
        out = [x * v for v in gen(4)]
        g = gen(6)
        next(g)
        z = g.send(3)
        return out, z, list(g), x.sum()
    graphs, eager = _compare(f, lambda i: (torch.randn(3),))
    assert (graphs, eager) == (1, 0)


def test_cpython_errors_of_send():
    def just_started(x):
        g = accumulator()
        return g.send(x)  # TypeError: can't send non-None value to a just-started generator

    def after_return(x):
        def two():
            a = yield 1
            b = yield a + 1
            return a + b
        g = two()
        next(g)
        g.send(3)
        try:
            g.send(4)
        except StopIteration as e:
            first = e.value
        try:
            g.send(5)
        except StopIteration as e:
            return x * first, e.value
        return x
    for fn in (just_started, after_return):
        graphs, eager = _compare(fn, lambda i: (torch.randn(3),))
        assert eager == 0


def test_an_exception_from_the_body_reaches_the_consumer():
    def raiser():
        n = 0
        while True:
            v = yield n
            if v is None:
                raise ValueError("boom")
            n = n + 1

    def caught(x):
        g = raiser()
        next(g)
        a = g.send(x)
        try:
            g.send(None)
        except ValueError as e:
            return x * a, str(e)

    def uncaught(x):
        g = raiser()
        next(g)
        a = g.send(x)
        y = x + a
        g.send(None)
        return y
    graphs, eager = _compare(caught, lambda i: (torch.randn(3),))
    assert (graphs, eager) == (1, 0)
    graphs, eager = _compare(uncaught, lambda i: (torch.randn(3),))
    assert eager == 0


def test_a_break_or_escape_while_it_is_live_moves_before_the_call_that_made_it(capsys):
    def with_print(x):
        g = accumulator()
        next(g)
        a = g.send(x)
        print("between")
        b = g.send(x * 2)
        return a + b

    def returned(x):
        g = accumulator()
        next(g)
        g.send(x)
        return g, x + 1

    graphs, eager = _compare(with_print, lambda i: (torch.randn(3),))
    assert eager == 0
    assert capsys.readouterr().out == "between\n" * 6
    framejit.reset()
    compiled = framejit.compile(returned, backend=_Counter())
    for i in range(2):
        x = torch.randn(3)
        g1, y1 = returned(x)
        g2, y2 = compiled(x)
        assert type(g2) is type(g1) and torch.equal(y1, y2)
        assert torch.equal(g1.send(x), g2.send(x))  # a real suspended generator, in the same state


def test_a_generator_from_outside_stays_a_clean_break():
    def f(g, x):
        y = g.send(x)
        return y * 2

    def make(i):
        g = accumulator()
        next(g)
        return g, torch.randn(3)
    graphs, eager = _compare(f, make)
    assert eager == 0 and graphs >= 1


def test_close_ends_it():
    def f(x):
        g = accumulator()
        next(g)
        a = g.send(x)
        g.close()
        try:
            g.send(x)
        except StopIteration:
            return a * 2
        return a
    graphs, eager = _compare(f, lambda i: (torch.randn(3),))
    assert (graphs, eager) == (1, 0)


def two_steps(x):
    yield x.sin()
    yield x.cos()


def closed_after_one_step(x):
    g = two_steps(x)
    first = next(g)
    closed = g.close()
    return first + 1, closed, list(g)


def thrown_while_suspended(x):
    g = (x * k for k in range(3))
    first = next(g)
    try:
        g.throw(KeyError)
    except KeyError as e:
        first = first + len(e.args) + 2
    return first, next(g, "ended")


def thrown_before_the_first_step(x):
    g = two_steps(x)
    try:
        g.throw(ValueError(x.shape[0]))
    except ValueError as e:
        return x - e.args[0], list(g)


def thrown_no_exception(x):  # CPython's TypeError; the generator goes on
    g = two_steps(x)
    next(g)
    try:
        g.throw(3)
    except TypeError as e:
        return x * 2, str(e), list(g)


def thrown_into_an_accumulator(x):
    g = accumulator()
    next(g)
    a = g.send(x)
    try:
        g.throw(ArithmeticError("stop"))
    except ArithmeticError as e:
        return a + len(str(e)), list(g)


def thrown_into_a_handler(x):  # its handler yields again: traced as before (not by this rule)
    def gen():
        try:
            yield x.sin()
        except ValueError:
            yield x.cos()
    g = gen()
    return next(g) + g.throw(ValueError)


def closed_while_lent_to_zip(x):  # zip drew its rows when made: a break where zip was made, eager's rows
    g = two_steps(x)
    z = zip(g, range(3))
    g.close()
    return x + 1, list(z)


def test_close_and_throw_of_generators_without_handlers():
    """NOTE [Generators ended by close or throw]: one graph each, as stock torch.compile (before: breaks)."""
    for fn in (closed_after_one_step, thrown_while_suspended, thrown_before_the_first_step, thrown_no_exception,
               thrown_into_an_accumulator):
        graphs, eager = _compare(fn, lambda i: (torch.randn(3) + i,), calls=2)
        assert (graphs, eager) == (1, 0), fn.__name__
    for fn in (thrown_into_a_handler, closed_while_lent_to_zip):
        _compare(fn, lambda i: (torch.randn(3),), calls=2)


@pytest.mark.parametrize("calls", [2])
def test_a_module_forward_with_a_send_accumulator(calls):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            g = running_mean()
            next(g)
            out = None
            for row in x:
                out = g.send(self.lin(row))
            return out

    torch.manual_seed(0)
    m = M()
    framejit.reset()
    counter = _Counter()
    compiled = framejit.compile(m, backend=counter)
    for i in range(calls):
        x = torch.randn(4, 3)
        assert torch.allclose(compiled(x), m(x))
    assert counter.graphs == 1
