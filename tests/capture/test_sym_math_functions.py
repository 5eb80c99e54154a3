"""Dynamic shapes, issue 13 (hhuntM MED-2/MED-6, helper hfixSym): math functions of symbolic numbers stay
symbolic (NOTE [Math functions of sizes] in capture/sym_arith.py).

`math.cos(math.pi * n / T)` (a cosine schedule, a warm-up factor from a step argument), `math.log2(n)`,
`math.tanh(n / 10)` and `math.prod(x.shape)` of a symbolic size or int specialised it: one compilation per
value, then "hit the recompile limit (8); it now runs eagerly" (stock torch.compile: 2 graphs). Each test
runs eagerly and compiled over at least 8 changing values; values equal, 2 compilations (the first call
static, then one dynamic entry), no frame run eagerly. Domains: where CPython raises (acos outside [-1, 1],
sqrt of a negative number) the compiled call raises the same error, and the entry serves the values on
either side again.
"""
from __future__ import annotations

import math

import pytest
import torch

import framejit
from tests.helpers import assert_same

BACKENDS = ["eager", "onnxrt"]


def _stats() -> tuple[int, int]:
    st = framejit.stats()
    return st["graphs"], st["eager_frames"]


def _compiled_by(run) -> tuple[int, int]:
    """(graphs, eager frames) that `run()` added (framejit.stats() keeps counting a function compiled by an
    earlier test of this file)."""
    graphs, eager = _stats()
    run()
    after = _stats()
    return after[0] - graphs, after[1] - eager


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - compared with eager's
        return type(e), str(e)


def _run(fn, calls, backend):
    compiled = framejit.compile(fn, backend=backend)
    for args in calls:
        expected = _outcome(fn, *args)
        actual = _outcome(compiled, *args)
        if isinstance(expected, tuple) and isinstance(expected[0], type):
            assert actual == expected
        else:
            assert_same(actual, expected)


def _cos_of_size(x):
    return x * math.cos(math.pi * x.shape[0] / 10)


def _log2_of_size(x):
    return x * math.log2(x.shape[0])


def _tanh_of_size(x):
    return x * math.tanh(x.shape[0] / 10)


def _sinh_atan_of_size(x):
    return x * math.sinh(x.shape[0] / 7) + math.atan(x.shape[0])


def _prod_of_shape(x):
    return x.reshape(math.prod(x.shape)) * 2


def _prod_with_start(x):
    return x.new_ones(math.prod([x.shape[0], 3], start=2))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_cos_of_size, _log2_of_size, _tanh_of_size, _sinh_atan_of_size, _prod_of_shape,
                                _prod_with_start])
def test_a_math_function_of_a_size_compiles_once_for_every_size(fn, backend):
    assert _compiled_by(lambda: _run(fn, [(torch.randn(n, 2),) for n in range(2, 12)], backend)) == (2, 0)


def _warmup(x, step: int):
    return x * (0.5 * (1 + math.cos(math.pi * step / 100)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cosine_factor_of_an_int_step_compiles_twice(backend):
    assert _compiled_by(lambda: _run(_warmup, [(torch.randn(3), step) for step in range(2, 12)], backend)) == (2, 0)


class _Schedule:
    def __init__(self) -> None:
        self.last_epoch = 0
        self.base = 0.1

    def lr(self) -> float:
        return self.base * (1 + math.cos(math.pi * self.last_epoch / 10)) / 2


def test_a_cosine_schedule_stepped_inside_the_compiled_function_compiles_twice():
    ours, theirs = _Schedule(), _Schedule()

    def step(s, x):
        s.last_epoch += 1
        return x * s.lr()
    compiled = framejit.compile(step)

    def run():
        for _ in range(12):
            x = torch.randn(3)
            assert_same(compiled(ours, x), step(theirs, x))
            assert ours.last_epoch == theirs.last_epoch
    assert _compiled_by(run) == (2, 0)


def _branch_on_cos(x):
    c = math.cos(math.pi * x.shape[0] / 6)  # changes sign at 3, 9, 15
    return x * c if c > 0 else x - c


def test_a_branch_on_a_cosine_of_a_size_follows_eager_as_the_sign_flips():
    sizes = (2, 4, 5, 2, 10, 11, 4, 8, 2, 10, 7)
    assert _compiled_by(lambda: _run(_branch_on_cos, [(torch.randn(n),) for n in sizes], "eager"))[1] == 0


def _acos_of_size(x):
    return x * math.acos(x.shape[0] / 10 - 1)


def _sqrt_below(x):
    return x * math.sqrt(x.shape[0] - 5)


@pytest.mark.parametrize("fn, sizes", [(_acos_of_size, (4, 6, 25, 8, 30, 12, 3)),
                                       (_sqrt_below, (8, 9, 3, 10, 4, 11, 12))])
def test_outside_a_math_domain_the_compiled_call_raises_as_eager(fn, sizes):
    assert _compiled_by(lambda: _run(fn, [(torch.randn(n),) for n in sizes], "eager"))[1] == 0


def _branch_on_log2(x):
    return x * 2 if math.log2(x.shape[0]) > 2.5 else x - 1  # flips between 5 and 6


def test_a_branch_on_a_log2_of_a_size_guards_the_relation():
    """The guard `math.log2(s0) > 2.5` is printed with `log2` read as the function, not as a symbol (which pinned
    every size of the entry: 8 compilations, then eager)."""
    sizes = list(range(2, 14)) + [3, 12]
    assert _compiled_by(lambda: _run(_branch_on_log2, [(torch.randn(n),) for n in sizes], "eager")) == (3, 0)
