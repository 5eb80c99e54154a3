"""framejit's own bookkeeping around a call made near the recursion limit (the miss path's recompile explanation
and marks, the lookup of a failed entry) never replaces the user's exception with its own RecursionError, and a
recursion that overflows in eager overflows compiled too (NOTE [Bookkeeping at the recursion limit] in
framejit/capture/deep_traces.py).

Differential: the same call made at every depth of a window that ends past eager's own overflow, each on fresh
inputs whose size changes from one depth to the next (the compiled function's entry is traced near the top of
the stack; the deep call misses its shape guard). Eager and compiled must agree at every depth, except the few
deepest where eager's frames fit and the hook's own frames around the call (its `__call__`, the miss) do not."""
import sys

import pytest
import torch

import framejit

_HOOK_FRAMES = 5  # the frames a compiled call adds below its caller before the user's code runs


def _raises_on_rows(x, n):
    y = x.sin() + n
    if y.shape[0] > 2:
        raise ValueError(f"rows {y.shape[0]}")
    return y


def _gathers(x, idx):
    return x.sin()[idx] * 2  # an index out of range raises in the graph, then in eager's rerun


def _burn(k, fn, *args):
    """`fn(*args)` called k plain frames further down the stack."""
    if k == 0:
        return fn(*args)
    return _burn(k - 1, fn, *args)


def _depth():
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args).tolist())
    except RecursionError:
        return ("RecursionError",)
    except Exception as e:  # noqa: BLE001  (compared with eager's)
        return (type(e).__name__, str(e))


def _scan(fn, make_args, warm_args):
    """(depths where eager and compiled differ, depths where eager overflows, depths where both agree and
    eager does not overflow) over a window of depths ending past eager's overflow."""
    framejit.compile(fn, backend="eager")(*warm_args)  # framejit's lazy imports, at the normal limit
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + 200)
    differ, overflows, agree = [], [], []
    try:
        for k in range(120, 200):
            framejit.reset()
            compiled = framejit.compile(fn, backend="eager")
            compiled(*warm_args)  # traced near the top of the stack
            args = make_args(k)
            eager = _outcome(_burn, k, fn, *args)
            mine = _outcome(_burn, k, compiled, *args)
            if eager != mine:
                differ.append((k, eager, mine))
            elif eager == ("RecursionError",):
                overflows.append(k)
            else:
                agree.append(k)
    finally:
        sys.setrecursionlimit(old)
    return differ, overflows, agree


def _check(differ, overflows, agree):
    assert overflows and agree, (overflows, agree)  # the window holds both sides of eager's overflow
    deepest_fit = max(agree + [k for k, _, _ in differ])
    # eager's exception everywhere, but where only the hook's own frames did not fit (was: 15 depths on 3.11,
    # the miss path's RecursionError where eager raises the user's ValueError)
    assert all(k > deepest_fit - _HOOK_FRAMES and mine == ("RecursionError",) for k, _, mine in differ), differ
    assert all(k > deepest_fit for k in overflows)  # overflowing in eager: RecursionError compiled too


@pytest.fixture(autouse=True)
def _fresh():
    framejit.reset()
    yield
    framejit.reset()


def test_user_exception_raised_after_a_deep_miss_is_not_replaced():
    _check(*_scan(_raises_on_rows, lambda k: (torch.randn(3 + k % 3), 2), (torch.randn(2), 1)))


def test_graph_failure_near_the_limit_reruns_or_propagates_the_users_exception():
    _check(*_scan(_gathers, lambda k: (torch.randn(3 + k % 2), torch.tensor([5 + k % 3])),
                  (torch.randn(3), torch.tensor([1]))))
