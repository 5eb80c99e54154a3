"""Block factories over torch state: nn.Modules and their hooks, module attributes (`forward`, parameters,
submodules, training mode), global module hooks, monkeypatched torch functions, grad mode, default dtype,
autocast, tensor layout (storage offset, strides) and Python attributes on tensors.

Same contract as `blocks_python.py`. Global-scope mutations (see NOTE [Mutation scopes] in program.py)
keep what they need to undo in the scratch namespace `G`, and each block's teardown restores it.
"""
from __future__ import annotations

from .program import Block, Mutation

M = Mutation
G = "global"

_NET = """
class Net$(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()
    def forward(self, t):
        t = self.act(self.lin(t))
        if self.training:
            t = t * 2
        return t
net$ = Net$()
"""


def module_hooks(rng):
    """Per-module forward and pre-forward hooks registered and removed between calls."""
    return Block("module_hooks", setup=_NET + "HOOKS$ = []\n", body="out = net$(out)",
                 mutations=(M("HOOKS$.append(net$.register_forward_hook(lambda m, i, o: o * 3))"),
                            M("HOOKS$.append(net$.lin.register_forward_pre_hook(lambda m, i: (i[0] + 1,)))"),
                            M("HOOKS$.pop().remove() if HOOKS$ else None")),
                 state=())


def module_attrs(rng):
    """Module attributes changed: `m.forward = ...`, a parameter replaced, a submodule swapped, train/eval."""
    return Block("module_attrs", setup=_NET, body="out = net$(out)\naux.append(net$.training)",
                 mutations=(M("net$.forward = types.MethodType(lambda self, t: t * 5, net$)"),
                            M("del net$.forward"),
                            M("net$.lin.weight = nn.Parameter(torch.full((4, 4), 0.1))"),
                            M("net$.lin.bias = None"),
                            M("net$.act = nn.Tanh()"),
                            M("net$.eval()"), M("net$.train()"),
                            M("with torch.no_grad():\n    net$.lin.weight.mul_(2)")),
                 state=("[p.detach().clone() for p in net$.parameters()]",))


def global_module_hooks(rng):
    """Global hooks for every module (`register_module_forward_hook` and the pre-hook) added and removed."""
    return Block("global_module_hooks", setup=_NET, body="out = net$(out)", mutations=(
        M("G['h$'] = torch.nn.modules.module.register_module_forward_hook("
          "lambda m, i, o: o + 1 if isinstance(m, nn.Linear) else o)", G),
        M("G['p$'] = torch.nn.modules.module.register_module_forward_pre_hook("
          "lambda m, i: (i[0] * 2,) if isinstance(m, nn.Linear) else None)", G),
        M("[G.pop(k).remove() for k in ('h$', 'p$') if k in G]", G)),
        teardown="[G.pop(k).remove() for k in ('h$', 'p$') if k in G]")


def monkeypatch_torch(rng):
    """A torch function replaced by the user between calls (`F.gelu = ...`), and restored."""
    return Block("monkeypatch_torch", body="out = F.gelu(out)\nout = torch.nn.functional.silu(out)", mutations=(
        M("G.setdefault('gelu', F.gelu); F.gelu = lambda t, approximate='none': t * 0 + 1", G),
        M("G.setdefault('silu', F.silu); F.silu = torch.tanh", G),
        M("F.gelu = G.get('gelu', F.gelu); F.silu = G.get('silu', F.silu)", G)),
        teardown="F.gelu = G.get('gelu', F.gelu); F.silu = G.get('silu', F.silu)")


def grad_mode(rng):
    """Grad mode switched off/on between calls; f branches on it and uses a weight that requires grad."""
    return Block("grad_mode", setup="W$ = torch.ones(4, requires_grad=True)\n", body="""
        out = out * W$
        if torch.is_grad_enabled():
            out = out + 1
        aux.append(out.requires_grad)
        """, mutations=(M("torch.set_grad_enabled(False)", G), M("torch.set_grad_enabled(True)", G)),
        teardown="torch.set_grad_enabled(True)")


def default_dtype(rng):
    """The default dtype changed between calls; f creates tensors with it."""
    return Block("default_dtype", body="out = out + torch.ones(4)\naux.append(str(torch.ones(1).dtype))",
                 mutations=(M("torch.set_default_dtype(torch.float64)", G),
                            M("torch.set_default_dtype(torch.float32)", G)),
                 teardown="torch.set_default_dtype(torch.float32)")


def autocast_state(rng):
    """CPU autocast switched on between calls (globally, not by a with-block inside f)."""
    return Block("autocast", setup="W$ = torch.randn(4, 4)\n",
                 body="out = torch.mm(out, W$)\naux.append(str(out.dtype))",
                 mutations=(M("torch.set_autocast_enabled('cpu', True)", G),
                            M("torch.set_autocast_enabled('cpu', False)", G)),
                 teardown="torch.set_autocast_enabled('cpu', False)")


def tensor_layout(rng):
    """An argument whose storage offset and strides vary per call (a slice of a bigger buffer, a transpose)."""
    use = rng.choice(["out = out + v$.as_strided((2, 4), (4, 1))",
                      "out = out + v$.reshape(2, 4) * v$.stride(0)",
                      "out = out + v$.view(2, 4)",
                      "out = out + v$.contiguous().view(2, 4) + v$.storage_offset()"])
    return Block("tensor_layout", params=("v$",),
                 args=("[torch.arange(16.)[0:8].view(2, 4), torch.arange(16.)[3:11].view(2, 4),"
                       " torch.arange(8.).view(4, 2).t(), torch.arange(16.)[5:13].view(2, 4)][i % 4]",),
                 body=use)


def tensor_attr(rng):
    """A Python attribute set on a tensor inside f and read back (by f and by the caller)."""
    return Block("tensor_attr", params=("t$",), args=("torch.ones(4)",),
                 body="t$.tag = 'seen'\naux.append(getattr(t$, 'tag', None))\nout = out + t$",
                 state=())


def compiled_module(rng):
    """The compiled object is an nn.Module whose forward calls f (the runner compiles `model` when the
    program defines it); its attributes, hooks and forward change on the original module between calls."""
    return Block("compiled_module", setup="""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 1.0
            def forward(self, x, *rest):
                out, aux = f(x, *rest)
                return out * self.scale, aux
        model = Model()
        MODEL_HOOKS = []
        """, mutations=(M("model.scale = 2.0"),
                        M("MODEL_HOOKS.append(model.register_forward_hook(lambda m, i, o: (o[0] + 1, o[1])))"),
                        M("MODEL_HOOKS.append(model.register_forward_pre_hook(lambda m, a: (a[0] * 2,) + a[1:]))"),
                        M("MODEL_HOOKS.pop().remove() if MODEL_HOOKS else None"),
                        M("model.forward = types.MethodType(lambda self, x, *rest: (x * 0 - 1, ['patched']), model)"),
                        M("del model.forward"), M("model.eval()")),
        state=("model.training",))


def module_absent_attr(rng):
    """A module attribute that is absent at first (hasattr / getattr default), then registered as a buffer,
    a parameter or a submodule (found through nn.Module.__getattr__), and deleted again."""
    return Block("module_absent_attr", setup=_NET, body="""
        if hasattr(net$, 'extra'):
            out = out + net$.extra
        if getattr(net$, 'gate', None) is not None:
            out = net$.gate(out)
        out = net$(out)
        """, mutations=(M("net$.register_buffer('extra', torch.ones(4))"),
                        M("net$.extra = nn.Parameter(torch.full((4,), 2.0))"),
                        M("net$.gate = nn.Sigmoid()"), M("del net$.extra"), M("del net$.gate")),
        state=())


def torch_queries(rng):
    """Answers of torch's global-state queries used as Python values (threads, autocast dtype, warn-always,
    deterministic algorithms), changed between calls."""
    return Block("torch_queries", body="""
        aux.append(torch.get_num_threads())
        aux.append(str(torch.get_autocast_dtype('cpu')))
        aux.append(torch.is_warn_always_enabled())
        if torch.are_deterministic_algorithms_enabled():
            out = out * 2
        """, mutations=(M("G.setdefault('threads', torch.get_num_threads()); "
                          "torch.set_num_threads(2 if torch.get_num_threads() == 1 else 1)", G),
                        M("torch.set_autocast_dtype('cpu', torch.float16)", G),
                        M("torch.set_warn_always(True)", G), M("torch.use_deterministic_algorithms(True)", G)),
        teardown="torch.set_num_threads(G.get('threads', torch.get_num_threads())); "
                 "torch.set_autocast_dtype('cpu', torch.bfloat16); torch.set_warn_always(False); "
                 "torch.use_deterministic_algorithms(False)")


FACTORIES = [torch_queries, compiled_module, module_absent_attr, module_hooks, module_attrs, global_module_hooks, monkeypatch_torch, grad_mode, default_dtype,
             autocast_state, tensor_layout, tensor_attr]
