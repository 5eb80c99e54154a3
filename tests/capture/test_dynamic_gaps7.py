"""Dynamic shapes, issue 13 (seventh round of gaps, h13dyn6): user-style programs over many sizes, eager vs
compiled, with the number of compilations bounded by stock torch.compile's on the same call sequence (each
bound below was measured with torch.compile(backend=CompileCounter) over the same calls, eager run first).

- A frame that breaks at `f"{x.size(1)}"` (a formatted symbolic size) before any tensor work made a graph
  that only returned the size, handed to the backend as a compilation: `tag = f"{x.size(1)}"` then a dict
  keyed by the width compiled 7 graphs over 6 widths (stock 6), and `f"{..}"`, `{x.shape: 1}`, `str(..)`
  13 (stock 6). Such graphs run as their own code now (NOTE [Graphs that only read sizes]).
- A sweep of serving programs (varying batch and sequence, masks from lengths, KV cache growth, position
  tables sliced by the length, views with -1, chunk/split, repeat_interleave, boolean masks, size-1
  broadcasting, step counters, mark_dynamic with a range) on the eager and onnxrt backends: values equal,
  no eager frame, no more compilations than stock.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, RecordingBackend, assert_same


def _stats() -> tuple[int, int]:
    st = framejit.stats()
    return st["graphs"], st["eager_frames"]


def _run(fn, calls, backend, dynamic=None, before_each=None):
    """Eager first, then compiled, on the same fresh inputs; returns the backend."""
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    for args in calls:
        expected = fn(*args)
        if before_each is not None:
            before_each(args)
        assert_same(compiled(*args), expected)
    return backend


# ---- sizes formatted into strings (NOTE [Graphs that only read sizes]) --------------------------------
def _formatted_then_keyed(x):
    key = f"{x.shape[0]}x{x.shape[1]}"
    d = {x.shape: 1}
    return x * len(key), d[x.shape], str(x.size(0))


_WIDTHS: dict = {}


def _tag_then_width_cache(x):
    tag = f"{x.size(1)}"
    if x.shape[1] not in _WIDTHS:
        _WIDTHS[x.shape[1]] = len(tag)
    return x * _WIDTHS[x.shape[1]]


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_formatted_size_then_a_size_keyed_dict_compiles_once_per_size(dynamic):
    backend = CountingBackend()
    graphs, eager = _stats()
    _run(_formatted_then_keyed, [(torch.randn(n, 3),) for n in (2, 3, 4, 5, 6, 10)], backend, dynamic)
    assert backend.graph_count <= 6, backend.graph_count  # stock 6 (one per size); 13 and 14 before
    assert _stats() == (graphs + backend.graph_count, eager)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_formatted_width_then_a_global_cache_keyed_by_it(dynamic):
    _WIDTHS.clear()
    backend = CountingBackend()
    graphs, eager = _stats()
    _run(_tag_then_width_cache, [(torch.randn(3, n),) for n in (2, 3, 4, 5, 6, 10, 3)], backend, dynamic)
    assert backend.graph_count <= 6, backend.graph_count  # stock 6; 7 before (a graph returning the width)
    assert _stats() == (graphs + backend.graph_count, eager)


def _print_size_then_work(x):
    n = f"rows={x.size(0)}"
    return x.relu() * len(n)


def test_a_graph_that_only_reads_a_size_reaches_no_backend_and_is_not_counted():
    backend = RecordingBackend("onnxrt")
    graphs, eager = _stats()
    _run(_print_size_then_work, [(torch.randn(n, 4),) for n in (2, 3, 5, 8, 11, 12)], backend)
    for gm in backend.graphs:  # every graph the backend got computes a tensor
        assert any(isinstance(n.meta.get("val"), torch.Tensor) for n in gm.graph.nodes
                   if n.op in ("call_function", "call_method")), gm.code
    assert _stats() == (graphs + backend.graph_count, eager)
    assert backend.graph_count <= 4, backend.graph_count  # stock torch.compile 6 over these sizes


# ---- a sweep of serving programs ---------------------------------------------------------------------
torch.manual_seed(0)
_LIN1, _LIN2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
_POS = torch.randn(1, 64, 8)
_EMB, _LN = torch.nn.Embedding(20, 8, padding_idx=0), torch.nn.LayerNorm(8)
_BT = [(2, 3), (3, 5), (4, 7), (1, 1), (2, 1), (5, 2), (6, 11), (3, 4), (7, 9)]


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _mlp(x):
    return _LIN2(_LIN1(x).relu())


def _pad_mask_mean(x, lengths):
    mask = torch.arange(x.size(1))[None, :] < lengths[:, None]
    return (x * mask[..., None]).sum(1) / lengths[:, None].clamp(min=1)


def _kv_cat(cache, new):
    k = torch.cat([cache, new], dim=1)
    att = (new @ k.transpose(1, 2)) / math.sqrt(k.size(-1))
    return att.softmax(-1) @ k, k


def _pos_slice(x):
    return x + _POS[:, :x.size(1)]


def _view_neg1(x):
    b = x.size(0)
    return x.view(b, -1, 4).transpose(1, 2).reshape(b, -1) * 2


def _chunk3(x):
    return [c.sum(1) for c in x.chunk(3, dim=1)]


def _split_half(x):
    n = x.size(0)
    a, b = x.split([n // 2, n - n // 2], dim=0)
    return a.sum(0) - b.sum(0)


def _repeat_int(x, r):
    return x.repeat_interleave(r, dim=0).cumsum(0)


def _repeat_tensor(x, reps):
    return x.repeat_interleave(reps, dim=0).sum(0)


def _bool_mask(x):
    y = x[x > 0]
    return y.sum() * 2, y.numel()


def _broadcast_one(x, y):
    return x * y + y.sum(0)


def _step(x, step):
    return x * step + (step % 3) - x.sum() / (step + 1)


def _pad_to_8(x):
    return F.pad(x, (0, (-x.size(-1)) % 8)).view(x.size(0), -1, 8).sum(-1)


def _causal(q):
    t = q.size(1)
    m = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    return (q @ q.transpose(1, 2)).masked_fill(m, float("-inf")).softmax(-1) @ q


def _topk_min(x):
    return x.topk(min(3, x.size(1)), dim=1).values.sum(1)


def _embed_ln(ids):
    return _LN(_EMB(ids)).sum(1)


def _decode_at(x, past):
    return x + _POS[:, past:past + x.size(1)]


def _max_pad(x, y):
    n = max(x.size(0), y.size(0))
    return F.pad(x, (0, 0, 0, n - x.size(0))) + F.pad(y, (0, 0, 0, n - y.size(0)))


def _sdpa(q):
    return F.scaled_dot_product_attention(q, q, q, is_causal=True).sum(2)


def _lengths(b, t, seed):
    return torch.randint(1, t + 1, (b,), generator=_g(seed))


# name: (fn, calls, {dynamic: stock torch.compile's count over these calls})
_SWEEP = {
    "mlp": (_mlp, lambda: [(torch.randn(b, 8),) for b in (2, 3, 4, 1, 5, 8, 16, 7)], {None: 3, True: 2}),
    "pad_mask_mean": (_pad_mask_mean, lambda: [(torch.randn(b, t, 8), _lengths(b, t, i)) for i, (b, t) in
                                               enumerate(_BT)], {None: 4, True: 3}),
    "kv_cache_cat": (_kv_cat, lambda: [(torch.randn(2, t, 8), torch.randn(2, 1, 8)) for t in range(1, 10)],
                     {None: 2, True: 2}),
    "position_slice": (_pos_slice, lambda: [(torch.randn(b, t, 8),) for b, t in _BT], {None: 4, True: 3}),
    "view_minus_one": (_view_neg1, lambda: [(torch.randn(b, 4 * t),) for b, t in _BT], {None: 4, True: 3}),
    "chunk3": (_chunk3, lambda: [(torch.randn(2, w),) for w in (6, 7, 8, 9, 10, 2, 1, 12)], {None: 4, True: 3}),
    "split_half": (_split_half, lambda: [(torch.randn(n, 3),) for n in (4, 5, 6, 7, 9, 2, 11)], {None: 2, True: 1}),
    "repeat_int": (_repeat_int, lambda: [(torch.randn(n, 3), r) for n, r in ((2, 2), (3, 2), (4, 3), (5, 3),
                                                                             (6, 4), (2, 5))], {None: 3, True: 1}),
    "repeat_tensor": (_repeat_tensor, lambda: [(torch.randn(n, 3), torch.randint(1, 4, (n,), generator=_g(n)))
                                               for n in (2, 3, 4, 5, 6)], {None: 2, True: 1}),
    "bool_mask": (_bool_mask, lambda: [(torch.randn(n, 4),) for n in (3, 5, 6, 8, 2, 9)], {None: 4, True: 2}),
    "broadcast_one": (_broadcast_one, lambda: [(torch.randn(b, n), torch.randn(1 if i % 2 else b, n)) for i, (b, n)
                                               in enumerate(((2, 3), (3, 4), (4, 5), (5, 6), (1, 3), (6, 2),
                                                             (3, 1)))], {None: 5, True: 4}),
    "step_counter": (_step, lambda: [(torch.randn(3, 4), s) for s in range(10)], {None: 2, True: 1}),
    "pad_to_8": (_pad_to_8, lambda: [(torch.randn(2, w),) for w in (5, 8, 9, 13, 16, 3, 20)], {None: 2, True: 1}),
    "causal": (_causal, lambda: [(torch.randn(2, t, 8),) for t in (2, 3, 4, 5, 1, 7, 9)], {None: 3, True: 3}),
    "topk_min": (_topk_min, lambda: [(torch.randn(2, t),) for t in (2, 3, 4, 5, 6, 8, 9)], {None: 2, True: 2}),
    "embed_layernorm": (_embed_ln, lambda: [(torch.randint(0, 20, (b, t), generator=_g(b * t)),) for b, t in _BT],
                        {None: 4, True: 3}),
    "decode_offset": (_decode_at, lambda: [(torch.randn(2, 1, 8), p) for p in range(12)], {None: 2, True: 1}),
    "max_pad": (_max_pad, lambda: [(torch.randn(a, 3), torch.randn(b, 3)) for a, b in
                                   ((2, 3), (4, 3), (5, 6), (7, 2), (3, 8))], {None: 3, True: 2}),
    "sdpa_causal": (_sdpa, lambda: [(torch.randn(b, 2, t, 8),) for b, t in _BT], {None: 4, True: 4}),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(_SWEEP))
def test_serving_programs_on_eager_compile_no_more_than_stock(name, dynamic):
    fn, calls, stock = _SWEEP[name]
    torch.manual_seed(1)
    backend = CountingBackend()
    _, eager = _stats()
    with torch.no_grad():
        _run(fn, calls(), backend, dynamic)
    assert _stats()[1] == eager
    assert backend.graph_count <= stock[dynamic], (backend.graph_count, stock[dynamic])


_ONNXRT = ("pad_mask_mean", "kv_cache_cat", "position_slice", "causal", "step_counter", "decode_offset",
           "broadcast_one", "embed_layernorm")


@pytest.mark.parametrize("name", _ONNXRT)
def test_serving_programs_on_onnxrt_one_session_per_graph(name):
    """dynamic=True on onnxrt: every size of a graph is served by the one ORT program made for it."""
    fn, calls, stock = _SWEEP[name]
    torch.manual_seed(2)
    backend = RecordingBackend("onnxrt")
    _, eager = _stats()
    with torch.no_grad():
        _run(fn, calls(), backend, dynamic=True)
    assert _stats()[1] == eager
    assert backend.graph_count <= stock[True], (backend.graph_count, stock[True])
    sessions = sum(c.session_count() for c in backend.compiled if hasattr(c, "session_count"))
    assert sessions <= backend.graph_count, (sessions, backend.graph_count)


def _marked_rows(x):
    return x.sum(0) * x.size(0)


def test_mark_dynamic_with_a_range_serves_it_and_a_call_outside_raises_as_stock():
    backend = CountingBackend()
    compiled = framejit.compile(_marked_rows, backend=backend)
    for b in (3, 4, 5, 6, 7, 8):
        x = torch.randn(b, 4)
        framejit.mark_dynamic(x, 0, min=2, max=8)
        assert_same(compiled(x), _marked_rows(x))
    assert backend.graph_count == 1, backend.graph_count
    x = torch.randn(9, 4)
    framejit.mark_dynamic(x, 0, min=2, max=8)
    with pytest.raises(Exception, match="range"):  # stock: ConstraintViolationError as well
        compiled(x)


class _GrowingCache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(1, 0, 4))

    def forward(self, x):
        self.k = torch.cat([self.k, x], dim=1)
        return self.k.sum(1) * self.k.size(1)


@pytest.mark.parametrize("backend_name", ["eager", "onnxrt"])
def test_a_module_cache_grown_by_cat_each_step(backend_name):
    ref, model = _GrowingCache(), _GrowingCache()
    backend = RecordingBackend(backend_name)
    compiled = framejit.compile(model, backend=backend)
    _, eager = _stats()
    for step in range(9):
        x = torch.randn(1, 1, 4, generator=_g(step))
        assert_same(compiled(x), ref(x))
        assert_same(model.k, ref.k)
    assert _stats()[1] == eager
    assert backend.graph_count <= 3, backend.graph_count  # stock 8 (the buffer's length, then the limit)
