"""A loop stepped in Python with its body as a resume function (NOTE [Loops carried across breaks]) runs
any number of steps: each step's tail call into the next resume function bounces back to a driver instead
of nesting two frames (NOTE [Tail calls bounced to a driver] in framejit/capture/lifetimes.py). Before, a
loop of ~500 steps raised RecursionError into the user's program. Differential: eager vs compiled, values,
printed output and eager frames, on lengths below and far above the recursion limit."""
import io
import sys

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames

_OUT = io.StringIO()


def _enumerated(x, rows):
    acc = x * 0
    for j, t in enumerate(rows):
        acc = acc * 0.9 + t
        print(j, end=",", file=_OUT)  # a break in every step
    return acc


def _ranged(x, n):
    acc = x[0] * 0
    for i in range(n):
        acc = acc * 0.9 + x[i]
        print(i, end=",", file=_OUT)
    return acc


def _long():
    return sys.getrecursionlimit() // 2 + 100  # two frames per step nested before: more than the limit allows


def _both(fn, compiled, make):
    """fn's and compiled's results on the same arguments (made by `make()` for each), and what each printed."""
    outs = []
    for g in (fn, compiled):
        _OUT.seek(0), _OUT.truncate()
        outs.append((g(*make()), _OUT.getvalue()))
    torch.testing.assert_close(outs[1][0], outs[0][0])
    assert outs[1][1] == outs[0][1]


def test_enumerate_loop_breaking_every_step_runs_past_the_recursion_limit():
    torch.manual_seed(0)
    backend = CountingBackend()
    compiled = framejit.compile(_enumerated, backend=backend)
    before = eager_frames()
    for n in (_long(), 10, _long() + 100):
        x = torch.randn(n, 2)
        _both(_enumerated, compiled, lambda: (x[0], (r for r in x)))  # a generator: stepped in Python from the start
    assert eager_frames() == before
    assert backend.graph_count <= 4  # the code before the loop and the body: not one entry per step


def test_range_loop_breaking_every_step_runs_past_the_recursion_limit():
    torch.manual_seed(0)
    backend = CountingBackend()
    compiled = framejit.compile(_ranged, backend=backend)
    before = eager_frames()
    for n in (_long(), 10, 7, _long() + 5):  # the first length unrolls the range
        x = torch.randn(n, 3)
        _both(_ranged, compiled, lambda: (x, n))
    assert eager_frames() == before


def test_stepped_loop_raising_midway_raises_eagers_exception_from_deep_steps():
    def f(x, n, stop):
        acc = x[0] * 0
        for i in range(n):
            acc = acc + x[i]
            print(i, end=",", file=_OUT)
            if i == stop:
                raise KeyError(i)
        return acc

    compiled = framejit.compile(f, backend="eager")
    for n, stop in ((_long(), _long() - 3), (8, 100), (9, 4), (_long() + 1, -1)):
        x = torch.randn(n, 2)
        outcome = []
        for fn in (f, compiled):
            _OUT.seek(0), _OUT.truncate()
            try:
                outcome.append(("value", fn(x, n, stop)))
            except KeyError as e:
                outcome.append(("raised", e.args))
            outcome[-1] += (_OUT.getvalue(),)
        assert outcome[0][0] == outcome[1][0] and outcome[0][2] == outcome[1][2]
        if outcome[0][0] == "raised":
            assert outcome[0][1] == outcome[1][1]
        else:
            torch.testing.assert_close(outcome[1][1], outcome[0][1])


def _counted(x, n):
    acc = x[0] * 0
    i = 0
    while i < n:  # the break's resume function continues the while loop: a tail call per step
        acc = acc * 0.9 + x[i]
        print(i, end=",", file=_OUT)
        i += 1
    return acc


def test_while_loop_breaking_every_step_runs_past_the_recursion_limit():
    torch.manual_seed(0)
    compiled = framejit.compile(_counted, backend="eager")
    before = eager_frames()
    for n in (_long(), 10, _long() + 50):
        x = torch.randn(n, 2)
        _both(_counted, compiled, lambda: (x, n))
    assert eager_frames() == before
