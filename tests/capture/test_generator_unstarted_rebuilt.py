"""A generator made in the compiled region and never started is returned (alone, in a tuple, inside a zip) in one
graph, rebuilt after it by calling its function again (NOTE [Unstarted generators rebuilt by their call] in
framejit/capture/unstarted_generators.py). Before, it broke where it was made (fullgraph=True raised "a
generator made in the compiled region escapes it"; PyTorch's test_generator.py test_return_generator,
test_return_tuple_generator, test_zip_generator, test_zip_subgenerator).

Differential: eager vs compiled on fresh inputs of two sizes; the returned generators are drained after the call
(their bodies run then, in the state of that moment, as in eager), and what they logged is compared too.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []


def whoo(t):
    yield t + 1
    yield t + 2


def logged(t, tag):
    LOG.append(("start", tag))  # runs when the first item is drawn, not when the generator is made
    yield t * 2
    LOG.append(("end", tag))
    yield t.cos()


def subgen(t):
    yield t + 1
    yield t + 2


def delegating(t):
    yield from subgen(t)
    yield t + 3


def returns_one(t):
    return whoo(t)


def returns_tuple(t):
    g1, g2 = whoo(t), whoo(t + 1)  # t + 1 is made by the graph: an output the rebuilt call reads
    return (g1, g2), t.sin()


def returns_zip(t):
    return zip(range(3), whoo(t * 3)), t.sin()


def returns_zip_of_delegating(t):
    return zip(range(3), delegating(t)), t.sin()


def returns_logged(t):
    g = logged(t - 1, "a")
    LOG.append(("made", 0))
    return g, t.sin()


def returns_closure_generator(t):
    k = 1

    def inner():
        yield t + k

    g = inner()
    k = 2  # read when the generator runs: after the call
    return g


def _drain(value):
    if isinstance(value, tuple):
        return tuple(_drain(v) for v in value)
    if hasattr(value, "__next__"):
        return [_drain(v) for v in value]
    return value


def _check(fn, fullgraph=True):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    for n in (2, 3, 3):
        t = torch.randn(n)
        del LOG[:]
        expected = fn(t)
        made_eager = list(LOG)
        expected = _drain(expected)
        log_eager = list(LOG)
        del LOG[:]
        actual = compiled(t.clone())
        made_compiled = list(LOG)
        actual = _drain(actual)
        assert made_compiled == made_eager  # the generator's body did not run inside the call
        assert list(LOG) == log_eager
        assert_same(actual, expected)
    return backend


def test_returned_unstarted_generators_are_one_graph():
    for fn in (returns_one, returns_tuple, returns_logged):
        _check(fn)
    _check(started_then_returned, fullgraph=False)  # started: still the break where it was made
    _check_not_rebuilt()


def test_unstarted_generator_inside_returned_zip():
    for fn in (returns_zip, returns_zip_of_delegating):
        backend = _check(fn)
        assert backend.graph_count == 2  # one per size (2, then 3 with a recompile), no break


def test_unstarted_generator_reads_its_cells_when_drained():
    _check(returns_closure_generator)


def started_then_returned(t):
    g = whoo(t)
    first = next(g)
    return g, first


OUTSIDE_IT = None


def over_outside_iterator():
    for v in OUTSIDE_IT:
        yield v


def returns_generator_over_outside_iterator(t):
    return over_outside_iterator(), t + 1


def returns_genexpr(t):
    pairs = [t + 1, t * 2]
    return (p.sum() for p in pairs), t


def _check_not_rebuilt():
    # the run ahead drained the outside iterator, and a generator expression's own argument (an iterator over
    # `pairs`): calling the function again after the graph would see them drained (eager: untouched)
    global OUTSIDE_IT
    for fn in (returns_generator_over_outside_iterator, returns_genexpr):
        compiled = framejit.compile(fn)
        for n in (2, 3):
            t = torch.randn(n)
            OUTSIDE_IT = iter([1, 2, 3])
            expected = _drain(fn(t))
            OUTSIDE_IT = iter([1, 2, 3])
            actual = _drain(compiled(t.clone()))
            assert_same(actual, expected)


def _made_default_list(x):
    acc = []

    def gen(t, out=acc):  # the run ahead's append reaches a list the frame made, through a default
        out.append(len(out))
        yield t + len(out)

    return gen(x), acc


def _made_kwdefault_dict(x):
    acc = {"n": 0}

    def gen(t, *, out=acc):
        out["n"] += 1
        yield t * out["n"]

    return gen(x), acc


def test_a_generator_writing_a_default_the_frame_made_runs_its_body_once():
    """revAQ HIGH-1: the generator was rebuilt by its call while the run ahead's write through the default was
    replayed too: the list held [0] right after the call (eager: []) and [0, 1] after draining (eager: [0])."""
    for fn in (_made_default_list, _made_kwdefault_dict):
        compiled = framejit.compile(fn, backend="eager")
        for n in (2, 3, 3):
            x = torch.randn(n)
            runs = []
            for call in (fn, compiled):
                g, acc = call(x)
                before = repr(acc)
                runs.append((before, list(g), repr(acc)))
            assert runs[1][0] == runs[0][0] and runs[1][2] == runs[0][2], (fn.__name__, runs)
            assert_same(runs[1][1], runs[0][1])


def _reads_box(box):
    for v in box[0]:
        yield v


def _zip_over_an_iterator_made_after_the_call(x):
    box = [None]
    g = _reads_box(box)
    it = iter([1, 2, 3])
    box[0] = it
    return zip(range(2), g), it, x + 1


def test_a_step_drawing_an_iterator_the_frame_made_after_the_call_keeps_it_drawn_once():
    """revAQ HIGH-0: the zip's first-row step drew `it` (made after the generator's call) in the trace and the
    rebuilt generator drew it again after the graph: reading `it` first gave [3] where eager gives [1, 2, 3];
    draining the zip first gave [(0, 3)] where eager gives [(0, 1), (1, 2)]."""
    compiled = framejit.compile(_zip_over_an_iterator_made_after_the_call, backend="eager")
    for n, zip_first in ((2, False), (3, True), (3, False)):
        x = torch.randn(n)
        runs = []
        for call in (_zip_over_an_iterator_made_after_the_call, compiled):
            z, it, y = call(x)
            runs.append((list(z), list(it), y) if zip_first else (list(it), list(z), y))
        assert runs[1][:2] == runs[0][:2]
        assert_same(runs[1][2], runs[0][2])
