"""`y.extend(<generator reading y>)` (and `y += ...`, deque.extendleft) is traced in one graph: the generator is
traced again lazily, resumed after each item is added (protocol._draw_retrying_lazily, NOTE [Containers grown while
drawing]). Before, the generator run ahead found `y` grown at its next step and broke where it was made
(fullgraph=True raised "state mutated while the generator ... is consumed"; PyTorch's test_generator.py
test_list_extend, test_deque_extendleft). Differential: eager vs compiled on fresh inputs, values and the grown
containers compared; one graph each (no break).
"""
from __future__ import annotations

import collections

import torch

from tests.helpers import run_differential


def extend_reads_the_list(x):
    y = [1]
    y.extend(y[-1] + z for z in range(3))  # eager: [1, 1, 2, 4]
    return x + 1, y


def extend_reads_tensors(x):
    y = [x]
    y.extend(y[-1] * 2 + k for k in range(3))
    return torch.stack(y)


def iadd_reads_the_list(x):
    y = [x.sum()]
    y += (y[-1] + len(y) for _ in range(2))
    return y


def extendleft_reads_the_deque(x):
    y = collections.deque([1])
    y.extendleft(y[0] + z for z in range(3))  # eager: deque([4, 2, 1, 1])
    return x + 1, y


def outside_list_extended(x, acc):
    acc.extend(acc[-1] + k for k in range(2))
    return x + len(acc)


def test_container_grown_by_a_generator_reading_it_is_one_graph():
    for fn in (extend_reads_the_list, extend_reads_tensors, iadd_reads_the_list, extendleft_reads_the_deque):
        backend = run_differential(fn, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 1))
        assert backend.graph_count == 2  # one per size, fullgraph: no break
    backend = run_differential(outside_list_extended, lambda seed: (torch.randn(2), [seed, seed + 1]), seeds=(0, 1))
    assert backend.graph_count >= 1
