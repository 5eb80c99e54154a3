"""Eager vs compiled observations of a training program, with proof that the compiled backwards ran through
the backend's joints (a joint whose build fails runs eagerly, which would prove nothing).

Usage: `eager, compiled = run_observed(program, backend, ...)` where `program(compile_fn, observed)` compiles
what it needs with `compile_fn` (identity for the eager run) and appends what it sees (tensors, lists of
gradients with None kept, numbers, messages) to `observed`; then `assert_same(eager, compiled)`.
Shared by tests/backends/test_training_{unreached,eager_saved,hooks_unreached,kept_outputs}.py.
"""
from __future__ import annotations

import torch

import framejit
from framejit.backends import joint as joint_mod
from framejit.backends.checks import unchecked

TOL = dict(atol=1e-4, rtol=1e-3)


def grad_copy(t):
    return None if t is None else t.detach().clone()


def run_observed(program, backend: str, *, joint_calls: int = 0, backwards: int = 1,
                 lean: bool | None = None) -> tuple[list, list]:
    """(eager's observations, compiled observations). On onnxrt/triton the compiled run made at least
    `joint_calls` joint calls and `backwards` backwards through joints, and lean calls where `lean` (none where
    `lean` is False; not checked where None)."""
    results, compiled = [], []

    def recording(gm, example_inputs):
        compiled.append(unchecked(framejit.lookup_backend(backend)(gm, example_inputs)))
        return compiled[-1]
    for compile_fn in (lambda f: f, lambda f: framejit.compile(f, backend=recording)):
        torch.manual_seed(0)
        observed: list = []
        program(compile_fn, observed)
        results.append(observed)
    assert compiled
    if backend != "eager":
        joints = [c if isinstance(c, joint_mod.JointGraph) else getattr(c, "_joint", None)
                  or getattr(c, "_training", None) for c in compiled]
        joints = [j for j in joints if j is not None]
        assert sum(j.stats["joint_calls"] for j in joints) >= joint_calls
        assert sum(j.stats["backward"] for j in joints) >= backwards
        if lean is not None:
            assert (sum(j.stats["lean_joints"] for j in joints) >= 1) == lean
    return results[0], results[1]


def assert_same(eager: list, compiled: list) -> None:
    """Equal observations: tensors within TOL, lists with None in the same places, anything else equal."""
    assert len(compiled) == len(eager)
    for e, c in zip(eager, compiled):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(c, e, **TOL)
        elif isinstance(e, list):
            assert isinstance(c, list) and [x is None for x in c] == [x is None for x in e]
            assert_same([x for x in e if x is not None], [x for x in c if x is not None])
        else:
            assert c == e
