"""torch.utils.checkpoint with a context_fn: the break names it; noop_context_fn passed explicitly is captured.

NOTE [Checkpoint context functions] (capture/higher_order.py). Selective activation checkpointing passes
`context_fn=functools.partial(create_selective_checkpoint_contexts, policy)`; the traced substitute compared it
with `context_fn not in (None, noop_context_fn)`, an `==` of a partial that broke with "comparison eq of
Constant(None) and PartialValue" instead of the checkpoint's own reason. Differential over three calls with
changing sizes; values and gradients compared with eager.
"""
import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts, noop_context_fn

import framejit
from tests.helpers import CountingBackend


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


def _make(context_fn):
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)

    def blk(x):
        return lin(x).relu().sin()

    def f(x):
        return checkpoint(blk, x, use_reentrant=False, context_fn=context_fn).square().sum()
    return f, lin


def _run(f, lin, n, seed):
    lin.zero_grad(set_to_none=True)
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    loss = f(x)
    loss.backward()
    return loss.detach(), x.grad, lin.weight.grad


def _differential(context_fn):
    framejit.reset()
    (f, lin), (g, lin2) = _make(context_fn), _make(context_fn)
    backend = CountingBackend()
    compiled = framejit.compile(g, backend=backend)
    for n, seed in ((3, 0), (3, 1), (5, 2)):
        for e, c in zip(_run(f, lin, n, seed), _run(compiled, lin2, n, seed)):
            assert torch.allclose(e, c)
    return backend


def test_selective_checkpoint_breaks_with_its_own_reason():
    _differential(functools.partial(create_selective_checkpoint_contexts, _policy))
    torch.manual_seed(0)
    f, _ = _make(functools.partial(create_selective_checkpoint_contexts, _policy))
    report = framejit.explain(f)(torch.randn(3, 4, requires_grad=True))
    reasons = [str(r) for r in report.break_reasons]
    assert any("checkpoint with a context_fn" in r for r in reasons), reasons
    assert not any("comparison" in r for r in reasons), reasons


def test_explicit_noop_context_fn_is_captured():
    backend = _differential(noop_context_fn)
    assert backend.graph_count <= 2  # one graph per shape specialisation: the checkpoint inlined, no break
    graphs = [m for gm in backend.graphs for m in gm.modules() if isinstance(m, torch.fx.GraphModule)]
    assert {"relu", "sin", "square"} <= {getattr(n.target, "__name__", str(n.target)) for gm in graphs
                                         for n in gm.graph.nodes}  # the region's ops in its checkpointed submodule
