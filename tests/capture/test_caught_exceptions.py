"""Exceptions the traced code catches itself: the trace follows its except clause
(NOTE [Exceptions caught while tracing] in capture/caught_exceptions.py)."""

import traceback

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential, eager_frames


def _lookup_or_count(x, d):
    try:
        v = d["a"]
    except KeyError:
        x = x + 1
        v = 2
    return x * v


def _unmatched(x, d, log):
    try:
        y = x * d["a"]
    except IndexError:
        y = x
    finally:
        log.append("finally")
    return y + 1


def _handler_prints(x, d):
    y = x.cos()
    try:
        s = d["scale"]
    except KeyError:
        print("no scale")
        s = 0.5
    return y * s


def _op_error_caught(x):
    try:
        y = x.view(5, -1)
    except RuntimeError:
        y = x * 2
    return y + 1


def test_key_error_caught_in_the_frame_is_one_graph():
    """`try: d[k] except KeyError:` in the compiled frame: 0 graphs and no eager frame counted before (the
    lookup ran as Python in an unhooked tail); now one graph per kind of `d`, no break."""
    before = eager_frames()
    backend = run_differential(_lookup_or_count, lambda seed: (torch.randn(3) + seed, {} if seed % 2 else {"a": seed}),
                               seeds=(1, 3, 0, 2), fullgraph=True)
    assert backend.graph_count == 3  # missing key (add, mul); a=0 and a=2 are specialised ints (mul each)
    assert eager_frames() == before
    # where the trace gives up on a handler it falls back to breaking before the raising instruction:
    # an except clause that does not match (the exception leaves after `finally`), a break inside one
    run_differential(_unmatched, lambda seed: (torch.randn(2), {} if seed % 2 else {"a": 3.0}, []),
                     seeds=(1, 0, 3), fullgraph=False)
    run_differential(_handler_prints, lambda seed: (torch.randn(3), {} if seed % 2 else {"scale": 2.0}),
                     seeds=(1, 0, 3), fullgraph=False)
    # a RuntimeError from a tensor op is not followed (fake tensors raise their own ones): as before
    run_differential(_op_error_caught, lambda seed: (torch.randn(10 if seed else 4),), seeds=(0, 1), fullgraph=False)


def _tuple_clause_and_name(x, items, i):
    try:
        v = items[i]
    except (KeyError, IndexError) as e:
        v = len(e.args) + len(str(e))
    return x + v


def test_except_tuple_binds_the_exception():
    """`except (A, B) as e`: the match is decided from the raised type and `e` is the exception."""
    backend = run_differential(_tuple_clause_and_name, lambda seed: (torch.randn(2), [1.5, 2.5], seed + 1),
                               seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count == 3  # one per index (ints are specialised); 2 and 3 take the except clause


def _drain(x, xs):
    it = iter(xs)
    while True:
        try:
            v = next(it)
        except StopIteration:
            break
        x = x * v
    return x


def test_stop_iteration_ends_a_while_loop_in_one_graph():
    backend = run_differential(_drain, lambda seed: (torch.randn(2), [1.5] * (seed + 1)), seeds=(0, 2, 1),
                               fullgraph=True)
    assert backend.graph_count == 3  # one per list length


_SEEN: list = []


def _parse(d):
    try:
        return float(d["v"])
    except (KeyError, ValueError):
        _SEEN.append(sorted(d))
        return -1.0


def _uses_parse(x, d):
    return x + _parse(d)


def test_callee_catches_with_side_effect_in_its_handler():
    """The callee's except clause appends to a global list: replayed once per call, as eager does."""
    _SEEN.clear()
    args = [(torch.randn(2), {}), (torch.randn(2), {"v": "2.5"}), (torch.randn(2), {"v": "x"}),
            (torch.randn(2), {})]
    compiled = framejit.compile(_uses_parse, fullgraph=True)
    expected = [_uses_parse(*a) for a in args]
    eager_seen = list(_SEEN)
    _SEEN.clear()
    actual = [compiled(*a) for a in args]
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e)
    assert _SEEN == eager_seen == [[], ["v"], []]
    # the callee's except clause is traced: no break at the call into it (there was one before)
    assert framejit.explain(_uses_parse)(torch.randn(2), {}).graph_break_count == 0


def test_sdpa_kernel_backends_named_through_the_module():
    """`sdpa_kernel([torch.nn.attention.SDPBackend.MATH])`: the backend member read through the library
    class is the pybind enum constant (was an opaque object that `dict.fromkeys` could not key on)."""
    def f(q):
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return out * 2

    backend = run_differential(f, lambda seed: (torch.randn(1, 2, 3 + seed, 4),), seeds=(0, 1), fullgraph=True)
    assert backend.graph_count == 2


def _reraised_to_outer(x, d, log):
    try:
        try:
            v = d["a"]
        except KeyError as e:
            log.append(("inner", str(e)))
            first = e
            raise
        finally:
            log.append("finally")
    except KeyError as e2:
        log.append((e2 is first, str(e2)))
        x, v = x + len(e2.args), 2.0
    return x * v


def _unmatched_to_outer(x, d):
    try:
        try:
            v = d["a"]
        except IndexError:
            v = -1.0
    except LookupError as e:
        v = float(len(str(e)))
    return x * v


def test_exception_re_raised_to_an_outer_handler_is_one_graph():
    """NOTE [Exceptions re-raised from followed handlers]: a bare `raise`, an except clause that does not match
    and a `finally` pass the handled exception on to the frame's outer handler in the trace (before: the frame
    ran from the lookup on as Python, 0 graphs, and fullgraph=True did not say so)."""
    backend = run_differential(_reraised_to_outer, lambda seed: (torch.randn(2), {"a": 3.0} if seed % 2 else {}, []),
                               seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count == 2  # missing key, present key
    backend = run_differential(_unmatched_to_outer, lambda seed: (torch.randn(2), {"a": 3.0} if seed % 2 else {}),
                               seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count == 2


def _new_exception_while_handling(x, d, log):
    try:
        try:
            v = d["a"]
        except KeyError as k:
            for kind in (ValueError, IndexError):
                try:
                    raise kind("inner")
                except kind as e:
                    log.append((type(e.__context__).__name__, e.__context__ is k))
                    last = e
            raise
    except KeyError:
        return x * 5, last  # the IndexError: its context (the KeyError) and traceback are rebuilt per call
    return x * v, None


def _break_in_nested_handler(x, d):
    try:
        v = d["a"]
    except KeyError:
        try:
            raise ValueError("v")
        except ValueError as e:
            print("handled", type(e.__context__).__name__)
            v = 2.0
    return x * v


def _described(exc):
    """An exception and its context as eager and compiled code can both have them (not by identity)."""
    if exc is None:
        return None
    first = _new_exception_while_handling.__code__.co_firstlineno
    # the function and file of each entry too (review revV V1: the compiled one named framejit's
    # fresh_exception_with_context in mappings_runtime.py at the user's line)
    lines = [(f.name, f.filename, f.lineno - first) for f in traceback.extract_tb(exc.__traceback__)]
    return type(exc).__name__, exc.args, lines, _described(exc.__context__)


def test_exception_raised_while_handling_has_its_context():
    """NOTE [Contexts of exceptions raised while handling]: `raise kind(...)` inside `except KeyError as k` is
    followed with `k` as its context (before: the frame ran from the lookup on as Python, 0 graphs, and
    fullgraph=True did not say so). NOTE [Handlers given up in the root frame]: a break inside such a handler
    is a counted break, an error under fullgraph."""
    backend = CountingBackend()
    compiled = framejit.compile(_new_exception_while_handling, backend=backend, fullgraph=True)
    for seed in (0, 1, 2, 4):
        d, x = {"a": 3.0} if seed % 2 else {}, torch.randn(2)
        (want, want_exc), want_log = _new_exception_while_handling(x, d, []), []
        _new_exception_while_handling(x, d, want_log)
        log = []
        got, got_exc = compiled(x, d, log)
        torch.testing.assert_close(got, want)
        assert log == want_log and _described(got_exc) == _described(want_exc)
    assert backend.graph_count == 2
    run_differential(_break_in_nested_handler, lambda seed: (torch.randn(2), {"a": 3.0} if seed % 2 else {}),
                     seeds=(0, 1, 2), fullgraph=False)
    assert framejit.explain(_break_in_nested_handler)(torch.randn(2), {}).graph_break_count == 1
    with pytest.raises(framejit.Unsupported, match="KeyError is caught by a handler of _break_in_nested_handler"):
        framejit.compile(_break_in_nested_handler, backend="eager", fullgraph=True)(torch.randn(2), {})


def _raises_runtime_error(k):
    if k > 1:
        raise NotImplementedError(f"k={k}")
    raise RuntimeError("stop")


def _runtime_errors_raised_and_caught(x, k):
    try:
        raise RuntimeError("stop")
    except RuntimeError as e:
        x = x + len(str(e))
    try:
        _raises_runtime_error(k)
    except RuntimeError as e:  # NotImplementedError included
        x = x * len(e.args[0])
    try:
        try:
            raise RuntimeError("inner")
        except ValueError:
            x = x - 100
    except Exception as e:
        x = x + len(type(e).__name__)
    return x


def test_runtime_error_raised_by_the_user_is_followed():
    """NOTE [RuntimeErrors raised by the user]: `try: raise RuntimeError(...) except RuntimeError:` made the whole
    frame run eagerly (0 graphs), where a ValueError was followed; now one graph per k, no eager frame."""
    before = eager_frames()
    backend = run_differential(_runtime_errors_raised_and_caught,
                               lambda seed: (torch.randn(3) + seed, seed % 3), seeds=(0, 1, 2, 3), fullgraph=True)
    assert backend.graph_count == 3
    assert eager_frames() == before
