"""In-place writes of inputs that autograd tracks, in graphs with an op inside a try or with-block (NOTE [Rewound
histories] in framejit/capture/handler_reruns.py; hhuntHF6 MED-1).

A StaticCache-like buffer written with `index_copy_` under grad mode becomes a non-leaf after the first step;
its write in a graph under a handler was a graph break on every step (transformers' StaticLayer.update writes
the cache inside `try: ... except NotImplementedError`), where stock torch.compile keeps one graph. Now the
graph keeps the write; when it raises at run time, the buffer's values, version counter and autograd history
are put back before the eager rerun. Each case runs eagerly and compiled on fresh inputs, comparing results,
the written buffer, its version counter, its grad_fn and the gradients of a backward through all steps.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend


class CacheStep(torch.nn.Module):
    """A decode step: project, write the cache row in place, read the whole cache (hhuntHF6 t_inplace_try.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)

    def forward(self, x, cache, pos):
        try:
            row = self.proj(x)
            cache.index_copy_(0, pos, row)
            return (cache * 2).sum(0)
        finally:
            pass


def _decode(step, model, steps=4):
    """Steps writing rows 0.. of one cache under grad mode, then a backward through all of them."""
    torch.manual_seed(0)
    cache, outs = torch.zeros(6, 3), []
    for i in range(steps):
        outs.append(step(torch.randn(1, 3) * (i + 1), cache, torch.tensor([(i * 5) % 6])))
    model.zero_grad()
    (sum(o.sum() for o in outs) + cache.sum()).backward()
    return outs, cache.detach().clone(), cache._version, type(cache.grad_fn).__name__, \
        [p.grad.clone() for p in model.parameters()]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def test_a_cache_written_under_grad_inside_try_keeps_stocks_graph_count():
    """Stock torch.compile: 2 graphs (one before the cache requires grad, one after), no break; framejit had 3
    graphs and a break at `index_copy_` on every step after the first."""
    framejit.reset()
    torch.manual_seed(1)
    model = CacheStep()
    expected = _decode(model, model)
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    for _ in range(2):  # the second loop runs on the entries of the first
        assert _same(_decode(compiled, model), expected)
    assert backend.graph_count == 2
    explained = framejit.explain(model.forward)(torch.randn(1, 3), torch.zeros(6, 3) * torch.ones(3, requires_grad=True),
                                                torch.tensor([1]))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def _chain(node) -> list:
    """The names of the autograd nodes along first connected edges (an in-place op's first edge is the history
    before it): one IndexCopyBackward0 per write of the cache, one CopySlices per write of a view into its base."""
    names = []
    while node is not None:
        names.append(type(node).__name__)
        node = next((edge for edge, _ in node.next_functions if edge is not None), None)
    return names


def write_then_index(x, w, cache, pos, idx, log):
    try:
        cache.index_copy_(0, pos, (x * w).unsqueeze(0))
        return (cache * 2).sum(0) + x[idx]
    except IndexError as e:
        log.append(str(e))
        return cache.sum(0) * 3


def _failing_calls(fn, tracked: bool):
    """Good and bad indices alternate: `x[idx]` fails after the write (the graph's write is in the cache's history
    when it raises), `pos` out of range fails in the write itself (nothing written into the history)."""
    w = torch.randn(3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    cache = torch.zeros(6, 3) * w if tracked else torch.zeros(6, 3)
    outs, log, versions = [], [], []
    for i, (pos, idx) in enumerate([(0, 1), (1, 7), (2, 0), (9, 2), (3, 5), (4, 2)]):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        outs.append(fn(x, w, cache, torch.tensor([pos]), torch.tensor([idx]), log))
        versions.append(cache._version)
    (sum(o.sum() for o in outs) + (cache * torch.arange(18.0).view(6, 3)).sum()).backward()
    writes = _chain(cache.grad_fn).count("IndexCopyBackward0")  # a failed write cut off (NOTE [Rewound histories])
    return outs, cache.detach().clone(), versions, log, type(cache.grad_fn).__name__, w.grad.clone(), writes


@pytest.mark.parametrize("tracked", [True, False], ids=["non_leaf_cache", "cache_made_tracked"])
def test_a_graph_failing_after_the_write_reruns_on_the_history_before_it(tracked):
    """The graph raises IndexError after `index_copy_` rebased the cache's history: the rerun writes on the history
    before the call (eager writes once), so values, versions, the handler's log and gradients are eager's; and
    the write stays in one graph."""
    framejit.reset()
    expected = _failing_calls(write_then_index, tracked)
    backend = CountingBackend()
    compiled = framejit.compile(write_then_index, backend=backend)
    got = _failing_calls(compiled, tracked)
    assert _same(got, expected), (got, expected)
    assert backend.graph_count == (1 if tracked else 2)  # an untracked cache recompiles once it is tracked


class RunCounting(CountingBackend):
    """Also counts the calls of its graphs (a call rerun eagerly from its entry check runs none)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        forward = super().__call__(gm, example_inputs)

        def run(*args):
            self.runs += 1
            return forward(*args)
        return run


def test_a_tracked_view_where_the_trace_saw_none_recompiles():
    """A view's write changes its base's history too, which the snapshot does not cover (the failed write's
    CopySlices stayed in the base's history). The entry traced with no view guards that its written input is none
    (revAO MED-1: each view call failed the entry check and ran the whole frame eagerly, silently): the view
    retraces once, its write breaks as before NOTE [Rewound histories], and every later call runs graphs."""
    framejit.reset()
    backend = RunCounting()
    compiled = framejit.compile(write_then_index, backend=backend)
    runs = []
    for view in (False, True, False, True, True):
        seen = []
        runs.append(-backend.runs)
        for fn in (write_then_index, compiled):
            w = torch.ones(3, requires_grad=True)
            base = torch.zeros(8, 3) * w
            cache, log = (base[:6] if view else base[:6].clone()), []
            out = fn(torch.arange(3.0), w, cache, torch.tensor([1]), torch.tensor([4]), log)
            (out.sum() + base.sum() + cache.sum()).backward()
            seen.append((out, cache.detach().clone(), cache._version, log, w.grad.clone(), _chain(base.grad_fn)))
        assert _same(*seen), seen
        runs[-1] += backend.runs
    assert backend.graph_count == 3  # the first trace's graph; the view's: before the write, after it
    assert all(runs), runs  # no call ran without its graphs


def add_then_index(cache, p, x, idx, accumulate):
    try:
        cache.add_(p) if accumulate == "add" else cache.mul_(p)
        return x[idx] + cache.sum()
    except IndexError:
        return cache.sum() * 3


def _retaining_calls(fn, accumulate, retain_at):
    """A non-leaf cache that retains its grad, from the start or only after the first call, written by an
    accumulating op whose failed call must leave no trace in the history (revAO HIGH-1: the failed add_/mul_
    stayed, p.grad counted it twice)."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    p = torch.tensor([0.5, 0.25, 1.5], requires_grad=True)
    cache, outs = w * 2, []
    for i, idx in enumerate((0, 7, 1, 9, 2, 8)):
        if i == retain_at:
            cache.retain_grad()
        outs.append(fn(cache, p, torch.arange(3.0) + i, torch.tensor([idx]), accumulate))
    (sum(o.sum() for o in outs) + (cache * torch.arange(3.0)).sum()).backward()
    return outs, cache.detach().clone(), cache._version, w.grad.clone(), p.grad.clone(), cache.grad.clone()


@pytest.mark.parametrize("retain_at", [0, 1, 3], ids=["before", "after_first", "after_a_failure"])
@pytest.mark.parametrize("accumulate", ["add", "mul"])
def test_a_cache_retaining_its_grad_keeps_eagers_history(accumulate, retain_at):
    """`retain_grad()` cannot be rewound: the entry traced without it guards `retains_grad` (also when it is called
    between calls), and the retrace breaks at the write as before NOTE [Rewound histories]."""
    framejit.reset()
    expected = _retaining_calls(add_then_index, accumulate, retain_at)
    compiled = framejit.compile(add_then_index, backend=CountingBackend())
    got = _retaining_calls(compiled, accumulate, retain_at)
    assert _same(got, expected), (got, expected)


def _offset0_view_calls(fn):
    """An untracked view at offset 0 (`buf[0]`) passes the guards of an entry traced with a plain tensor; the
    failed add_ of a tracked `p` makes it tracked (revAO HIGH-2: that CopySlices stayed in buf's history)."""
    res = []
    for view in (False, True, False, True):
        p = torch.tensor([0.5, 0.25, 0.125], requires_grad=True)
        buf = torch.zeros(4, 3)
        v = buf[0] if view else torch.zeros(3)
        outs = [fn(v, p, torch.arange(3.0), torch.tensor([idx]), "add") for idx in (7, 0, 9)]
        (sum(o.sum() for o in outs) + (buf * torch.arange(12.0).view(4, 3)).sum() + v.sum()).backward()
        res.append((outs, buf.detach().clone(), v.detach().clone(), v._version, p.grad.clone()))
    return res


def test_an_untracked_view_made_tracked_by_a_failed_write_keeps_eagers_history():
    framejit.reset()
    expected = _offset0_view_calls(add_then_index)
    got = _offset0_view_calls(framejit.compile(add_then_index, backend=CountingBackend()))
    assert _same(got, expected), (got, expected)
