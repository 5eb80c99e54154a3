"""A submodule's forward breaking inside a compiled model: what reads the stack sees eager's frames, torch's
`_wrapped_call_impl` and `_call_impl` included: warnings and logging records with stacklevel 1 to 4 (at the
break, after it, and in a try block after it), and the traceback of an exception raised after the break.
Differential against eager on fresh inputs of changing sizes. (Written for c785f98, nested breaks through
module calls, reverted after review revL found tracebacks missing torch's levels there; kept as guards of
the plain break and of any later attempt.)"""
from __future__ import annotations

import contextlib
import io
import logging
import traceback
import warnings

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, LogRecords

_LOG = logging.getLogger("framejit_test_nested_module_calls")


_Records = LogRecords


class _Inner(torch.nn.Module):
    def __init__(self, level: int, mode: str) -> None:
        super().__init__()
        self.level, self.mode = level, mode

    def forward(self, x):
        y = x.sin()
        print("inner", y.shape)
        if self.mode == "warn":
            warnings.warn("after the break", stacklevel=self.level)
            _LOG.warning("record after the break", stacklevel=self.level)
        elif self.mode == "try":
            try:
                warnings.warn("in a try block", stacklevel=self.level)
            except KeyError:
                pass
        elif self.mode == "raise" and x.shape[0] == 4:
            raise KeyError("four rows")
        return y * 2


class _Outer(torch.nn.Module):
    def __init__(self, level: int, mode: str) -> None:
        super().__init__()
        self.inner = _Inner(level, mode)

    def forward(self, x):
        y = self.inner(x + 1)
        return y - 1


def _caller(f, x):
    return f(x)  # the line both runs share


def _observe(f, x):
    """(output or traceback entries, warnings, log records, printed text) of one call of f from _caller."""
    handler = _Records()
    _LOG.addHandler(handler)
    out = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            try:
                result = _caller(f, x)
            except KeyError as e:
                result = [(t.filename, t.lineno, t.name) for t in traceback.extract_tb(e.__traceback__)]
    finally:
        _LOG.removeHandler(handler)
    return result, [(w.filename, w.lineno, str(w.message)) for w in caught], handler.records, out.getvalue()


def _differential(level: int, mode: str) -> CountingBackend:
    before = framejit.stats()["eager_frames"]
    backend = CountingBackend()
    eager = _Outer(level, mode)
    compiled = framejit.compile(_Outer(level, mode), backend=backend)
    for size in (3, 5, 4, 3):
        x = torch.randn(size)
        want, got = _observe(eager, x), _observe(compiled, x)
        if isinstance(want[0], torch.Tensor):
            assert torch.equal(got[0], want[0])
        else:
            assert got[0] == want[0], (size, got[0], want[0])
        assert got[1:] == want[1:], (size, got[1:], want[1:])
    assert framejit.stats()["eager_frames"] == before and backend.graph_count > 0
    return backend


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_warnings_and_records_after_a_submodules_break_name_eagers_frames(level):
    _differential(level, "warn")


@pytest.mark.parametrize("level", [2, 3])
def test_a_warning_in_a_try_block_after_the_break_names_eagers_frames(level):
    _differential(level, "try")


def test_a_traceback_after_a_submodules_break_has_torchs_entries():
    _differential(2, "raise")
