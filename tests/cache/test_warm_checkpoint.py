"""Warm starts for frames with activation-checkpointed regions (issue 16; NOTE [Persisted checkpointed regions]
in capture/frame_cache.py).

A forward calling `torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)` (transformers' gradient
checkpointing does it for every layer) has its region moved into a `fj_checkpoint_N` submodule (NOTE
[Checkpointed regions]); such entries were kept in memory only ("the graph reads module state (call_module
fj_checkpoint_1)"), so every warm process traced the forward again (tools/warm_gaps.py nn_checkpoint: 1 frame).
Now the region is saved with the graph: a warm process traces nothing, its values and gradients are eager's,
and the loaded graph still runs the region under checkpoint (its activations are recomputed in backward).
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

PROGRAM = textwrap.dedent('''
    import copy, json, torch, framejit
    from torch import nn
    from torch.utils.checkpoint import checkpoint
    from framejit.capture import higher_order

    RUNS = [0]
    _forward = higher_order._Checkpointed.forward
    def counted(self, *args):
        RUNS[0] += 1
        return _forward(self, *args)
    higher_order._Checkpointed.forward = counted

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(6, 6)
            self.b = nn.Linear(6, 3)
            self.register_buffer("shift", torch.arange(6.0))

        def forward(self, x, scale):
            h = checkpoint(lambda t: (self.a(t) + self.shift).tanh() * scale, x, use_reentrant=False)
            h = checkpoint(self.layer, h, use_reentrant=False)
            return self.b(h)

        def layer(self, t):
            return t.sin() * t

    torch.manual_seed(0)
    m = Net()
    ref = copy.deepcopy(m)
    c = framejit.compile(m, backend="eager")
    ok = True
    for s, (n, scale) in enumerate(((4, 2.0), (4, 3.0), (7, 0.5))):
        x = torch.randn(n, 6, generator=torch.Generator().manual_seed(s))
        out, want = c(x, scale), ref(x, scale)
        out.square().sum().backward()
        want.square().sum().backward()
        ok = ok and torch.allclose(out, want, atol=1e-6) and all(
            torch.allclose(p.grad, q.grad, atol=1e-6) for p, q in zip(m.parameters(), ref.parameters()))
        m.zero_grad(); ref.zero_grad()
        m.shift.add_(1); ref.shift.add_(1)
    s = framejit.stats()
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"],
                      "eager": s["eager_frames"], "checkpointed": RUNS[0]}))
''')


def test_checkpointed_regions_start_warm(tmp_path):
    cold = run_cache_program(tmp_path, "ckpt.py", PROGRAM)
    warm = run_cache_program(tmp_path, "ckpt.py", PROGRAM)
    assert cold["ok"] and cold["eager"] == 0 and cold["traced"] > 0, cold
    assert cold["checkpointed"] == 6, cold  # two regions per call, three calls
    assert warm["ok"] and warm["eager"] == 0, warm
    assert warm["traced"] == 0 and warm["loaded"] >= 1, warm
    assert warm["checkpointed"] == 6, warm
