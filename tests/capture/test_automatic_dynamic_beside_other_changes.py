"""Automatic dynamic looks at every guard of the newest entry at a recompile, not only the first that
failed: a counter or a size that changes on the same call as a flag is symbolic from that recompile on
(transformers' static sliding-window cache flips `is_initialized` with `cumulative_length` growing)."""
import torch

import framejit
from tests.helpers import CountingBackend


class _Cache:
    def __init__(self):
        self.ready = False
        self.n = 0


def _step(x, c):
    if not c.ready:
        c.ready = True
        y = x * 2
    else:
        y = x + 1
    cur = c.n
    c.n += 1
    return y * (cur + 1)


def _run(fn, cache, sizes):
    return [fn(torch.full((n,), float(i)), cache) for i, n in enumerate(sizes)]


def test_counter_changing_with_a_flag_is_symbolic_at_the_first_recompile():
    counter = CountingBackend()
    compiled = framejit.compile(_step, backend=counter)
    eager_cache, compiled_cache = _Cache(), _Cache()
    want = _run(_step, eager_cache, [3] * 6)
    got = _run(compiled, compiled_cache, [3] * 6)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert compiled_cache.n == eager_cache.n == 6 and compiled_cache.ready
    assert counter.graph_count == 2  # static first call, then one entry for n = 1, 2, 3, ...


def _scale(x, cfg):
    return x * 2 if cfg["on"] else x - 1


def test_size_changing_with_a_flag_is_symbolic_at_the_first_recompile():
    counter = CountingBackend()
    compiled = framejit.compile(_scale, backend=counter)
    calls = [(3, True), (4, False), (5, False), (6, False), (7, False)]
    for n, on in calls:
        x = torch.randn(n)
        assert torch.equal(compiled(x, {"on": on}), _scale(x, {"on": on}))
    assert counter.graph_count == 2
