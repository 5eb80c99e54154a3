"""Adversarial differential programs, fourth round (issue 12, red team): user code that framejit's own
introspection must not run (a counting `__getattribute__` or `__class__` property), and storage offsets
read by a graph whose offset became symbolic (fuzzer seed 30222 on onnxrt). Each runs eagerly and
compiled on separate but equal state over several calls."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

BACKENDS = ["eager", "onnxrt"]


def _backend(name):
    return CountingBackend() if name == "eager" else name


# ---- introspection that runs user code (NOTE [Wrapping without running user code]) ------------------------

def _counting_world(kind):
    """A world whose object counts every attribute lookup that reaches user code."""
    count = [0]
    if kind == "getattribute":
        class C:
            def __getattribute__(self, name):
                count[0] += 1
                return count[0]
    else:
        class C:
            k = 3

            @property
            def __class__(self):
                count[0] += 1
                return C
    o = C()

    def f(x):
        return x * o.k + count[0]
    return f, count


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["getattribute", "class_property"])
def test_wrapping_an_object_runs_none_of_its_lookup_code(kind, backend):
    # before: tracing called the counting __getattribute__ 50 times (isinstance and hasattr tests of the
    # value builder), so the first compiled call returned x * 51 where eager returns x * 1
    (f_e, count_e), (f_c, count_c) = _counting_world(kind), _counting_world(kind)
    compiled = framejit.compile(f_c, backend=_backend(backend))
    for _ in range(3):
        x = torch.randn(3)
        assert_same(compiled(x.clone()), f_e(x.clone()))
        assert count_c == count_e


# ---- storage offsets read by the graph (NOTE [Storage offsets read by the graph]) ------------------------

def _offset_read(x, v):
    out = x + 1
    if out.sum() > -100:  # a break: the rest is a resume function whose entry sees v's offsets change
        out = out * 2
    return out + v.contiguous().view(2, 4) + v.storage_offset()


def _views(i):
    base = torch.arange(16.)
    return [base[0:8].view(2, 4), base[3:11].view(2, 4), torch.arange(8.).view(4, 2).t(), base[5:13].view(2, 4)][i]


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_storage_offset_changing_between_calls(backend):
    # fuzzer seed 30222: offset 0, then 3 (the offset becomes symbolic), a transposed layout, then 5: onnxrt
    # reused the program built for offset 3 (no offset in its signature) and added 3 instead of 5
    compiled = framejit.compile(_offset_read, backend=backend)
    for i in range(4):
        x = torch.randn(2, 4)
        assert_same(compiled(x, _views(i)), _offset_read(x, _views(i)))


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_storage_offset_read_by_a_size_generic_program(backend):
    # before: the symbolic program was traced over dense fakes of offset 0 and added 0 for every offset
    def f(x, v):
        return x + v * 2 + v.storage_offset()
    compiled = framejit.compile(f, backend=backend, dynamic=True)
    for i, n in enumerate((4, 5, 6)):
        x, v = torch.randn(n), torch.arange(40.)[3 * i:3 * i + n]
        assert_same(compiled(x, v), f(x, v))
