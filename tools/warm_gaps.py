"""Which compiled entries a warm process still traces or compiles again (issue 16: warm start for real code).

Each program below runs compiled code and eager code side by side; the tool runs it in a cold process and
then in a warm one with the same FRAMEJIT_CACHE_DIR (a fresh folder per program), and prints, for the warm
process: frames traced, backend compiles, joints AOT-traced, make_fx lowerings (onnxrt and triton lower
through make_fx: a warm process should build no program), and whether outputs and gradients equal eager's
in both processes. Every nonzero count is a gap; the cold process's `cache` log says why each entry was
kept in memory only (printed with --why).

    .venv/bin/python tools/warm_gaps.py                 # every program
    .venv/bin/python tools/warm_gaps.py break_branch hf_bloom --why

Not part of the test run (tests/cache/test_warm_gaps.py holds the regression tests).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Counts what a warm process should not do; imported by every program before framejit.
PRELUDE = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.fx.experimental.proxy_tensor as _pt
    _MAKE_FX = [0]
    _make_fx = _pt.make_fx
    def _counted_make_fx(*a, **k):
        _MAKE_FX[0] += 1
        return _make_fx(*a, **k)
    _pt.make_fx = _counted_make_fx
    import framejit
    from framejit.backends import joint as _joint

    def close(a, b, tol=1e-4):
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=tol)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
        return a == b

    def report(equal):
        s = framejit.stats()
        print(json.dumps({"equal": bool(equal), "traced": s["frames_traced"], "loaded": s["frames_loaded"],
                          "compiles": s["backend_compiles"], "joints_traced": _joint.STATS["traced"],
                          "joints_loaded": _joint.STATS["loaded"], "make_fx": _MAKE_FX[0],
                          "eager_frames": s["eager_frames"]}))
''')

PROGRAMS: dict[str, str] = {}


def program(name: str, backends=("eager",)):
    def register(body: str) -> str:
        for backend in backends:
            PROGRAMS[name if len(backends) == 1 else f"{name}_{backend}"] = body.replace("BACKEND", repr(backend))
        return body
    return register


program("break_branch")('''
def f(x, t):
    h = x * t
    if h.sum() > 0:
        return h.relu() + 1
    return -h
c = framejit.compile(f, backend=BACKEND)
ok = all(close(c(torch.randn(4, 5, generator=torch.Generator().manual_seed(s)), 2.0),
               f(torch.randn(4, 5, generator=torch.Generator().manual_seed(s)), 2.0)) for s in range(4))
report(ok)
''')

program("side_effects_print")('''
LOG = []
def g(x):
    y = x.sin()
    print("between", y.shape[0], file=sys.stderr)
    LOG.append(y.shape[0])
    return y.cos() + 1
c = framejit.compile(g, backend=BACKEND)
x = torch.randn(3, 4)
a = c(x); n = len(LOG); b = g(x)
report(close(a, b) and LOG == [3, 3])
''')

program("mha_block")('''
from torch import nn
class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Linear(d, d)
    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        x = self.norm(x + y)
        if x.mean() > 0:
            x = x * 2
        else:
            x = x - 1
        return x + self.ff(x)
torch.manual_seed(0)
m = Block().eval()
c = framejit.compile(m, backend=BACKEND)
x = torch.randn(2, 5, 16)
report(close(c(x), m(x)) and close(c(-x), m(-x)))
''')

program("dynamic_sizes")('''
def f(x):
    return (x * 2).softmax(-1).sum(0)
c = framejit.compile(f, backend=BACKEND)
xs = [torch.randn(n, 6) for n in (3, 4, 7, 9)]
report(all(close(c(x), f(x)) for x in xs))
''')

program("module_hooks")('''
from torch import nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
m[0].register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
m[2].register_forward_hook(lambda mod, args, out: out + 1)
c = framejit.compile(m, backend=BACKEND)
x = torch.randn(3, 4)
report(close(c(x), m(x)))
''')

program("resume_locals")('''
def f(x, n):
    a = x + 1
    b = [a * i for i in range(n)]
    print("mid", file=sys.stderr)
    return sum(b) + a.relu()
c = framejit.compile(f, backend=BACKEND)
x = torch.randn(5)
report(close(c(x, 3), f(x, 3)) and close(c(x, 4), f(x, 4)))
''')

program("train_mlp", backends=("eager", "onnxrt", "triton"))('''
import copy
from torch import nn
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
ref = copy.deepcopy(m)
c = framejit.compile(m, backend=BACKEND)
ok = True
for s in range(2):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(s))
    out, want = c(x), ref(x)
    out.square().sum().backward(); want.square().sum().backward()
    ok = ok and close(out, want) and all(close(a.grad, b.grad) for a, b in zip(m.parameters(), ref.parameters()))
report(ok)
''')

program("custom_function_train", backends=("eager", "onnxrt", "triton"))('''
import copy
from torch import nn
class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x.sin() * k
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * ctx.k * 3, None
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)
    def forward(self, x):
        return Scaled.apply(self.fc(x), 2.0).sum(-1)
torch.manual_seed(0)
m = Net(); ref = copy.deepcopy(m)
c = framejit.compile(m, backend=BACKEND)
ok = True
for s in range(2):
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(s))
    out, want = c(x), ref(x)
    out.sum().backward(); want.sum().backward()
    ok = ok and close(out, want) and all(close(a.grad, b.grad) for a, b in zip(m.parameters(), ref.parameters()))
report(ok)
''')

program("optimizer_steplr", backends=("eager", "onnxrt", "triton"))('''
import copy
from torch import nn
torch.manual_seed(0)
m = nn.Linear(4, 3); ref = copy.deepcopy(m)
opt = torch.optim.Adam(m.parameters(), lr=0.1, foreach=True)
ropt = torch.optim.Adam(ref.parameters(), lr=0.1, foreach=True)
sch = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
rsch = torch.optim.lr_scheduler.StepLR(ropt, 1, gamma=0.5)
step = framejit.compile(opt.step, backend=BACKEND)
for s in range(3):
    for model, o in ((m, opt), (ref, ropt)):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(s))
        model(x).square().sum().backward()
    step(); ropt.step()
    opt.zero_grad(); ropt.zero_grad(); sch.step(); rsch.step()
report(all(close(a, b, 1e-5) for a, b in zip(m.parameters(), ref.parameters())))
''')

HF = '''
import copy, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from tests.models.hf import catalog, harness
from tests.models.hf.training import train_step, training_variant
harness.silence_transformers()
def arch(name):
    from tests.models.hf.catalog_extra import EXTRA
    return EXTRA[name] if name in EXTRA else catalog.get(name)
build, make_inputs, head = training_variant(arch(NAME))
model, ref = build(), build()
c = framejit.compile(model, backend=BACKEND)
ok = True
for s in range(2):
    got, want = train_step(c, make_inputs(s), s), train_step(ref, make_inputs(s), s)
    ok = ok and close(got["loss"], want["loss"]) and sorted(got["grads"]) == sorted(want["grads"]) and all(
        close(got["grads"][k], want["grads"][k]) for k in want["grads"])
report(ok)
'''
for _name in ("bloom", "recurrent_gemma", "gpt2", "llama", "bert"):
    program(f"hf_{_name}", backends=("eager", "onnxrt"))(HF.replace("NAME", repr(_name)))

program("hf_phimoe", backends=("eager",))('''
import copy, transformers
from tests.models.hf import harness
harness.silence_transformers()
config = transformers.PhimoeConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                                   num_experts_per_tok=2, max_position_embeddings=64, attention_dropout=0.0,
                                   input_jitter_noise=0.0, router_jitter_noise=0.0)
torch.manual_seed(0)
model = transformers.PhimoeForCausalLM(config).train()
ref = copy.deepcopy(model)
c = framejit.compile(model, backend=BACKEND)
ok = True
for s in range(2):
    ids = torch.randint(1, 100, (2, 8), generator=torch.Generator().manual_seed(s))
    torch.manual_seed(s); got = c(input_ids=ids, labels=ids)
    torch.manual_seed(s); want = ref(input_ids=ids, labels=ids)
    got.loss.backward(); want.loss.backward()
    ok = ok and close(got.loss, want.loss) and all(close(a.grad, b.grad) for a, b in zip(model.parameters(), ref.parameters()))
    model.zero_grad(); ref.zero_grad()
report(ok)
''')


HF_EVAL = '''
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from tests.models.hf import catalog, harness
harness.silence_transformers()
arch = catalog.get(NAME)
model = arch.build()
c = framejit.compile(model, backend=BACKEND)
def first(out):
    return out[0] if isinstance(out, tuple) else next(iter(out.values()))
ok = True
with torch.no_grad():
    for s in range(2):
        ok = ok and close(first(c(**arch.make_inputs(s))), first(model(**arch.make_inputs(s))))
report(ok)
'''
for _name in ("mistral", "qwen2", "phi", "t5", "bart", "whisper", "vit", "clip_vision", "swin", "gpt_neox",
              "mixtral"):
    program(f"hf_eval_{_name}")(HF_EVAL.replace("NAME", repr(_name)))
    program(f"hf_train_{_name}")(HF.replace("NAME", repr(_name)))

program("nn_mha")('''
from torch import nn
torch.manual_seed(0)
m = nn.MultiheadAttention(16, 4, batch_first=True).eval()
c = framejit.compile(m, backend=BACKEND)
ok = True
for n in (5, 7):
    x = torch.randn(2, n, 16)
    mask = torch.rand(n, n) > 0.7
    ok = ok and close(c(x, x, x, attn_mask=mask), m(x, x, x, attn_mask=mask))
report(ok)
''')

program("nn_transformer_encoder")('''
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
m = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
c = framejit.compile(m, backend=BACKEND)
x = torch.randn(2, 6, 16)
pad = torch.zeros(2, 6, dtype=torch.bool); pad[1, 4:] = True
report(close(c(x, src_key_padding_mask=pad), m(x, src_key_padding_mask=pad)) and close(c(x * 2), m(x * 2)))
''')

program("nn_transformer_encoder_train")('''
import copy
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
m = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False); ref = copy.deepcopy(m)
c = framejit.compile(m, backend=BACKEND)
ok = True
for s in range(2):
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(s))
    out, want = c(x), ref(x)
    out.square().sum().backward(); want.square().sum().backward()
    ok = ok and close(out, want) and all(close(a.grad, b.grad) for a, b in zip(m.parameters(), ref.parameters()))
report(ok)
''')

program("nn_lstm")('''
import copy
from torch import nn
torch.manual_seed(0)
m = nn.LSTM(8, 12, num_layers=2, batch_first=True); ref = copy.deepcopy(m)
c = framejit.compile(m, backend=BACKEND)
ok = True
for s in range(2):
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(s))
    (out, (h, cc)), (want, (rh, rc)) = c(x), ref(x)
    (out.sum() + h.sum()).backward(); (want.sum() + rh.sum()).backward()
    ok = ok and close(out, want) and close(h, rh) and all(close(a.grad, b.grad) for a, b in zip(m.parameters(), ref.parameters()))
report(ok)
''')

program("nn_checkpoint")('''
import copy
from torch import nn
from torch.utils.checkpoint import checkpoint
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6); self.b = nn.Linear(6, 3)
    def forward(self, x):
        h = checkpoint(lambda t: self.a(t).tanh(), x, use_reentrant=False)
        return self.b(h)
torch.manual_seed(0)
m = Net(); ref = copy.deepcopy(m)
c = framejit.compile(m, backend=BACKEND)
ok = True
for s in range(2):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(s))
    out, want = c(x), ref(x)
    out.square().sum().backward(); want.square().sum().backward()
    ok = ok and close(out, want) and all(close(a.grad, b.grad) for a, b in zip(m.parameters(), ref.parameters()))
report(ok)
''')


def snapshot(folder: str) -> str:
    """A copy of framejit in `folder` (framejit's source digest is in every cache key: an edit of the tree
    between the cold and the warm process would make every entry a miss); the path to put first."""
    shutil.copytree(os.path.join(REPO, "framejit"), os.path.join(folder, "framejit"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def run(name: str, cache: str, log: bool, install: str = REPO) -> tuple[dict | None, str]:
    source = PRELUDE + f"REPO = {REPO!r}\n" + PROGRAMS[name]
    env = dict(os.environ, FRAMEJIT_CACHE_DIR=cache, FRAMEJIT_CACHE="1", TRITON_INTERPRET="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.pathsep.join([install, REPO]))
    if log:
        env["FRAMEJIT_LOGS"] = "cache"
    proc = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=900,
                          cwd=cache)  # not the repository: `-c` puts the working directory first on sys.path
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    return (json.loads(lines[-1]) if proc.returncode == 0 and lines else None), proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="programs to run (default: all)")
    parser.add_argument("--why", action="store_true", help="print why the cold process kept entries in memory")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--install", help="a folder holding the framejit package to run (default: a copy of this tree's)")
    args = parser.parse_args()
    if args.list:
        print("\n".join(PROGRAMS))
        return
    names = args.names or list(PROGRAMS)
    install = args.install or snapshot(tempfile.mkdtemp(prefix="warm_gaps_framejit_"))
    print(f"framejit copied to {install}")
    print(f"{'program':32} {'equal':>11} {'traced':>6} {'compiles':>8} {'joints':>6} {'make_fx':>7}  (warm process)")
    for name in names:
        with tempfile.TemporaryDirectory(prefix="warm_gaps_") as cache:
            cold, cold_err = run(name, cache, True, install)
            warm, warm_err = run(name, cache, True, install) if cold is not None else (None, "")
        if cold is None or warm is None:
            tail = (cold_err if cold is None else warm_err).strip().splitlines()[-3:]
            print(f"{name:32} FAILED: {' | '.join(tail)}")
            continue
        print(f"{name:32} {str(cold['equal']) + '/' + str(warm['equal']):>11} {warm['traced']:>6} "
              f"{warm['compiles']:>8} {warm['joints_traced']:>6} {warm['make_fx']:>7}", flush=True)
        if args.why:
            reasons = sorted({re.sub(r"\s+", " ", m) for m in re.findall(
                r"(?:kept in memory only|not persisted|not used)[^\n]*", cold_err + warm_err)})
            for reason in reasons:
                print("    " + reason[:200])


if __name__ == "__main__":
    main()
