"""Dynamic shapes, issue 13 (third round of gaps): differential tests, eager vs compiled over several sizes,
with the number of compilations asserted.

- A relation of symbolic sizes handed to an op that wants a bool (`is_causal = self.is_causal and mask is
  None and q_len > 1`, HF moonshine and sdpa_attention_forward) is specialised by a guard on the relation
  (NOTE [SymBool arguments of ops] in graph.py). Before, the fake call raised "argument 'is_causal' must
  be bool, not SymBool": the frame broke there (moonshine's resized call) or ran wholly eagerly.
- A comprehension or generator expression with free variables that reaches the frame hook at a break is a
  new function object with new cells on every call: each call traced it anew (NOTE [Comprehensions made per
  call] in hook.py). Now objects with the same cells share a hook, and a code seen with other cells runs as
  plain Python from then on, so calls of the same shapes trace nothing.
- A list built over a symbolic size and opaque after one recompile (NOTE [Sequences of changing length
  carried across breaks]): a `for` over it (its GET_ITER run in Python) is a carried loop whose steps run as
  Python, and a method call on it (`outs.append(y)`) breaks at the call (NOTE [Methods of sequences of
  changing length]). Before, both compiled once per length until the recompile limit ran them eagerly
  (stock torch.compile: 8 graphs, then eager).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames


# ---- SymBool arguments of ops (NOTE [SymBool arguments of ops]) -------------------------------------------
class CausalAttention(torch.nn.Module):
    """Moonshine's pattern: the query is a strided part of the keys, so its length is a derived size
    ((s - 1) // 2 + 1) whose relation to 1 the shape env does not know; `and` hands sdpa the SymBool."""

    def __init__(self) -> None:
        super().__init__()
        self.is_causal = True
        self.scale = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, mask=None):
        q = x[:, :, ::2] * self.scale
        q_len = q.shape[2]
        is_causal = self.is_causal and mask is None and q_len > 1
        return _sdpa(q, x, x, is_causal=is_causal)


def _sdpa(query, key, value, is_causal=None):
    is_causal = query.shape[2] > 1 and is_causal  # sdpa_attention_forward's form: the last operand
    return F.scaled_dot_product_attention(query, key, value, is_causal=is_causal)


def plain_relation(x):
    return F.scaled_dot_product_attention(x, x, x, is_causal=x.shape[2] > 1)


torch.manual_seed(0)
ATTENTION = CausalAttention()


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [ATTENTION, plain_relation], ids=["derived_length", "size_relation"])
def test_a_size_relation_given_as_a_bool_argument_is_guarded(fn, dynamic):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=dynamic)
    eager_before = eager_frames()
    # lengths 1 and 2 give a query of length 1 (not causal: with 1 query and several keys, causal would mask
    # all keys but the first, so a wrongly kept is_causal=True differs from eager)
    lengths = [4, 6, 9, 2, 7, 1, 5, 3]
    for i, s in enumerate(lengths):
        torch.manual_seed(i)
        x = torch.randn(2, 2, s, 4)
        assert_same(compiled(x), fn(x), rtol=1e-5, atol=1e-6)
    assert eager_frames() == eager_before
    # one entry for sizes where the relation holds, one where it does not (length 2), one for length 1 (sizes
    # 0 and 1 stay specialised), plus the first static one under automatic dynamic
    assert backend.graph_count <= (3 if dynamic else 4), backend.graph_count


# ---- comprehensions made per call (NOTE [Comprehensions made per call] in hook.py) ---------------------------
def _batches(x):
    """A data-loading style generator that logs: it runs as Python, so the comprehension over it breaks."""
    for chunk in x.split(2):
        print("batch", tuple(chunk.shape))
        yield chunk


def listcomp_with_closure(x, w):
    return [c * w for c in _batches(x)]  # `w` is a free variable: a new closure on every call (3.11)


def genexpr_with_closure(x, w):
    return torch.stack(tuple(c.sum() * w for c in _batches(x)))  # a frame on every version


def nested_closures(x, w):
    scale = w + 1
    return sum(c.sum() * scale for c in _batches(x)) + torch.cat([c * w for c in _batches(x)]).sum()


@pytest.mark.parametrize("fn", [listcomp_with_closure, genexpr_with_closure, nested_closures],
                         ids=["listcomp", "genexpr", "both"])
def test_a_comprehension_with_a_closure_is_traced_once_for_same_shapes(fn, capsys):
    compiled = framejit.compile(fn, backend=CountingBackend())
    traced = []
    for i, n in enumerate([6, 6, 6, 6, 5, 5]):
        torch.manual_seed(i)
        x, w = torch.randn(n, 3), 1.5 + i
        expected = fn(x, w)
        eager_out = capsys.readouterr().out
        assert_same(compiled(x, w), expected)
        assert capsys.readouterr().out == eager_out
        traced.append(framejit.stats()["frames_traced"])
    # the first call traces (the second once more: `w` changed, it becomes a dynamic float); later calls of
    # the same shapes do not trace again: before, every call traced its comprehension frames anew (new cells)
    assert traced[3] == traced[2] == traced[1], traced
    assert traced[5] == traced[4], traced


# ---- a for loop over a list of changing length (NOTE [Sequences of changing length carried across breaks]) ------
def loop_over_built_list(x):
    outs = []
    for i in range(x.size(0)):  # a symbolic range: runs as Python, `outs` has a length per size
        outs.append(x[i] * 2)
    total = x.sum() * 0
    for o in outs:  # GET_ITER on the opaque list runs in Python; the loop after it is a carried loop
        total = total + o.sum()
    return total


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_loop_over_a_list_of_changing_length_stops_recompiling(dynamic):
    compiled = framejit.compile(loop_over_built_list, backend=CountingBackend(), dynamic=dynamic)
    eager_before = eager_frames()
    traced = []
    for i, n in enumerate([3, 5, 7, 4, 9, 6, 11, 8, 10, 12, 13, 2, 14, 15]):
        torch.manual_seed(i)
        x = torch.randn(n, 3)
        before = framejit.stats()["frames_traced"]
        assert_same(compiled(x), loop_over_built_list(x))
        traced.append(framejit.stats()["frames_traced"] - before)
    # before: the resume function at the second loop read the list iterator as a plain argument, guarded by
    # its list's length: one entry per length until the recompile limit ran it eagerly
    assert eager_frames() == eager_before
    assert sum(traced[-5:]) == 0, traced


def append_after_the_loop(x):
    outs = []
    for i in range(x.size(0)):
        outs.append(x[i] * 2)
    outs.append(x.sum(0))  # a method of the opaque list: the call runs in Python, not the method load
    last = outs.pop()
    outs.insert(0, last * 3)
    return torch.stack(outs), len(outs)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_method_call_on_a_list_of_changing_length_stops_recompiling(dynamic):
    compiled = framejit.compile(append_after_the_loop, backend=CountingBackend(), dynamic=dynamic)
    eager_before = eager_frames()
    traced = []
    for i, n in enumerate([3, 5, 7, 4, 9, 6, 11, 8, 10, 12, 2, 13, 14, 15]):
        torch.manual_seed(i)
        x = torch.randn(n, 3)
        before = framejit.stats()["frames_traced"]
        assert_same(compiled(x), append_after_the_loop(x))
        traced.append(framejit.stats()["frames_traced"] - before)
    # before: the bound method `outs.append` reached the next resume function guarded by identity (a new
    # object each call): a trace per call until the recompile limit ran it eagerly
    assert eager_frames() == eager_before
    assert sum(traced[-5:]) == 0, traced


# ---- automatic dynamic across entries (NOTE [Automatic dynamic across entries] in hook.py) -----------------------
torch.manual_seed(0)
LAYER_LIST = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])


def layers_with_a_break(x, mask):
    for layer in LAYER_LIST:  # the body's resume function has one entry per position of the loop
        print("layer")
        x = layer(x) * mask
    return x


def test_a_resume_function_with_an_entry_per_loop_position_becomes_dynamic(capsys):
    compiled = framejit.compile(layers_with_a_break, backend=CountingBackend())
    eager_before = eager_frames()
    traced = []
    for i, b in enumerate([2, 3, 5, 4, 6, 7, 8]):
        torch.manual_seed(i)
        x, mask = torch.randn(b, 4), torch.randn(b, 4)
        expected = layers_with_a_break(x, mask)
        eager_out = capsys.readouterr().out
        before = framejit.stats()["frames_traced"]
        assert_same(compiled(x, mask), expected)
        assert capsys.readouterr().out == eager_out
        traced.append(framejit.stats()["frames_traced"] - before)
    # before: the newest entry (the other loop position) failed first on the position, so the sizes were
    # never made symbolic: every size traced both positions again until the recompile limit (an eager frame)
    assert eager_frames() == eager_before
    assert sum(traced[-4:]) == 0, traced
