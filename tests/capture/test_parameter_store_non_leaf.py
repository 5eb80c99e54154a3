"""`self.w = p` where p is a non-leaf Parameter (`t.as_subclass(nn.Parameter)` of a tensor with a grad_fn):
eager's register_parameter raises ValueError and registers nothing; compiled code does the same."""
import pytest
import torch
from torch import nn

import framejit


class _LazyNonLeaf(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.ones(3))

    def forward(self, x):
        if not hasattr(self, "w"):
            self.w = (self.bias * 2).as_subclass(nn.Parameter)
        return x * self.w


def _assign(m, p, x):
    m.w = p
    return x * m.w


@pytest.mark.parametrize("fullgraph", [False, True])
def test_non_leaf_parameter_made_in_forward_raises_every_call(fullgraph):
    eager_m, compiled_m = _LazyNonLeaf(), _LazyNonLeaf()
    compiled = framejit.compile(compiled_m, backend="eager", fullgraph=fullgraph)
    for n in (3, 3, 3):
        x = torch.randn(n)
        with pytest.raises(ValueError, match="non-leaf") as want:
            eager_m(x)
        with pytest.raises((ValueError, framejit.Unsupported)) as got:
            compiled(x)
        if not fullgraph:
            assert str(got.value) == str(want.value)
        assert "w" not in compiled_m._parameters and "w" not in eager_m._parameters


def test_non_leaf_parameter_from_outside_raises_and_leaf_one_registers():
    compiled = framejit.compile(_assign, backend="eager")
    for n in (3, 4, 5):
        b = torch.randn(n, requires_grad=True)
        m_eager, m_compiled = nn.Module(), nn.Module()
        with pytest.raises(ValueError, match="non-leaf"):
            _assign(m_eager, (b * 2).as_subclass(nn.Parameter), torch.randn(n))
        with pytest.raises(ValueError, match="non-leaf"):
            compiled(m_compiled, (b * 2).as_subclass(nn.Parameter), torch.randn(n))
        assert "w" not in m_compiled._parameters
        leaf, x = nn.Parameter(torch.randn(n)), torch.randn(n)
        assert torch.equal(compiled(m_compiled, leaf, x), _assign(m_eager, leaf, x))
        assert m_compiled._parameters["w"] is leaf
