"""Sweep of transformers architectures beyond tests/models/hf's catalogs (issue 11): one model per process.

Usage (from the repository root; one process per model, so a crash or hang costs one row):
    .venv/bin/python tools/hf_sweep.py MODULE [MODE] [config_key=python_expr ...]
MODULE is a `transformers.models.<MODULE>` package name (deepseek_v2, modernbert, ...): its shortest
`*Config` class is built with the tiny settings of TINY (only the keys the config knows: 2 layers, hidden
32, 2 heads, vocab 100, 4 experts, ...; overrides on the command line, `text_config.KEY=...` for a key of a
sub-config), and so is each sub-config of a composite config (text_config, vision_config: VLMs, Llama4),
random weights, offline, and the
model is AutoModelForCausalLM, else AutoModelForSeq2SeqLM, else AutoModel of that config.
Inputs: input_ids (+ decoder_input_ids for seq2seq; + pixel_values too with SWEEP_PIX=1: CLIP-style dual
encoders), else pixel_values, else input_features (batch, 4*seq, num_mel_bins|feature_size), else input_values.
SWEEP_SEED=1 seeds torch before every call (models that sample in eval: ViLT's patch selection).
MODE: fwd (2 calls at batch 2 / seq 8, then batch 1 / seq 12), pad (left padding: attention_mask zeros,
batch 3 / seq 12 for the third call), flags (output_attentions, output_hidden_states, return_dict=False),
cache (use_cache=True, then one more token with the returned past_key_values, twice per call), gen
(greedy generate, max_new_tokens=4; stock compiles model.forward, as HF users do), train (the model in
train mode with randomness off (tests/models/hf/training.py), labels = input_ids / decoder_input_ids,
`loss.backward()` outside the compiled call; the loss and every gradient compared with eager's).
Each mode runs eager, stock torch.compile with a counting eager backend (the reference; torch._dynamo
reset around it; breaks from torch._dynamo's counters) and framejit with a counting backend and the
graph_breaks, recompiles and eager_fallback logs, compares every output with eager's
(tests/models/hf/harness.assert_outputs_close) and prints one `ROW` line: graphs after each call,
breaks, frames run eagerly, then the first 40 log records. With SWEEP_ONNXRT=1 a fourth run compiles with
framejit on the onnxrt backend (outputs within 1e-4 of eager's) and adds its graphs, ORT/eager node counts and
the distinct reasons nodes stayed in torch (`ORT-EAGER` lines) to the row.
"""
import sys, os, logging, time, importlib
os.environ["HF_HUB_OFFLINE"] = "1"; os.environ["TRANSFORMERS_OFFLINE"] = "1"
# SWEEP_ROOT: the checkout to import framejit and tests from (a worktree), else this file's repository
sys.path.insert(0, os.environ.get("SWEEP_ROOT") or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch
import framejit
from tests.helpers import CountingBackend
from tests.models.hf import harness
harness.silence_transformers()
import transformers
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            intermediate_size=64, max_position_embeddings=64, head_dim=16, d_model=32, encoder_layers=2,
            decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, num_layers=2, num_heads=2, d_ff=64, d_kv=16, n_embd=32, n_layer=2, n_head=2,
            n_positions=64, num_experts=4, num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            n_routed_experts=4, n_shared_experts=1, shared_expert_intermediate_size=32, first_k_dense_replace=1,
            kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
            image_size=32, patch_size=8, num_channels=3, embedding_size=32, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, decoder_start_token_id=0, sliding_window=None, layer_types=None, n_group=1,
            topk_group=1, moe_num_experts=4, moe_k=2, moe_topk=2, num_shared_experts=1,
            linear_num_value_heads=2, linear_num_key_heads=1, linear_key_head_dim=16, linear_value_head_dim=16,
            global_attn_every_n_layers=1, hidden_sizes=[16, 32], depths=[1, 1], mamba_d_state=8, mamba_n_heads=2,
            mamba_d_head=16, mamba_n_groups=1, mamba_expand=2, ssm_state_size=8)
SEQ, ALT = 8, 12
name = sys.argv[1]; mode = sys.argv[2] if len(sys.argv) > 2 else "fwd"
override = dict(a.split("=", 1) for a in sys.argv[3:])

def config_class(mod):
    m = importlib.import_module(f"transformers.models.{mod}")
    cands = [getattr(m, a) for a in dir(m) if a.endswith("Config") and isinstance(getattr(m, a), type)
             and issubclass(getattr(m, a), transformers.PretrainedConfig)]
    cands = [c for c in cands if c.__module__.startswith(f"transformers.models.{mod}.")]
    cands.sort(key=lambda c: (len(c.__name__)))
    return cands[0]

def tiny_kwargs(cls, depth=0):
    default = cls()
    kw = {}
    for k, v in TINY.items():
        if hasattr(default, k) or k in cls.__init__.__code__.co_varnames:
            if k == "layer_types" or k == "sliding_window":
                continue
            if isinstance(getattr(cls, k, None), property) and getattr(cls, k).fset is None:
                continue  # a derived value (xLSTMConfig.v_head_dim): the config computes it
            kw[k] = v
    # A composite config (text_config, vision_config, ...: VLMs, Llama4, Blt) gets tiny sub-configs too;
    # with only the top level made tiny the sub-models keep their full size (out of memory, or minutes a call).
    for sub, sub_cls in (getattr(cls, "sub_configs", None) or {}).items():
        if depth < 2 and isinstance(sub_cls, type) and issubclass(sub_cls, transformers.PretrainedConfig) \
                and sub_cls is not cls:
            kw[sub] = tiny_kwargs(sub_cls, depth + 1)
    return kw

cls = config_class(name)
kw = tiny_kwargs(cls)
for k, v in override.items():  # "text_config.rope_theta=1e4" sets a key of a sub-config
    *path, last = k.split(".")
    d = kw
    for p in path:
        d = d.setdefault(p, {})
    d[last] = eval(v)
config = cls(**kw)
if getattr(config, "layer_types", None) is not None and len(config.layer_types) != config.num_hidden_layers:
    config.layer_types = config.layer_types[:config.num_hidden_layers]
config.use_cache = getattr(config, "use_cache", False)
if mode == "train":
    from tests.models.hf.training import _zero_randomness, train_step, assert_steps_close
    _zero_randomness(config)
torch.manual_seed(1234)
is_dec = False
try:
    model = AutoModelForCausalLM.from_config(config); is_dec = True
except Exception:
    try:
        model = AutoModelForSeq2SeqLM.from_config(config); is_dec = True
    except Exception:
        model = AutoModel.from_config(config)
model.train() if mode == "train" else model.eval()
seq2seq = model.config.is_encoder_decoder

def inputs(seed, batch=2, seq=SEQ, pad=False):
    g = torch.Generator().manual_seed(seed)
    import inspect
    fwd_params = list(inspect.signature(model.forward).parameters)
    if "input_ids" in fwd_params:
        ids = torch.randint(3, 100, (batch, seq), generator=g)
        kw = {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}
        if pad:
            kw["attention_mask"][0, :3] = 0  # left padding on the first row
        if seq2seq:
            kw["decoder_input_ids"] = torch.randint(3, 100, (batch, seq // 2 + 1), generator=g)
        if os.environ.get("SWEEP_PIX") and "pixel_values" in fwd_params:
            size = getattr(getattr(config, "vision_config", config), "image_size", 32)
            size = size if isinstance(size, int) else size[0]
            kw["pixel_values"] = torch.randn(batch, 3, size, size, generator=g)
        return kw
    if "pixel_values" in fwd_params:
        size = getattr(config, "image_size", 32)
        size = size if isinstance(size, int) else size[0]
        nc = getattr(config, "num_channels", 3)
        return {"pixel_values": torch.randn(batch, nc, size, size, generator=g)}
    if "input_features" in fwd_params:
        nf = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None) or 80
        return {"input_features": torch.randn(batch, seq * 4, nf, generator=g)}
    if "input_values" in fwd_params:
        return {"input_values": torch.randn(batch, seq * 400, generator=g)}
    raise SystemExit(f"{name}: no input maker for {fwd_params[:8]}")

class Breaks(logging.Handler):
    def __init__(s): super().__init__(logging.DEBUG); s.n = 0; s.msgs = []
    def emit(s, r):
        if r.name.endswith("graph_breaks"):
            s.n += 1; s.msgs.append(r.getMessage().splitlines()[0:3])
        elif r.name.endswith("recompiles"):
            s.msgs.append(["RC " + r.getMessage()[:300]])
        elif r.name.endswith("eager_fallback"):
            s.msgs.append(["EAGER " + r.getMessage()[:300]])

def run(f, kw):
    if mode == "train":
        return train_step(f, kw, 0)
    if os.environ.get("SWEEP_SEED"):  # models that draw random numbers in eval (ViLT's patch sampling)
        torch.manual_seed(0)
    with torch.no_grad():
        return f(**kw)

if mode == "fwd":
    ins = [inputs(0), inputs(1), inputs(2, 1, ALT)]
elif mode == "pad":
    ins = [inputs(0, pad=True), inputs(1, pad=True), inputs(2, 3, ALT, pad=True)]
elif mode.startswith("flags"):
    extra = dict(output_attentions=True, output_hidden_states=True, return_dict=False)
    ins = [dict(inputs(0), **extra), dict(inputs(1), **extra), dict(inputs(2, 1, ALT), **extra)]
elif mode == "train":
    ins = [inputs(0), inputs(1), inputs(2, 1, ALT)]
    for kw in ins:
        if is_dec:
            kw["labels"] = (kw.pop("decoder_input_ids") if seq2seq else kw["input_ids"]).clone()
elif mode == "gen":
    ins = [dict(inputs(s, 2, 6), max_new_tokens=4, do_sample=False) for s in (0, 1)] + \
          [dict(inputs(2, 1, 9), max_new_tokens=4, do_sample=False)]

if mode == "cache":  # step 1: prompt with use_cache; step 2: one token with the returned cache
    def call(f, seed, seq):
        kw = inputs(seed, 2, seq); kw["use_cache"] = True
        out1 = run(f, kw)
        nxt = torch.randint(3, 100, (2, 1), generator=torch.Generator().manual_seed(seed + 7))
        kw2 = {"input_ids": nxt, "past_key_values": out1.past_key_values, "use_cache": True,
               "attention_mask": torch.ones(2, seq + 1, dtype=torch.long)}
        out2 = run(f, kw2)
        return (out1.logits, out2.logits)
    runs = [(0, 6), (1, 6), (2, 9)]
    want = [call(model, s, q) for s, q in runs]
    def calls(f, backend):
        counts = []
        for (s, q), w in zip(runs, want):
            got = call(f, s, q); harness.assert_outputs_close(got, w); counts.append(backend.graph_count)
        return counts
else:
    target = (lambda m: m.generate) if mode == "gen" else (lambda m: m)
    want = [run(target(model), kw) for kw in ins]
    def calls(f, backend):
        counts = []
        for kw, w in zip(ins, want):
            got = run(f, kw)
            (assert_steps_close if mode == "train" else harness.assert_outputs_close)(got, w)
            counts.append(backend.graph_count)
        return counts

import torch._dynamo
from torch._dynamo.utils import counters
torch._dynamo.reset(); counters.clear()
sb = CountingBackend()
try:
    if mode == "gen":
        model.forward = torch.compile(model.forward, backend=sb); sf = model.generate
    else:
        sf = torch.compile(model, backend=sb)
    t = time.time(); sc = calls(sf, sb); st = time.time() - t
    sbreaks = sum(counters["graph_break"].values())
except Exception as e:
    sc = f"ERR {type(e).__name__}: {str(e)[:200]}"; sbreaks = "-"; st = 0
finally:
    if mode == "gen":
        del model.forward
torch._dynamo.reset()
fb = CountingBackend()
h = Breaks(); lg = logging.getLogger("framejit"); lg.addHandler(h)
framejit.set_logs("graph_breaks,recompiles,eager_fallback")
e0 = harness.eager_frame_count()
try:
    cm = framejit.compile(model, backend=fb)
    ff = cm.generate if mode == "gen" else cm
    t = time.time(); fc = calls(ff, fb); ft = time.time() - t
except Exception as e:
    import traceback; traceback.print_exc()
    fc = f"ERR {type(e).__name__}: {str(e)[:300]}"; ft = 0
framejit.set_logs("")
ef = harness.eager_frame_count() - e0
oc = "-"
if os.environ.get("SWEEP_ONNXRT"):  # framejit on the onnxrt backend too (looser tolerance: ORT kernels)
    from tests.helpers import RecordingBackend
    framejit.reset(); ob = RecordingBackend("onnxrt"); e1 = harness.eager_frame_count()
    _close = harness.assert_outputs_close
    harness.assert_outputs_close = lambda a, e, path="out", atol=1e-4, rtol=1e-4: \
        _close(a, e, path, atol=max(atol, 1e-4), rtol=max(rtol, 1e-4))
    try:
        om = framejit.compile(model, backend=ob)
        oc = calls(om.generate if mode == "gen" else om, ob)
        rows = [r for c in ob.compiled for r in (c.summary() if hasattr(c, "summary") else [])]
        oc = f"{oc} ort_nodes={sum(r.get('ort_nodes', 0) for r in rows)} " \
             f"eager_nodes={sum(len(r['eager_nodes']) for r in rows)} " \
             f"eager_graphs={sum(r['eager_graph'] for r in rows)} eager={harness.eager_frame_count() - e1}"
        why = sorted({str(v)[:90] for r in rows for v in r["eager_nodes"].values()})
        oc += "".join(f"\n    ORT-EAGER {w}" for w in why[:8])
    except Exception as e:
        import traceback; traceback.print_exc()
        oc = f"ERR {type(e).__name__}: {str(e)[:300]}"
    finally:
        harness.assert_outputs_close = _close
print(f"ROW {name}.{mode} {type(model).__name__} stock graphs/call={sc} breaks={sbreaks} | framejit graphs/call={fc} "
      f"breaks={h.n} eager={ef} | {st:.0f}s/{ft:.0f}s" + (f" | onnxrt graphs/call={oc}" if oc != "-" else ""))
for m in h.msgs[:40]:
    print("   ", " | ".join(x.strip() for x in m))
