"""Reentrant activation checkpointing inside a compiled function (NOTE [Reentrant checkpoint at a break]).

`torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=True)` whose `fn` has effects on Python state (or that
does not pass `use_reentrant`) is a graph break where torch's own checkpoint runs; before, `fn` then ran as plain
Python, uncaptured and uncounted. Now `fn` goes through its frame hook: its body is captured twice (the forward
under no_grad, the recomputation in backward under grad), and values, gradients of inputs and parameters, and
dropout masks (RNG replayed) equal eager's, over two shapes. Without such effects the call is captured in the
graph (NOTE [Reentrant checkpoint in the graph]; test_reentrant_checkpoint_captured.py).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as ckpt

import framejit
from tests.helpers import CountingBackend, assert_same, logged_breaks


def _with_linear(backend: CountingBackend) -> list:
    return [gm for gm in backend.graphs
            if any(node.target in (torch._C._nn.linear, torch.nn.functional.linear) for node in gm.graph.nodes)]


def _run(fn, params, x, seed):
    x = x.detach().clone().requires_grad_(True)
    for p in params:
        p.grad = None
    torch.manual_seed(seed)
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad, [p.grad.clone() for p in params], torch.get_rng_state()


def _check(fn, params, shapes):
    """Runs eager and compiled per shape; returns the backend, graphs per shape and the frames framejit ran
    wholly eagerly meanwhile (a delta: stats are per process and earlier tests add to them)."""
    eager_before = framejit.stats()["eager_frames"]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    per_shape = []
    for seed, shape in enumerate(shapes):
        x = torch.randn(*shape)
        expected = _run(fn, params, x, seed)
        before = backend.graph_count
        actual = _run(compiled, params, x, seed)
        per_shape.append(backend.graph_count - before)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    return backend, per_shape, framejit.stats()["eager_frames"] - eager_before


def test_a_reentrant_checkpointed_module_with_dropout_is_captured_with_its_gradients():
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.4), nn.Tanh())
    calls = []

    def body(t):  # an effect eager makes again in backward: the checkpoint stays a break
        calls.append(t.shape[0])
        return block(t)

    def fn(x):
        y = ckpt.checkpoint(body, x * 2, use_reentrant=True)
        return y + 1

    backend, per_shape, eager_frames = _check(fn, list(block.parameters()), [(3, 8), (5, 8)])
    assert calls == [3, 3, 3, 3, 5, 5, 5, 5]  # eager's forward and backward, then the compiled ones
    # first shape: the graph before the break, the one after it, and the block's body twice (forward under
    # no_grad, recomputation under grad); the block ran uncaptured before
    assert per_shape[0] == 4
    assert len(_with_linear(backend)) >= 2
    assert eager_frames == 0


def test_a_reentrant_checkpointed_function_and_bound_method_are_captured():
    torch.manual_seed(1)
    lin = nn.Linear(6, 6)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)

        def run(self, t, scale):
            return torch.relu(self.lin(t)) * scale

    layer = Layer()

    def fn(x):
        y = ckpt.checkpoint(lambda t: torch.sigmoid(lin(t)), x, use_reentrant=True, preserve_rng_state=False)
        return ckpt.checkpoint(layer.run, y, 0.5, use_reentrant=True)

    params = list(lin.parameters()) + list(layer.parameters())
    backend, per_shape, eager_frames = _check(fn, params, [(2, 6), (4, 6)])
    assert per_shape[0] == 1  # both checkpoints in the graph (NOTE [Reentrant checkpoint in the graph])
    assert eager_frames == 0


def test_the_break_at_a_reentrant_checkpoint_logs_why():
    # the log named only the substitute's helper ("graph_break is marked framejit.disable")
    block = nn.Linear(4, 4)

    def fn(x):
        return ckpt.checkpoint(block, x + 1) * 2  # no use_reentrant: torch warns at this line

    with logged_breaks() as records, pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        _check(fn, list(block.parameters()), [(2, 4)])
    assert any("without use_reentrant" in r for r in records), records
    assert not any("marked framejit.disable" in r for r in records), records
