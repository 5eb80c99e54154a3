"""A StaticCache decode loop under grad mode (`model.eval()`, grad enabled: a hand-written loop without
`generate`), compiled as a module (hhuntHF6 MED-1; NOTE [Rewound histories] in capture/handler_reruns.py).

After the prefill the cache tensors are non-leaves that autograd tracks, and transformers writes them with
`index_copy_` inside `try: ... except NotImplementedError` (StaticLayer.update): framejit broke the graph at
every such write (11 graphs, 20 break records; stock torch.compile 3 graphs, no break). Prompts of two lengths,
a prefill and decode steps at explicit cache positions; logits and the caches compared with eager at every step,
the gradients of the prefill, and the error of a backward through the last step.
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models.hf import harness  # noqa: E402

transformers = pytest.importorskip("transformers")

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::FutureWarning")]


def _model():
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=32, max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _decode(model, base, prompt, steps=3):
    """Logits of each step and the caches; the gradients of the prefill (taken before the first decode step
    writes the caches it saved); the error of a backward through the last step, which reaches the prefill's saved
    caches written since (eager's RuntimeError: modified by an inplace operation)."""
    cache = transformers.StaticCache(config=base.config, max_cache_len=12)
    out = model(input_ids=prompt, past_key_values=cache, cache_position=torch.arange(prompt.shape[1]), use_cache=True)
    seen = [out.logits.detach()]
    base.zero_grad()
    out.logits.square().sum().backward(retain_graph=True)
    grads = [p.grad.clone() for p in base.parameters()]
    for i in range(steps):
        token = out.logits[:, -1:].argmax(-1)
        out = model(input_ids=token, past_key_values=cache, cache_position=torch.tensor([prompt.shape[1] + i]),
                    use_cache=True)
        seen.append(out.logits.detach())
    seen += [t.detach().clone() for layer in cache.layers for t in (layer.keys, layer.values)]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.logits.sum().backward()
    return seen, grads


def _loop(model, base):
    prompts = [torch.randint(1, 64, (1, n), generator=torch.Generator().manual_seed(n)) for n in (4, 6)]
    return [_decode(model, base, prompt) for prompt in prompts]


def _assert_close(got, want):
    for (values, grads), (want_values, want_grads) in zip(got, want):
        for a, b in zip(values + grads, want_values + want_grads):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), (a - b).abs().max()


def test_static_cache_decode_under_grad_keeps_stocks_graph_count():
    harness.silence_transformers()
    model = _model()
    expected = _loop(model, model)
    import torch._dynamo  # the reference only
    torch._dynamo.reset()
    stock = CountingBackend()
    _assert_close(_loop(torch.compile(model, backend=stock), model), expected)
    torch._dynamo.reset()
    framejit.reset()
    backend = CountingBackend()
    before = harness.eager_frame_count()
    _assert_close(_loop(framejit.compile(model, backend=backend), model), expected)
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()
    assert backend.graph_count == stock.graph_count == 3, (backend.graph_count, stock.graph_count)
