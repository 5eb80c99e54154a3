"""Graph breaks inside comprehensions, across CPython 3.11, 3.12 and 3.13 (issue 15; NOTE [Breaks inside
inlined comprehensions] in capture/inlined_comprehensions.py).

3.11 makes a list, dict or set comprehension a function of its own; 3.12+ inline it into the frame (PEP 709).
A break inside one (a print, a framejit.disable'd call) used to leave everything after the comprehension
running as uncaptured Python on 3.12/3.13 (0 graphs where 3.11 and stock torch.compile make 2). Each program
is compiled and compared with eager on fresh inputs (values, printed output, over 3 calls with changing
shapes); what is asserted (the code after the comprehension is in a graph, no more graphs than 3.11 makes,
no frame run wholly eagerly) holds on every supported version alike.
"""
from __future__ import annotations

import sys

import pytest
import torch

import framejit
from tests.capture.test_version_forms import fresh, run_compared


@framejit.disable
def _opaque(t):
    return t * 2


def _logged(t):
    print("logged", tuple(t.shape))
    return t + 1


def stored(x):
    y = [print(i) or x * i for i in range(3)]
    return (sum(y) + 1).tanh()


def in_a_call(x):
    return sum([print(i) or x * i for i in range(3)]).tanh()


def returned(x):
    return [print(i) or x * i for i in range(2)], x.tanh()


def nested(x):
    y = [[print(i, j) or x * (i + j) for j in range(2)] for i in range(2)]
    return (y[1][1] + y[0][0]).tanh()


def two_for_clauses(x):
    return sum([x * i * j for i in range(2) for j in range(2) if print(i, j) is None]).tanh()


def dict_comprehension(x):
    d = {f"k{i}": print(i) or x * i for i in range(3)}
    return (d["k1"] + d["k2"]).tanh(), sorted(d)


def set_comprehension(x):
    s = {print(i) or i * 2 for i in range(3)}
    return (x * sum(s)).tanh()


def shadows_a_local(x):
    i = 10
    y = [_opaque(x) * i for i in range(2)]
    return (y[0] + y[1] + i).tanh()


def result_named_like_its_variable(x):
    i = 5
    i = [print(i) or x * i for i in range(2)]
    return (i[1] - x).tanh()


def closure_over_the_loop_variable(x):
    fs = [print(i) or (lambda: x * i) for i in range(3)]
    return (fs[0]() + fs[2]()).tanh()


def in_a_loop(x):
    acc = x
    for k in range(2):
        acc = acc + sum([print(k, i) or x * i for i in range(2)])
    return acc.tanh()


@pytest.mark.parametrize("fn", [stored, in_a_call, returned, nested, two_for_clauses, dict_comprehension,
                                set_comprehension, shadows_a_local, result_named_like_its_variable,
                                closure_over_the_loop_variable], ids=lambda f: f.__name__)
def test_code_after_a_comprehension_that_breaks_is_captured(fn):
    """3.12/3.13 before: the tanh after the comprehension ran as plain Python (no graph held it; `nested`,
    `stored`: 0 graphs). 3.11 and stock torch.compile (3.11, 3.12): 2 graphs over these 3 calls."""
    backend, eager = run_compared(fn, fresh)
    assert eager == []
    assert any(n.target in (torch.tanh, "tanh") for gm in backend.graphs for n in gm.graph.nodes)
    assert backend.graph_count <= 2


def walrus_bound_before(x):
    t = x
    y = [(t := _opaque(t) + i) for i in range(3)]
    return (t + y[0]).tanh()


def walrus_first_bound_inside(x):
    y = [(t := _opaque(x) * i) for i in range(3)]
    return t + y[0]


def raises_inside(x):
    i = 3
    try:
        y = [1 / (i - 1) for i in range(2) if print(i) is None]
    except ZeroDivisionError:
        return x * i
    return x + len(y)


def calls_a_function_that_breaks(x):
    parts = [_logged(x * i) for i in range(2)]
    return torch.stack(parts, dim=0).mean(dim=0, keepdim=False)


def in_a_try_block(x):
    try:
        y = [_logged(x * i) for i in range(2)]
    except ValueError:
        y = [x]
    return y[-1] * 3


def in_a_with_block(x):
    with torch.no_grad():
        y = [_logged(x * i) for i in range(2)]
    return y[1] + 1


# 3.11 runs these frames wholly eagerly, as stock torch.compile does on 3.11 (0 graphs for in_a_loop): the
# `<listcomp>` closure shares a cell the frame assigns again (NOTE [Cells at breaks]); inlined, they need none
_ELEVEN_EAGER = (in_a_loop, walrus_bound_before, walrus_first_bound_inside)


@pytest.mark.parametrize("fn", [in_a_loop, walrus_bound_before, walrus_first_bound_inside, raises_inside,
                                calls_a_function_that_breaks, in_a_try_block, in_a_with_block],
                         ids=lambda f: f.__name__)
def test_comprehension_forms_that_break(fn):
    """A comprehension in a loop (3.12 before: the code after the loop uncaptured), walrus targets (bound
    before, or first bound inside: that one keeps the break where it is), an exception raised inside and
    handled outside (the iteration variable restored), callees that break (called through their frame
    hooks), and comprehensions inside try and with blocks."""
    backend, eager = run_compared(fn, fresh)
    if sys.version_info >= (3, 12) or fn not in _ELEVEN_EAGER:
        assert eager == []
    if fn is in_a_loop and sys.version_info >= (3, 12):
        assert any(n.target in (torch.tanh, "tanh") for gm in backend.graphs for n in gm.graph.nodes)


# ---- nested functions with defaults made before a break (NOTE [Defaults of closures guarded by code]) -----
def _many(call):
    torch.manual_seed(call)
    return (torch.randn(3 + call % 2), (2, 3, 2, 5)[call % 4])


def annotated_with_defaults(x, k):
    w = x.sum()

    def inner(a: int, b: "T" = None, *, c: float = 2.5) -> torch.Tensor:
        return a * w + c
    print("mid")
    return inner(2), sorted(inner.__annotations__)


def default_from_an_argument(x, k):
    w = x.sum()

    def g(a, b=k):
        return a * b + w
    print("mid")
    return g(x), g.__defaults__


def keyword_default_from_an_argument(x, k):
    w = x.sum()

    def g(a, *, b=k * 1.5):
        return a * b + w
    print("mid")
    return g(x), g.__kwdefaults__


def default_tensor(x, k):
    w = x * k

    def g(a, t=w):
        return a + t
    print("mid")
    return g(x)


def defaults_reassigned(x, k):
    w = x.sum()

    def g(a, b=2):
        return a * b + w
    if k == 3:
        g.__defaults__ = (10,)
    print("mid")
    return g(x), g.__defaults__


def mutable_default(x, k):
    w = x.sum()

    def g(a, acc=[]):
        acc.append(k)
        return a * len(acc) + w
    print("mid")
    return g(x), g(x)


def called_at_a_second_break(x, k):
    def g(a, b=k):
        print("g", b)
        return a * b
    print("mid")
    return g(x)


def keyword_default_called_at_a_second_break(x, k):
    def g(a, *, b=k):
        print("g", b)
        return a * b
    print("mid")
    return g(x) + 1


@pytest.mark.parametrize("fn", [annotated_with_defaults, default_from_an_argument, keyword_default_from_an_argument,
                                default_tensor, defaults_reassigned, mutable_default, called_at_a_second_break,
                                keyword_default_called_at_a_second_break], ids=lambda f: f.__name__)
def test_nested_function_with_defaults_live_across_a_break(fn):
    """A nested function with defaults (and annotations) made before a break and used after it: guarded by
    identity, its resume function recompiled on every call (a new function object each time) and ran
    eagerly from the recompile limit on (annotated_with_defaults over 12 calls: 9 graphs and an eager frame;
    stock torch.compile 2 graphs). Values still follow the defaults of each call (from an argument, a
    tensor, reassigned, a mutable default; the function called where it breaks itself goes through the hook
    of the object of this call, not one fixed for the traced object: "g 2" was printed for k = 3 and 5 while
    a fixed hook served it)."""
    backend, eager = run_compared(fn, _many, calls=12)
    assert eager == []
    assert backend.graph_count <= 6


def _with_function(call):
    torch.manual_seed(call)
    k = (2, 3, 2, 5)[call % 4]

    def g(a, b=k):
        print("g", b)
        return a * b
    return torch.randn(3), g


def function_passed_in(x, g):
    y = x + 1
    return g(y)


def test_function_with_defaults_passed_in_and_breaking():
    """A nested function made by the caller with other defaults on each call, breaking inside: each call
    runs the object it was given (NOTE [Defaults of closures guarded by code])."""
    backend, eager = run_compared(function_passed_in, _with_function, calls=6)
    assert eager == []
