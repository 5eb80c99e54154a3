"""Graph breaks in frames with cell variables (NOTE [Cells at breaks] in framejit/capture/graph_break.py),
and closures guarded by their code rather than their identity (NOTE [Closures guarded by code] in
framejit/capture/values/builder.py).

A frame whose local is captured by a nested function passes the variable's value to its resume function,
which puts it into a new cell. That is exact unless a closure made before the break shares the old cell
and the variable is assigned again later: then the frame runs eagerly. Each case runs eagerly and
compiled on three fresh input sets (tests/helpers.run_differential) and asserts the number of graphs.
"""
from __future__ import annotations


import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def one(*shape):
    return lambda seed: (torch.randn(*shape),)


def closure_after_break(x):
    y = x * 2
    print("break")
    g = lambda t: t + y  # noqa: E731 - a closure over the cell y, made after the break
    return g(x)
def closure_before_break_read_only(x):
    scale = x.sum() * 0 + 2
    g = lambda t: t * scale  # noqa: E731 - shares scale's cell across the break; scale is not assigned again
    y = g(x)
    print("break")
    return g(y)
def nonlocal_writer_before_break(x):
    total = x.sum()

    def add(t):
        nonlocal total
        total = total + t.sum()
    print("made")
    add(x)
    add(x * 2)
    return total
def nonlocal_writer_after_break(x):
    total = x.sum()
    print("break")

    def add(t):
        nonlocal total
        total = total + t.sum()
    add(x)
    add(x * 2)
    return total
def closures_in_loop(x):
    fs = []
    for i in range(3):
        fs.append(lambda: x * i)  # noqa: B023 - every closure sees the last i, as Python does
        print("made", i)
    return [f() for f in fs]
def cell_in_try(x, log):
    try:
        y = x * 2
        print("in try")
        f = lambda: y + 1  # noqa: E731
        z = f()
    finally:
        log.append("finally")
    return z
def key_closure_item(x):
    k = 3
    out = [x * i for i in range(k)]
    print(len(out))
    return sorted(out, key=lambda t: t.sum().item() * k)


CASES = [
    # x*2 before the print; the resume graph: the closure's t + y: 2
    (closure_after_break, one(3), 2),
    # sum, mul, add, the closure's t*scale before the print; g(y) in the resume: 2
    (closure_before_break_read_only, one(3), 2),
    # add() is made before the print and assigns total later: sum before the print; the resume function
    # gets the frame's cell of total and inlines add() twice (NOTE [Cells passed to resume functions]): 2
    (nonlocal_writer_before_break, one(3), 2),
    # sum before the print; the resume inlines add() twice, writing its own new cell: 2
    (nonlocal_writer_after_break, one(3), 2),
    # i is assigned again by the loop after closures over its cell were made; the first iteration's graph is
    # empty. The loop's resume function holds `fs`, opaque, then traced by its length (NOTE [Opaque sequences
    # that cannot be carried]; before e5688aa it ran wholly eagerly on 3.11, 0 graphs): one graph (`x * i`)
    (closures_in_loop, one(3), 1),
    (cell_in_try, lambda s: (torch.randn(3), []), 2),
    # the comprehension's graph; sorted() calls the key (with .item()) in plain Python: 1
    (key_closure_item, one(3), 1),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_break_with_cells(fn, make_args, graphs):
    backend = run_differential(fn, make_args, fullgraph=False, seeds=(0, 1, 2))
    assert backend.graph_count == graphs


def takes_fn(x, fn):
    return fn(x) + 1


def test_closure_made_per_call_is_guarded_by_code():
    """A lambda over a tensor, made anew for every call: one graph, the tensor read through the closure."""
    backend = CountingBackend()
    compiled = framejit.compile(takes_fn, backend=backend)
    for _ in range(4):
        w = torch.randn(3)
        g = lambda t: t * w  # noqa: E731
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, g), takes_fn(x, g))
    assert backend.graph_count == 1


def test_closure_with_other_code_recompiles():
    backend = CountingBackend()
    compiled = framejit.compile(takes_fn, backend=backend)
    w = torch.randn(3)
    for g in (lambda t: t * w, lambda t: t - w):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, g), takes_fn(x, g))
    assert backend.graph_count == 2


def test_float_in_closure_and_module_attribute_become_dynamic():
    """A float read through a closure or a module attribute that changes between calls becomes a graph
    input after its first change (NOTE [Dynamic floats])."""
    backend = CountingBackend()
    compiled = framejit.compile(takes_fn, backend=backend)
    for s in (1.0, 2.0, 3.0, 4.0):
        g = lambda t: t * s  # noqa: E731, B023
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, g), takes_fn(x, g))
    assert backend.graph_count == 2

    class Annealed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tau = 1.0

        def forward(self, x):
            return torch.softmax(x / self.tau, -1)

    model, backend = Annealed(), CountingBackend()
    compiled_model = framejit.compile(model, backend=backend)
    for step in range(5):
        model.tau = 1.0 / (step + 1)
        x = torch.randn(4)
        torch.testing.assert_close(compiled_model(x), model(x))
    assert backend.graph_count == 2


def test_nonlocal_assignment_through_a_closure_passed_in_is_a_break():
    """Writing a closure's cell that came from outside (guarded by code) is not modelled: a break, and the
    write happens in plain Python (the caller sees it)."""
    def make():
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t * count
        return bump, lambda: count

    bump, read = make()
    bump_ref, read_ref = make()
    compiled = framejit.compile(takes_fn, backend=CountingBackend())
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, bump), takes_fn(x, bump_ref))
    assert read() == read_ref() == 3


def loop_closure_then_rebind(x):
    k = 1.0
    for i in range(2):
        x.sum().item()  # a break in every step: the loop runs as Python from its second step
        f = lambda: x * k  # noqa: E731
    k = 3.0
    return f(), k


def row_closures_then_rebind(x):
    fns, k = [], 1.0
    for r in list(x.unbind(0)):
        print(r.max().item() > 0)
        fns.append(lambda: x * k)
    k = 3.0
    return [f() for f in fns]


def loop_closure_then_nonlocal_write(x):
    k = 1.0
    for i in range(3):
        x.sum().item()
        g = (x * k for _ in range(2))  # a generator expression closes over k too
    def bump():
        nonlocal k
        k = k + 2.0
    bump()
    return list(g), k


def loop_closure_then_del(x):
    k = 1.0
    for i in range(2):
        x.sum().item()
        f = lambda: x * k  # noqa: E731
    del k
    try:
        return f()
    except NameError as e:
        return str(e)


@pytest.mark.parametrize("fn", [loop_closure_then_rebind, row_closures_then_rebind, loop_closure_then_nonlocal_write,
                                loop_closure_then_del], ids=lambda f: f.__name__)
def test_a_closure_made_by_a_loop_run_as_python_shares_the_frames_cell(fn):
    """NOTE [Closures made by a loop run as Python] (break_callees.py): the closure made in the loop's later
    steps (run as Python after the break) closed over the trampoline's cell, and the code after the loop
    rebound k in a new cell: the closure read the old k (x * 1, eager x * 3; review revM HIGH-2)."""
    run_differential(fn, lambda s: (torch.randn(3, 2),), fullgraph=False, seeds=(0, 1))
