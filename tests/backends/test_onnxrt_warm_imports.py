"""A warm process running an onnxrt program imports only what running it needs (NOTE [sympy imported when
used] in backends/onnxrt/shapes.py, NOTE [Frozen models are cached] in backends/onnxrt/runtime.py): no
sympy (0.5-1 s of import), no onnx or onnxscript (0.6-0.7 s), no tracing, eager's results."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3)).eval()
    compiled = framejit.compile(net, backend="onnxrt", options={"allow_spinning": False})
    x = torch.linspace(-2, 2, 24).reshape(4, 6) + float(sys.argv[1])
    with torch.no_grad():
        out, ref = compiled(x), net(x)
    stats = framejit.stats()
    print(json.dumps({"close": torch.allclose(out, ref, rtol=1e-4, atol=1e-5), "traced": stats["frames_traced"],
                      "loaded": stats["frames_loaded"], "sympy": "sympy" in sys.modules,
                      "onnx": sorted(m for m in ("onnx", "onnxscript") if m in sys.modules)}))
''')


def test_warm_onnxrt_process_does_not_import_sympy_or_onnx(tmp_path):
    install = tmp_path / "install"  # a copy: a source file changing between the two processes is a miss
    shutil.copytree(os.path.join(REPO, "framejit"), install / "framejit", ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT_")}
    env.update(PYTHONPATH=str(install), FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1")
    runs = []
    for shift in ("0.0", "0.5"):  # the warm process gets other values
        done = subprocess.run([sys.executable, str(script), shift], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["close"] and warm["close"]
    assert cold["traced"] == 1 and cold["sympy"]  # tracing made a ShapeEnv, which imports sympy
    assert "onnx" in cold["onnx"]  # translating and freezing the weights use the onnx package
    assert warm["traced"] == 0 and warm["loaded"] == 1
    assert not warm["sympy"]
    assert warm["onnx"] == []  # the frozen model was persisted: ORT loads it without the onnx package
