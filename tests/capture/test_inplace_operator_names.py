"""NOTE [In-place operator names]: which ops count as writes is decided by exact name (issue 11, sweep h11fam).

Found in VideoMAEForPreTraining: `embeddings[~bool_masked_pos]` with a mask made by `expand` broke at the `~`
("in-place _operator.invert writes into a tensor whose elements share memory"): `operator.invert` (and
`inv`, `__invert__`) matched the prefix test for `operator.iadd`-style names. `~` of an expanded mask is
not a write; eager runs it and stock torch.compile captures it in one graph. The real in-place operators
on an expanded tensor still run in Python, where eager's kernel raises its RuntimeError.
"""
from __future__ import annotations

import operator

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


def _expanded_mask(seed: int, rows: int, cols: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(cols, generator=gen) > 0.5).expand(rows, cols)


def _invert_tilde(x, m):
    return x * (~m).float()


def _invert_operator(x, m):
    return x * operator.invert(m).float() + operator.inv(m).float()


def _invert_dunder(x, m):
    return x * m.__invert__().float()


def _masked_select_of_inverted(x, m):
    return x.masked_fill(~m, 0.0).sum(-1) + (1 - m.long()).sum()


@pytest.mark.parametrize("fn", [_invert_tilde, _invert_operator, _invert_dunder, _masked_select_of_inverted])
def test_invert_of_an_expanded_mask_is_one_graph(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    with logged_breaks() as breaks:
        for seed, (rows, cols) in enumerate([(2, 5), (2, 5), (3, 7)]):
            x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed + 10))
            m = _expanded_mask(seed, rows, cols)
            torch.testing.assert_close(compiled(x, m), fn(x, m))
    assert breaks == []
    assert 1 <= backend.graph_count <= 2  # the third call's new sizes may recompile; never a break


@pytest.mark.parametrize("write", [operator.iand, operator.ior, lambda a, b: a.__ixor__(b)])
def test_in_place_operators_on_an_expanded_mask_still_raise_as_eager(write):
    def fn(m, other):
        out = m.clone()
        try:
            write(m, other)
        except RuntimeError as e:
            return out, "overlap" if "single memory location" in str(e) else str(e)
        return out, "no error"

    compiled = framejit.compile(fn, backend=CountingBackend())
    for seed, (rows, cols) in enumerate([(2, 5), (3, 6)]):
        m_eager, m_compiled = _expanded_mask(seed, rows, cols), _expanded_mask(seed, rows, cols)
        other = torch.ones(rows, cols, dtype=torch.bool)
        want, got = fn(m_eager, other), compiled(m_compiled, other)
        assert want[1] == "overlap"
        assert got[1] == want[1]
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(m_compiled, m_eager)
