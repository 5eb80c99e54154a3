"""NOTE [Getitem-to-index blocks] (issue 11, h11llava).

transformers' sdpa_mask builds token-type and packed-sequence masks as
`with TransformGetItemToIndex(): vmap(vmap(vmap(vmap(mask_fn))))(b, h, q, kv)`. framejit broke at the mode's
`__enter__` and ran the rest of the frame eagerly (Gemma3ForConditionalGeneration: 8 graphs per call and an
eager frame, stock torch.compile 4 and none). The programs below are written as a user would; each compares
values with eager's over calls with changing sizes and data.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks
from tests.models.hf import harness

from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex


def _expand(fn):
    for dims in [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)]:
        fn = torch.vmap(fn, in_dims=dims, out_dims=0)
    return fn


def masked(x, pad, types):
    """sdpa_mask's vmap path: a causal mask, and-ed with a padding mask, or-ed with a bidirectional block
    over equal token types; the mask functions index tensors with the per-sample 0-d index tensors."""
    b, n = pad.shape

    def mask_fn(bi, hi, qi, ki):
        same_block = (types[bi, qi] == types[bi, ki]) & (types[bi, qi] > 0)
        return ((ki <= qi) | same_block) & pad[bi, ki]

    with TransformGetItemToIndex():
        mask = _expand(mask_fn)(torch.arange(b), torch.arange(1), torch.arange(n), torch.arange(n))
    return torch.where(mask, x, torch.finfo(x.dtype).min).softmax(-1)


def _mask_inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    pad = torch.rand(2, n, generator=g) > 0.2
    pad[:, 0] = True
    types = (torch.rand(2, n, generator=g) > 0.5).long()
    return torch.randn(2, 1, n, n, generator=g), pad, types


def test_a_vmapped_mask_under_the_mode_is_captured_whole():
    backend = CountingBackend()
    compiled = framejit.compile(masked, backend=backend)
    eager_before = harness.eager_frame_count()
    with logged_breaks() as breaks:
        for seed, n in enumerate((5, 5, 7)):
            x, pad, types = _mask_inputs(n, seed)
            torch.testing.assert_close(compiled(x, pad, types), masked(x, pad, types))
    assert breaks == []
    assert harness.eager_frame_count() == eager_before
    assert backend.graph_count <= 2  # stock torch.compile: 2 (one per size)


def subscripts(t, i):
    """Every subscript form under the mode: a tensor index, an int (a copy, not a view: the write below
    leaves t alone), a slice (untouched by the mode: a view), a tensor and an int, a list of ints (the
    mode reads it as two indices, t[1, 2], not rows 1 and 2)."""
    with TransformGetItemToIndex():
        a = t[i]
        b = t[1]
        b.add_(100)
        c = t[1:3]
        c.mul_(2)
        d = t[i, 2]
        e = t[[1, 2]]
        f = t[(i, i)]
    return a, b, c, d, e, f, t


def test_subscripts_under_the_mode_compute_what_eager_does():
    backend = CountingBackend()
    compiled = framejit.compile(subscripts, backend=backend)
    with logged_breaks() as breaks:
        for n in (4, 4, 6):
            t, i = torch.randn(n, 5), torch.tensor(n - 2)
            got, want = compiled(t.clone(), i), subscripts(t.clone(), i)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w)
            assert want[4].shape == ()  # t[[1, 2]] under the mode
    assert breaks == []
    assert backend.graph_count <= 2


def broken_block(t, i, log):
    with TransformGetItemToIndex():
        a = t[i] + 1
        log.append(a.sum().item())  # a graph break inside the block
        b = t[1]
        b.add_(1)
    return a, b, t[1]


def test_a_break_inside_the_block_keeps_the_mode_after_it():
    """After the break the resume function is inside the block again: `t[1]` is still a copy (eager's
    t[1] after the block is unchanged by `b.add_`); no frame runs eagerly."""
    compiled = framejit.compile(broken_block, backend=CountingBackend())
    eager_before = harness.eager_frame_count()
    for n in (3, 5):
        t, i = torch.randn(n, 4), torch.tensor(n - 1)
        got_log, want_log = [], []
        got, want = compiled(t.clone(), i, got_log), broken_block(t.clone(), i, want_log)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        assert got_log == want_log
    assert harness.eager_frame_count() == eager_before


def test_outside_the_block_subscripts_are_views_again():
    def h(t, i):
        with TransformGetItemToIndex():
            a = t[1]
        b = t[1]  # a view: the write reaches t
        b.add_(1)
        return a, t, t[i]

    compiled = framejit.compile(h, backend=CountingBackend())
    for n in (3, 4):
        t, i = torch.randn(n, 2), torch.tensor(1)
        got, want = compiled(t.clone(), i), h(t.clone(), i)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def _int_key_write(x, k):
    with TransformGetItemToIndex():
        y = x[k]  # a copy under the mode (aten.index), also once k is a symbolic int
        y.add_(100)
    return x, y


def _spelled_key_write(x, k, spelling):
    with TransformGetItemToIndex():
        b = spelling(x, k)
    b.mul_(0)  # eager: b is a copy, x is unchanged
    return x, b


def test_int_keys_stay_copies_when_the_int_changes():
    """Review revC C4: from the 2nd call k is a symbolic int; the subscript took the symbolic-index path (a
    view) and `y.add_` wrote into the caller's x. Now such a key is a break and x is unchanged, as in eager."""
    compiled = framejit.compile(_int_key_write, backend="eager")
    for k in (1, -1, 0, 2):
        x = torch.arange(6.).reshape(3, 2)
        got, want = compiled(x.clone(), k), _int_key_write(x.clone(), k)
        for g, w in zip(got, want):
            assert torch.equal(g, w)


def test_other_spellings_of_a_subscript_stay_copies():
    import operator
    for spelling in (lambda x, k: x.__getitem__(k), operator.getitem, torch.Tensor.__getitem__):
        compiled = framejit.compile(_spelled_key_write, backend="eager")
        for k in (1, 0, -1):
            x = torch.arange(6.).reshape(3, 2)
            got, want = compiled(x.clone(), k, spelling), _spelled_key_write(x.clone(), k, spelling)
            for g, w in zip(got, want):
                assert torch.equal(g, w)
        framejit.reset()
