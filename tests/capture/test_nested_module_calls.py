"""Nested graph breaks through module calls (NOTE [Nested breaks through module calls] in nested_breaks.py): a
submodule's forward breaking inside a compiled model makes one graph for every frame up to the break, and
what reads the stack sees eager's frames, torch's `_wrapped_call_impl` and `_call_impl` included: warnings
and logging records with stacklevel 1 to 4 (at the break, after it, and in a try block after it), and the
traceback of an exception raised after the break, also where the outer frame's resume function runs as
Python past the recompile limit (review revL HIGH-1). Differential against eager on fresh inputs of changing
sizes; the plain break at the submodule's call made 3 graphs, these make 2, and a submodule breaking twice,
called twice, compiles no more graphs than the plain break did (review revL MED-1)."""
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


def test_a_submodules_break_is_one_graph_for_both_frames():
    backend = CountingBackend()
    model = _Outer(2, "plain")
    compiled = framejit.compile(model, backend=backend)
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(2):
            x = torch.randn(3)
            assert torch.equal(compiled(x), model(x))
    assert backend.graph_count == 2  # the plain break at `self.inner(x + 1)`: 3


_TAILS = ("sin", "cos", "tan", "exp", "neg", "abs", "tanh", "floor")


class _Counting(torch.nn.Module):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.level, self.k = level, 0

    def forward(self, x):
        y = x.sin()
        print("counting", self.k)
        self.k += 1
        if self.level:  # (these break again: the outer resume calls this one's through its hook)
            warnings.warn("after the break", stacklevel=self.level)
            _LOG.warning("record after the break", stacklevel=self.level)
        if self.k == 5:
            raise KeyError("fifth call")
        return y


class _Retail(torch.nn.Module):
    """Its tail after the submodule's call reads the submodule's counter: a new entry of the outer resume
    function on every call, so that function reaches the recompile limit and runs as Python."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.inner = _Counting(level)

    def forward(self, x):
        y = self.inner(x + 1)
        return getattr(torch, _TAILS[self.inner.k])(y)


@pytest.mark.parametrize("level", [0, 2, 4])
def test_past_the_recompile_limit_the_outer_resume_keeps_torchs_levels(level, monkeypatch):
    # review revL HIGH-1: the outer resume function run as Python (level 0: it inlines the submodule's rest)
    # called the submodule's resume function directly; the KeyError's traceback lacked module.py's two entries
    # (one size: the compiled module's own call stays under the limit)
    monkeypatch.setattr(framejit.config, "recompile_limit", 2)
    eager, compiled = _Retail(level), framejit.compile(_Retail(level), backend=CountingBackend())
    for _ in range(7):
        x = torch.randn(3)
        want, got = _observe(eager, x), _observe(compiled, x)
        if isinstance(want[0], torch.Tensor):
            assert torch.allclose(got[0], want[0])
        else:
            assert got[0] == want[0], (got[0], want[0])
        assert got[1:] == want[1:], (got[1:], want[1:])


class _Twice(torch.nn.Module):
    def forward(self, x):
        y = x.sin()
        print("first")
        v = (y * 2).sum().item()
        return y + v


class _CallsTwice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Twice()

    def forward(self, x):
        y = self.inner(x + 1)
        print("between")
        return self.inner(y) - 1


class _Runs(CountingBackend):
    """Counts the graphs run too."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def __call__(self, gm, example_inputs):
        compiled = super().__call__(gm, example_inputs)

        def run(*args):
            self.runs += 1
            return compiled(*args)
        return run


def test_a_submodule_breaking_twice_called_twice_compiles_no_more_graphs():
    # review revL MED-1: the submodule's second break nested again over each call site traced its tail once per
    # site; it is a plain break at the outer resume function's call of the submodule's, whose hook serves both
    backend = _Runs()
    model = _CallsTwice()
    compiled = framejit.compile(model, backend=backend)
    with contextlib.redirect_stdout(io.StringIO()):
        for size in (3, 3, 3, 4, 4):
            x = torch.randn(size)
            assert torch.allclose(compiled(x), model(x))
        runs = backend.runs
        compiled(torch.randn(4))
    # 11 graphs, as with the plain break at both calls (16 with the second break nested again: review revL
    # MED-1); 7 graphs run per call where the plain break ran 8
    assert (backend.graph_count, backend.runs - runs) == (11, 7)
