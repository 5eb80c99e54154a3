"""A warm process's first training step loads its joint (NOTE [Persisted joints] in backends/joint_cache.py): a
cold process trains two SGD steps on onnxrt and stores the frame and the joint; a second process (a stable copy
of framejit: its source digest is in every key) traces no frame, AOT-traces no joint, builds no ORT program,
and its outputs, gradients and parameters after the steps equal eager's. In the same warm process an input
that requires grad is a fact the stored joint did not depend on being otherwise: a joint is traced for it.
"""
from __future__ import annotations

import json
import os
import shutil
import textwrap

from tests.helpers import BACKEND_MODULES, run_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent('''
    import copy, json, sys
    import torch
    import framejit
    from framejit.backends import joint

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(6, 12), torch.nn.Linear(12, 3)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref)]
    compiled = framejit.compile(model, backend="onnxrt")
    equal, counts = [], []
    for requires_grad in [bool(int(v)) for v in sys.argv[1].split(",")]:
        before, frames = dict(joint.STATS), framejit.stats()["frames_traced"]
        for step in range(2):
            x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step), requires_grad=requires_grad)
            xr = x.detach().clone().requires_grad_(requires_grad)
            out, want = compiled(x), ref(xr)
            out.square().sum().backward()
            want.square().sum().backward()
            grads = [(a.grad, b.grad) for a, b in zip(model.parameters(), ref.parameters())]
            if requires_grad:
                grads.append((x.grad, xr.grad))
            equal.append(torch.allclose(out, want, atol=1e-6) and all(torch.allclose(a, b, atol=1e-6) for a, b in grads))
            for opt in opts:
                opt.step()
                opt.zero_grad()
        equal.append(all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), ref.parameters())))
        counts.append({k: joint.STATS[k] - before.get(k, 0) for k in ("traced", "loaded", "half_programs_built")})
        counts[-1]["frames_traced"] = framejit.stats()["frames_traced"] - frames
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "counts": counts, "traced": stats["frames_traced"],
                      "loaded": stats["frames_loaded"], "compiles": stats["backend_compiles"]}))
''')


def test_warm_first_training_step_traces_and_compiles_nothing(tmp_path):
    snapshot = tmp_path / "install"
    shutil.copytree(os.path.join(REPO, "framejit"), snapshot / "framejit", ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1")
    runs = []
    for blocks in ("0", "0,1"):  # cold: x without grad; warm: the same, then x requiring grad
        rc, out, err = run_program(tmp_path, script, blocks, env=env, preload=BACKEND_MODULES["onnxrt"],
                                   pythonpath=str(snapshot))
        assert rc == 0, err
        runs.append(json.loads(out.strip().splitlines()[-1]))
    cold, warm = runs
    assert all(cold["equal"]) and all(warm["equal"]), (cold, warm)
    assert cold["counts"] == [{"traced": 1, "loaded": 0, "half_programs_built": 2, "frames_traced": 1}]
    assert warm["counts"][0] == {"traced": 0, "loaded": 1, "half_programs_built": 0, "frames_traced": 0}
    assert warm["loaded"] == 1 and warm["counts"][1]["traced"] == 1 and warm["counts"][1]["loaded"] == 0
