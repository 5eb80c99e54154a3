"""Review revA2 HIGH-1/HIGH-4: a generator that draws random numbers, run ahead (NOTE [Random draws of run-ahead
generators]), then closed, thrown into, or left partly drawn by an exception leaving the frame: eager drew only
the items its code asked for, so the random state after the call (and later draws) must be eager's."""
import contextlib

import pytest
import torch
import torch.nn.functional as F

import framejit


def gen(x):
    for k in range(4):
        yield torch.rand(x.shape[0]) + x * k


def closed(x):
    g = gen(x)
    a = next(g)
    g.close()
    return a, torch.rand(1)


def closed_before_next(x):
    g = gen(x)
    g.close()
    return x + 1


def thrown(x):
    g = gen(x)
    a = next(g)
    try:
        g.throw(ValueError)
    except ValueError:
        pass
    return a


def closing(x):
    with contextlib.closing(gen(x)) as g:
        a = next(g)
    return a * 2


def closed_in_finally(x):
    g = gen(x)
    try:
        return next(g) + next(g)
    finally:
        g.close()


def raised_in_loop(x):
    out = []
    for h in (F.dropout(x * k, 0.5) for k in range(4)):
        out.append(h)
        if len(out) > 1:
            raise ValueError("too many")
    return out


def asserted(x):
    g = gen(x)
    next(g)
    assert x.shape[0] < 0, "positive"
    return x


def raised_in_zip(x):
    for a, b in zip(gen(x), [1, 2, 3, 4]):
        if b == 2:
            raise KeyError(b)
    return x


def raised_after_map(x):
    m = map(lambda t: t + torch.rand(t.shape[0]), [x, x * 2, x * 3])
    next(m)
    raise KeyError("m")


def _run(fn, x, seed):
    torch.manual_seed(seed)
    try:
        result, error = fn(x), None
    except Exception as e:
        result, error = None, (type(e), str(e))
    return (error, repr(result), torch.get_rng_state().tolist(), F.dropout(torch.ones(4), 0.5).tolist())


@pytest.mark.parametrize("fn", [closed, closed_before_next, thrown, closing, closed_in_finally, raised_in_loop,
                                asserted, raised_in_zip, raised_after_map])
def test_rng_state_after_partly_drawn_generators_is_eager_s(fn):
    compiled = framejit.compile(fn, backend="eager")
    for seed, n in ((0, 2), (1, 3), (2, 2), (3, 4)):
        x = torch.ones(n) * (seed + 1)
        assert _run(compiled, x, seed) == _run(fn, x, seed)
