"""LR schedulers whose step counter is read in ways that pinned it (issue 13): inside a compiled train step,
PolynomialLR (`(...) ** power`), MultiStepLR (`last_epoch not in self.milestones`, a Counter), SequentialLR
(`bisect_right(self._milestones, last_epoch)`) and ReduceLROnPlateau (`a < best * rel_epsilon`) compiled once per
step until the recompile limit ran the frame eagerly. Now: NOTE [Float bases to int powers] (whole float powers)
in sym_arith.py, NOTE [Symbolic ints looked up in dicts and sets] and NOTE [Comparisons of computed dynamic
floats] in comparisons.py, NOTE [Bisecting by a symbolic int] in stdlib.py.

Stock torch.compile(backend=CompileCounter) over the same 12 steps compiles 3-5 frames; framejit's graph counts
(each resume function its own graph) are bounded below, with no eager frame and eager's values at every step.
"""
from __future__ import annotations

import bisect
import collections

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames

S = torch.optim.lr_scheduler
SCHEDULERS = {  # name: (make, graphs at most over 12 steps; before: recompile limit + eager frame for all four)
    "poly": (lambda o: S.PolynomialLR(o, total_iters=8, power=2.0), 6),
    "multistep": (lambda o: S.MultiStepLR(o, milestones=[3, 7], gamma=0.5), 9),
    "sequential": (lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.3, total_iters=3),
                                                S.ExponentialLR(o, gamma=0.9)], milestones=[4]), 8),
    "plateau": (lambda o: S.ReduceLROnPlateau(o, patience=1, factor=0.5), 11),  # 10 when `a < best * rel_epsilon`
    # broke on every call (NOTE [Comparisons of computed floats guarded by replay]: 27 traces -> 23, fewer breaks)
}


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _make(kind: str):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    return model, opt, SCHEDULERS[kind][0](opt)


def train_step(model, opt, sched, x):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if isinstance(sched, S.ReduceLROnPlateau):
        sched.step(loss.detach())
    else:
        sched.step()
    return loss


@pytest.mark.parametrize("kind", sorted(SCHEDULERS))
def test_a_scheduler_in_a_compiled_train_step_keeps_its_counter_symbolic(kind):
    eager, compiled = _make(kind), _make(kind)
    backend, before = CountingBackend(), eager_frames()
    step = framejit.compile(train_step, backend=backend)
    lrs = set()
    for i in range(12):
        x = torch.randn(3, 4) * (1 if i % 3 else -3)
        torch.testing.assert_close(step(*compiled, x), train_step(*eager, x), rtol=0, atol=0)
        assert compiled[1].param_groups[0]["lr"] == eager[1].param_groups[0]["lr"]
        for p, q in zip(compiled[0].parameters(), eager[0].parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        lrs.add(eager[1].param_groups[0]["lr"])
    assert len(lrs) >= 3  # the schedule really moved
    assert eager_frames() == before
    assert backend.graph_count <= SCHEDULERS[kind][1], backend.graph_count


def _count(fn, make_args, values):
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(fn, backend=backend)
    for v in values:
        torch.testing.assert_close(compiled(*make_args(v)), fn(*make_args(v)), rtol=0, atol=0)
    assert eager_frames() == before
    return backend.graph_count


MILESTONES = collections.Counter([3, 7, 7])
TABLE = {2: "a", "k": 0, 9.0: None}


def membership(x, n):
    return x * (n in MILESTONES) + (n not in TABLE) * 10


def test_a_symbolic_int_in_a_dict_of_numbers_is_a_relation_per_key():
    """Was one compilation per value (the int looked up by value). Now: the first value, the symbolic entry
    for every value in none of the keys, and one per key met (3, 7, 2, 9)."""
    n = _count(membership, lambda v: (torch.ones(2), v), [1, 4, 5, 6, 8, 10, 11, 12, 13, 3, 7, 2, 9, 5, 9])
    assert n <= 6, n


BOUNDS = [4, 8]
UNSORTED = [5, 1, 9, 3]


def bisecting(x, n):
    return x * bisect.bisect_right(BOUNDS, n) + bisect.bisect_left(UNSORTED, n) * 10


def test_bisect_by_a_symbolic_int_gives_eagers_index_with_few_entries():
    """Eager's index at every value (also over an unsorted list, searched by the same midpoints); was one
    compilation per value."""
    n = _count(bisecting, lambda v: (torch.ones(2), v), [0, 1, 2, 5, 6, 7, 10, 11, 12, 4, 8, 9, -3, 3, 100])
    assert n <= 10, n


class _State:
    pass


def polynomial(s, x):
    s.g["lr"] = s.g["lr"] * ((1.0 - s.n / 8) / (1.0 - (s.n - 1) / 8)) ** 2.0
    return x * 2


def test_a_float_of_symbolic_ints_to_a_whole_float_power_stays_symbolic():
    backend = CountingBackend()
    compiled = framejit.compile(polynomial, backend=backend)
    a, b = _State(), _State()
    a.g, b.g = {"lr": 0.5}, {"lr": 0.5}
    for n in range(1, 8):
        a.n = b.n = n
        torch.testing.assert_close(compiled(b, torch.ones(2)), polynomial(a, torch.ones(2)), rtol=0, atol=0)
        assert a.g["lr"] == b.g["lr"]
    assert backend.graph_count == 2  # was 7: one per step


def plateau_like(x, s, a):
    if a < s.best * (1.0 - 1e-4):
        s.best = a
        s.bad = 0
    else:
        s.bad += 1
    return x * s.bad


def test_a_comparison_of_computed_dynamic_floats_keeps_eagers_branch():
    """`a < best * (1 - eps)` of dynamic floats: eager's branch at every call, including values at the
    boundary; was one compilation per value, then eager for good."""
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(plateau_like, backend=backend)
    e, c = _State(), _State()
    e.best = c.best = 1.0
    e.bad = c.bad = 0
    for a in [0.9, 0.95, 0.8, 0.8 * (1.0 - 1e-4), 0.7, 0.75, 0.6, 0.65, 0.5, 0.55, 0.4, 0.3]:
        torch.testing.assert_close(compiled(torch.ones(2), c, a), plateau_like(torch.ones(2), e, a))
        assert (c.best, c.bad) == (e.best, e.bad)
    assert eager_frames() == before
    assert backend.graph_count <= 5, backend.graph_count
