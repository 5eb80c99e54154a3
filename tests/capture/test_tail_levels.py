"""Caller levels of warnings and logging calls made in plain code the user's frame runs (tail functions:
an except handler after a `raise` that broke, a loop run as Python) and in a module's forward after its
hooks are removed (NOTE [Caller-naming calls in tail functions] in capture/caller_frames.py, NOTE
[Hooked paths at breaks are guarded] in capture/module_hooks.py). Differential: the same caller line
calls eager and compiled code on inputs of changing sizes; warnings' (file, line, message) and records'
(file, line, function) must be eager's."""
from __future__ import annotations

import logging
import warnings

import torch

import framejit
from tests.helpers import LogRecords

_LOG = logging.getLogger("framejit_test_tail_levels")


_Records = LogRecords


def _caller(f, x):
    return f(x)  # the user's line both runs share


def _observe(f, x):
    handler = _Records()
    _LOG.addHandler(handler)
    _LOG.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = _caller(f, x)
    finally:
        _LOG.removeHandler(handler)
        _LOG.propagate = True
    return out, [(w.filename, w.lineno, str(w.message)) for w in caught], handler.records


def _differential(fn, shapes=((3,), (5,), (4,))):
    compiled = framejit.compile(fn, backend="eager")
    for shape in shapes:
        x = torch.rand(shape) + 0.5
        want = _observe(fn, x)
        got = _observe(compiled, x)
        assert torch.equal(got[0], want[0])
        assert want[1] and want[2]
        assert got[1] == want[1], (shape, got[1], want[1])
        assert got[2] == want[2], (shape, got[2], want[2])


def handler_with_a_break(x):
    y = x * 2
    try:
        raise ValueError("boom")
    except ValueError:
        print("caught")  # a break inside the handler: the rest runs in a tail function
    warnings.warn("after the handler", UserWarning, stacklevel=2)
    _LOG.warning("record after the handler", stacklevel=2)
    return y + 1


def test_an_except_handler_with_a_break_names_the_callers_line(capsys):
    # before: both named the `raise` line of handler_with_a_break (function 'handler_with_a_break')
    _differential(handler_with_a_break)


def loop_over_rows(x):
    y = x * 2
    for row in x:
        if row.item() > 0:  # data-dependent: the loop runs as Python (NOTE [Loops run as Python])
            warnings.warn("in the loop", UserWarning, stacklevel=2)
            _LOG.warning("record in the loop", stacklevel=2)
    return y + 1


def test_a_loop_run_as_python_names_the_callers_line():
    # before: the loop's head line of loop_over_rows
    _differential(loop_over_rows)


def _warns_for_its_caller():
    warnings.warn("from a callee", UserWarning, stacklevel=3)
    _LOG.warning("record from a callee", stacklevel=3)


def callee_after_the_handler(x):
    y = x - 1
    try:
        raise KeyError("k")
    except KeyError:
        print("caught")
    _warns_for_its_caller()
    return y


def test_a_callee_of_a_tail_function_names_its_callers_caller(capsys):
    # before: the `raise` line of callee_after_the_handler
    _differential(callee_after_the_handler)


class _Warns(torch.nn.Module):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def forward(self, x):
        warnings.warn("from forward", UserWarning, stacklevel=self.level)
        _LOG.warning("record from forward", stacklevel=self.level)
        return x * 2


def _pre(module, args):
    return (args[0] * 10,)


def test_a_forward_after_its_hooks_are_removed_names_eagers_levels():
    # before (review A F2): the 4th call (hook removed) still named module.py's hooked `inner` lines
    # (level 2, 3) or module.py instead of the caller (level 4): the entry traced with the hook was reused
    for level in (2, 3, 4):
        eager, compiled = _Warns(level), framejit.compile(_Warns(level), backend="eager")
        handles = []
        for call in range(4):
            if call == 1:
                handles = [eager.register_forward_pre_hook(_pre), compiled.register_forward_pre_hook(_pre)]
            if call == 3:
                for handle in handles:
                    handle.remove()
            x = torch.rand(call + 2)
            want, got = _observe(eager, x), _observe(compiled, x)
            assert torch.equal(got[0], want[0])
            assert got[1] == want[1], (level, call, got[1], want[1])
            assert got[2] == want[2], (level, call, got[2], want[2])
