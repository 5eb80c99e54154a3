"""framejit on HF `generate()` and on a whole training step (issue 11): tokens, gradients, graph counts.

Two things the other HF tests do not drive:
- `framejit.compile(model).generate(...)` (greedy, 5 new tokens) for decoders and encoder-decoders, on two
  prompts of different lengths, so the second call meets a new prompt length and new KV-cache sizes (NOTE
  [Automatic dynamic]); t5 and bart are not in catalog.GENERATE.
- a training step as users write it around a compiled model: `opt.zero_grad()`, `out = compiled(**batch)`,
  `out.loss.backward()`, `opt.step()` with AdamW, two steps at different batch and sequence sizes, so the
  second forward runs on parameters the first step changed.
Each test compares with eager (token ids exactly; loss, every gradient and every updated parameter to 1e-5),
asserts that no frame ran wholly eagerly and that framejit captured at least one graph and no more graphs
than stock torch.compile over the same calls (recorded or live: NOTE [Stock counts table]).
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
from tests.models.hf.training import _zero_randomness  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo"),
              pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
              pytest.mark.filterwarnings("ignore::UserWarning:transformers")]

NEW_TOKENS = 5


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def _prompts() -> list[dict]:
    """Two greedy prompts of different lengths (one row each)."""
    return [dict(input_ids=inputs.text(seed, 1, length)["input_ids"], max_new_tokens=NEW_TOKENS,
                 min_new_tokens=NEW_TOKENS, do_sample=False) for seed, length in ((0, 6), (1, 9))]


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5", "bart"])
def test_generate_of_the_compiled_module(name):
    arch = catalog.get(name)
    model = arch.build()
    expected = [harness.run(model.generate, kwargs) for kwargs in _prompts()]
    assert all(e.shape[-1] >= NEW_TOKENS for e in expected)
    stock = harness.stock(model, _prompts(), method="generate")
    backend = CountingBackend()
    before = harness.eager_frame_count()
    compiled = framejit.compile(model, backend=backend)
    for kwargs, want in zip(_prompts(), expected):
        got = harness.run(compiled.generate, kwargs)
        assert torch.equal(got, want), (got, want)
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()
    assert 1 <= backend.graph_count <= stock.graph_count, (backend.graph_count, stock.graph_count)


def test_generate_compiled_as_a_function_captures_the_decoding_steps():
    """`framejit.compile(model.generate)`: generate's own frame is traced (its `locals()` sits on a path the
    trace does not take: NOTE [Locals readers decided where they are reached]) and no frame runs wholly
    eagerly (before: generate itself, and `_sample`'s resume function inside its loop over a
    StoppingCriteriaList, NOTE [List subclasses])."""
    model = catalog.get("gpt2").build()
    expected = [harness.run(model.generate, kwargs) for kwargs in _prompts()]
    backend = CountingBackend()
    before = harness.eager_frame_count()
    compiled = framejit.compile(model.generate, backend=backend)
    for kwargs, want in zip(_prompts(), expected):
        got = harness.run(compiled, kwargs)
        assert torch.equal(got, want), (got, want)
    assert backend.graph_count >= 2, backend.graph_count  # the prefill's forward and the decoding step's
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()


# name -> the model class with a loss head
TRAINED = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM", "llama": "LlamaForCausalLM"}


def _build(name: str) -> torch.nn.Module:
    import transformers
    arch = catalog.get(name)
    config = getattr(transformers, arch.config)(**arch.config_kwargs)
    _zero_randomness(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(catalog.WEIGHT_SEED)
        return getattr(transformers, TRAINED[name])(config).train()


def _batches(name: str) -> list[dict]:
    arch = catalog.get(name)
    batches = []
    for seed, (batch, seq) in ((0, (2, 8)), (1, (1, 12))):
        kwargs = arch.make_inputs(seed, batch=batch, seq=seq)
        kwargs["labels"] = kwargs["input_ids"].clone()
        batches.append(kwargs)
    return batches


def _train(model: torch.nn.Module, forward, name: str) -> list:
    """Two AdamW steps: each step's loss, gradients and the parameters after the update."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    results = []
    for kwargs in _batches(name):
        opt.zero_grad()
        out = forward(**kwargs)
        out.loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        opt.step()
        results.append((out.loss.detach(), grads, [p.detach().clone() for p in model.parameters()]))
    return results


@pytest.mark.parametrize("name", list(TRAINED))
def test_training_step_with_optimizer(name):
    eager_model = _build(name)
    expected = _train(eager_model, eager_model, name)
    stock_model = _build(name)

    def live() -> CountingBackend:
        import torch._dynamo  # the reference compiler (tests only)
        torch._dynamo.reset()
        stock = CountingBackend()
        try:
            _train(stock_model, torch.compile(stock_model, backend=stock), name)
        finally:
            torch._dynamo.reset()
        return stock
    stock = stock_table.stock_counts("adamw_steps", stock_model, _batches(name), live)
    backend = CountingBackend()
    model = _build(name)
    before = harness.eager_frame_count()
    got = _train(model, framejit.compile(model, backend=backend), name)
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()
    for (loss, grads, params), (want_loss, want_grads, want_params) in zip(got, expected):
        torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-5)
        assert len(grads) == len(want_grads) > 0
        for g, w in zip(grads + params, want_grads + want_params):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    assert 1 <= backend.graph_count <= stock.graph_count, (backend.graph_count, stock.graph_count)
