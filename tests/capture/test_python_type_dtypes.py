"""NOTE [Python types as dtypes]: torch ops given the Python types int/float/bool/complex as a dtype
(`torch.tensor(0, dtype=int)`, as transformers' linear-attention caches do) are captured in one graph with
the dtype torch makes of each type, instead of the frame falling back to eager."""
import torch

from tests.helpers import run_differential


def _types_as_dtypes(x, n):
    count = torch.tensor(0, dtype=int) + n
    zeros = torch.zeros(3, dtype=float)
    mask = x.new_zeros(x.shape, dtype=bool) | (x > 0)
    return x.to(float) * count, zeros, mask, torch.ones(2, dtype=complex), torch.full((2,), 1, dtype=int)


def _user_function_given_a_type(x, kind):
    return x.to(torch.int64) if kind is int else x  # a type given to Python code keeps its meaning


def test_python_types_given_as_dtypes_are_captured():
    counting = run_differential(_types_as_dtypes, lambda s: (torch.randn(2 + s, 3), s + 1), seeds=(0, 1, 2))
    assert counting.graph_count >= 1  # fullgraph=True: no break, no eager frame


def test_type_passed_to_python_code_keeps_its_meaning():
    counting = run_differential(_user_function_given_a_type, lambda s: (torch.randn(4) * 3, int if s % 2 else float),
                                seeds=(0, 1, 2, 3), fullgraph=False)
    assert counting.graph_count >= 1
