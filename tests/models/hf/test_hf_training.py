"""framejit on transformers classification heads in training (issue 11): loss and gradients, graph counts.

A sequence-classification head called with `labels` picks its loss from `config.problem_type`, which it
sets on the first call (`self.config.problem_type = "regression"`): a store through PretrainedConfig's own
`__setattr__` (NOTE [Custom __setattr__] in framejit/capture/getattribute.py). Each case builds a tiny
model in train mode (dropout 0, so eager and compiled runs are comparable), runs two steps of
forward + `loss.backward()` on fresh inputs eagerly, under stock `torch.compile` (the reference graph
count, recorded per environment or live: NOTE [Stock counts table]) and under framejit, and asserts equal
losses and gradients, graphs <= stock, and no frame run wholly eagerly.
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models.hf import catalog, harness, inputs, stock_table  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo"),
              pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
              pytest.mark.filterwarnings("ignore::UserWarning:transformers")]

_NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
# name -> (config class, model class, config kwargs, number of labels)
HEADS = {
    "bert_regression": ("BertConfig", "BertForSequenceClassification", dict(catalog._TEXT, **_NO_DROPOUT), 1),
    "roberta_single_label": ("RobertaConfig", "RobertaForSequenceClassification", dict(catalog._TEXT, **_NO_DROPOUT),
                             3),
    "gpt2_single_label": ("GPT2Config", "GPT2ForSequenceClassification",
                          dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, pad_token_id=0,
                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), 3),
    "bert_multi_label": ("BertConfig", "BertForSequenceClassification", dict(catalog._TEXT, **_NO_DROPOUT), 3),
}


def _build(name: str) -> torch.nn.Module:
    import transformers
    config_cls, model_cls, kwargs, labels = HEADS[name]
    config = getattr(transformers, config_cls)(**kwargs, num_labels=labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(catalog.WEIGHT_SEED)
        return getattr(transformers, model_cls)(config).train()  # a fresh config: problem_type is None


def _inputs(name: str, seed: int) -> dict:
    labels = HEADS[name][3]
    kwargs = inputs.text(seed, catalog.BATCH, catalog.SEQ)
    gen = torch.Generator().manual_seed(seed + 31)
    if labels == 1:
        kwargs["labels"] = torch.randn(catalog.BATCH, generator=gen)
    elif name.endswith("multi_label"):
        kwargs["labels"] = (torch.rand(catalog.BATCH, labels, generator=gen) > 0.5).float()
    else:
        kwargs["labels"] = torch.randint(0, labels, (catalog.BATCH,), generator=gen)
    return kwargs


def _steps(model, name: str) -> list:
    """Two training steps (gradients accumulate): each step's loss and every parameter's gradient."""
    results = []
    for seed in (0, 1):
        out = model(**_inputs(name, seed))
        out.loss.backward()
        results.append((out.loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    return results


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


@pytest.mark.parametrize("name", list(HEADS))
def test_classification_head_training(name):
    expected = _steps(_build(name), name)
    stock_model = _build(name)

    def live() -> CountingBackend:
        import torch._dynamo  # the reference compiler (tests only)
        torch._dynamo.reset()
        stock = CountingBackend()
        try:
            _steps(torch.compile(stock_model, backend=stock), name)
        finally:
            torch._dynamo.reset()
        return stock
    # recorded or live: NOTE [Stock counts table]
    stock = stock_table.stock_counts("training_steps", stock_model, [_inputs(name, seed) for seed in (0, 1)], live)
    backend = CountingBackend()
    model = _build(name)
    before = harness.eager_frame_count()
    got = _steps(framejit.compile(model, backend=backend), name)
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()
    for (loss, grads), (want_loss, want_grads) in zip(got, expected):
        torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-5)
        assert len(grads) == len(want_grads) > 0
        for g, w in zip(grads, want_grads):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    assert model.config.problem_type is not None  # the store reached the real config
    assert 1 <= backend.graph_count <= stock.graph_count, (backend.graph_count, stock.graph_count)
