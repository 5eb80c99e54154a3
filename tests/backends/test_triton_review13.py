"""Triton-backend fixes found by a read-only review of issue 13/14 commits (h13tri2): a float64 LSTM's
workspace measured in float32 (recurrent.sized_workspaces); probe repairs that made two symbols equal (probe_relations._residues_met). Values compared with eager; what ran
in the backend and what was logged on `eager_fallback` checked."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.backends.test_training_gaps6 import _sgd, fallback_log, train_twins  # noqa: F401 (fixture)
from tests.backends.test_training_backends import _count_ort_runs  # noqa: F401 (the autouse fixture)
from tests.backends.test_training_backends import assert_backward_in_backend

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


class Float64Lstm(nn.Module):
    """An LSTM in float64 on the raw input, then a linear head (NOTE [The workspace's size])."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True).double()
        self.head = nn.Linear(4, 2).double()

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out[:, -1]) + h.sum() * 0.1 + c.mean()


def test_a_float64_lstm_trains_with_its_backward_on_triton(fallback_log):
    """The review's program: passes before and after (a float64 LSTM never reaches oneDNN's layer, which
    takes float32 and bfloat16 only, so no workspace is measured); kept as the twin of the bfloat16 test."""
    recording = train_twins(Float64Lstm, lambda g: (torch.randn(2, 3, 3, generator=g, dtype=torch.float64),),
                            "triton", _sgd)
    assert_backward_in_backend(recording, steps=3)
    assert not fallback_log()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_bfloat16_layers_workspace_example_has_the_real_ops_size(dtype):
    """Before: measured on float32 zeros whatever the layer's dtype: a bfloat16 layer of 7 steps x 5 x 33
    got 102400 bytes where oneDNN gives it 86016, so the backward's example differed from every real call."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from framejit.backends import recurrent
    steps, batch, width, hidden = 7, 5, 3, 33
    gen = torch.Generator().manual_seed(0)
    layer = [torch.randn(steps, batch, width, generator=gen), torch.randn(4 * hidden, width, generator=gen),
             torch.randn(4 * hidden, hidden, generator=gen), torch.randn(4 * hidden, generator=gen),
             torch.randn(4 * hidden, generator=gen), torch.zeros(batch, hidden), torch.zeros(batch, hidden)]
    layer = [t.to(dtype) for t in layer]
    with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():
        out, hy, cy, workspace = torch.ops.aten.mkldnn_rnn_layer.default(
            *layer, False, [], 2, hidden, 1, True, False, False, True)

    def backward(*args):
        *tensors, ws = args
        return torch.ops.aten.mkldnn_rnn_layer_backward.default(
            *tensors, False, 2, hidden, 1, True, True, False, [], False, ws)

    grads = [torch.randn_like(t) for t in (out, hy, cy)]
    fake = torch.empty(0, dtype=torch.uint8)  # the meta kernel's workspace, as AOT autograd's example
    graph = make_fx(backward, tracing_mode="fake")(*layer, out, hy, cy, *grads, fake)
    examples = recurrent.sized_workspaces(graph, [*layer, out, hy, cy, *grads, fake])
    assert examples[-1].shape == workspace.shape


def _mod_relations(modulus: int, count: int):
    import sympy

    from framejit.backends.triton.probe_relations import Relations
    symbols = sympy.symbols(f"s0:{count}", integer=True, positive=True)
    guards = [sympy.Eq(sympy.Mod(s, modulus), 0) for s in symbols]
    return Relations(guards, list(symbols), [(None, None)] * count)


def test_lowering_to_residues_keeps_symbols_distinct_and_ordered():
    """Before: each symbol was lowered alone, 101 and 103 under Mod(s, 8) == 0 both became 96 (and hold()
    accepted the probe), so no probe told the two symbols apart. Now a value that meets or passes another
    symbol's is skipped: 103 stays where it is (96 and 88 meet or pass 101's 96; values are only lowered)."""
    relations = _mod_relations(8, 2)
    assert relations._residues_met([101, 103], [0, 1]) == [96, 103]
    assert relations._residues_met([103, 101], [0, 1]) == [103, 96]
    assert relations._residues_met([101, 120], [0, 1]) == [96, 120]  # far apart: both met, as before
    assert relations._residues_met([101, 101], [0, 1]) == [96, 96]  # equal before: may stay equal
    three = _mod_relations(3, 3)
    assert three._residues_met([80, 112, 176], [0, 1, 2]) == [78, 111, 174]  # NOTE [Residues of probes]
    assert three._residues_met([80, 79, 176], [0, 1, 2]) == [80, 78, 174]  # 78 and 75 would pass s1's 79


# ---- NOTE [Symbols pinned by guards the probes miss] (probe_relations.py): the looped-reduction pass ------------
class GuardedPool(torch.nn.Module):
    """A pool over the image (a reduction whose length h*w varies with the probes) behind a frontend guard
    that no exchange of prime probes meets (16 patches of 2x2, as a 17-row position table asks)."""

    def forward(self, x):
        if (x.size(2) // 2) * (x.size(3) // 2) + 1 == 17:
            return x.relu().sum(dim=(2, 3))
        return x.sum(dim=(2, 3)) * 0


def test_a_probe_failing_in_the_looped_reduction_pass_pins_and_retries(monkeypatch, fallback_log):
    """Generation at a probe breaking the guard fails only once reductions are looped (an injected failure:
    the second pass is the point). Before: the _PinAndRetry raised by the second generate_all was outside
    its try, reached the backend's catch-all and the graph ran eagerly for every size ('internal error',
    EagerGraph). Now the image's symbols are pinned and one module serves every batch."""
    import framejit
    from framejit.backends.triton import dynamic
    from tests.helpers import RecordingBackend, assert_same

    real = dynamic._generate
    looped_at = []

    def generate(gm, inputs, device, opts, configs, ints):
        if configs and any(not c.persistent for c in configs.values()) and inputs[0].shape[2:] != (8, 8):
            looped_at.append(tuple(inputs[0].shape))
            raise RuntimeError("injected: this probe fails with looped reductions")
        return real(gm, inputs, device, opts, configs, ints)

    monkeypatch.setattr(dynamic, "_generate", generate)
    framejit.reset()
    model = GuardedPool()
    backend = RecordingBackend("triton")
    compiled = framejit.compile(model, backend=backend, dynamic=True)
    for b in (2, 3, 5, 4):
        x = torch.randn(b, 3, 8, 8)
        assert_same(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    framejit.reset()
    # NOTE [Probes that break a guard] (dynamic.py): the image's symbols are now pinned before any probe is
    # generated, so no probe breaking the guard reaches either pass (the injected failure is never hit)
    assert looped_at == []
    assert len(backend.graphs) == 1
    assert [type(c).__name__ for c in backend.compiled] == ["DynamicGraph"]  # before: EagerGraph
    assert not [m for m in fallback_log() if "internal error" in m or "compiling failed" in m]
