"""Breaks inside loop bodies: the resume function of a break takes the same locals on every pass of the loop
(NOTE [Resume functions take the same locals on every pass] in framejit/capture/local_liveness.py), so the
first pass (in the original frame) and later ones (in resume functions, where locals assigned later in the
body are bound from the pass before) share one resume function instead of tracing two.

Differential: eager and compiled on fresh inputs over several calls (lengths and values change), printed
output compared; graph counts are deltas of one backend, no frame run eagerly by framejit."""
from __future__ import annotations

import contextlib
import io

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


@pytest.fixture(autouse=True)
def _fresh():
    framejit.reset()
    yield
    framejit.reset()


def _outcome(fn, args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            value = fn(*args)
        except Exception as e:  # noqa: BLE001  (compared with eager's)
            value = (type(e).__name__,)
    return value, out.getvalue()


def _check(fn, make_args, calls=3):
    """Eager vs compiled on each call's fresh inputs; returns (graphs, frames run eagerly by framejit)."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = eager_frames()
    for seed in range(calls):
        torch.manual_seed(seed)
        expected = _outcome(fn, make_args(seed))
        torch.manual_seed(seed)
        got = _outcome(compiled, make_args(seed))
        if isinstance(expected[0], tuple) and isinstance(expected[0][0], str):
            assert got[0] == expected[0]  # the exception eager raised
        else:
            torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
    return backend.graph_count, eager_frames() - before


def _sizes(t):
    h, w = t.tolist()  # reads data: a graph break inside the loop body
    return h // 4, w // 4


def _rows(t, size):
    h, _ = size.tolist()
    return t[:, : h // 4]


def pack(feats, sizes):
    """LLaVA-NeXT's pack_image_features, reduced: two breaks per item, locals assigned after each."""
    new, lens = [], []
    for i, feat in enumerate(feats):
        base = feat[0]
        feat = feat[1:]
        gh, gw = _sizes(sizes[i])
        feat = feat.view(gh, gw, -1).permute(2, 0, 1).contiguous()
        feat = _rows(feat, sizes[i])
        feat = torch.cat((base.flatten(), feat.flatten()))
        new.append(feat)
        lens.append(feat.size(0))
    return new, torch.tensor(lens)


def _pack_args(n):
    return lambda seed: ([torch.randn(5, 2, 3) + seed for _ in range(n)], torch.tensor([[8, 8]] * n))


def test_a_loop_whose_body_breaks_twice_traces_each_resume_function_once():
    # pack's graphs, each break inside _sizes or _rows a nested one (NOTE [Nested graph breaks]): the first
    # pass up to _sizes' tolist (base, feat[1:]), from there to _rows' tolist (view ... contiguous), from
    # there to the next pass's tolist in _sizes (cat, flatten, the loop's step), those three resume functions
    # once more each for `i` symbolic (it changed: NOTE [Dynamic ints]), and torch.tensor(lens) after the
    # loop: 8 (14 frames traced before nested breaks, 8 now). Before the same-locals fix, the 2nd pass's
    # locals (gh, gw bound from the 1st) made a second resume function after _sizes: 9 graphs.
    graphs, eager = _check(pack, _pack_args(4))
    assert eager == 0
    assert graphs == 8


def rope_like(x, groups):
    """Qwen2-VL's get_rope_index, reduced: a batch loop whose body breaks at .tolist(), with locals assigned
    after the break (an inner loop's, a running position) that are bound from the previous row."""
    outs = []
    for b in range(x.shape[0]):
        row = x[b] * 2
        parts = groups[b].tolist()
        pos = 0
        pieces = []
        for length in parts:
            piece = row[pos:pos + length] + pos
            pieces.append(piece)
            pos += length
        outs.append(torch.cat(pieces) * pos)
    return torch.stack(outs)


def test_a_batch_loop_with_an_inner_loop_after_its_break():
    def make(seed):
        return torch.randn(3, 6) + seed, torch.tensor([[2, 4], [3, 3], [1, 5]])
    graphs, eager = _check(rope_like, make)
    assert eager == 0
    # the frame up to row 0's .tolist() (x[0] * 2) and torch.stack after the loop. Row 0's resume function
    # meets row 1's .tolist(), so the rest of the loop runs as Python from its resume point (NOTE [Loops
    # breaking on every step]): one resume function for every row (before d0833af: two, the second taking
    # pieces/pos/length/piece bound from row 0), whose pieces make no graph, as in stock. Before that rule
    # it was traced once per loop position (3 rows: 4 graphs, one more per row up to LOOP_POSITIONS)
    assert graphs == 2


# ---- every loop form keeps eager's results ------------------------------------------------------------

def range_continue_else(x, n):
    acc = x * 0
    for i in range(n):  # a local assigned after the break, continue, else
        print("range", i)
        if i == 1:
            continue
        t = x + i
        acc = acc + t
    else:
        acc = acc * 2
    return acc, t


def dict_items(x, n):
    acc = x
    for k, v in {"a": 1, "b": 2, "c": n}.items():
        print("item", k)
        w = acc * v
        acc = acc + w
    return acc, w


def zip_break(x, n):
    acc = x
    for a, b in zip([1, 2, 3, n], [4, 5, 6, 7]):
        print("zip", a)
        s = a * b
        if s > 12:
            break
        acc = acc + s
    return acc, s


def while_loop(x, n):
    acc, j = x, 0
    while j < n:
        print("while", j)
        u = acc.sum() * j
        acc = acc + u
        j += 1
    return acc, u


def nested(x, n):
    acc = x
    for p in range(n):
        for q in range(2):
            print("nested", p, q)
            m = p * 10 + q
            acc = acc + m
        r = acc * p
    return acc, m, r


@pytest.mark.parametrize("fn", [range_continue_else, dict_items, zip_break, while_loop, nested])
def test_loop_forms_keep_eager_results(fn):
    graphs, eager = _check(fn, lambda seed: (torch.randn(3) + seed, 3 + seed % 2))
    assert eager == 0


def try_and_with(x, n):
    out = x
    for i in range(n):
        try:
            print("try", i)
            kept = out * 2
            if i == 1:
                raise ValueError(i)
            out = kept + 1
        except ValueError:
            out = out - kept  # a local read only by the handler is live across the break
        with torch.no_grad():
            print("with", i)
            inner = out * 3
        out = inner + out
    return out


def test_try_and_with_blocks_inside_loops():
    graphs, eager = _check(try_and_with, lambda seed: (torch.randn(2) + seed, 3))
    assert eager == 0


def maybe_unbound(x, n):
    out = x
    for i in range(n):
        print("step", i)
        if i == 2:
            out = out + late  # noqa: F821  (bound only from pass 1 on: eager reads it)
        if i >= 1:
            late = out * i
    return out


def deleted(x, n):
    out = x
    for i in range(n):
        temp = out * 2
        print("step", i)
        out = temp + i
        del temp
    return out


def first_pass_raises(x, n):
    for i in range(n):
        print("step", i)
        x = x + later  # noqa: F821  (UnboundLocalError on the first pass, as in eager)
        later = x
    return x


@pytest.mark.parametrize("fn", [maybe_unbound, deleted, first_pass_raises])
def test_unbound_and_deleted_locals_across_breaks(fn):
    graphs, eager = _check(fn, lambda seed: (torch.randn(2) + seed, 3 + seed))
    assert eager == 0 or fn is first_pass_raises
