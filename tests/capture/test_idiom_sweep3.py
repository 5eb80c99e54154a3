"""Idioms from the third side-by-side sweep of framejit against stock torch.compile (issue 11, helper
h11sweep3; the programs are in /work/helper_notes/h11sweep3_c*.py).

Each program is written as model code writes it, runs eagerly and compiled over several calls with
inputs or state changed between them, and asserts equal values, printed output and side effects, the
graph count where that is the point, and that no frame ran wholly eagerly.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


# ---- a function with a lambda default, held by a closure cell (NOTE [Defaults that lead back]) --------------
# With the frame cache on (as users have it) and a backend whose entries persist, locating the lambda
# searched the closures, described the function that holds it, located the lambda again...: RecursionError,
# and the whole frame ran eagerly.
def _block_factory():
    lin = torch.nn.Linear(3, 3)

    def block(x, *, act=lambda t: t.relu(), residual: bool = True, **extra):
        y = act(lin(x)) * extra.get("gain", 1.0)
        return x + y if residual else y

    def f(x):
        return block(x), block(x, residual=False, gain=2.0, act=torch.tanh)
    return f


def test_a_closure_function_with_a_lambda_default_persists_or_stays_in_memory(monkeypatch):
    monkeypatch.setattr(framejit.config, "cache_enabled", True)  # as users run it (tests turn it off)
    torch.manual_seed(0)
    f = _block_factory()
    compiled = framejit.compile(f, backend="eager")
    eager_before = _eager_frames()
    for n in (2, 2, 4):
        x = torch.randn(n, 3)
        for got, want in zip(compiled(x), f(x)):
            torch.testing.assert_close(got, want)
    assert _eager_frames() == eager_before
