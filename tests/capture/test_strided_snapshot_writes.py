"""Review revA2 HIGH-2/HIGH-3: a graph that writes an input through storage outside the region the input covers
(`as_strided_` moving it, or a write through an `as_strided` view) and then fails must not make that write twice
when the frame reruns eagerly (the snapshot clones the input's own region only, so such graphs are unrestorable)."""
import pytest
import torch

import framejit


def moved_in_place(x, t, log):
    x.as_strided_((4,), (1,), 0)
    log.append(1)
    x.add_(1)
    return x[t]


def moved_in_place_try(x, t, log):
    x.as_strided_((4,), (1,), 0)
    x.add_(1)
    try:
        return x[t]
    except IndexError:
        log.append("caught")
        return x.sum()


def strided_view_write(x, t, log):
    x.as_strided((4,), (1,), 0).add_(1)
    log.append(1)
    return x[t]


def strided_view_write_try(x, t, log):
    x.as_strided((4,), (1,), 0).add_(1)
    try:
        return x[t]
    except IndexError:
        log.append("caught")
        return x.sum()


def moved_below(x, t, log):
    x.as_strided_((2,), (2,), 1)
    log.append(1)
    x.add_(1)
    return x[t]


def _run(fn, call, index, start):
    base = torch.arange(8.)
    x = base[start:] if fn is moved_below else base[start:start + 2]
    log = []
    try:
        result, error = call(x, torch.tensor([index]), log), None
    except IndexError as e:
        result, error = None, type(e)
    return error, None if result is None else result.tolist(), base.tolist(), tuple(x.shape)


@pytest.mark.parametrize("fn", [moved_in_place, moved_in_place_try, strided_view_write, strided_view_write_try,
                                moved_below])
def test_writes_outside_the_input_region_are_made_once(fn):
    compiled = framejit.compile(fn, backend="eager")
    for index, start in ((9, 0), (0, 0), (9, 2), (1, 1), (7, 0)):
        if fn is moved_below:
            start += 2
        assert _run(fn, compiled, index, start) == _run(fn, fn, index, start)
