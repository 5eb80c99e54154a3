"""transformers models training with reentrant gradient checkpointing (issue 11, NOTE [Reentrant checkpoint in
the graph]).

`model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})` makes every
decoder/encoder layer call `torch.utils.checkpoint.checkpoint(partial(layer.forward, **kwargs), *args,
use_reentrant=True)` in train mode. That call was a graph break per layer (llama: 3 graphs per step, stock 5);
now it is captured: each tiny model trains 3 steps (fresh inputs, gradients of every parameter, dropout zeroed so
eager and compiled runs compare) as eager does, in no more graphs than stock torch.compile (NOTE [Stock counts
table]) and with no frame run wholly eagerly.
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models.hf import catalog, harness, stock_table  # noqa: E402
from tests.models.hf.training import assert_steps_close, train_step, training_variant  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo"),
              pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
              pytest.mark.filterwarnings("ignore::UserWarning:transformers")]

_SEEDS = (0, 1, 2)


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def _model(build):
    model = build()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    return model


@pytest.mark.parametrize("name", ["llama"])
def test_reentrant_gradient_checkpointing_trains_in_no_more_graphs_than_stock(name):
    build, make_inputs, _ = training_variant(catalog.get(name))
    calls = [make_inputs(seed) for seed in _SEEDS]
    eager = _model(build)
    expected = [train_step(eager, kwargs, seed) for kwargs, seed in zip(calls, _SEEDS)]
    stock_model = _model(build)

    def live() -> CountingBackend:
        import torch._dynamo  # the reference compiler (tests only)
        torch._dynamo.reset()
        stock = CountingBackend()
        try:
            compiled = torch.compile(stock_model, backend=stock)
            for kwargs, seed in zip(calls, _SEEDS):
                train_step(compiled, kwargs, seed)
        finally:
            torch._dynamo.reset()
        return stock
    stock = stock_table.stock_counts("reentrant_checkpoint_training", stock_model, calls, live)
    backend = CountingBackend()
    before = harness.eager_frame_count()
    compiled = framejit.compile(_model(build), backend=backend)
    for kwargs, seed, want in zip(calls, _SEEDS, expected):
        assert_steps_close(train_step(compiled, kwargs, seed), want)
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()
    assert 1 <= backend.graph_count <= stock.graph_count, (backend.graph_count, stock.graph_count)
    assert backend.graph_count == 1  # was 3: a break at every layer's checkpoint (stock: 5)


def _attention_scalings(model) -> list:
    return [m for m in model.modules() if isinstance(getattr(m, "scaling", None), float)]


def _steps_with_scaling_changed(target, model, calls) -> list:
    """3 steps; each attention's `scaling` (read by the checkpointed layer's forward) changes between the forward
    and the backward, which eager's recomputation reads."""
    steps = []
    for seed, kwargs in zip(_SEEDS, calls):
        for attention in _attention_scalings(model):
            attention.scaling = 0.25
        torch.manual_seed(seed)
        loss = target(**kwargs).loss
        for attention in _attention_scalings(model):
            attention.scaling = 0.5 + seed
        loss.backward()
        steps.append({"loss": loss.detach(), "grads": {n: p.grad.clone() for n, p in model.named_parameters()
                                                       if p.grad is not None}})
        model.zero_grad(set_to_none=True)
    return steps


def test_state_changed_between_the_forward_and_the_backward_is_read_by_the_layers_recomputation():
    """transformers checkpoints `partial(forward, self, **kwargs)` (position_embeddings a tuple of tensors made in
    the frame): at the parent that call had no recall and the captured region recomputed with the forward's
    scaling (gradients off by up to 0.06); now the layer's forward runs again in the backward, as eager's
    (NOTE [State changed between the forward and the backward]), still in one graph."""
    build, make_inputs, _ = training_variant(catalog.get("llama"))
    calls = [make_inputs(seed) for seed in _SEEDS]
    eager = _model(build)
    assert len(_attention_scalings(eager)) == 2
    want = _steps_with_scaling_changed(eager, eager, calls)
    backend = CountingBackend()
    model = _model(build)
    got = _steps_with_scaling_changed(framejit.compile(model, backend=backend), model, calls)
    for g, w in zip(got, want):
        assert_steps_close(g, w)
    assert backend.graph_count == 1
    recalls = [n.target.recall for gm in backend.graphs for n in gm.graph.nodes
               if type(n.target).__name__ == "ReentrantCall"]
    assert len(recalls) == 2 and None not in recalls
