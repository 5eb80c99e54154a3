"""Dynamic shapes on real models (issue 13): every model of the zoo and a few transformers models called
with 10 batch sizes and sequence lengths (then size 1) match eager, with the compilations counted.

- Automatic dynamic (the default): 10 calls at sizes >= 2 compile exactly twice (static, then one
  entry with the varying dimensions symbolic); calls with batch 1 add at most one compilation, calls with
  sequence length 1 at most one more (broadcasting differs for size 1: specialised, as torch does).
- `dynamic=True` compiles exactly once over the same 10 calls; `mark_dynamic` too.
- Transformers models: 10 sizes then batch 1 (and sequence length 1 for a decoder) with automatic
  dynamic; exactly once with `dynamic=True` or `mark_dynamic`; a float and an int varying with the sizes.
- HF decoders over varying sequence lengths, and `generate()` whose sequence grows each step, compile no
  more often than stock torch.compile over the same calls (counted with a counting backend; torch.compile
  is the reference here, in tests only).
- The recompile log names the dimension that changed.
Differential throughout: each call's outputs are compared with eager on the same fresh inputs.
"""
from __future__ import annotations

import logging
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models import zoo  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::FutureWarning")]

# (batch, sequence) pairs: 10 calls at sizes >= 2, then batch 1, then sequence length 1
CALLS = [(2, 3), (3, 5), (4, 7), (5, 4), (2, 8), (6, 6), (3, 2), (7, 9), (4, 10), (2, 11)]
BATCH_ONE = [(1, 5), (1, 7), (1, 3)]
SEQ_ONE = [(3, 1), (5, 1)]


def _ids(gen, vocab, b, s):
    return torch.randint(0, vocab, (b, s), generator=gen)


def _bert_inputs(gen, b, s):
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, -1:] = 0  # a padded row
    types = torch.zeros(b, s, dtype=torch.long)
    types[:, s // 2:] = 1
    return _ids(gen, 64, b, s), mask, types


# inputs of each zoo model ("small") at batch b and sequence length s; image models and the GRU forecaster
# (a Python loop over its fixed number of time steps) vary the batch only
ZOO_INPUTS = {
    "mlp": lambda gen, b, s: (torch.randn(b, 16, generator=gen),),
    "cnn": lambda gen, b, s: (torch.randn(b, 3, 8, 8, generator=gen),),
    "gpt": lambda gen, b, s: (_ids(gen, 64, b, s),),
    "gpt_loss": lambda gen, b, s: (_ids(gen, 64, b, s), _ids(gen, 64, b, s)),
    "bert": _bert_inputs,
    "vit": lambda gen, b, s: (torch.randn(b, 3, 8, 8, generator=gen),),
    "lstm": lambda gen, b, s: (_ids(gen, 32, b, s),),
    "gru_cell": lambda gen, b, s: (torch.randn(b, 8, 4, generator=gen),),
    "moe": lambda gen, b, s: (torch.randn(b, s, 16, generator=gen),),
}
SEQUENCE_MODELS = {"gpt", "gpt_loss", "bert", "lstm", "moe"}


def test_inputs_cover_the_zoo():
    assert sorted(ZOO_INPUTS) == sorted(zoo.names())


def _run_zoo(case, compiled, calls, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for b, s in calls:
        args = ZOO_INPUTS[case.name](gen, b, s)
        with torch.no_grad():
            expected = zoo.output_tensors(case.model(*args))
            actual = zoo.output_tensors(compiled(*args))
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.shape == e.shape
            torch.testing.assert_close(a, e, **case.tolerance)


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_automatic_dynamic(name):
    case = zoo.get(name)
    backend = CountingBackend()
    compiled = framejit.compile(case.model, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    _run_zoo(case, compiled, CALLS)
    assert backend.graph_count == 2  # static, then one entry for every later size
    _run_zoo(case, compiled, BATCH_ONE, seed=1)
    assert backend.graph_count <= 3
    _run_zoo(case, compiled, SEQ_ONE, seed=2)
    assert backend.graph_count <= (4 if name in SEQUENCE_MODELS else 3)
    assert framejit.stats()["eager_frames"] == eager_before


@pytest.mark.parametrize("name", ["mlp", "gpt", "lstm", "moe"])
def test_zoo_dynamic_true_compiles_once(name):
    case = zoo.get(name)
    backend = CountingBackend()
    _run_zoo(case, framejit.compile(case.model, backend=backend, dynamic=True), CALLS)
    assert backend.graph_count == 1


def test_zoo_mark_dynamic_compiles_once():
    case = zoo.get("gpt")
    backend = CountingBackend()
    compiled = framejit.compile(case.model, backend=backend)
    gen = torch.Generator().manual_seed(0)
    for b, s in CALLS:
        (idx,) = ZOO_INPUTS["gpt"](gen, b, s)
        framejit.mark_dynamic(idx, 0)
        framejit.mark_dynamic(idx, 1)
        with torch.no_grad():
            torch.testing.assert_close(compiled(idx).logits, case.model(idx).logits, **case.tolerance)
    assert backend.graph_count == 1


def test_zoo_recompile_log_names_the_dimension(caplog):
    case = zoo.get("moe")
    compiled = framejit.compile(case.model, backend=CountingBackend())
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            _run_zoo(case, compiled, [(2, 3), (2, 5)])
    finally:
        framejit.set_logs("")
    messages = [r.getMessage() for r in caplog.records]
    assert any("size of dim 1 of" in m and "changed" in m and "symbolic from now on" in m for m in messages)
    assert not any("size of dim 0 of" in m for m in messages)  # the batch did not change


# ---- transformers models from tiny configs --------------------------------------------------------------
from tests.models.hf import catalog, harness  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def _hf_calls(arch, pairs, seed=0):
    return [arch.make_inputs(seed + i, batch=b, seq=s) for i, (b, s) in enumerate(pairs)]


def _check_hf(compiled, model, calls):
    for i, kwargs in enumerate(calls):
        harness.assert_outputs_close(harness.run(compiled, kwargs), harness.run(model, kwargs), f"call {i}")


def test_hf_decoder_varying_sequence_no_more_compiles_than_stock():
    arch = catalog.get("llama")
    model = arch.build()
    calls = _hf_calls(arch, CALLS + BATCH_ONE)
    stock = harness.stock(model, calls)  # recorded or live: NOTE [Stock counts table]
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    _check_hf(compiled, model, calls[:len(CALLS)])
    assert backend.graph_count == 2
    _check_hf(compiled, model, calls[len(CALLS):])
    assert backend.graph_count <= min(3, stock.graph_count), f"stock compiled {stock.graph_count} graphs"
    # then single-token calls (sequence length 1: broadcasting and the causal mask differ): at most one more
    after_batch_one = backend.graph_count
    _check_hf(compiled, model, _hf_calls(arch, SEQ_ONE, seed=30))
    assert backend.graph_count <= after_batch_one + 1
    assert framejit.stats()["eager_frames"] == eager_before


# bart's decoder input has length max(2, seq // 2): its first two calls change it too, so that every
# dimension that ever varies has changed by the second call (automatic dynamic makes a dimension symbolic
# when it changes; one that first changes at a later call costs a compilation then, in torch too)
PAIRS = {"bert": CALLS, "vit": CALLS, "bart": [(2, 4), (3, 7)] + CALLS[2:]}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_hf_models_over_ten_sizes(name):
    arch = catalog.get(name)
    model = arch.build()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    _check_hf(compiled, model, _hf_calls(arch, PAIRS[name]))
    assert backend.graph_count == 2
    _check_hf(compiled, model, _hf_calls(arch, BATCH_ONE, seed=20))
    assert backend.graph_count <= 3


@pytest.mark.parametrize("name", ["gpt2", "bert"])  # a decoder and an encoder
def test_hf_dynamic_true_compiles_once(name):
    arch = catalog.get(name)
    model = arch.build()
    backend = CountingBackend()
    _check_hf(framejit.compile(model, backend=backend, dynamic=True), model, _hf_calls(arch, CALLS))
    assert backend.graph_count == 1


def test_hf_generate_no_more_compiles_than_stock():
    """Greedy generate(): the sequence grows one token per step (and prompts differ in length)."""
    model = catalog.get("gpt2").build()
    prompts = [dict(catalog.inputs.text(seed, 1, length), max_new_tokens=8, min_new_tokens=8, do_sample=False)
               for seed, length in ((0, 4), (1, 7))]
    expected = [harness.run(model.generate, kwargs) for kwargs in prompts]
    stock = harness.stock(model, prompts, method="generate")
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    for kwargs, want in zip(prompts, expected):
        assert torch.equal(harness.run(compiled.generate, kwargs), want)
    assert 1 <= backend.graph_count <= stock.graph_count, f"framejit {backend.graph_count}, stock {stock.graph_count}"


def _marked(kwargs: dict) -> dict:
    for value in kwargs.values():
        if isinstance(value, torch.Tensor):
            framejit.mark_dynamic(value, [0, 1])
    return kwargs


def test_hf_mark_dynamic_compiles_once():
    arch = catalog.get("gpt2")
    model = arch.build()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    for i, (b, s) in enumerate(CALLS):
        kwargs = arch.make_inputs(i, batch=b, seq=s)
        harness.assert_outputs_close(harness.run(compiled, _marked(dict(kwargs))), harness.run(model, kwargs), f"call {i}")
    assert backend.graph_count == 1


def test_hf_varying_sizes_float_and_int_compile_twice():
    """Sizes, a Python float and a Python int change on every call (a scale and a position offset, as in
    benchmarks/recompiles.py): the second call makes all of them symbolic or graph inputs at once."""
    arch = catalog.get("qwen2")
    model = arch.build()

    def step(inputs, scale, offset):
        out = model(**inputs)
        return out.logits * scale + offset

    backend = CountingBackend()
    compiled = framejit.compile(step, backend=backend)
    for i, (b, s) in enumerate(CALLS):
        kwargs, scale, offset = arch.make_inputs(i, batch=b, seq=s), 0.5 + i / 4, 3 + 2 * i
        with torch.no_grad():
            torch.testing.assert_close(compiled(kwargs, scale, offset), step(kwargs, scale, offset), atol=1e-5, rtol=1e-5)
    assert backend.graph_count == 2
