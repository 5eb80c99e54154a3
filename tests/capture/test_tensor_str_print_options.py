"""`str()` of a tensor made from constants follows the print options of each call, as eager's (NOTE [Strings
of tensors follow the print options] in capture/builtins.py): it was folded while tracing."""
from __future__ import annotations

import pytest
import torch

import framejit


def str_of_a_constant_tensor(x):
    return x * len(str(torch.tensor([1.123456789])))


def str_of_a_computed_constant_tensor(x):
    return x + len(str(torch.tensor([1.123456789]) * 2)), str(torch.tensor([3.0]))


def repr_of_a_constant_tensor(x):
    return x - len(repr(torch.tensor([1.123456789])))


@pytest.mark.parametrize("fn", [str_of_a_constant_tensor, str_of_a_computed_constant_tensor,
                                repr_of_a_constant_tensor])
def test_strings_of_constant_tensors_follow_the_print_options(fn):
    compiled = framejit.compile(fn, backend="eager")
    try:
        for call, precision in enumerate((4, 2, 4, 6)):
            torch.set_printoptions(precision=precision)
            x = torch.arange(3.0) + call
            expected, got = fn(x), compiled(x)
            if isinstance(expected, tuple):
                assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
            else:
                assert torch.equal(got, expected)
    finally:
        torch.set_printoptions(profile="default")
