"""`y.grad_fn is None` / `is not None` of a tensor is captured (issue 12: hhuntG3 MED-4), differential (eager vs
compiled on fresh inputs, tests/helpers.run_differential).

NOTE [Autograd nodes known absent or present] (framejit/capture/tensor_hooks.py): a tensor that does not require
grad has no node; a result of the graph that requires grad has one exactly when its fake has one. Before, the read
was a break whose resume frame held the node on its stack and ran wholly eagerly (still so for other uses of
the node: `node = y.grad_fn`).
"""
from __future__ import annotations

import torch

from tests.helpers import run_differential


def _x(seed):
    return torch.randn(2 + seed).requires_grad_(seed % 2 == 1)  # requires grad on the second call only


def node_of_result(x):
    y = x * 2
    return y, y.requires_grad, y.grad_fn is not None, y.grad_fn is None


def test_result_node_compared_with_none_in_one_graph():
    run_differential(node_of_result, lambda seed: (_x(seed),), seeds=(0, 1, 2))  # fullgraph: no break


def node_branches(x, grad):
    out = []
    with torch.set_grad_enabled(grad):
        y = x.sin()
    if y.grad_fn is None:
        out.append("none")
    if y.grad_fn is not None:
        out.append("node")
    if not x.requires_grad and x.grad_fn is None:  # an input that requires grad: a break (is_leaf unguarded)
        out.append("input")
    return y + 1, out


def test_node_branches_under_grad_modes():
    run_differential(node_branches, lambda seed: (_x(seed), seed != 2), seeds=(0, 1, 2, 3))

