"""`flex_attention` captured as torch's flex_attention higher-order op (NOTE [Flex attention in the graph]).

Differential: eager vs compiled on fresh inputs, two or more calls with changed values of the captured
tensors (and sequence lengths where the test says so), with a counting backend. The graph counts are stock
torch.compile's (backend="eager", a counting backend) on the same programs. Before: a score_mod (or no
block mask at all) broke inside torch's flex_attention (its empty BlockMask cannot be a graph value), the
frame's remaining work ran as Python and no graph held the attention (0 graphs where stock has 1); a block
mask made in the frame gave a graph of the mask only, the attention ran after it, outside the graphs.
On CPU, torch has no backward for q, k or v that require grad (eager raises NotImplementedError); a
captured bias that requires grad does get gradients, compared here.
"""
from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

HEADS, DIM = 4, 8


def _qkv(length: int, heads: int = HEADS, kv_heads: int = HEADS) -> tuple:
    return (torch.randn(1, heads, length, DIM), torch.randn(1, kv_heads, length, DIM),
            torch.randn(1, kv_heads, length, DIM))


def _flex_nodes(backend: CountingBackend) -> list[int]:
    hop = torch.ops.higher_order.flex_attention
    return [sum(1 for n in gm.graph.nodes if n.target is hop) for gm in backend.graphs]


def relative_position(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score + (q_idx - kv_idx))


def bias_table(q, k, v, bias):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h, q_idx]
    return flex_attention(q, k, v, score_mod=score_mod)


def alibi(q, k, v):
    heads = q.shape[1]
    slopes = torch.exp2(-torch.arange(1, heads + 1, dtype=torch.float32) * 8.0 / heads)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return flex_attention(q, k, v, score_mod=score_mod)


def soft_cap(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: 20 * torch.tanh(score / 20))


def causal(q, k, v):
    length = q.shape[2]
    mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, length, length, device="cpu")
    return flex_attention(q, k, v, block_mask=mask)


def sliding_window(q, k, v):
    length = q.shape[2]
    mask = create_block_mask(lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & (q_idx - kv_idx < 4), None, None,
                             length, length, device="cpu")
    return flex_attention(q, k, v, block_mask=mask)


def documents(q, k, v, doc_ids):
    length = q.shape[2]

    def mask_mod(b, h, q_idx, kv_idx):
        return doc_ids[q_idx] == doc_ids[kv_idx]
    return flex_attention(q, k, v, block_mask=create_block_mask(mask_mod, None, None, length, length, device="cpu"))


def grouped_query(q, k, v):
    return flex_attention(q, k, v, enable_gqa=True, score_mod=lambda score, b, h, q_idx, kv_idx: score * 0.5)


def with_lse(q, k, v):
    out, lse = flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score * 0.5, return_lse=True)
    return out * 2, lse


def with_aux(q, k, v):
    out, aux = flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score - kv_idx,
                              return_aux=AuxRequest(lse=True))
    return out, aux.lse, aux.max_scores


compiled_flex = None  # torch.compile(flex_attention) (the documented usage), made in its test: a torch.compile at
# import turns torch.distributions' validation off for the whole process (NOTE [Validation restored after stock
# torch.compile] in conftest.py: test_realmodel_more failed in the fresh-clone CI)


def through_plain(q, k, v, bias):
    return flex_attention(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score + bias[q_idx])


def through_torch_compile(q, k, v, bias):
    return compiled_flex(q, k, v, score_mod=lambda score, b, h, q_idx, kv_idx: score + bias[q_idx])


def _check(fn, make_args, graphs: int = 1, **compile_kwargs) -> CountingBackend:
    eager_before = framejit.stats()["eager_frames"]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, **compile_kwargs)
    run_differential(fn, make_args, seeds=(0, 1, 2), compiled=compiled, atol=1e-5, rtol=1e-5)
    assert backend.graph_count == graphs
    assert _flex_nodes(backend) == [1] * graphs  # the attention is in the graph (before: 0 graphs, or 0 nodes)
    assert framejit.stats()["eager_frames"] == eager_before
    return backend


@pytest.mark.parametrize("fn", [relative_position, alibi, soft_cap, causal, sliding_window, grouped_query, with_lse,
                                with_aux])
def test_mods_in_one_graph(fn):
    """Stock: 1 graph each (2 for with_lse: it recompiles once)."""
    kv_heads = 2 if fn is grouped_query else HEADS
    _check(fn, lambda seed: _qkv(16, kv_heads=kv_heads))


def test_bias_table_changes_between_calls():
    """The closed-over table is an input of the graph (a new table each call, the same graph)."""
    backend = _check(bias_table, lambda seed: (*_qkv(16), torch.randn(HEADS, 16) * (seed + 1)))
    assert len(backend.example_inputs[0]) == 4


def test_torch_compiled_flex_attention_called_from_the_frame():
    """NOTE [torch.compile'd functions called while tracing]: the wrapper's original is inlined (stock too);
    before, the trace broke at torch's set_eval_frame and the attention ran outside the graphs (0 graphs)."""
    global compiled_flex
    compiled_flex = torch.compile(flex_attention, backend="eager")
    eager_before = framejit.stats()["eager_frames"]
    backend = CountingBackend()
    compiled = framejit.compile(through_torch_compile, backend=backend)
    for seed in range(3):  # the reference calls flex_attention itself: stock compiling in this process keeps
        # later frames' locals alive (test_graph_breaks_more's finalizer-order test failed after this one)
        args = (*_qkv(16), torch.randn(16) * seed)
        torch.testing.assert_close(compiled(*args), through_plain(*args), atol=1e-5, rtol=1e-5)
    assert backend.graph_count == 1 and _flex_nodes(backend) == [1]
    assert framejit.stats()["eager_frames"] == eager_before


def test_document_mask_reads_a_tensor():
    _check(documents, lambda seed: (*_qkv(16), torch.arange(16) // (seed + 3)))


def test_sequence_length_changes():
    """Changed sequence lengths: one graph for every length with dynamic=True (stock: 1), the block mask
    and the bias table made for each length."""
    for fn, extra in ((bias_table, lambda n: (torch.randn(HEADS, n),)), (causal, lambda n: ()),
                      (documents, lambda n: (torch.arange(n) // 5,))):
        _check(fn, lambda seed: (*_qkv(16 + 8 * seed), *extra(16 + 8 * seed)), dynamic=True)


def test_head_dim_is_guarded_under_dynamic():
    """The default scale 1/sqrt(E) is specialised: another head dimension compiles anew (values stay right)."""
    backend = CountingBackend()
    compiled = framejit.compile(relative_position, backend=backend, dynamic=True)
    for length, dim in ((16, 8), (24, 8), (24, 16)):
        q, k, v = (torch.randn(1, HEADS, length, dim) for _ in range(3))
        assert_same(compiled(q, k, v), relative_position(q, k, v))
    assert backend.graph_count == 2


def test_block_mask_from_outside():
    """A BlockMask argument: its tensors are graph inputs. The mask_mod's closure int changes on each call:
    one recompile, after which it is symbolic (an int input of the mask's graph); stock recompiles per width
    (3 graphs)."""
    def attend(q, k, v, mask):
        return flex_attention(q, k, v, block_mask=mask)

    backend = CountingBackend()
    compiled = framejit.compile(attend, backend=backend)
    for width in (3, 5, 9):
        mask = create_block_mask(lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & (q_idx - kv_idx < width), None,
                                 None, 16, 16, device="cpu")
        q, k, v = _qkv(16)
        assert_same(compiled(q, k, v, mask), attend(q, k, v, mask))
    assert _flex_nodes(backend) == [1, 1]


def _bias_grads(fn, length: int, compiled) -> None:
    q, k, v = _qkv(length)
    bias = torch.randn(HEADS, length)
    eager_bias, compiled_bias = bias.clone().requires_grad_(), bias.clone().requires_grad_()
    expected, actual = fn(q, k, v, eager_bias), compiled(q, k, v, compiled_bias)
    assert_same(actual, expected, atol=1e-5, rtol=1e-5)
    (expected * torch.arange(DIM)).sum().backward()
    (actual * torch.arange(DIM)).sum().backward()
    torch.testing.assert_close(compiled_bias.grad, eager_bias.grad, atol=1e-5, rtol=1e-4)


def test_grads_of_a_captured_bias():
    """The captured table requires grad: its gradient comes from the op's autograd (stock: 1 graph per
    length; here the same, and with dynamic=True one)."""
    backend = CountingBackend()
    compiled = framejit.compile(bias_table, backend=backend, dynamic=True)
    for length in (16, 24, 32):
        _bias_grads(bias_table, length, compiled)
    assert backend.graph_count == 1 and _flex_nodes(backend) == [1]


def _break_at_the_call(fn, args, reason: str) -> None:
    """Under fullgraph, the break is at the user's flex_attention line (before: inside torch's flex_attention,
    at its empty BlockMask), naming why."""
    with pytest.raises(framejit.Unsupported) as info:
        framejit.compile(fn, fullgraph=True)(*args)
    graph_break = info.value.graph_break
    assert graph_break.location.split(":")[0] == __file__ and reason in graph_break.explanation


def test_query_that_requires_grad_raises_as_eager():
    """torch has no CPU backward for q/k/v: eager raises NotImplementedError, compiled too (a graph break at
    the call, whose reason is torch's check)."""
    def make(seed):
        q, k, v = _qkv(16)
        return q.requires_grad_(), k, v
    run_differential(relative_position, make, fullgraph=False)
    _break_at_the_call(relative_position, make(0), "flex_attention: it raises NotImplementedError")


def threshold(q, k, v):
    return flex_attention(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: s if q_idx.item() > 3 else s * 2)


def test_data_dependent_mod_is_a_break():
    """A mod whose body needs a tensor's value breaks at the call, which then runs as eager's does."""
    with warnings.catch_warnings():  # (eager raises torch's own error from inside its vmap; not run here: after
        # it, later frames' locals lived longer in this process and test_graph_breaks_more's finalizer-order test
        # failed in the fresh-clone CI)
        warnings.simplefilter("ignore")
        _break_at_the_call(threshold, _qkv(8), "Tensor.item()")


def writes_its_table(q, k, v, table):
    def score_mod(score, b, h, q_idx, kv_idx):
        table.add_(1)
        return score * table[h]
    return flex_attention(q, k, v, score_mod=score_mod), table


def test_a_mod_writing_a_captured_tensor_is_a_break():
    """revAP H1: the write inside the mod was dropped from the graph (eager's table ends at ones, the compiled
    one stayed zeros and scaled every score by 0); now the call is a break and runs as eager's."""
    for length in (8, 8, 12):
        q, k, v = _qkv(length)
        want = writes_its_table(q, k, v, torch.zeros(HEADS))
        got = framejit.compile(writes_its_table, backend="eager")(q, k, v, torch.zeros(HEADS))
        assert_same(got, want)
    _break_at_the_call(writes_its_table, (*_qkv(8), torch.zeros(HEADS)), "writes a tensor in place")


def test_backends_run_the_op_as_torch_and_say_so(monkeypatch, caplog):
    """triton runs a graph holding the op eagerly and says which op (before: it failed inside its lowering,
    "'<lambda>' object has no attribute 'shape'", and logged that); onnxrt runs the op in eager torch (its node,
    or the graph where the op's autograd cannot be traced to aten) and logs it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for backend, expected in (("triton", ("torch.ops.higher_order.flex_attention, which",)),
                              ("onnxrt", ("runs in eager torch", "runs eagerly"))):
        framejit.set_logs("eager_fallback")
        caplog.clear()
        try:
            with caplog.at_level(logging.INFO, logger="framejit"):
                run_differential(bias_table, lambda seed: (*_qkv(16), torch.randn(HEADS, 16)), backend=backend,
                                 atol=1e-5, rtol=1e-5)
        finally:
            framejit.set_logs("")
        messages = [r.getMessage() for r in caplog.records if r.name == "framejit.eager_fallback"]
        assert any(e in m for m in messages for e in expected), (backend, messages)
