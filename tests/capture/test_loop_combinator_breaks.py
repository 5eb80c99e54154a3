"""For loops over enumerate(...)/zip(...) whose body has a graph break (issue 11).

Before NOTE [Combinators rebuilt at breaks] (capture/lazy_combinators.py) the combinator live at the
break had to break where it was made, a break the frame could not take: the whole frame ran eagerly.
Each program here runs eagerly and compiled on fresh inputs (printed output, results and the mutated
arguments compared by tests.helpers.run_differential), and asserts that no frame ran wholly eagerly and
that graphs were captured (a bounded number: the loop's body is a resume function reused across steps).
"""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential, eager_frames


def _rows(n):
    return [torch.randn(3) for _ in range(n)]


def enumerate_print_break(x, xs):
    acc = x * 2
    for i, t in enumerate(xs):
        print("step", i)
        acc = acc + t
        if i == 2:
            break
    return (acc * 3).sin()


def zip_data_dependent_break(x, xs, ys):
    acc = x + 1
    for a, b in zip(xs, ys):
        if a.sum() > 0:
            acc = acc + b
        else:
            break
    return acc.cos() * 2


def enumerate_continue(x, xs):
    acc = x * 2
    for i, t in enumerate(xs):
        if t.sum() > 0:
            continue
        acc = acc + t * i
    return acc.sin()


def nested_enumerate_zip(x, xs, ys):
    for i, (a, b) in enumerate(zip(xs, ys), 1):
        print(i)
        x = x + a * b
        if i == 3:
            break
    return x.sin()


def zip_dict_items(x, d, xs):
    for (k, v), t in zip(d.items(), xs):
        if t.sum() > 0:
            x = x + v
        else:
            x = x - t
    return x * 2


def enumerate_tuple(x, tup):
    for i, t in enumerate(tup):
        print(i)
        x = x + t * i
    return x.cos()


def list_grows_after_print(x, xs):
    for i, t in enumerate(xs):
        print(i)
        if i < 2:
            xs.append(t * 2)  # the resumed loop must see the new items, as CPython's enumerate does
        x = x + t
    return x, len(xs)


def list_shrinks_after_print(x, xs):
    for i, t in enumerate(xs):
        print(i)
        if i == 1:
            xs.pop()
        x = x + t
    return x, len(xs)


def held_in_a_local(x, xs):
    it = enumerate(xs)
    for i, t in it:
        print(i)
        x = x + t
        if i == 1:
            break
    return x, [j for j, _ in it]  # the rest of the same object


def dict_values_written_in_loop(x, d):
    for i, (k, v) in enumerate(d.items()):
        d[k] = v * 2  # the dict changed while enumerate reads it: rebuilt from where it was made instead
        print(i)
        x = x + v
    return x


def zip_with_generator(x, xs, ys):
    for a, b in zip(xs, (y * 2 for y in ys)):
        print("g")
        x = x + a * b
    return x.sin()


def enumerate_map(x, xs):
    for i, a in enumerate(map(lambda t: t + 1, xs)):
        if a.sum() > 0:
            break
        x = x + a
    return x


def nested_loops(x, xs):
    hits = []
    for i, t in enumerate(xs):
        for j, u in enumerate(xs):
            if (t * u).sum() > 0:
                hits.append(i * 10 + j)
                x = x + u
    return x, hits


class _Layers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(3, 3) for _ in range(3))

    def forward(self, x, scales):
        for i, (layer, s) in enumerate(zip(self.layers, scales)):
            x = layer(x) * s
            if x.sum() > 0:
                x = x.relu()
            print(i)
        return x


# name -> (function, make_args(seed), most graphs over the three calls (measured, with slack))
CASES = {
    "enumerate_print_break": (enumerate_print_break, lambda s: (torch.randn(3), _rows(5)), 6),
    "zip_data_dependent_break": (zip_data_dependent_break, lambda s: (torch.randn(3), _rows(5), _rows(5)), 6),
    "enumerate_continue": (enumerate_continue, lambda s: (torch.randn(3), _rows(5)), 8),
    "nested_enumerate_zip": (nested_enumerate_zip, lambda s: (torch.randn(3), _rows(5), _rows(4)), 5),
    "zip_dict_items": (zip_dict_items, lambda s: (torch.randn(3), {k: torch.randn(3) for k in "abcd"}, _rows(4)),
                       10),
    "enumerate_tuple": (enumerate_tuple, lambda s: (torch.randn(3), tuple(_rows(5))), 14),
    "list_grows_after_print": (list_grows_after_print, lambda s: (torch.randn(3), _rows(3)), 5),
    "list_shrinks_after_print": (list_shrinks_after_print, lambda s: (torch.randn(3), _rows(4)), 5),
    "held_in_a_local": (held_in_a_local, lambda s: (torch.randn(3), _rows(5)), 4),
    "dict_values_written_in_loop": (dict_values_written_in_loop,
                                    lambda s: (torch.randn(3), {k: torch.randn(3) for k in "abc"}), 6),
    "zip_with_generator": (zip_with_generator, lambda s: (torch.randn(3), _rows(3), _rows(3)), 6),
    "enumerate_map": (enumerate_map, lambda s: (torch.randn(3), _rows(4)), 5),
    "nested_loops": (nested_loops, lambda s: (torch.randn(3), _rows(3)), 12),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_over_combinator_with_a_break_resumes(name):
    fn, make_args, most = CASES[name]
    before = eager_frames()
    backend = run_differential(fn, make_args, seeds=(0, 1, 2), fullgraph=False)
    assert eager_frames() == before, framejit.stats().get("eager_frame_reasons", [])[before:]
    assert 1 <= backend.graph_count <= most, backend.graph_count


def test_module_list_zip_with_a_data_dependent_branch():
    module = _Layers()
    before = eager_frames()
    backend = run_differential(module, lambda s: (torch.randn(3), [0.5, 2.0 - s, 1.5]), seeds=(0, 1, 2),
                               fullgraph=False, compiled=None)
    assert eager_frames() == before, framejit.stats().get("eager_frame_reasons", [])[before:]
    assert 1 <= backend.graph_count <= 8, backend.graph_count


def _expert_rows(x, mask):
    out = torch.zeros_like(x)
    hit = mask.sum(0).nonzero()  # a graph break: its length changes from call to call
    for e in hit:
        rows = torch.where(mask[:, e[0]])[0]
        out = out.index_add(0, rows, x[rows] * 2)
    return out


def test_loop_over_rows_of_a_symbolic_length_steps_in_python():
    """NOTE [Loops over symbolic rows]: once the rows' count is symbolic the loop is not unrolled again
    for every new count (19 graphs over these 6 calls before, one more recompile per new count)."""
    backend = CountingBackend()
    compiled = framejit.compile(_expert_rows, backend=backend)
    before = eager_frames()
    g = torch.Generator().manual_seed(0)
    for k, cols in enumerate([[0, 2], [1, 2, 3], [0], [0, 1, 2, 3], [3, 1], [2, 0, 1]]):
        x = torch.randn(6, 4, generator=g)
        mask = torch.zeros(6, 4, dtype=torch.bool)
        for j, col in enumerate(cols):
            mask[(j + k) % 6, col] = True
            mask[(j + k + 2) % 6, col] = j % 2 == 0
        torch.testing.assert_close(compiled(x, mask), _expert_rows(x, mask))
    assert eager_frames() == before
    assert backend.graph_count <= 15, backend.graph_count
