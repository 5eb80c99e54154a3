"""Red team of dynamic shapes (issue 13): Python code over symbolic sizes and ints that specialised (one
compilation per size where torch.compile needs one), and a loop over a size whose body breaks that reached
the recompile limit. Differential: every call is compared with eager on fresh inputs of several sizes, and
the number of compilations is asserted."""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_sizes

SIZES = [3, 4, 5, 6, 7]


def _run(fn, make, sizes=SIZES, **kwargs) -> CountingBackend:
    return run_sizes(fn, make, sizes, **kwargs)

def _rows(n):
    return (torch.randn(n, 4),)


def _truth(x):
    if x.shape[0] - 1:  # `n - 1 != 0`: known for sizes >= 2, not a guard on the size's value
        return x * 2
    return x - 1


def _bitwise(x):
    n = x.shape[0]
    return x * (n & 1), n << 1, n >> 1, n ^ 3, n | 8, 2 ** n


def _divmod(x):
    q, r = divmod(x.shape[0], 3)
    return x[:q + 1] * r, q


def _int_index(x):
    n = x.shape[0]
    return x[n - 1], x[-n], x[:, (n - 3) % 4], x[..., 0][n - 2]


def _tensor_of_sizes(x):
    return (torch.tensor(x.shape[0]), torch.tensor([x.shape[0], 2]), torch.tensor(x.shape),
            torch.tensor(x.shape[0], dtype=torch.float32) * x, torch.as_tensor(x.shape[1:]))


def _in_tuple(x):
    return x * (x.shape[0] in (0, 1, 9)), x.shape[0] not in [10]  # a relation known false or guarded


@pytest.mark.parametrize("fn", [_truth, _bitwise, _divmod, _int_index, _tensor_of_sizes, _in_tuple],
                         ids=lambda f: f.__name__.strip("_"))
def test_size_uses_stay_symbolic_with_dynamic_true(fn):
    assert _run(fn, _rows, dynamic=True).graph_count == 1  # before: one compilation per size


def test_in_tuple_guards_the_relations_not_the_size():
    def fn(x):
        return x * 2 if x.shape[0] in (3, 4) else x - 1

    # 3 and 4 are each a relation that holds (n == 3, n == 4); 5, 6, 7 share the entry where both fail
    assert _run(fn, _rows, dynamic=True).graph_count == 3


def test_negative_exponent_or_shift_of_a_symbolic_int_specialises():
    def fn(x, n):  # n may be negative (an int argument): 2 ** n is a float then, 1 << n an error
        return x * (2 ** n), x * (1 << abs(n))

    backend = _run(fn, lambda n: (torch.randn(3), n - 5), dynamic=True)  # n: -2 .. 2
    assert backend.graph_count == 5


def test_int_argument_is_symbolic_from_the_first_call_with_dynamic_true():
    def fn(x, step, offset):
        return x[offset:offset + 2] * (step + 1), step * 2

    backend = _run(fn, lambda n: (torch.randn(8, 3), n, n - 3), dynamic=True)
    assert backend.graph_count == 1  # as torch.compile(dynamic=True); before: one per value
    assert [type(t) for t in backend.example_inputs[0]] == [torch.Tensor, int, int]


def test_int_attribute_becomes_symbolic_when_it_changes_with_dynamic_true():
    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.step = 0

        def forward(self, x):
            return x * (self.step + 1)

    eager, module = Step(), Step()
    backend = CountingBackend()
    compiled = framejit.compile(module, backend=backend, dynamic=True)
    for n in SIZES:
        eager.step = module.step = n
        x = torch.randn(n, 2)
        assert_same(compiled(x), eager(x))
    assert backend.graph_count == 2  # the first value, then symbolic (an attribute: not at the first call)


def test_loop_over_a_size_that_breaks_stays_under_the_recompile_limit(monkeypatch):
    def fn(x):
        acc = x[0]
        for i in range(1, x.shape[0]):
            if acc.sum() > 1e9:  # data-dependent: a break in every step
                acc = acc * 0
            acc = acc + x[i] * i
        return acc

    before = framejit.stats()["eager_frames"]
    compiled = framejit.compile(fn, backend="eager")
    for n in SIZES:
        x = torch.randn(n, 3)
        assert_same(compiled(x), fn(x))
    # before: the body's resume function recompiled for each (position, length) of the loop's list and
    # reached the recompile limit (8) at the fourth size, running eagerly from then on
    assert framejit.stats()["eager_frames"] == before


def test_math_of_sizes_compiles_once():
    def fn(x):
        n = x.shape[0]
        return x[: math.ceil(n / 2)] * (n % 2), -(-n // 2), bool(n), round(n / 4)

    assert _run(fn, _rows, dynamic=True).graph_count == 1


@pytest.mark.parametrize("dynamic, compiles", [(None, 4), (True, 2)])
def test_shape_carried_across_a_break_becomes_symbolic(dynamic, compiles):
    def fn(x):
        shape = x.shape
        y = x.relu()
        if y.sum() > 1e9:  # data-dependent: a break; `shape` is an argument of the resume function
            y = -y
        return y.reshape(shape[0] * shape[1]), torch.zeros(shape[0] // 2), shape

    backend = _run(fn, _rows, dynamic=dynamic)
    # the frame and its resume function: static, then symbolic (the torch.Size too), or symbolic at once
    # under dynamic=True (as torch.compile: 4 and 2); before: the resume function compiled once per size
    # (its torch.Size was a constant: 7 and 6 compilations over 5 sizes)
    assert backend.graph_count == compiles


def test_backends_read_output_layouts_without_guarding_sizes():
    from framejit.backends.layout import output_layouts

    def fn(x):
        middle = x[1:x.shape[0] - 1]
        return middle * 2, middle.t() * 3  # contiguous, and transposed (eager keeps the stride order)

    backend = _run(fn, _rows, sizes=[5], dynamic=True)
    gm = backend.graphs[0]
    env = next(n for n in gm.graph.nodes if n.op == "placeholder").meta["val"].shape[0].node.shape_env
    before = (len(env.guards), dict(env.replacements))
    layouts = output_layouts(gm)
    # before: is_contiguous() asked the frontend's env, which specialised x.size(0) == 5, so on onnxrt and
    # triton the entry served one size (NOTE [Layouts read from hints] in backends/layout.py)
    assert (len(env.guards), dict(env.replacements)) == before
    assert layouts is not None and list(layouts) == [1] and layouts[1][0] == (1, 0)
