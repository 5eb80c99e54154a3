"""Dynamic shapes, issue 13 (fifth round of gaps, h13dyn3): differential tests, eager vs compiled over
several sizes, with the number of compilations asserted against stock torch.compile's count.

- A dim marked with `mark_dynamic` whose size is 0 or 1 is specialised by rule (not a broken contract), but
  the entry's DYNAMIC_INDICES guard allowed only the dims it kept symbolic, so the entry failed its own kind
  of input: sizes 3, 0, 1, 2, 5, 0, 1 traced 0 and 1 again on every return (stock torch.compile: 3 graphs).
  The guard now also allows the traced tensor's marked dims of size 0 or 1 (shapes._marked_by_rule).
- `d ** -0.5` of a size (attention's scale) specialised the size: one compilation per size until the
  recompile limit ran the frame eagerly (NOTE [Float powers of sizes] in sym_arith.py).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames


def _sum_and_mean(x):
    return (x * 2).sum(0) + x.mean(0), x.unsqueeze(0).expand(3, *x.shape).sum(0)


def test_a_marked_dim_of_size_0_or_1_is_served_again_by_its_entry():
    backend = CountingBackend()
    compiled = framejit.compile(_sum_and_mean, backend=backend)
    eager_before = eager_frames()
    for i, size in enumerate([3, 0, 1, 2, 5, 0, 1, 4, 0, 1]):
        torch.manual_seed(i)
        x = torch.randn(size, 3)
        framejit.mark_dynamic(x, 0)
        assert_same(compiled(x), _sum_and_mean(x))
    assert eager_frames() == eager_before
    assert backend.graph_count == 3, backend.graph_count  # symbolic, 0, 1 (stock torch.compile: 3)


def test_an_unmarked_entry_of_size_1_still_retraces_a_marked_tensor():
    backend = CountingBackend()
    compiled = framejit.compile(_sum_and_mean, backend=backend, dynamic=False)
    x = torch.randn(1, 3)
    assert_same(compiled(x), _sum_and_mean(x))
    y = torch.randn(1, 3)
    framejit.mark_dynamic(y, 0)
    assert_same(compiled(y), _sum_and_mean(y))
    assert backend.graph_count == 2, backend.graph_count  # the unmarked entry does not serve a marked tensor


# ---- ints passed to a compiled module under dynamic=True ------------------------------------------------
class _Decoder(torch.nn.Module):
    """HF-style decoding step: past keys and values grow by one each step, with a position offset."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, past=None, offset=0):
        k = self.proj(x)
        if isinstance(past, tuple):
            past = past[0]
        if past is not None:
            k = torch.cat([past, k], 1)
        pos = torch.arange(offset, offset + x.size(1))
        return (x @ k.transpose(1, 2)).softmax(-1) @ k + pos[None, :, None], k


def test_an_int_argument_of_a_compiled_module_is_symbolic_from_the_first_call_under_dynamic_true():
    torch.manual_seed(0)
    model = _Decoder().eval()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend, dynamic=True)
    eager_before = eager_frames()
    torch.manual_seed(1)
    x = torch.randn(2, 3, 4)
    with torch.no_grad():
        assert_same(compiled(x), model(x))  # the prompt: no past (one entry)
        past = model(x)[1]
        for step in range(6):
            x = torch.randn(2, 1, 4)
            expected = model(x, past, 3 + step)
            assert_same(compiled(x, past, 3 + step), expected)
            past = expected[1]
    assert eager_frames() == eager_before
    # stock torch.compile(dynamic=True): 2 graphs; the offset (an item of module_call's *args) was static
    # on its first value, one more graph when it changed
    assert backend.graph_count == 2, backend.graph_count


# ---- recompile log lines stay short (NOTE [Short values in recompile logs]) -------------------------------
def test_the_recompile_log_writes_tensors_of_a_changed_argument_by_shape(caplog):
    import logging
    from framejit import logs
    model = _Decoder().eval()
    compiled = framejit.compile(model, backend=CountingBackend())
    logs.set_logs("recompiles")
    caplog.set_level(logging.INFO, logger="framejit")
    try:
        x = torch.randn(2, 3, 4)
        past = torch.randn(2, 30, 4)
        assert_same(compiled(x, None), model(x, None))
        assert_same(compiled(x, (past, past)), model(x, past))
    finally:
        logs.set_logs("")
    lines = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert lines and "Tensor(shape=(2, 30, 4), dtype=torch.float32)" in lines[0], lines
    assert len(lines[0]) < 600, lines[0]


# ---- float powers of sizes (NOTE [Float powers of sizes]) ----------------------------------------------
def _scaled(x):
    d = x.shape[-1]
    return x * d ** -0.5 + d ** 0.5, x.new_full((x.size(0),), d)


def test_a_float_power_of_a_size_stays_symbolic():
    for dynamic, expected in ((True, 1), (None, 2)):
        backend = CountingBackend()
        compiled = framejit.compile(_scaled, backend=backend, dynamic=dynamic)
        eager_before = eager_frames()
        for i, (b, s) in enumerate([(2, 5), (3, 7), (4, 3), (2, 9), (5, 4), (3, 6), (2, 8), (4, 2), (3, 11)]):
            torch.manual_seed(i)
            x = torch.randn(b, s)
            assert_same(compiled(x), _scaled(x))
        assert eager_frames() == eager_before
        assert backend.graph_count == expected, (dynamic, backend.graph_count)  # stock torch.compile: 1 and 2


# ---- float arguments under dynamic=True (NOTE [Dynamic floats]) ------------------------------------------
def _temperature(x, scale: float):
    return (x * scale).softmax(-1), scale * 2


def test_a_float_argument_is_a_graph_input_from_the_first_call_under_dynamic_true():
    backend = CountingBackend()
    compiled = framejit.compile(_temperature, backend=backend, dynamic=True)
    eager_before = eager_frames()
    for i, scale in enumerate([0.5, 1.5, -2.0, 3.25, 0.0, 7.0]):
        torch.manual_seed(i)
        x = torch.randn(2, 3 + i)
        assert_same(compiled(x, scale), _temperature(x, scale))
    assert backend.graph_count == 1, backend.graph_count  # stock torch.compile(dynamic=True): 1 (was 2)
    for scale in (float("inf"), float("nan"), 2.5):  # no symbol for these: still equal to eager
        x = torch.randn(2, 4)
        assert_same(compiled(x, scale), _temperature(x, scale))
    assert eager_frames() == eager_before
