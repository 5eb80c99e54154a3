"""framejit's markers and torch's own on one tensor (issue 13, h13dyn5): `framejit.mark_dynamic` sets the
attributes `torch._dynamo.mark_dynamic` reads, so library code that marks a tensor with torch's function
after the user marked it with framejit's works, and both compilers honour the result."""
from __future__ import annotations

import re

import pytest
import torch
import torch._dynamo

import framejit
from tests.helpers import CountingBackend, run_program


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def _both_marked(*shape):
    x = torch.randn(*shape)
    framejit.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(x, 1)  # before: AttributeError '_dynamo_dynamic_range'
    torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
    return x


def scale(x):
    return x * x.size(1) + x.sum(0)


def test_torch_marks_a_tensor_framejit_marked_first_and_one_graph_serves_both_dims():
    counter = CountingBackend()
    compiled = framejit.compile(scale, backend=counter)
    for b, t in ((2, 3), (3, 5), (5, 4), (7, 9)):
        x = _both_marked(b, t)
        torch.testing.assert_close(compiled(x), scale(x))
    assert counter.graph_count == 1
    assert x._dynamo_dynamic_indices == {0, 1}


def test_a_torch_marked_range_after_framejits_mark_is_enforced():
    compiled = framejit.compile(scale, backend=CountingBackend())
    x = torch.randn(80, 3)
    framejit.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=64)
    with pytest.raises(framejit.ConstraintViolationError):
        compiled(x)


# NOTE [Stock compile errors run in a child]: torch.compile raising ConstraintViolationError (torch 2.13) leaves
# torch's PEP 523 frame-evaluation shim installed in the process for good: from then on CPython does not inline
# Python-to-Python calls, so every caller keeps its callee's arguments on its own stack until the call returns.
# framejit's resume functions hand their arguments over through such calls (NOTE [Arguments handed to resume
# functions] in capture/lifetimes.py), and a later test of when a local dropped between breaks dies failed in
# the full suite only (test_graph_breaks_more.py::test_locals_dropped_between_breaks_die_where_eager_drops_them,
# the red CI of 2026-12-06 on all three Pythons: a probe call's argument refcount went 2 -> 3 after this
# test). The raising stock compile runs in a forked child, whose interpreter state dies with it.
_BOUNDED_STOCK = """
import torch, framejit
def scale(x):
    return x * x.size(1) + x.sum(0)
bounded = torch.compile(scale, backend=lambda gm, ex: gm.forward)
x = torch.randn(80, 3)
framejit.mark_dynamic(x, 0, min=2, max=64)
try:
    bounded(x)
except Exception as e:
    print(type(e).__name__, e)
else:
    print("no error")
"""


def test_stock_torch_compile_honours_framejits_mark_and_range(tmp_path):
    """hhuntD MED-4: torch.compile popped the range of every marked dimension from `_dynamo_dynamic_range`,
    which framejit's marker left empty: IndexError on every call."""
    counter = CountingBackend()
    stock = torch.compile(scale, backend=counter)
    for b in (3, 5, 7):
        x = torch.randn(b, 4)
        framejit.mark_dynamic(x, 0)
        torch.testing.assert_close(stock(x), scale(x))
    assert counter.graph_count == 1
    torch._dynamo.reset()
    script = tmp_path / "bounded_stock.py"
    script.write_text(_BOUNDED_STOCK)
    rc, out, err = run_program(tmp_path, script)  # NOTE [Stock compile errors run in a child]
    assert rc == 0, err
    assert re.search("80|range|constraint|Constraint", out) and "no error" not in out, out


def test_marking_a_dimension_of_a_0d_tensor_names_the_dimension():
    """Review revK LOW: `framejit.mark_dynamic` of a 0-d tensor raised ZeroDivisionError."""
    with pytest.raises(IndexError, match="dimension 0 out of range for a tensor of 0 dimensions"):
        framejit.mark_dynamic(torch.tensor(1.0), 0)
    framejit.mark_static(torch.tensor(1.0))  # every dimension of none: nothing to mark
