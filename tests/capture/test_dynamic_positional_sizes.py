"""Dynamic shapes, issue 13 (hhuntD MED-7, helper hfixDyn2): a random factory given a symbolic size as its third
POSITIONAL argument keeps it symbolic.

`torch.randint(0, 10, (x.shape[0],))` and `torch.normal(0.0, 1.0, (x.shape[0],))` pinned the size: the check
whether a call draws random numbers read the third positional argument as a constant (only a dropout's `training`
sits there), so one compilation per size, then "hit the recompile limit (8); it now runs eagerly". Stock
torch.compile (backend counting graphs): 2 graphs over these 8 sizes for each function here, as with `size=`.
Each test compares eager and compiled under the same seed over 8 sizes and asserts framejit's 2 graphs.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, manual_seed

SIZES = (3, 5, 7, 2, 9, 4, 11, 6)

CASES = {
    "randint_low_high_size": lambda x: torch.randint(0, 10, (x.shape[0],)) + x[:, 0],
    "randint_low_high_size_dtype": lambda x: torch.randint(0, 10, (x.shape[0],), dtype=torch.float32) + x[:, 0],
    "randint_2d_float": lambda x: torch.randint(0, 10, (x.shape[0], 3)).float() + x,
    "normal_float_float_size": lambda x: torch.normal(0.0, 1.0, (x.shape[0],)) + x[:, 0],
    "normal_float_float_size_none_generator": lambda x: torch.normal(2.0, 3.0, (x.shape[0], 3), generator=None) + x,
    "randint_high_size": lambda x: torch.randint(10, (x.shape[0],)) + x[:, 0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_positional_symbolic_size_of_random_factory(name):
    fn = CASES[name]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in SIZES:
        x = torch.randn(n, 3)
        manual_seed(n)
        expected = fn(x)
        manual_seed(n)
        assert torch.equal(compiled(x), expected)
    assert backend.graph_count == 2  # stock torch.compile: 2


def test_dropout_training_argument_still_read():
    """A dropout's third positional argument (`training`) is still read: in eval it draws nothing."""
    fn = lambda x, p: torch.nn.functional.dropout(x, p, False) * 2  # noqa: E731
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in SIZES[:4]:
        x = torch.randn(n, 3)
        assert torch.equal(compiled(x, 0.5), fn(x, 0.5))
    assert backend.graph_count == 2
