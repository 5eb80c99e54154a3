"""More block factories: Python scalar types that compare equal (1, True, 1.0), dict order, global tensors
changed in place or replaced, side effects before an exception, arguments whose shape, dtype or
requires_grad change per call, a training step (backward and an SGD update), random ops under a fixed
seed, descriptors (properties, `__slots__`, classmethods), dataclass configs, `functools.partial`,
BatchNorm running statistics, ModuleList growth, frozen parameters and `load_state_dict`.

Same contract as `blocks_python.py`.
"""
from __future__ import annotations

from .program import Block, Mutation

M = Mutation


def scalar_types(rng):
    """A global that changes between values that compare equal but differ in type: 1, True, 1.0."""
    return Block("scalar_types", setup="MODE$ = 1\n", body="""
        out = out * MODE$
        aux.append(MODE$)
        aux.append(type(MODE$).__name__)
        """, mutations=(M("MODE$ = True"), M("MODE$ = 1.0"), M("MODE$ = 1")), state=())


def dict_order(rng):
    """A dict config iterated in order; replaced by an equal dict with another order."""
    return Block("dict_order", setup="STAGES$ = {'a': 2.0, 'b': 3.0}\n", body="""
        for name, v in STAGES$.items():
            out = out * v + len(name)
            aux.append(name)
        """, mutations=(M("STAGES$ = {'b': 3.0, 'a': 2.0}"), M("STAGES$ = dict(sorted(STAGES$.items()))")),
        state=())


def global_tensor(rng):
    """A global tensor changed in place, replaced, given another dtype or requires_grad between calls."""
    return Block("global_tensor", setup="BIAS$ = torch.zeros(4)\n", body="out = out + BIAS$\naux.append(BIAS$.dtype)",
                 mutations=(M("BIAS$.add_(1)"), M("BIAS$ = torch.full((4,), 2.0)"), M("BIAS$ = BIAS$.double()"),
                            M("BIAS$ = torch.zeros(4).requires_grad_()"), M("BIAS$ = BIAS$[None]")),
                 state=())


def effect_then_raise(rng):
    """A side effect (append, attribute store) made before f raises; the caller catches nothing."""
    return Block("effect_then_raise", setup="""
        class Run$:
            mode = 'ok'
            steps = 0
        run$ = Run$()
        TRACE$ = []
        """, body="""
        TRACE$.append(run$.mode)
        run$.steps = len(TRACE$)
        if run$.mode == 'bad':
            raise ValueError('bad mode')
        out = out + run$.steps
        """, mutations=(M("run$.mode = 'bad'"), M("run$.mode = 'ok'"), M("TRACE$.clear()")),
        state=("list(TRACE$)", "run$.steps"))


def shape_arg(rng):
    """An argument whose first dimension changes per call; f reads its shape, len and numel."""
    return Block("shape_arg", params=("s$",), args=("torch.ones(i % 3 + 1, 4) * (i + 1)",), body="""
        out = out + s$.sum(0)
        aux.append(len(s$))
        if s$.shape[0] > 1:
            out = out + s$.numel()
        """)


def dtype_arg(rng):
    """An argument whose dtype changes per call (float32, float64, int64, bool)."""
    return Block("dtype_arg", params=("d$",),
                 args=("torch.ones(4, dtype=[torch.float32, torch.float64, torch.int64, torch.bool][i % 4])",),
                 body="r = d$ * 2\naux.append(r.dtype)\nout = out + r")


def grad_arg(rng):
    """An argument that requires grad on some calls; f returns a result depending on it."""
    return Block("grad_arg", params=("q$",), args=("torch.ones(4).requires_grad_(i % 2 == 1)",),
                 body="out = out * q$\naux.append(out.requires_grad)")


def training_step(rng):
    """A training step: loss, backward (a graph break), an SGD update under no_grad, grads zeroed."""
    return Block("training_step", setup="WT$ = torch.linspace(-1, 1, 4).requires_grad_()\nLR$ = 0.1\n", body="""
        loss = (out.detach() * WT$).sum()
        loss.backward()
        with torch.no_grad():
            WT$ -= LR$ * WT$.grad
        aux.append(WT$.grad.clone())
        WT$.grad = None
        out = out + WT$.detach()
        """, mutations=(M("LR$ = 0.5"), M("WT$.requires_grad_(False)"), M("WT$.requires_grad_(True)")),
        state=("WT$.detach().clone()",), tiny=False)


def random_ops(rng):
    """Random ops under a fixed seed (the harness seeds both sides before each call)."""
    op = rng.choice(["out = F.dropout(out, 0.5, training=True)", "out = out + torch.rand(4)",
                     "out = out + torch.randn_like(out)", "out = out * torch.bernoulli(torch.full((4,), 0.5))"])
    return Block("random_ops", body=op)


def descriptors(rng):
    """A property reading changing state, a classmethod replaced, an object with __slots__."""
    return Block("descriptors", setup="""
        class Opt$:
            __slots__ = ('base', 'extra')
            factor = 2.0
            def __init__(self):
                self.base = 1.0
            @property
            def scale(self):
                return self.base * type(self).factor
            @classmethod
            def offset(cls):
                return cls.factor - 1
        opt$ = Opt$()
        """, body="out = out * opt$.scale + opt$.offset()\nif hasattr(opt$, 'extra'):\n    out = out + opt$.extra",
        mutations=(M("opt$.base = 3.0"), M("Opt$.factor = -1.0"), M("opt$.extra = 0.5"),
                   M("Opt$.scale = property(lambda self: 10.0)"), M("del opt$.extra"),
                   M("Opt$.offset = classmethod(lambda cls: 100.0)")), state=())


def dataclass_config(rng):
    """A dataclass config replaced with dataclasses.replace, and a frozen one."""
    return Block("dataclass_config", setup="""
        import dataclasses
        @dataclasses.dataclass
        class HParams$:
            dim: int = 4
            scale: float = 1.0
            use_bias: bool = False
        HP$ = HParams$()
        """, body="""
        out = out * HP$.scale
        if HP$.use_bias:
            out = out + 1
        aux.append(dataclasses.asdict(HP$))
        """, mutations=(M("HP$ = dataclasses.replace(HP$, scale=2.0)"), M("HP$.use_bias = True"),
                        M("HP$.scale = float('nan')")), state=())


def partial_fn(rng):
    """A functools.partial global with bound keywords, replaced between calls."""
    return Block("partial_fn", setup="""
        import functools
        def affine$(t, w=1.0, b=0.0):
            return t * w + b
        ACT$ = functools.partial(affine$, w=2.0)
        """, body="out = ACT$(out)",
        mutations=(M("ACT$ = functools.partial(affine$, w=3.0, b=1.0)"), M("ACT$ = functools.partial(affine$, b=-1.0)")),
        state=())


def batchnorm_stats(rng):
    """BatchNorm in training mode updates running stats (buffers mutated in place); eval uses them."""
    return Block("batchnorm_stats", setup="BN$ = nn.BatchNorm1d(4)\n", body="out = BN$(out)",
                 mutations=(M("BN$.eval()"), M("BN$.train()"), M("BN$.momentum = 0.5"), M("BN$.reset_running_stats()"),
                            M("BN$.track_running_stats = False")),
                 state=("BN$.running_mean.clone() if BN$.running_mean is not None else None",
                        "int(BN$.num_batches_tracked) if BN$.num_batches_tracked is not None else None"))


def module_list(rng):
    """A ModuleList iterated in forward, appended to and popped between calls; a buffer replaced."""
    return Block("module_list", setup="""
        class Stack$(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Linear(4, 4)])
                self.register_buffer('shift', torch.zeros(4))
            def forward(self, t):
                for layer in self.layers:
                    t = layer(t) + self.shift
                return t
        stack$ = Stack$()
        """, body="out = stack$(out)\naux.append(len(stack$.layers))",
        mutations=(M("stack$.layers.append(nn.Linear(4, 4))"), M("del stack$.layers[0]"),
                   M("stack$.shift = torch.ones(4)"), M("stack$.shift.fill_(-1)")),
        state=("stack$.shift.clone()",))


def frozen_params(rng):
    """Parameters frozen/unfrozen (`requires_grad_`) and weights loaded with load_state_dict."""
    return Block("frozen_params", setup="LIN$ = nn.Linear(4, 4)\nSD$ = {k: v * 0 + 0.5 for k, v in LIN$.state_dict().items()}\n",
                 body="out = LIN$(out)\naux.append(out.requires_grad)",
                 mutations=(M("LIN$.requires_grad_(False)"), M("LIN$.load_state_dict(SD$)"),
                            M("LIN$.requires_grad_(True)")),
                 state=("LIN$.weight.detach().clone()",))


FACTORIES = [scalar_types, dict_order, global_tensor, effect_then_raise, shape_arg, dtype_arg, grad_arg,
             training_step, random_ops, descriptors, dataclass_config, partial_fn, batchnorm_stats, module_list,
             frozen_params]
