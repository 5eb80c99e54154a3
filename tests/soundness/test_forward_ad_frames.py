"""NOTE [Frames under forward-mode AD] (capture/convert.py), review revV V2: tangents of dual tensors are not
traced, so a frame entered inside a dual level runs eagerly and every entry is guarded on the level it was
made at. Differential: eager vs compiled, several calls, tangents changed between calls, the same compiled
function called outside and inside a level in either order."""
from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import framejit
from tests.helpers import CountingBackend, assert_same


def _tangent_of_sin(d):
    return fwAD.unpack_dual(d.sin() * 2).tangent


def _scaled(d):
    return d.cos() * 3 + 1


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("outside_first", [True, False])
def test_a_dual_tensor_argument_keeps_its_tangent(backend, outside_first):
    # before: the tangent read in the trace folded to None on every call, and an entry traced outside a
    # level was served inside one
    reads, plain = framejit.compile(_tangent_of_sin, backend=backend), framejit.compile(_scaled, backend=backend)
    for step in range(3):
        x = torch.linspace(0.0, 2.0, 3 + step)
        if outside_first:  # an entry made outside a dual level exists first
            assert reads(x) is None and _tangent_of_sin(x) is None
            assert_same(plain(x), _scaled(x))
        with fwAD.dual_level():
            d = fwAD.make_dual(x, torch.full_like(x, float(step + 1)))
            assert_same(reads(d), _tangent_of_sin(d))
            got, want = fwAD.unpack_dual(plain(d)), fwAD.unpack_dual(_scaled(d))
            assert_same(got.primal, want.primal)
            assert_same(got.tangent, want.tangent)
        assert fwAD._current_level == -1


def test_a_dual_level_opened_inside_the_function():
    # before: after the break at the level's entry, the resume function got the dual tensor as a graph input
    # without its tangent: None on the first call (TypeError at `None + 1`)
    def f(x, scale):
        y = x.cos() * 2
        with fwAD.dual_level():
            d = fwAD.make_dual(x, torch.ones_like(x) * scale)
            out = fwAD.unpack_dual(d.sin()).tangent
        return out + 1, y

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for step in range(3):
        x = torch.randn(2 + step)
        assert_same(compiled(x, step + 0.5), f(x, step + 0.5))
        assert fwAD._current_level == -1
    assert backend.graph_count >= 1  # the code before the level is still captured (`x.cos() * 2`)
