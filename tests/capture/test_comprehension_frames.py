"""Comprehension and generator-expression frames that reach the frame hook (issue 11: no crash eager does
not raise; helper h11f).

A comprehension's code object takes one implicit argument named `.0` (its iterator). On 3.11 every
`<listcomp>`, `<dictcomp>`, `<setcomp>` and `<genexpr>` is such a frame; 3.12+ inline list, dict and set
comprehensions (PEP 709) but a generator expression is still a frame. Such a frame reaches the hook when
its function object is live at a graph break (the break in the expression that makes its iterable: here a
generator that prints, which runs lazily as Python) and its own body then breaks too (stepping that
iterator in Python). Its guard function was `def ___guard__listcomp__4(.0):`, a SyntaxError raised into the
user's program; renamed, the frame's comprehension container (live on the stack across its steps) lost the
items added after each break (`[]` for a list of two tensors). Differential: eager vs compiled on fresh
inputs over several calls with changing shapes and values, printed output compared too.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import framejit
from framejit.capture.codegen import FunctionShape
from tests.helpers import CountingBackend, run_differential, eager_frames


def _eager_frame_reasons(since: int) -> list[dict]:
    return framejit.stats()["eager_frame_reasons"][since:]


def _batches(x, size=2):
    """A data-loading style generator that logs: it runs lazily, as Python, so the frame breaks where it is
    made and its consumer steps it in Python."""
    for chunk in x.split(size):
        print("batch", tuple(chunk.shape))
        yield chunk


def _scaled_list(x, w):
    return [c.sum() * w for c in _batches(x)]


def _sums_no_closure(x, w):
    return torch.stack([c.sum() for c in _batches(x)]) * w  # no free variable: called through a plain hook


def _kwargs_dict(x, w):
    kwargs = {f"b{i}": c * w for i, c in enumerate(_batches(x))}
    return _sum_of(**kwargs), sorted(kwargs)


def _sum_of(**parts):
    return sum(v.sum() for v in parts.values())


def _sizes_set(x, w):
    return sorted({c.shape[0] * w for c in _batches(x, 3)})


def _nested(x, w):
    return [[c * (j + w) for j in range(2)] for c in _batches(x)]


@pytest.mark.parametrize("fn", [_scaled_list, _sums_no_closure, _kwargs_dict, _sizes_set, _nested],
                         ids=["listcomp", "listcomp_no_closure", "dictcomp_kwargs", "setcomp", "nested_listcomp"])
def test_comprehension_over_a_generator_run_as_python(fn):
    """3.11: the comprehension's frame is called through its hook at the break and stepped over the
    generator (SyntaxError before; then `[]`/`{}` for the comprehension's result). 3.12+: inlined."""
    before = eager_frames()
    run_differential(fn, lambda seed: (torch.randn(4 + seed), 2 + seed), seeds=(0, 1, 1), fullgraph=False)
    # the comprehension frames were captured: only the generator's own frame runs as Python (counted)
    assert {e["function"] for e in _eager_frame_reasons(before)} <= {"_batches"}


def _genexpr_sum(x, w):
    return sum(torch.sin(c) * w for c in _batches(x)) + x.sum()


def _genexpr_stack(x, w):
    return torch.stack(tuple(c.mean() * w for c in _batches(x))).softmax(0)


def _genexpr_any(x, w):
    if any(c.shape[0] < 2 for c in _batches(x)):
        return x * w
    return x - w


@pytest.mark.parametrize("fn", [_genexpr_sum, _genexpr_stack, _genexpr_any], ids=["sum", "stack", "any"])
def test_generator_expression_over_a_generator_run_as_python(fn):
    """A generator expression is a frame on every version: sum(), torch.stack(tuple(...)) and any() over one
    reached its hook and raised SyntaxError (3.11, 3.12, 3.13). A generator frame runs as Python, counted."""
    backend = CountingBackend()
    run_differential(fn, lambda seed: (torch.randn(4 + seed), 1.5 + seed), seeds=(0, 1, 1), fullgraph=False,
                     backend=backend)
    assert backend.graph_count >= 1  # the code around the generator expression is still captured


class _ChunkedHeads(nn.Module):
    """Comprehensions in a module's forward over a generator method that logs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)

    def chunks(self, x):
        for c in x.split(2):
            print("chunk", c.shape[0])
            yield c

    def forward(self, x):
        outs = [self.proj(c).relu() for c in self.chunks(x)]
        total = sum(o.sum() for o in self.chunks(torch.cat(outs)))
        return torch.cat(outs), total


def test_comprehensions_in_a_module_forward():
    torch.manual_seed(0)
    model = _ChunkedHeads()
    compiled = framejit.compile(model, backend=CountingBackend())
    run_differential(model, lambda seed: (torch.randn(3 + 2 * seed, 3),), seeds=(0, 1, 1), compiled=compiled)


def _scale(x):
    return x * 2 + 1


def test_guard_function_that_is_not_python_runs_eagerly(monkeypatch):
    """The safety net (NOTE [Eager entries whose guards fail to build]): generated guard code that does not
    compile is framejit's own failure. Without fullgraph the frame runs eagerly, counted with its reason and
    not traced again; with fullgraph=True it is framejit.Unsupported. Before, the eager entry made for the
    internal error generated the same guard function again, and the SyntaxError reached the caller."""
    monkeypatch.setattr(FunctionShape, "params_source", lambda self: ".0")
    backend = CountingBackend()
    compiled = framejit.compile(_scale, backend=backend)
    before, traced = eager_frames(), framejit.stats()["frames_traced"]
    for n in (3, 5):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), _scale(x))
    assert eager_frames() == before + 1
    assert "SyntaxError" in framejit.stats()["eager_frame_reasons"][-1]["reason"]
    assert framejit.stats()["frames_traced"] == traced + 1  # the second call was not traced again
    strict = framejit.compile(_scale, backend=CountingBackend(), fullgraph=True)
    with pytest.raises(framejit.Unsupported):
        strict(torch.randn(3))


def _scale_by(cfg, x, _):
    return x * cfg.k


def _calls_across_a_break(x, cfg):
    return _scale_by(cfg, x, print("break"))  # `_scale_by` and `cfg` are on the stack at the break


def test_renamed_arguments_of_resume_functions_are_not_read_past_a_failed_fact():
    """Generated parameter names (`___stack2`, `___local__0`) are frame arguments, not objects of the guard
    namespace: when a resume function recompiles, its failures are listed (NOTE [Guards run no user code]:
    past a failed lookup fact, only guards reading named objects or class dicts run). `___stack2.k` was taken
    for a named object and read through the property the class had gained: the compiled call ran it twice
    more than eager."""
    calls = []

    class Cfg:
        pass

    cfg = Cfg()
    cfg.k = 2
    compiled = framejit.compile(_calls_across_a_break, backend=CountingBackend())
    for n in (3, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x, cfg), _calls_across_a_break(x, cfg))
    Cfg.k = property(lambda self: calls.append(1) or 5)
    x = torch.randn(3)
    expected = _calls_across_a_break(x, cfg)
    eager_calls, calls[:] = len(calls), []
    torch.testing.assert_close(compiled(x, cfg), expected)
    assert len(calls) == eager_calls
