"""A new exception raised in an inlined callee's handler and caught by its caller (NOTE [New exceptions leaving
callees' handlers] in capture/caught_exceptions.py).

`except KeyError: raise ValueError(key)` in a callee, or os.environ's `raise KeyError(key) from None`: before, the
callee's handler was given up and the caller's handler took the callee's *handled* exception for the new one when
they had the same type (`e.args` read ('zz',) where eager reads ('other',)), or the frame broke at the call. Each
program is compared with eager on fresh inputs and mappings, with fullgraph=True (no break, one graph).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _lookup_from_none(d, key):
    try:
        return d[key]
    except KeyError:
        raise KeyError("missing " + key) from None


def _lookup_as_value_error(d, key):
    try:
        return d[key]
    except KeyError:
        raise ValueError(key)


def _lookup_wrapped(d, key):
    try:
        return d[key]
    except KeyError as err:
        raise LookupError(key) from err


def wrapped_from_the_handled_one(x, d, key):
    try:
        v = _lookup_wrapped(d, key)
    except LookupError as e:
        return x / 2, e.args, repr(e.__cause__), e.__cause__ is e.__context__, e.__suppress_context__
    return x * v, (), "", False, False


def same_type_from_none(x, d, key):
    try:
        v = _lookup_from_none(d, key)
    except KeyError as e:
        return x + 1, e.args, e.__suppress_context__, repr(e.__cause__), repr(e.__context__)
    return x * v, (), False, "", ""


def other_type_with_context(x, d, key):
    try:
        v = _lookup_as_value_error(d, key)
    except ValueError as e:
        return x - 1, e.args, e.__suppress_context__, repr(e.__context__), e.__context__.args
    return x * v, (), False, "", ()


def returned_exception(x, d, key):
    try:
        _lookup_as_value_error(d, key)
    except ValueError as e:
        return x * 2, e
    return x, None


def _assert_same_exception(got, expected):
    assert type(got) is type(expected) and got.args == expected.args
    assert repr(got.__context__) == repr(expected.__context__)
    assert got.__suppress_context__ == expected.__suppress_context__


@pytest.mark.parametrize("fn", [same_type_from_none, other_type_with_context, returned_exception,
                                wrapped_from_the_handled_one],
                         ids=lambda f: f.__name__)
def test_new_exception_from_a_callees_handler_equals_eager(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for n, key in ((2, "zz"), (3, "yy"), (4, "a")):
        x = torch.randn(n)
        got, expected = compiled(x, {"a": 2.0}, key), fn(x, {"a": 2.0}, key)
        if fn is returned_exception:
            assert_same(got[0], expected[0])
            if expected[1] is not None:
                _assert_same_exception(got[1], expected[1])
                assert got[1] is not compiled(x, {}, key)[1]  # a new object each call
        else:
            assert_same(got, expected)
    assert backend.graph_count >= 2  # the key found, the key missing: fullgraph, no break


def _getattr_via_dict(self, name):
    try:
        return self.__dict__["_" + name]
    except KeyError:
        raise AttributeError(name)


class WithGetattr:
    __getattr__ = _getattr_via_dict

    def __init__(self, b):
        self._b = b


def hasattr_through_a_handler(x, obj):
    return x * (2 if hasattr(obj, "b") else 3) + (1 if hasattr(obj, "c") else 0)


def test_hasattr_over_a_getattr_raising_in_its_handler_equals_eager():
    compiled = framejit.compile(hasattr_through_a_handler, backend="eager", fullgraph=True)
    for n in (2, 3):
        x, obj = torch.randn(n), WithGetattr(n)
        assert_same(compiled(x, obj), hasattr_through_a_handler(x, obj))


def _mid_prints(d, key):
    try:
        return _lookup_as_value_error(d, key)
    except ValueError as e:
        print("mid handler", e.args)  # a graph break in the middle callee's handler
        return -1.0


def _mid_prints_same_type(d, key):
    try:
        return _lookup_from_none(d, key)
    except KeyError as e:
        print("mid", e.args)
        return -1.0


class _PrintingSuppressor:
    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        print("exit", typ.__name__ if typ else None)
        return True


def _mid_with_prints(d, key):
    with _PrintingSuppressor():
        return _lookup_as_value_error(d, key)
    return -1.0


def mid_handler_breaks(x, d, key):
    try:
        v = _mid_prints(d, key)
    except ValueError:
        return x - 100
    return x * v


def mid_same_type_handler_breaks(x, d, key):
    try:
        v = _mid_prints_same_type(d, key)
    except KeyError:
        return x - 100
    return x * v


def mid_with_exit_breaks(x, d, key):
    try:
        v = _mid_with_prints(d, key)
    except ValueError:
        return x - 100
    return x * v


@pytest.mark.parametrize("fn", [mid_handler_breaks, mid_same_type_handler_breaks, mid_with_exit_breaks],
                         ids=lambda f: f.__name__)
def test_a_middle_callees_handler_that_breaks_runs_as_eager(fn, capsys):
    """hfixEX (revW HIGH-3): the middle callee catches the new exception but its handler (a print, an `__exit__`
    that prints) cannot be traced: it runs as eager's, not the caller's handler (x - 100, nothing printed)."""
    compiled = framejit.compile(fn, backend="eager")
    for n, key in ((2, "zz"), (3, "a"), (4, "yy")):
        x = torch.randn(n)
        expected = fn(x, {"a": 2.0}, key)
        eager_out = capsys.readouterr().out
        got = compiled(x, {"a": 2.0}, key)
        assert capsys.readouterr().out == eager_out
        assert_same(got, expected)


class _CachedVal:
    def __init__(self, d):
        self._d = d

    @property
    def val(self):
        try:
            return self._d["val"]
        except KeyError:
            raise AttributeError("val missing")


class _CachedValWithGetattr(_CachedVal):
    def __getattr__(self, name):
        return "fallback-" + name


def property_then_getattr(x, obj):
    return x + 1, hasattr(obj, "val"), getattr(obj, "val", "dflt"), obj.val


def test_getattr_answers_after_a_property_raises_attribute_error():
    """hfixEX (revW HIGH-2): an AttributeError of a property getter goes on to the class's `__getattr__`, as
    CPython's slot_tp_getattr_hook does; replacing that `__getattr__` between calls is seen."""
    compiled = framejit.compile(property_then_getattr, backend="eager")
    for n, d in ((2, {}), (3, {"val": 4.0}), (4, {})):
        x = torch.randn(n)
        assert_same(compiled(x, _CachedValWithGetattr(d)), property_then_getattr(x, _CachedValWithGetattr(d)))
    original = _CachedValWithGetattr.__getattr__
    try:
        _CachedValWithGetattr.__getattr__ = lambda self, name: "other-" + name
        x = torch.randn(5)
        assert_same(compiled(x, _CachedValWithGetattr({})), property_then_getattr(x, _CachedValWithGetattr({})))
    finally:
        _CachedValWithGetattr.__getattr__ = original
    plain = framejit.compile(lambda x, o: (x * 2, hasattr(o, "val"), getattr(o, "val", "dflt")), backend="eager")
    for n, d in ((2, {}), (3, {"val": 1.0})):
        x = torch.randn(n)
        o = _CachedVal(d)
        assert_same(plain(x, o), (x * 2, hasattr(o, "val"), getattr(o, "val", "dflt")))


def _raise_value_error(key):
    raise ValueError("helper " + key)


def _lookup_via_helper(d, key):
    try:
        return d[key]
    except KeyError:
        _raise_value_error(key)


def _this_files_entries(exc):
    import traceback
    return [(f.name, f.lineno, f.line) for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__]


def traceback_of_the_new_exception(x, d, key):
    try:
        v = _lookup_as_value_error(d, key)
    except ValueError as e:
        return x - 1, e
    return x * v, None


def traceback_through_a_helper(x, d, key):
    try:
        v = _lookup_via_helper(d, key)
    except ValueError as e:
        return x - 1, e
    return x * v, None


@pytest.mark.parametrize("fn", [traceback_of_the_new_exception, traceback_through_a_helper], ids=lambda f: f.__name__)
def test_the_new_exceptions_traceback_shows_the_raising_lines(fn):
    """hfixEX (revW HIGH-1): the callee's entry is at its `raise` line (not its `def` line) and a helper called
    from the handler keeps its own entries."""
    compiled = framejit.compile(fn, backend="eager")
    for n, key in ((2, "zz"), (3, "a"), (4, "yy")):
        x = torch.randn(n)
        (got, got_e), (expected, expected_e) = compiled(x, {"a": 2.0}, key), fn(x, {"a": 2.0}, key)
        assert_same(got, expected)
        if expected_e is None:
            assert got_e is None
            continue
        assert type(got_e) is type(expected_e) and got_e.args == expected_e.args
        assert _this_files_entries(got_e) == _this_files_entries(expected_e)
