"""An exception that leaves a callee past a block the trace did not follow (a with-block of torch's no_grad,
set_grad_enabled(False) or autocast, whose exit restores the mode) is not traced out of the callee: the frame
breaks at the call and Python runs the exit (NOTE [Blocks an escape passed untraced] in capture/caught_exceptions.py).
Before, a callee's `try: raise KeyError finally: pass` inside `with torch.no_grad():`, caught by the frame, left
grad mode off in the rest of the frame and in the whole process after the call (revBI HIGH-1), autocast on the same.

Each program runs eagerly and compiled on fresh inputs that require grad, twice with other shapes; the result
(tensor values, requires_grad, dtypes, the modes read inside the frame after the except) and the modes after the
call returns must be eager's. The modes are put back after each run so that a leak cannot reach other tests."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import assert_same

LOG: list = []
TABLE: dict = {}


def _modes():
    return torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), torch.is_inference_mode_enabled()


def _after_except(x):
    z = x * 3
    return z, (x @ x.T).dtype, _modes()


def nograd_finally_passes(x):
    def g():
        with torch.no_grad():
            try:
                raise KeyError("k")
            finally:
                pass
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def set_grad_false_finally_passes(x):
    def g():
        with torch.set_grad_enabled(False):
            try:
                raise KeyError("k")
            finally:
                pass
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def autocast_finally_passes(x):
    def g():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            try:
                raise KeyError("k")
            finally:
                pass
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def nograd_and_autocast_bare_raise(x):
    def g():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            try:
                raise KeyError("k")
            except KeyError:
                raise
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def nograd_finally_logs(x):  # the handler changed state and re-raised (NOTE [Handlers that re-raise what they caught])
    def g():
        with torch.no_grad():
            try:
                raise KeyError("k")
            finally:
                LOG.append("fin")
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def autocast_generator_finally_logs(x):
    def gen(t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            try:
                yield t @ t.T
                raise KeyError("k")
            finally:
                LOG.append("fin")
    it = gen(x)
    a = next(it)
    try:
        next(it)
    except KeyError:
        pass
    return a.dtype, _after_except(x)


class _Forward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        with torch.no_grad():
            try:
                if x.shape[0] > 2:
                    raise ValueError("bad")
                return x * 2
            finally:
                self.calls += 1


FORWARD = _Forward()


def nograd_module_forward_counts(x):
    try:
        y = FORWARD(x)
    except ValueError:
        y = x * 4
    return y, FORWARD.calls, _after_except(x)


def nograd_in_the_callees_caller(x):
    def h():
        try:
            raise KeyError("k")
        finally:
            pass

    def g():
        with torch.no_grad():
            h()
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def nograd_around_a_comprehension(x):  # 3.12+ inline the comprehension: its cleanup lies between
    def g():
        with torch.no_grad():
            return [TABLE["a"] for _ in range(1)]
    try:
        g()
    except KeyError:
        pass
    return _after_except(x)


def try_around_a_comprehension(x):  # the callee's except runs (3.12+: past the comprehension's cleanup)
    def g():
        try:
            return [TABLE["a"] for _ in range(1)]
        except KeyError:
            LOG.append("g")
            raise ValueError("v")
    try:
        g()
    except KeyError:
        LOG.append("f")
    except ValueError:
        LOG.append("fv")
    return _after_except(x)


def _run(fn, x):
    LOG.clear()
    try:
        return fn(x), _modes(), list(LOG)
    finally:  # a leaked mode must not reach the other runs or tests
        torch.set_grad_enabled(True)
        torch.set_autocast_enabled("cpu", False)


@pytest.mark.parametrize("fn", [nograd_finally_passes, set_grad_false_finally_passes, autocast_finally_passes,
                                nograd_and_autocast_bare_raise, nograd_finally_logs, autocast_generator_finally_logs,
                                nograd_module_forward_counts, nograd_in_the_callees_caller,
                                nograd_around_a_comprehension, try_around_a_comprehension],
                         ids=lambda f: f.__name__)
def test_modes_after_a_caught_exception_are_eagers(fn):
    compiled = framejit.compile(fn, backend="eager")
    for call in range(2):
        x = (torch.randn(2 + call, 3) + call).requires_grad_()
        FORWARD.calls = 0
        expected = _run(fn, x)
        FORWARD.calls = 0
        assert expected[1] == (True, False, False)
        assert_same(_run(compiled, x), expected)
