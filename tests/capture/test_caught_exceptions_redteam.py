"""Red team of the handlers the trace follows (NOTE [Exceptions caught while tracing]): what an except clause
sees of the caught exception, and the user code that runs on the way to raising it."""

import torch

import framejit
from tests.helpers import run_differential

MADE = []


class LoggingError(Exception):
    def __init__(self, msg):
        MADE.append(msg)  # the user's __init__: runs on every raise in eager
        super().__init__(msg)
        self.extra = len(msg)


def _raise_custom(x, d):
    made = len(MADE)
    try:
        if "a" not in d:
            raise LoggingError("missing")
        v = d["a"]
    except LoggingError as e:
        v = e.extra
    return x * v, len(MADE) - made


def test_exception_class_with_python_init_runs_it_per_call():
    """Folding `LoggingError("missing")` to a constant ran its __init__ once while tracing: the followed
    handler then used that constant and later calls appended nothing (eager: one append per raise)."""
    MADE.clear()
    run_differential(_raise_custom, lambda seed: (torch.randn(3), {} if seed % 2 else {"a": seed}),
                     seeds=(1, 0, 3, 5), fullgraph=False)


class Missing(KeyError):
    pass


SEEN = []


class MissingDict(dict):
    def __missing__(self, key):
        SEEN.append(key)
        raise Missing(key)


def _lookup(x, d):
    seen = len(SEEN)
    try:
        v = d["a"]
    except Missing:
        v = 7
    except KeyError:
        v = 9
    return x * v, len(SEEN) - seen


def test_dict_subclass_missing_is_called():
    """`d[k]` on a dict subclass was answered from its raw items, raising a plain KeyError: the trace took
    `except KeyError` (9) where eager's __missing__ raised Missing (7), and its append was lost."""
    SEEN.clear()
    run_differential(_lookup, lambda seed: (torch.randn(3), MissingDict() if seed % 2 else MissingDict(a=seed)),
                     seeds=(0, 1, 2, 3), fullgraph=False)
    assert SEEN == ["a", "a", "a", "a"]  # eager and compiled, seeds 1 and 3


def _traceback_line(x, d):
    try:
        v = d["a"]
    except KeyError as e:
        return x, e.__traceback__ is None
    return x * v, None


def _context_of_nested(x, d, items):
    try:
        v = d["a"]
    except KeyError:
        try:
            v = items[3]
        except IndexError as e:
            return x, repr(e.__context__)
    return x * v, None


def _raise_from(x, n):
    try:
        if n > 1:
            raise ValueError("a") from KeyError("b")
        y = x
    except ValueError as e:
        return x, repr(e.__cause__), e.__suppress_context__
    return y, None, None


def test_what_a_followed_handler_sees_of_its_exception():
    """The caught exception is a constant the trace made: it had no __traceback__ (eager: a traceback), no
    __context__ inside a nested handler (eager: the KeyError being handled) and no __cause__ after
    `raise ... from` (eager: the KeyError). Each now keeps the old path and matches eager."""
    before = framejit.stats()["eager_frames"]
    run_differential(_traceback_line, lambda seed: (torch.randn(3), {} if seed % 2 else {"a": seed}),
                     seeds=(0, 1, 2, 3), fullgraph=False)
    run_differential(_context_of_nested, lambda seed: (torch.randn(3), {}, [1] * seed), seeds=(1, 2, 5),
                     fullgraph=False)
    run_differential(_raise_from, lambda seed: (torch.randn(3), seed), seeds=(0, 2, 3), fullgraph=False)
    assert framejit.stats()["eager_frames"] == before


STRS = []


class Shouting(Exception):
    def __str__(self):
        STRS.append(1)  # a method of the class: user code on every str(e)
        return "loud"


def _str_of_caught(x, n):
    strs = len(STRS)
    try:
        if n % 2:
            raise Shouting()
        m = "none"
    except Shouting as e:
        m = str(e)
    return x, m, len(STRS) - strs


def test_exception_class_with_python_methods_runs_them_per_call():
    """A class without __init__ but with its own __str__ was folded too: str(e) ran __str__ once while
    tracing, and the calls after it appended nothing."""
    run_differential(_str_of_caught, lambda seed: (torch.randn(3), seed), seeds=(1, 2, 3, 5), fullgraph=False)


def _zip_strict(x, a, b):
    out = []
    try:
        for p, q in zip(a, b, strict=True):
            out.append(p + q)
    except ValueError as e:
        return x, str(e), out
    return x + sum(out), None, out


def test_zip_strict_raises_when_the_shorter_runs_out():
    """zip(strict=True) over lists of different lengths raised at zip() while tracing, with another message:
    the followed handler then saw no rows appended ([] where eager has [2, 3])."""
    run_differential(_zip_strict, lambda seed: (torch.randn(3), [1, 2, 3], [1] * (2 + seed % 2)),
                     seeds=(0, 1, 2), fullgraph=False)


def _items_then_error(n):
    yield 1
    if n:
        raise ValueError("late")
    yield 2


def _consume_until_error(x, n, out):
    s = 0
    try:
        for v in _items_then_error(n):
            s += v
            out.append(v)
    except ValueError:
        return x + s, list(out)
    return x - s, list(out)


def _next_of(it):
    while True:
        yield next(it)  # PEP 479: the StopIteration leaves the generator as a RuntimeError


def _consume_pep479(x, items):
    s = 0
    try:
        for v in _next_of(iter(items)):
            s += v
    except StopIteration:
        s = -100
    except RuntimeError:
        s = -200
    return x + s


def test_exception_from_a_generator_is_raised_where_it_is_consumed():
    """A generator called in the frame runs to completion while tracing (NOTE [Eager generators]); an
    exception it raised reached the handler around the call before any item was used (s == 0, out == []
    where eager has 1 and [1]), and a StopIteration leaving it was caught as StopIteration where eager has
    PEP 479's RuntimeError."""
    run_differential(_consume_until_error, lambda seed: (torch.randn(3), seed % 2, []), seeds=(1, 2, 3),
                     fullgraph=False)
    run_differential(_consume_pep479, lambda seed: (torch.randn(3), list(range(seed))), seeds=(0, 2, 3),
                     fullgraph=False)


def _unpack(x, t):
    try:
        a, b = t
    except ValueError as e:
        a, b = 0, len(str(e))
    return x + a + b


def test_unpack_error_has_cpythons_message():
    """`a, b = (1, 2, 3)` raised 'too many values to unpack (expected 2, got 3)' while tracing (3.13's
    message) where 3.11 says '(expected 2)': the followed handler used the wrong message."""
    run_differential(_unpack, lambda seed: (torch.randn(3), [(1, 2), (1, 2, 3), (4,), (5, 6, 7, 8)][seed]),
                     seeds=(0, 1, 2, 3), fullgraph=False)


def _sum_printing(x, it):
    s = 0
    for v in it:
        s += v
        print("v", v)  # a graph break in the loop's body
    return x + s, next(it, "done")


def test_reversed_iterator_argument_looped_across_breaks():
    """A for loop over a reversed list iterator argument, with a break in its body: the resume function got
    a copy of the remaining items as its loop iterator, which advanced apart from the caller's iterator
    (still `it` in the frame): after the loop next(it) gave an item where eager's iterator is exhausted."""
    compiled = framejit.compile(_sum_printing, backend="eager")
    for n in (0, 2, 3, 1):
        results = []
        for fn in (_sum_printing, compiled):
            it = reversed([1, 2, 3][:n])
            total, after = fn(torch.zeros(1), it)
            results.append((total.item(), after, list(it)))
        assert results[1] == results[0]
