"""A user's function called with views whose strides change and whose sizes do not (NOTE [Changing strides of
arguments] in capture/shapes.py): `x[:, t]` of sequences of growing length has the sizes of every length and
the stride T*H. Such a frame was traced once per stride and ran eagerly from the recompile limit on (stock
torch.compile: 2 graphs for the first program, 4 for the GRUCell loop); the changed stride is now a symbol
of the trace, and the backends build one program for every stride. Each program is compared with eager
over 9 lengths on the eager, onnxrt and triton backends: values, raised errors, outputs' strides and the
inputs (and their bases) after the call, with the graph count and no frame run eagerly."""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.backends.triton.dynamic import DynamicGraph
from tests.helpers import CountingBackend, RecordingBackend, assert_same, reset_with_triton_interpreted

BACKENDS = ["eager", "onnxrt", "triton"]
LENGTHS = range(3, 12)
W = torch.randn(4, 4)


_reset = pytest.fixture(autouse=True)(reset_with_triton_interpreted)


def _outcome(fn, args):
    try:
        return fn(*args), None
    except RuntimeError as e:
        return None, str(e)


def _compare(fn, makers: list, backend: str):
    """Run `fn` eagerly and compiled on fresh inputs from each maker (the same data for both), comparing
    results, errors, outputs' strides and the arguments after; the recording backend and the frames that
    ran eagerly."""
    rec = CountingBackend() if backend == "eager" else RecordingBackend(backend)
    compiled = framejit.compile(fn, backend=rec)
    before = framejit.stats()["eager_frames"]
    for make in makers:
        torch.manual_seed(0)
        want_args = make()
        torch.manual_seed(0)
        got_args = make()
        want, want_error = _outcome(fn, want_args)
        got, got_error = _outcome(compiled, got_args)
        assert got_error == want_error
        assert_same(got, want)
        for w, g in zip(*(x if isinstance(x, tuple) else (x,) for x in (want, got))):
            if isinstance(w, torch.Tensor):
                assert g.stride() == w.stride()
        for w, g in zip(want_args, got_args):  # written in place: the view and its base
            if isinstance(w, torch.Tensor):
                assert_same(g, w)
                if w._base is not None:
                    assert_same(g._base, w._base)
    return rec, framejit.stats()["eager_frames"] - before


def _row(length: int, t: int = 1):
    return torch.randn(2, length, 4)[:, t]


def _step(inp, h):
    return torch.tanh(inp @ h)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_of_growing_sequences_compile_one_graph_for_every_stride(backend):
    makers = [lambda T=T, t=t: (_row(T, t), W) for T in LENGTHS for t in (0, 1)]
    rec, eager_frames = _compare(_step, makers, backend)
    assert eager_frames == 0
    assert rec.graph_count == 3  # static; offset 4 symbolic (row 1); the stride symbolic (before: 8, then eager)
    if backend == "onnxrt":  # one ONNX program for every stride
        assert not rec.compiled[-1].programs
        assert [len(p) for p in rec.compiled[-1].dynamic_programs.values()] == [1]
    if backend == "triton":  # one size-generic module
        assert isinstance(rec.compiled[-1], DynamicGraph) and rec.compiled[-1].modules == 1


def test_a_compiled_grucell_stepped_over_sequences_of_growing_length():
    torch.manual_seed(0)
    cell = torch.nn.GRUCell(4, 6)
    rec = CountingBackend()
    compiled = framejit.compile(cell, backend=rec)
    before = framejit.stats()["eager_frames"]
    for length in range(3, 11):
        xs = torch.randn(2, length, 4)
        got = want = None
        for t in range(length):
            got, want = compiled(xs[:, t], got), cell(xs[:, t], want)
            assert_same(got, want)
    assert framejit.stats()["eager_frames"] == before
    # hx None / a tensor, static, then the offset and the stride symbolic at the same recompile (automatic
    # dynamic reads every guard of the newest entry); before: 8 graphs, then GRUCell.forward ran eagerly;
    # stock torch.compile: 4, it does not guard offsets
    assert rec.graph_count == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_of_strided_inputs_work_or_raise_as_in_eager(backend):
    def split(x):  # viewable for every stride
        return x.view(2, 2, 2).sum(1) * 2

    def flatten(x):  # viewable only when contiguous: eager's RuntimeError otherwise
        return x.view(-1) * 2

    makers = [lambda T=T: (_row(T),) for T in LENGTHS]
    rec, eager_frames = _compare(split, makers, backend)
    assert (rec.graph_count, eager_frames) == (2, 0)  # static, then the stride and offset (before: 8, then eager)
    mixed = [lambda T=T: (torch.randn(2, 4),) if T % 3 == 0 else (_row(T),) for T in LENGTHS]
    rec, eager_frames = _compare(flatten, mixed, backend)
    assert (rec.graph_count, eager_frames) == (1, 0)  # the contiguous calls' graph; the others raise


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_into_strided_inputs_reach_their_bases(backend):
    def scale_then_multiply(x, h):
        x.mul_(2)
        return x @ h

    def write_through_the_view(base, row):
        row.add_(1)
        return base.sum(), row * 2

    rec, eager_frames = _compare(scale_then_multiply, [lambda T=T: (_row(T), W) for T in LENGTHS], backend)
    assert (rec.graph_count, eager_frames) == (2, 0)  # before: 8, then eager
    makers = [lambda T=T: (lambda b: (b, b[:, 1]))(torch.randn(2, T, 4)) for T in LENGTHS]
    rec, eager_frames = _compare(write_through_the_view, makers, backend)
    assert eager_frames == 0  # before: the frame ran eagerly
    assert rec.graph_count == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposed_inputs_and_their_outputs_strides(backend):
    def affine(x):  # eager keeps the input's stride order: out.stride() == (1, 4)
        return x * 2 + 1, x.exp().sum(0)

    makers = [lambda T=T: (torch.randn(3, T + 2)[:, :4].t(),) for T in LENGTHS]  # strides (1, T + 2)
    rec, eager_frames = _compare(affine, makers, backend)
    assert (rec.graph_count, eager_frames) == (2, 0)  # before: 8, then eager
    square = [lambda T=T: (torch.randn(4, 4).t() if T % 2 else torch.randn(4, 4),) for T in LENGTHS]
    rec, eager_frames = _compare(affine, square, backend)  # a stride order that changes: one entry each
    assert (rec.graph_count, eager_frames) == (2, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_facts_read_from_symbolic_strides_stay_exact(backend):
    def read(x):
        return x * x.stride(0), x.stride(0) > 20, x.is_contiguous(), x.as_strided((2, 2), (1, 2)) + 1

    makers = [lambda T=T: (_row(T),) for T in LENGTHS]
    rec, eager_frames = _compare(read, makers, backend)
    assert (rec.graph_count, eager_frames) == (2, 0)  # before: 8, then eager
    # a contiguous row (stride 4, offset 4) after them: is_contiguous() was guarded, not assumed
    rec, eager_frames = _compare(read, makers + [lambda: (torch.randn(3, 4)[1:],)] + makers[:2], backend)
    assert (rec.graph_count, eager_frames) == (3, 0)


class _Window:
    """A sliding-window cache layer as transformers' DynamicSlidingWindowLayer keeps it: the last key of a new
    `torch.cat` each step, a view whose strides and offset follow the prompt's length."""
    def __init__(self, prompt):
        self.keys = prompt[:, :, -1:, :]


def _decode(x, cache):
    full = torch.cat([cache.keys, x * 2], dim=-2)
    cache.keys = full[:, :, -1:, :]
    return full.sum(-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sliding_window_cache_whose_offset_changes_with_its_strides(backend):
    # NOTE [Offsets that change with strides]: the strides and the offset of `cache.keys` change together on the
    # second step (only the strides were marked); a longer prompt then missed on the offset alone (before: [2, 0, 1])
    rec = CountingBackend() if backend == "eager" else RecordingBackend(backend)
    compiled = framejit.compile(_decode, backend=rec)
    before, per_prompt = framejit.stats()["eager_frames"], []
    for length in (6, 6, 9, 3):
        prompt = torch.randn(2, 2, length, 16)
        want_cache, got_cache = _Window(prompt.clone()), _Window(prompt.clone())
        count = rec.graph_count
        for _ in range(3):
            x = torch.randn(2, 2, 1, 16)
            assert_same(compiled(x, got_cache), _decode(x, want_cache))
            assert_same(got_cache.keys, want_cache.keys)
            assert (got_cache.keys.stride(), got_cache.keys.storage_offset()) == \
                (want_cache.keys.stride(), want_cache.keys.storage_offset())
        per_prompt.append(rec.graph_count - count)
    assert per_prompt == [2, 0, 0, 0]
    assert framejit.stats()["eager_frames"] == before
