"""framejit on real HuggingFace transformers models (issue 11): outputs, graph counts, no eager frames.

For each catalog architecture (tests/models/hf/catalog.py), one test: run eagerly; count the graphs stock
`torch.compile` captures over the same calls (the reference; torch._dynamo is reset around it; recorded per
environment and computed live on a miss: NOTE [Stock counts table] in stock_table.py); run
`framejit.compile(model, backend=CountingBackend())` on fresh inputs (two seeds; for the few marked
`resize`, a third call at another batch and sequence length, checked for values and eager frames) and assert
- every output equals eager's (ModelOutput fields, caches and tuples compared recursively, 1e-5),
- no frame ran wholly eagerly (harness.eager_frame_count: framejit.stats()),
- framejit captured at least one graph, no more graphs than stock torch.compile, and graphs holding at
  least harness.OP_SHARE of stock's tensor ops (NOTE [HF op share]).
Greedy `generate()` of catalog.GENERATE decoders (and an encoder-decoder) is checked the same way (tokens equal,
graphs <= stock).

NOTE [HF known gaps]: an architecture that fails today is listed in KNOWN_GAPS with its precise current
failure (tools/hf_triage.py prints these lines with --gaps) and runs as `xfail(strict=True)`, so the suite
stays green while capture is fixed, and an entry whose model starts passing turns red until it is
removed. Never list a model that passes; remove an entry as soon as its model passes.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models.hf import catalog, harness, stock_table  # noqa: E402

# the reference compiler's and transformers' own warnings are not what these tests check
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo"),
              pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
              pytest.mark.filterwarnings("ignore::UserWarning:transformers")]

KNOWN_GAPS: dict[str, str] = {}

GENERATE_KNOWN_GAPS: dict[str, str] = {}  # gpt2/llama/qwen2 had 5 graphs (a recompile per sequence length) before dynamic shapes


LIVE_CHECKED = ("distilbert", "resnet")  # cheap references: an encoder's and a conv net's


def _params(names, gaps: dict[str, str]) -> list:
    """Test ids; a known gap is a strict xfail. A gap whose reason does not start with "crash" or "error"
    is a check that fails (AssertionError), so a model that starts crashing instead turns the test red."""
    unknown = set(gaps) - set(names)
    assert not unknown, f"known gaps for unknown architectures: {sorted(unknown)}"

    def mark(reason: str):
        raises = None if reason.startswith(("crash", "error")) else AssertionError
        return pytest.mark.xfail(strict=True, reason=reason, raises=raises)

    return [pytest.param(n, marks=mark(gaps[n])) if n in gaps else n for n in names]


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def eager_frames_during(call) -> tuple[object, int]:
    """(call's result, frames framejit ran wholly eagerly during it); the one place that reads the stat."""
    before = harness.eager_frame_count()
    result = call()
    return result, harness.eager_frame_count() - before


def _check_calls(target, inputs: list[dict], expected: list) -> None:
    for i, (kwargs, want) in enumerate(zip(inputs, expected)):
        got, eager = eager_frames_during(lambda: harness.run(target, kwargs))
        harness.assert_outputs_close(got, want, f"call {i}")
        assert eager == 0, f"call {i}: {eager} frame(s) ran wholly eagerly: {harness.eager_frame_reasons()[-eager:]}"


def _check_graphs(backend: CountingBackend, stock: stock_table.StockCounts) -> None:
    """No more graphs than stock torch.compile, holding (nearly) as many tensor ops: a frame whose work
    ran outside every graph (breaks resumed into code with no graph) fails the second check."""
    assert 1 <= backend.graph_count <= stock.graph_count, \
        f"framejit captured {backend.graph_count} graphs, stock {stock.graph_count} ({stock.source})"
    ops, stock_ops = harness.op_count(backend), stock.ops
    assert ops >= harness.OP_SHARE * stock_ops, \
        f"framejit's graphs hold {ops} ops, stock's {stock_ops} ({stock.source})"


@pytest.mark.parametrize("name", _params(catalog.names(), KNOWN_GAPS))
def test_forward(name):
    arch = catalog.get(name)
    model = arch.build()
    expected = [harness.run(model, kwargs) for kwargs in harness.calls(arch)]
    stock = harness.stock(model, harness.calls(arch))
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    _check_calls(compiled, harness.calls(arch), expected)
    _check_graphs(backend, stock)
    if arch.resize:  # another batch and sequence length: still equal to eager, still no eager frame
        _check_calls(compiled, [harness.resized_call(arch)], [harness.run(model, harness.resized_call(arch))])


def _prompts() -> list[dict]:
    return [catalog.generate_kwargs(seed) for seed in (0, 1)]


@pytest.mark.parametrize("name", _params(list(catalog.GENERATE), GENERATE_KNOWN_GAPS))
def test_generate_greedy(name):
    arch = catalog.get(name)
    model = arch.build()
    expected = [harness.run(model.generate, kwargs) for kwargs in _prompts()]
    start = 1 if arch.family == "seq2seq" else 6  # an encoder-decoder returns the decoder's start token and its own
    assert all(e.shape[-1] == start + catalog.GENERATE_TOKENS for e in expected)  # really generated 5 tokens
    stock = harness.stock(model, _prompts(), method="generate")
    backend = CountingBackend()
    _check_calls(framejit.compile(model, backend=backend).generate, _prompts(), expected)
    _check_graphs(backend, stock)


def test_stock_table_matches_a_live_reference(monkeypatch):
    """Two recorded references, recomputed live at the point test_forward takes them (after the eager
    calls): equal counts, so a dependency missing from the table's key shows up here (NOTE [Stock counts
    table]). Where this environment has no table, both are live and this only checks that they agree."""
    for name in LIVE_CHECKED:
        arch = catalog.get(name)
        model = arch.build()
        for kwargs in harness.calls(arch):
            harness.run(model, kwargs)
        recorded = harness.stock(model, harness.calls(arch))
        with monkeypatch.context() as patch:
            patch.setenv(stock_table.MODE_VAR, "live")
            live = harness.stock(model, harness.calls(arch))
        assert live.source == "live" and live.graph_count >= 1 and live.ops > 0
        assert (recorded.graph_count, recorded.ops) == (live.graph_count, live.ops), (name, recorded, live)


def test_stock_table_key_covers_weights_config_modes_and_inputs():
    """Whatever the reference depends on changes the table's key, so a changed model or call is a miss
    (computed live), never a stale count (NOTE [Stock counts table])."""
    import torch
    arch = catalog.get("distilbert")
    model, calls = arch.build(), harness.calls(arch)
    base = stock_table.key(stock_table.key_parts("forward", model, calls))
    assert base == stock_table.key(stock_table.key_parts("forward", arch.build(), harness.calls(arch)))
    changed_calls = harness.calls(arch)
    changed_calls[1]["input_ids"][0, 0] += 1
    other = arch.build()
    with torch.no_grad():
        next(other.parameters()).view(-1)[0] += 1e-6
    trained, configured = arch.build().train(), arch.build()
    configured.config.output_hidden_states = True
    for parts in (stock_table.key_parts("forward", model, changed_calls),
                  stock_table.key_parts("forward", model, calls[:1]),
                  stock_table.key_parts("forward", other, calls),
                  stock_table.key_parts("forward", trained, calls),
                  stock_table.key_parts("forward", configured, calls),
                  stock_table.key_parts("training_steps", model, calls)):
        assert stock_table.key(parts) != base


def test_catalog_covers_the_required_architectures():
    names = set(catalog.names())
    assert len(names) >= 40
    required = {"bert", "distilbert", "roberta", "albert", "electra", "deberta_v2", "longformer", "big_bird",
                "mpnet", "xlm_roberta", "gpt2", "gpt_neo", "gpt_neox", "gptj", "opt", "bloom", "llama", "mistral",
                "qwen2", "qwen3", "phi", "phi3", "gemma", "gemma2", "falcon", "olmo", "stablelm", "starcoder2",
                "t5", "bart", "mbart", "pegasus", "marian", "vit", "deit", "swin", "convnext", "resnet", "beit",
                "clip_vision", "dinov2", "whisper_encoder", "whisper", "wav2vec2", "hubert", "mixtral",
                "qwen2_moe", "clip_text"}
    assert required <= names, sorted(required - names)
    assert {catalog.get(n).family for n in names} == {"encoder", "decoder", "seq2seq", "vision", "audio", "moe"}


def test_catalog_inputs_are_seeded_and_fresh():
    for name in ("bert", "t5", "whisper", "wav2vec2", "vit"):
        arch = catalog.get(name)
        a, b, c = arch.make_inputs(0), arch.make_inputs(0), arch.make_inputs(1)
        assert list(a) == list(b) == list(c)
        for key in a:
            assert a[key] is not b[key] and a[key].equal(b[key]) and a[key].shape == c[key].shape
        assert any(not a[k].equal(c[k]) for k in a)


def test_compare_rejects_differences():
    """The comparison the tests rely on notices a changed value, a missing field and an unknown type."""
    arch = catalog.get("llama")
    model = arch.build()
    out = harness.run(model, arch.make_inputs(0))
    harness.assert_outputs_close(harness.run(model, arch.make_inputs(0)), out)
    other = harness.run(model, arch.make_inputs(1))
    with pytest.raises(AssertionError, match="logits"):
        harness.assert_outputs_close(other, out)
    cache = harness.run(model, arch.make_inputs(0)).past_key_values
    cache.layers[1].values[0, 0, 0, 0] += 1e-3
    with pytest.raises(AssertionError, match="layers"):
        harness.assert_outputs_close(cache, out.past_key_values)
    with pytest.raises(TypeError, match="cannot compare"):
        harness.assert_outputs_close(object(), object())
