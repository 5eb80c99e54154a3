"""NOTE [Dropouts that return their input] (capture/graph.py): eager's dropout returns its input object when it
does nothing (training off, or p == 0), so `F.dropout(y, ...) is y`; framejit keeps that answer when sizes are
symbolic, where the fake run returns a clone (review revK K8). Differential over calls with changing sizes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit

CASES = {
    "eval": lambda y: F.dropout(y, 0.5, training=False),
    "p_zero": lambda y: F.dropout(y, 0.0, training=True),
    "p_zero_keyword": lambda y: F.dropout(y, p=0.0),
    "torch_dropout_eval": lambda y: torch.dropout(y, 0.3, False),
    "inplace_eval": lambda y: F.dropout(y, 0.5, training=False, inplace=True),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_dropout_that_does_nothing_returns_its_input_object(case, dynamic):
    op = CASES[case]

    def fn(x):
        y = x * 2
        out = op(y)
        return out is y, out + 1

    compiled = framejit.compile(fn, backend="eager", dynamic=dynamic)
    for n in (3, 3, 4, 5):  # sizes turn symbolic from the third call (None) or the first (True)
        x = torch.randn(n)
        want, got = fn(x), compiled(x)
        assert got[0] is want[0] is True
        assert torch.equal(got[1], want[1])


def test_a_dropout_with_p_outside_the_unit_interval_raises_as_in_eager():
    def fn(x):
        return F.dropout(x, 1.5, training=False)

    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 4):
        with pytest.raises(ValueError) as want:
            fn(torch.randn(n))
        with pytest.raises(ValueError) as got:
            compiled(torch.randn(n))
        assert str(got.value) == str(want.value)
