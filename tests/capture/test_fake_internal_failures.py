"""A failure of framejit's own code under the fake mode is a logged INTERNAL_ERROR break at the op, not the
user's exception (NOTE [Internal failures under the fake mode] in framejit/capture/fake_failures.py)."""
import pytest
import torch

import framejit
from framejit.capture import packed_sequences
from tests.helpers import CountingBackend, eager_frames, run_differential

_REAL = torch.ones(1)


@pytest.fixture
def broken_rule(monkeypatch):
    """A framejit shape rule with a bug: for torch.cos it adds a real tensor inside the fake mode (what
    revAB HIGH-1's pad_packed_sequence rule did), which the fake mode refuses with an AssertionError."""
    original = packed_sequences.padded_rnn_rule

    def rule(target, args, out):
        if target is torch.cos:
            return lambda *a: torch.cos(*a) + _REAL
        return original(target, args, out)
    monkeypatch.setattr(packed_sequences, "padded_rnn_rule", rule)


def _fn(x):
    return torch.cos(x * 2) + 1


def _traced() -> int:
    return int(framejit.stats()["frames_traced"])


@pytest.mark.parametrize("dynamic", [None, True])
def test_internal_failure_breaks_once(broken_rule, dynamic):
    backend = CountingBackend()
    compiled = framejit.compile(_fn, backend=backend, dynamic=dynamic)
    traced, eager = _traced(), eager_frames()
    run_differential(_fn, lambda s: (torch.randn((3, 4, 5, 6, 7)[s]),), seeds=(0, 1, 2, 3, 4), fullgraph=False,
                     backend=backend, compiled=compiled)
    # the frame and the resume function after cos, each traced once for static sizes and once more when the
    # size becomes symbolic; at the parent every call with symbolic sizes traced the frame again
    assert _traced() - traced <= 4, _traced() - traced
    assert eager_frames() == eager
    mul_graphs = [g for g in backend.graphs if any(getattr(n.target, "__name__", "") == "mul" for n in g.graph.nodes)]
    assert mul_graphs  # the code before the failing op stays captured


def test_internal_failure_under_fullgraph_raises_framejits_error(broken_rule):
    with pytest.raises(framejit.Unsupported, match="INTERNAL_ERROR|internal_error|fake run"):
        framejit.compile(_fn, backend=CountingBackend(), fullgraph=True, dynamic=True)(torch.randn(3))


def _bad_view(x, n):
    return torch.cos(x).view(n, -1) * 2


def test_user_errors_stay_the_users(broken_rule):
    # a view that does not divide raises eager's RuntimeError at the calls with n = 4 (x has 6 elements)
    run_differential(_bad_view, lambda s: (torch.randn(6), (2, 3, 4, 2)[s]), seeds=(0, 1, 2, 3), fullgraph=False)


def _bad_matmul(x):
    return torch.sin(x) @ torch.ones(5, 2)


def test_user_shape_error_at_symbolic_op():
    run_differential(_bad_matmul, lambda s: (torch.randn(3, (5, 5, 4, 5)[s]),), seeds=(0, 1, 2, 3), fullgraph=False)
