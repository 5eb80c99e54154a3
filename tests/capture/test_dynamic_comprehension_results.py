"""Dynamic shapes, issue 13: the list a comprehension over a symbolic range makes, read after it (len(),
indexing, slicing, torch.stack, sum, unpacking, mutation), no longer makes the function after the comprehension
compile once per length (NOTE [Comprehension results of changing length] in carried_loops.py). Before, that
resume function was guarded by the list's length: one trace per size until the recompile limit ran it eagerly
(stock torch.compile: one graph per size, then the frame eagerly). Now the list is opaque there from the first
trace: each use runs in Python, and every frame after it is traced at most twice (a tensor built from the list
goes by automatic dynamic). Differential: eager vs compiled on fresh inputs of changing sizes, values, types,
exceptions and a log of side effects compared; per-frame trace counts asserted."""
from __future__ import annotations

import collections

import pytest
import torch

import framejit

SIZES = [3, 5, 7, 4, 9, 6, 11, 2, 8, 10]  # more sizes than the recompile limit (8)
LOG: list = []


def stacked(x):
    ys = [x[i] * i for i in range(x.size(0))]
    return torch.stack(ys).sum(0), len(ys)


def indexed(x):
    ys = [i * 2 for i in range(x.size(0))]
    return x * ys[-1] + len(ys), ys[0]


def summed(x):
    ys = [i for i in range(x.size(0))]
    return x + sum(ys)


def sliced(x):
    ys = [i * i for i in range(x.size(0))]
    return ys[1:], ys[::-1], ys[-2:], ys * 2, ys + [9]


def mutated(x):
    ys = [i for i in range(1, x.size(0))]
    ys.append(100)
    zs = ys
    zs.insert(0, -1)
    return ys, zs is ys, len(ys)


def unpacked(x):  # UNPACK_EX of an opaque list: no break can be taken there, the frame after runs eagerly
    ys = [i for i in range(x.size(0))]
    a, *rest = ys
    return a, rest, x * a


def logged(x):
    LOG.append("a")
    ys = [LOG.append(i) or i for i in range(x.size(0))]
    LOG.append(len(ys))
    return x * sum(ys)


def made_tuple(x):
    t = tuple([i for i in range(x.size(0))])
    return t, len(t), x * len(t)


def extremes(x):
    ys = [i - 3 for i in range(x.size(0))]
    return max(ys), min(ys)


PROGRAMS = [stacked, indexed, summed, sliced, mutated, logged, made_tuple, extremes]


def _outcome(fn, x):
    LOG.clear()
    try:
        result = ("value", fn(x))
    except Exception as e:  # noqa: BLE001 (compared with eager's)
        result = ("raised", type(e), str(e))
    return result, list(LOG)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _run(fn, dynamic, sizes) -> collections.Counter:
    framejit.reset()
    before = len(framejit.stats()["frames"])
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for size in sizes:
        torch.manual_seed(size)
        x = torch.randn(size, 3)
        want, got = _outcome(fn, x.clone()), _outcome(compiled, x.clone())
        assert _same(want, got), (size, want, got)
    return collections.Counter(row["function"] for row in framejit.stats()["frames"][before:]
                               if row["cache"] == "miss")


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_a_comprehension_result_read_after_it_compiles_each_frame_at_most_twice(fn, dynamic):
    eager = framejit.stats()["eager_frames"]
    traces = _run(fn, dynamic, SIZES)
    assert max(traces.values()) <= 2, traces
    assert traces[fn.__name__] <= (2 if dynamic is None else 1), traces
    assert framejit.stats()["eager_frames"] == eager


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", [*PROGRAMS, unpacked], ids=lambda f: f.__name__)
def test_sizes_zero_and_one_raise_and_return_as_eager(fn, dynamic):
    # an empty list: ys[-1], a, *rest = ys and max(ys) raise; size 1: one item
    _run(fn, dynamic, [3, 0, 5, 1, 4, 0, 6])


def test_under_dynamic_true_a_list_of_unchanging_length_stays_in_the_graph():
    # review revO O5: the resume function took the list as opaque from its first trace, so under dynamic=True
    # with a size that never changes `torch.stack(ys)` and `torch.cat(ys)` ran outside every graph; the list
    # is opaque once its length changed (automatic dynamic), as under dynamic=None
    def f(x):
        ys = [x[i] * i for i in range(x.size(0))]
        return torch.stack(ys).relu() * 2 + 1, torch.cat(ys).sum()

    from tests.helpers import CountingBackend
    be = CountingBackend()
    compiled = framejit.compile(f, backend=be, dynamic=True)
    for _ in range(3):
        x = torch.randn(4, 3)
        for got, want in zip(compiled(x), f(x)):
            torch.testing.assert_close(got, want)
    targets = [n.target for gm in be.graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.stack in targets and torch.cat in targets, targets
    for n in (5, 6, 2):  # then lengths change: values still equal, no frame run eagerly
        x = torch.randn(n, 3)
        for got, want in zip(compiled(x), f(x)):
            torch.testing.assert_close(got, want)


def _first_use_star(x):
    ys = [i for i in range(x.size(0))]
    return x * len([*ys, 1])


def _first_use_closure(x):
    ys = [i * 2 for i in range(x.size(0))]

    def g():
        return len(ys) + sum(ys)
    ys.append(100)
    return x * g(), g()


def _first_use_dict(x):
    ys = [i for i in range(x.size(0))]
    d = {"ys": ys, "n": 1}
    return x * (len(d["ys"]) + d["n"])


@pytest.mark.parametrize("fn", [_first_use_star, _first_use_closure, _first_use_dict],
                         ids=["star", "closure", "dict"])
def test_a_list_whose_first_use_cannot_break_is_traced_by_length(fn):
    # review revP P3: an opaque list's first use (LIST_EXTEND, STORE_DEREF, BUILD_CONST_KEY_MAP) is no place for
    # a break, and the resume function ran wholly eagerly from its first call; it is traced again with the
    # list's length guarded (NOTE [Opaque sequences that cannot be carried])
    compiled = framejit.compile(fn, backend="eager")
    before = framejit.stats()["eager_frames"]
    for n in (3, 5, 4, 6):
        x = torch.randn(n)
        got, want = compiled(x), fn(x)
        assert _same(got, want), (got, want)
    assert framejit.stats()["eager_frames"] == before
