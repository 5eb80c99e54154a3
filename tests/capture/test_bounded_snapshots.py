"""Graphs that write inputs and record Python effects copy no input per call (review revS HIGH-2).

NOTE [Ops that fail on values] (framejit/capture/failing_ops.py): only an op whose success depends on tensor
values can raise at run time, so an effect between ops that fake tracing checks fully (a step counter in an
optimizer loop, a counter between a cache write and attention over a slice of it) needs no snapshot of the
written inputs. NOTE [Bounded snapshots] (handler_reruns.py): where one is needed, a call whose written inputs
hold more than SNAPSHOT_LIMIT bytes runs without it and, when it raises, is not rerun (its writes stay as eager
made them). Each program runs eagerly and compiled on fresh inputs, comparing results, written tensors and
Python effects, and counts the tensor copies (`Tensor.clone`) the compiled calls make.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.capture import handler_reruns


@pytest.fixture
def clones(monkeypatch):
    """Counts `Tensor.clone` calls from Python (the snapshot of written inputs is made by clone)."""
    count = [0]
    clone = torch.Tensor.clone

    def counting(self, *args, **kwargs):
        count[0] += 1
        return clone(self, *args, **kwargs)
    monkeypatch.setattr(torch.Tensor, "clone", counting)
    return count


def adam_step(params, grads, exp_avgs, exp_sqs, state):
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_sqs)):
        state[i] = state.get(i, 0) + 1  # a Python step count, written before the tensor ops
        m.mul_(0.9).add_(g, alpha=0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-3 * state[i])


def _adam_inputs(n, seed):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(n, 3, generator=gen) for _ in range(2)]
    return (params, [torch.randn(n, 3, generator=gen) for _ in params], [torch.zeros(n, 3) for _ in params],
            [torch.zeros(n, 3) for _ in params], {})


def test_optimizer_step_with_a_python_counter_copies_nothing(clones):
    compiled = framejit.compile(adam_step, backend="eager")
    for n, seed in ((4, 0), (5, 1)):
        expected, actual = _adam_inputs(n, seed), _adam_inputs(n, seed)
        for _ in range(3):
            adam_step(*expected)
            before = clones[0]
            compiled(*actual)
            assert clones[0] == before, "a compiled step copied tensors"
        for e, a in zip(expected[:4], actual[:4]):
            torch.testing.assert_close(a, e)
        assert actual[4] == expected[4] == {0: 3, 1: 3}
    assert compiled.entries


class Cache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(16, 4))
        self.steps = 0
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, pos):
        self.k.index_copy_(0, pos, self.proj(x))  # may fail: an index out of range
        self.steps += 1
        return torch.softmax(x @ self.k[:8].T, -1)  # cannot fail once traced


def test_counter_after_a_cache_write_copies_nothing(clones):
    torch.manual_seed(0)
    eager, module = Cache(), Cache()
    module.load_state_dict(eager.state_dict())
    compiled = framejit.compile(module, backend="eager")
    with torch.no_grad():
        for call, p in enumerate((5, 2, 9, 40, 3)):
            x, pos = torch.randn(1, 4), torch.tensor([p])
            results = []
            for m in (eager, compiled):
                before = clones[0]
                try:
                    results.append((m(x, pos), None))
                except Exception as e:
                    results.append((None, type(e)))
                assert m is eager or clones[0] == before, call
            assert results[0][1] is results[1][1]
            if results[0][1] is None:
                torch.testing.assert_close(results[1][0], results[0][0])
            torch.testing.assert_close(module.k, eager.k)
            assert module.steps == eager.steps
    assert eager.steps == 4  # the call with index 40 raised before the counter


def cache_then_read(cache, q, st, idx, log):
    cache.index_copy_(0, idx, q)
    st.append(len(st))  # eager makes it when the read below fails
    log.append("read")
    return (cache[idx + 1] * 2).sum()


@pytest.mark.parametrize("limit, copies", [(1 << 20, True), (64, False)])
def test_snapshot_is_bounded(clones, monkeypatch, limit, copies):
    """A small cache is snapshotted and the failing call reruns exactly; above the bound no call copies it, and a
    failing call raises as it is: the cache written once (as eager), the effects between the ops not made."""
    monkeypatch.setattr(handler_reruns, "SNAPSHOT_LIMIT", limit, raising=False)
    compiled = framejit.compile(cache_then_read, backend="eager")
    for p in (1, 3, 5, 2, 7):  # 7: the read fails (index 8 of 8 rows); 9 would fail at the write
        runs = []
        for fn in (cache_then_read, compiled):
            cache, st, log = torch.arange(32.0).reshape(8, 4), [], []
            before = clones[0]
            try:
                result, error = fn(cache, torch.ones(1, 4), st, torch.tensor([p]), log), None
            except IndexError as e:
                result, error = None, type(e)
            runs.append((result, error, cache, st, log, clones[0] - before))
        (expected, actual) = runs
        assert actual[1] is expected[1]
        torch.testing.assert_close(actual[2], expected[2])  # never written twice
        assert (actual[5] > 0) is copies
        if expected[1] is None:
            torch.testing.assert_close(actual[0], expected[0])
        if copies or expected[1] is None:
            assert actual[3:5] == expected[3:5]
        else:
            assert (actual[3:5], expected[3:5]) == (([], []), ([0], ["read"]))  # the known gap, logged


def warns_between(x, log):
    x.add_(1)
    a = x[x[:1].long() + 1]
    log.append("mid")
    return torch.nn.functional.softmax(x.reshape(1, -1)) + a  # warns (no dim): raises under the "error" filter


def test_an_op_that_warns_may_fail():
    """Under warnings.simplefilter("error") an op that warns raises at run time: the effect before it is made."""
    import warnings
    compiled = framejit.compile(warns_between, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (6, 7, 3, 1):
            runs = []
            for fn in (warns_between, compiled):
                x, log = torch.arange(float(n)), []
                try:
                    fn(x, log)
                    error = None
                except (IndexError, UserWarning) as e:
                    error = type(e)
                runs.append((error, x, log))
            assert runs[1][0] is runs[0][0] and runs[1][2] == runs[0][2], n
            torch.testing.assert_close(runs[1][1], runs[0][1])


def _unsqueezed(x):
    x.unsqueeze_(0)
    return x[0]


def _transposed(x):
    x.t_()
    return x[:, 0]


def _swapped(x):
    x.transpose_(0, 1).unsqueeze_(2)
    return x[:, 0, 0]


@pytest.mark.parametrize("view", [_unsqueezed, _transposed, _swapped], ids=lambda f: f.__name__)
def test_in_place_view_ops_rerun_exactly(view):
    """Review revS HIGH-1: the snapshot put values back, not sizes, so the rerun applied `unsqueeze_` twice (eager
    (1, 3), framejit (1, 1, 3)); then such graphs took no snapshot and lost the effect between the indexes. Now
    the sizes, strides and offset are put back with the values: the rerun makes eager's effects and shape."""
    def fn(x, log):
        row = view(x)
        a = row[row[:1].long() + 1]
        log.append(len(log))
        return a + row[row[:1].long() + 3]

    compiled = framejit.compile(fn, backend="eager")
    for n in (6, 7, 3, 8, 2, 5):
        runs = []
        for f in (fn, compiled):
            x, log = torch.arange(2.0 * n).reshape(n, 2).t().contiguous() if view is not _unsqueezed else \
                torch.arange(float(n)), ["o"]
            try:
                result, error = f(x, log), None
            except IndexError as e:
                result, error = None, type(e)
            runs.append((result, error, x, log))
        (expected, actual) = runs
        assert actual[1] is expected[1] and actual[3] == expected[3], n
        assert (actual[2].shape, actual[2].stride()) == (expected[2].shape, expected[2].stride()), n
        torch.testing.assert_close(actual[2], expected[2])
        if expected[1] is None:
            torch.testing.assert_close(actual[0], expected[0])


def view_in_try(x, log):
    x.t_()
    try:
        a = x[0, x[0, :1].long() + 3]
    except IndexError:
        log.append("caught")
        a = x[0]
    return a * 2


def test_handler_rerun_after_an_in_place_view_op():
    compiled = framejit.compile(view_in_try, backend="eager")
    for n in (6, 7, 3, 8):
        runs = []
        for f in (view_in_try, compiled):
            x, log = torch.arange(2.0 * n).reshape(n, 2), []
            runs.append((f(x, log), x, log))
        (expected, actual) = runs
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1].shape == expected[1].shape and actual[2] == expected[2], n
        torch.testing.assert_close(actual[1], expected[1])
