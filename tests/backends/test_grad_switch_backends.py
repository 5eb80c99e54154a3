"""Inference graphs that keep grad-mode switches (NOTE [Grad-mode nodes] in capture/graph.py) under the
lowered backends: with no input or weight that requires grad, the switches do not make the graph a
training graph (onnxrt and triton compile it and run the compiled program, not the FX graph eagerly);
with an input that requires grad and grad switched on inside, the graph runs eagerly so autograd records
it. Results (values, requires_grad) and the grad mode after the call equal eager's."""
from __future__ import annotations

import logging

import pytest
import torch

from framejit import logs
from framejit.backends import lookup_backend
from framejit.backends.triton.runtime import EagerGraph
from tests.helpers import run_differential


class Recording:
    """Compiles with a named backend and keeps what it returned for each graph."""

    def __init__(self, name: str) -> None:
        self.name, self.graphs, self.compiled = name, [], []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.compiled.append(lookup_backend(self.name)(gm, example_inputs))
        return self.compiled[-1]


def fn(x, w):
    y = x @ w
    torch._C._set_grad_enabled(True)
    z = torch.relu(y) * 2
    torch._C._set_grad_enabled(False)
    return z + 1, z.requires_grad


@pytest.fixture
def fallback_log(caplog):
    logs.set_logs("eager_fallback")
    caplog.set_level(logging.INFO, logger="framejit")
    yield caplog
    logs.set_logs("")


@pytest.mark.parametrize("name", ["onnxrt", "triton"])
def test_inference_graph_with_grad_switches_is_compiled(name, fallback_log):
    backend = Recording(name)
    with torch.no_grad():
        run_differential(fn, lambda seed: (torch.randn(4, 3), torch.randn(3, 5)), backend=backend, rtol=1e-4, atol=1e-5)
    assert len(backend.graphs) == 1
    targets = [n.target for n in backend.graphs[0].graph.nodes]
    assert targets.count(torch._C._set_grad_enabled) == 2
    assert not [r for r in fallback_log.records if "eager" in r.getMessage()]
    (compiled,) = backend.compiled
    if name == "triton":
        assert not isinstance(compiled, EagerGraph) and compiled.kernel_count > 0
    else:
        assert [row["ort_nodes"] > 0 for row in compiled.summary()] == [True]


@pytest.mark.parametrize("name", ["onnxrt", "triton"])
def test_grad_switched_on_for_an_input_that_requires_grad_runs_eagerly(name, fallback_log):
    backend = Recording(name)
    with torch.no_grad():
        run_differential(fn, lambda seed: (torch.randn(4, 3, requires_grad=True), torch.randn(3, 5)),
                         backend=backend, rtol=1e-4, atol=1e-5)
    assert len(backend.graphs) == 1
    assert [r for r in fallback_log.records if "eager" in r.getMessage()]


def test_no_grad_foreach_update_of_weights_that_require_grad_is_expanded(fallback_log):
    # an EMA update (timm's ModelEmaV3 form): `@torch.no_grad()` inside the graph switches grad mode, the
    # weights require grad, so the graph is a joint; its foreach call is expanded before AOT autograd traces
    # it (NOTE [Foreach expansion]), not left whole to run in torch
    import framejit

    def update(ema, model, decay):
        with torch.no_grad():
            torch._foreach_lerp_(ema, model, 1 - decay)
            torch._foreach_mul_(ema, 1.0)

    def make():
        g = torch.Generator().manual_seed(0)
        return [torch.randn(3, 2, generator=g).requires_grad_() for _ in range(2)], \
            [torch.randn(3, 2, generator=g).requires_grad_() for _ in range(2)]
    (ema_e, model_e), (ema_c, model_c) = make(), make()
    compiled = framejit.compile(update, backend="onnxrt")
    for decay in (0.9, 0.99, 0.5):
        update(ema_e, model_e, decay)
        compiled(ema_c, model_c, decay)
        torch.testing.assert_close(ema_c, ema_e)
    assert not [r for r in fallback_log.records if "_foreach" in r.getMessage()]
