"""An exception raised in the block of a `@contextlib.contextmanager` manager (NOTE [Exceptions leaving generator
context manager blocks] in capture/generator_ctx.py).

contextlib's `__exit__` throws the exception into the generator at its `yield`: the generator suppresses it
(returns), lets it through (a `finally`, no handler, an `except` that does not match) or raises another one, whose
`__context__` is the block's exception. Before, the frame broke before the manager's entry, and in an inlined callee
(PyTorch's test_exceptions.py::test_foo) fullgraph=True raised Unsupported. Each program is compared with eager on
fresh inputs (values, what the generator logged, the exception that leaves), compiled with fullgraph=True.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

LOG: list = []


@contextlib.contextmanager
def suppressing(kind):
    try:
        yield "entered"
    except kind as e:
        LOG.append(("suppressed", type(e).__name__, e.args))
    LOG.append("after")


@contextlib.contextmanager
def cleaning():
    try:
        yield
    finally:
        LOG.append("finally")


@contextlib.contextmanager
def plain():
    yield


@contextlib.contextmanager
def converting():
    try:
        yield
    except BaseException:
        raise ValueError("converted")


@contextlib.contextmanager
def wrapping():
    try:
        yield
    except Exception as exc:
        raise RuntimeError(f"caught {exc}") from exc


def wrapped_from_the_handled_one(x, n):
    try:
        with wrapping():
            x = x / n
            raise KeyError(n)
    except RuntimeError as e:
        return x, e.args, repr(e.__cause__), e.__cause__ is e.__context__, e.__suppress_context__


def suppressed(x, n):
    with suppressing(IndexError) as v:
        y = x + 1
        if n > 2:
            raise IndexError(n)
        y = y * 2
    return y, v


def not_matching(x, n):
    try:
        with suppressing(KeyError):
            raise IndexError(n)
    except IndexError as e:
        return x - 1, e.args


def through_finally(x, n):
    try:
        with cleaning():
            x = x * 3
            raise KeyError(n)
    except KeyError as e:
        return x, e.args


def no_handler(x, n):
    try:
        with plain():
            raise TypeError(n)
    except TypeError:
        return x + n


def converted(x, n):
    err = IndexError(n)
    try:
        with converting():
            raise err
    except ValueError as v:
        return x * 2, v.args, v.__context__ is err, repr(v.__context__)
    except IndexError:
        return x, (), False, ""


def nested_as_in_test_foo(x, n):  # PyTorch's test_exceptions.py::test_foo, a callee here
    z = 0
    with cleaning():
        try:
            with converting():
                raise IndexError
        except ValueError:
            z = 1
        except IndexError:
            z = 2
    return x + z + n


def calls_nested(x, n):
    return nested_as_in_test_foo(x, n)


@pytest.mark.parametrize("fn", [suppressed, not_matching, through_finally, no_handler, converted, wrapped_from_the_handled_one,
                                nested_as_in_test_foo, calls_nested], ids=lambda f: f.__name__)
def test_exception_in_a_generator_managers_block_equals_eager(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    before = framejit.stats()["eager_frames"]
    for n in (2, 3, 4):
        x = torch.randn(n)
        LOG.clear()
        expected = fn(x, n)
        expected_log = list(LOG)
        LOG.clear()
        assert_same(compiled(x, n), expected)
        assert LOG == expected_log
    assert backend.graph_count >= 1 and framejit.stats()["eager_frames"] == before  # no frame ran eagerly


@contextlib.contextmanager
def yields_again():
    try:
        yield
    except IndexError:
        yield


def yields_after_throw(x, n):
    try:
        with yields_again():
            raise IndexError(n)
    except RuntimeError as e:
        return x + 1, str(e)


def stop_iteration_in_the_block(x, n):
    try:
        with wrapping():
            raise StopIteration(n)
    except Exception as e:
        return x + 1, type(e).__name__, e.args


def test_stop_iteration_in_the_block_still_runs_as_python_under_fullgraph():  # PEP 479: not followed
    compiled = framejit.compile(stop_iteration_in_the_block, backend="eager", fullgraph=True)
    for n in (2, 3):
        x = torch.randn(n)
        assert_same(compiled(x, n), stop_iteration_in_the_block(x, n))


def test_generator_yielding_again_after_throw_equals_eager():  # kept a break: contextlib's RuntimeError
    compiled = framejit.compile(yields_after_throw, backend="eager")
    for n in (2, 3):
        x = torch.randn(n)
        assert_same(compiled(x, n), yields_after_throw(x, n))
