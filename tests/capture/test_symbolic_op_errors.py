"""An op that raises on symbolic sizes or ints, inside the traced code's own try/except: the handler sees
eager's exception (its type and message), not the fake run's (NOTE [Errors of ops on symbolic values])."""
import pytest
import torch

import framejit


def index_caught(x, i):
    try:
        return x[i] * 2
    except IndexError as e:
        return "caught: " + str(e)


def index_in_callee(x, i):
    def pick(t, j):
        return t[j]
    try:
        return pick(x, i) + 1
    except IndexError as e:
        return ("callee", str(e), e.args)


def split_caught(x, n):
    try:
        return torch.stack(torch.split(x, n)[:1] * 2)
    except (IndexError, ValueError, TypeError, RuntimeError) as e:
        return type(e).__name__ + ": " + str(e)


def unbind_index(x):
    try:
        return x.unbind(0)[x.size(0) + 1]
    except IndexError as e:
        return ("unbind", str(e))


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, tuple):
        return type(b) is tuple and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [index_caught, index_in_callee])
def test_an_index_out_of_range_caught_reads_eagers_message(fn, dynamic):
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for size, i in [(4, 1), (4, 7), (5, 2), (4, 9), (6, -7), (3, 0), (6, -2)]:
        x = torch.randn(size)
        want, got = fn(x, i), compiled(x, i)
        assert _same(want, got), (size, i, want, got)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn,args", [(split_caught, [(6, 2), (8, 3), (5, 0), (7, 2)]),
                                     (unbind_index, [(3,), (4,), (5,)])])
def test_errors_of_ops_on_symbolic_sizes_caught(fn, args, dynamic):
    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for size, *rest in args:
        x = torch.arange(float(size))
        want, got = fn(x, *rest), compiled(x, *rest)
        assert _same(want, got), (size, rest, want, got)


def tuple_errors(x, t, k):
    out = []
    for get in (lambda: x.unbind(0)[5], lambda: (x, x)[k], lambda: t[4], lambda: [x][2], lambda: t[str(k)],
                lambda: (x, x)[k / 2], lambda: x.shape[7], lambda: (1, 2)[x.size(0)]):
        try:
            out.append(get() * 1)
        except (IndexError, TypeError) as e:
            out.append(type(e).__name__ + ": " + str(e))
    return out


def test_tuple_index_errors_say_tuple():
    compiled = framejit.compile(tuple_errors, backend="eager")
    for size, k in [(3, 3), (4, 5), (2, -3)]:
        x = torch.randn(size)
        want, got = tuple_errors(x, (1, 2), k), compiled(x, (1, 2), k)
        assert len(want) == len(got) and all(_same(a, b) for a, b in zip(want, got)), (want, got)
