"""Warm starts for frames with reentrant checkpoints captured in the graph (NOTE [Persisted reentrant checkpoints]
in capture/reentrant_checkpoint.py).

A graph node applying torch's reentrant checkpoint to a traced region (NOTE [Reentrant checkpoint in the graph])
is saved with the region node by node and made again on load. A call whose recomputation reads the state of the
backward (NOTE [State changed between the forward and the backward]: every captured call, since its recall has a
recipe for any `fn`) keeps its frame's entry in memory only: a loaded call had no recall and recomputed with the
forward's state (here `eval()` between the forward and the backward: the warm process's gradients differed).
The warm process traces that frame again, and its values, gradients and BatchNorm statistics (updated in the
forward and again in the recomputation) are eager's.
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

PROGRAM = textwrap.dedent('''
import copy, json, torch, framejit
from torch import nn
from torch.utils.checkpoint import checkpoint
from framejit.capture import reentrant_checkpoint

RUNS = [0]
_call = reentrant_checkpoint.ReentrantCall.__call__
def counted(self, *args):
    RUNS[0] += 1
    return _call(self, *args)
reentrant_checkpoint.ReentrantCall.__call__ = counted

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.3), nn.BatchNorm1d(6)); self.b = nn.Linear(6, 3)
    def forward(self, x):
        h = checkpoint(self.a, x, use_reentrant=True)
        h, none = checkpoint(lambda t: (t.sin() * 2, None), h, use_reentrant=True)
        return self.b(h)
torch.manual_seed(0)
m = Net(); ref = copy.deepcopy(m)
c = framejit.compile(m, backend="eager")
ok = True
for s, n in enumerate((4, 4, 7)):
    x = torch.randn(n, 6, generator=torch.Generator().manual_seed(s)).requires_grad_()
    m.train(); ref.train()
    torch.manual_seed(s); out = c(x); m.train(s == 0); out.square().sum().backward(); gx = x.grad; x.grad = None
    torch.manual_seed(s); want = ref(x); ref.train(s == 0); want.square().sum().backward()
    ok = ok and torch.allclose(out, want, atol=1e-6) and torch.allclose(gx, x.grad) and all(
        torch.allclose(p.grad, q.grad, atol=1e-6) for p, q in zip(m.parameters(), ref.parameters())) and all(
        torch.equal(p, q) for p, q in zip(m.buffers(), ref.buffers()))
    m.zero_grad(); ref.zero_grad()
s = framejit.stats()
print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"], "eager": s["eager_frames"],
                  "reentrant": RUNS[0]}))
''')


def test_reentrant_checkpoints_with_a_recall_are_traced_again_in_a_warm_process(tmp_path):
    cold = run_cache_program(tmp_path, "reentrant.py", PROGRAM)
    warm = run_cache_program(tmp_path, "reentrant.py", PROGRAM)
    assert cold["ok"] and cold["eager"] == 0 and cold["traced"] > 0, cold
    assert cold["reentrant"] == 6, cold  # two checkpoints per call, three calls: in the graph
    assert warm["ok"] and warm["eager"] == 0 and warm["reentrant"] == 6, warm  # the parent: ok False (loaded)
    assert warm["traced"] == cold["traced"] and warm["loaded"] == 0, warm
