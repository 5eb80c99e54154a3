"""nn.Module capture: containers, parameters and buffers, plain attributes and configs, training flag,
hooks, module methods, and guarding of module state. Each model runs eagerly and compiled with
fullgraph=True on two fresh inputs; the graph count is asserted."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential


@dataclasses.dataclass
class BlockConfig:
    width: int = 6
    depth: int = 3
    dropout: float = 0.0
    use_bias: bool = True
    activation: str = "gelu"


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))

    def forward(self, x):
        return self.body(x)


class SeqSlice(Seq):
    def forward(self, x):
        return self.body[:2](x), self.body[-1](x), len(self.body)


class SeqIterate(Seq):
    def forward(self, x):
        for layer in self.body:
            x = layer(x)
        return x


class ListLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        return x


class ListIndex(ListLoop):
    def forward(self, x):
        return self.layers[0](x) + self.layers[-1](x) + len(self.layers)


class ListSliceZip(ListLoop):
    def forward(self, x):
        outs = [layer(x) for layer in self.layers[1:]]
        for a, layer in zip(outs, self.layers):
            x = x + layer(a)
        return x


class DictModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(6, 2), "b": nn.Linear(6, 3)})

    def forward(self, x):
        out = {name: head(x) for name, head in self.heads.items()}
        out["a2"] = self.heads["a"](x) * 2
        return out, "a" in self.heads, list(self.heads.keys()), len(self.heads)


class DictValues(DictModules):
    def forward(self, x):
        return [h(x).sum() for h in self.heads.values()]


class Buffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.randn(6))
        self.register_buffer("std", torch.rand(6) + 0.5)
        self.register_buffer("unused", None)

    def forward(self, x):
        return (x - self.mean) / self.std, self.unused is None


class ParamDirect(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 6))
        self.bias = nn.Parameter(torch.randn(6))
        self.scale = 0.5

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) * self.scale


class Configured(nn.Module):
    def __init__(self, config: BlockConfig):
        super().__init__()
        self.config = config
        self.proj = nn.Linear(config.width, config.width, bias=config.use_bias)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x):
        for _ in range(self.config.depth):
            x = self.proj(x)
            x = F.gelu(x) if self.config.activation == "gelu" else F.relu(x)
            x = self.drop(x)
        return x


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            return y * 0.5
        return y


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(6)
        self.bn = nn.BatchNorm1d(6)
        self.gn = nn.GroupNorm(2, 6)

    def forward(self, x):
        return self.ln(x), self.bn(x), self.gn(x)


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()

    def forward(self, x):
        return self.flat(self.pool(F.relu(self.bn(self.conv(x)))))


class Embeds(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.pos = nn.Parameter(torch.randn(1, 4, 6))

    def forward(self, idx):
        return self.emb(idx) + self.pos[:, : idx.shape[1]]


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(6, 2, batch_first=True)

    def forward(self, x):
        out, weights = self.mha(x, x, x, need_weights=True)
        return out, weights


class Recurrent(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind](6, 5, num_layers=2, batch_first=True)

    def forward(self, x):
        out, _ = self.rnn(x)
        return out


class Cells(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(6, 4)

    def forward(self, x):
        h = c = torch.zeros(x.shape[0], 4)
        outs = []
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
            outs.append(h)
        return torch.stack(outs, 1)


class MethodsAndProperties(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def project(self, x):
        return self.lin(x).to(self.dtype)

    def forward(self, x):
        return self.project(x) + self.helper(x)

    @staticmethod
    def helper(x):
        return x * 2


class ParamsIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 2)

    def forward(self, x):
        total = sum(p.sum() for p in self.parameters())
        names = [n for n, _ in self.named_parameters()]
        kids = len(list(self.children()))
        return self.b(self.a(x)) + total, names, kids, len(list(self.modules()))


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = ListLoop()
        self.out = nn.Linear(6, 3)

    def forward(self, x):
        return self.out(self.inner(x))


class CustomSuper(nn.Linear):
    def forward(self, x):
        return super().forward(x).tanh()


class Identity(nn.Module):
    def forward(self, x, *rest, scale=1.0, **kw):
        return x * scale, rest, kw


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.Softmax(-1),
                                   nn.LeakyReLU(0.1), nn.ELU(), nn.Hardswish(), nn.Mish()])

    def forward(self, x):
        return [a(x) for a in self.acts]


class Losses(nn.Module):
    def forward(self, x, target):
        return F.mse_loss(x, target), F.l1_loss(x, target), F.smooth_l1_loss(x, target), \
            F.binary_cross_entropy_with_logits(x, target.sigmoid())


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


def x6(seed):
    return (torch.randn(3, 6),)


MODELS = [
    (Seq, x6), (SeqSlice, x6), (SeqIterate, x6), (ListLoop, x6), (ListIndex, x6), (ListSliceZip, x6),
    (DictModules, x6), (DictValues, x6), (Buffers, x6), (ParamDirect, x6),
    (lambda: Configured(BlockConfig()), x6), (lambda: Configured(BlockConfig(activation="relu", depth=2)), x6),
    (lambda: TrainingFlag().eval(), x6), (lambda: Norms().eval(), x6),
    (lambda: Convs().eval(), lambda s: (torch.randn(2, 2, 5, 5),)),
    (Embeds, lambda s: (torch.randint(0, 10, (2, 3)),)),
    (lambda: Attention().eval(), lambda s: (torch.randn(2, 4, 6),)),
    (lambda: Recurrent("lstm"), lambda s: (torch.randn(2, 4, 6),)),
    (lambda: Recurrent("gru"), lambda s: (torch.randn(2, 4, 6),)),
    (lambda: Recurrent("rnn"), lambda s: (torch.randn(2, 4, 6),)),
    (Cells, lambda s: (torch.randn(2, 3, 6),)), (MethodsAndProperties, x6), (ParamsIteration, x6),
    (Nested, x6), (lambda: CustomSuper(6, 6), x6), (Activations, x6),
    (Losses, lambda s: (torch.randn(4, 3), torch.randn(4, 3))),
    (lambda: Transformer().eval(), lambda s: (torch.randn(2, 5, 8),)),
]


def _name(factory):
    return getattr(factory, "__name__", "m") if factory.__name__ != "<lambda>" else "lambda"


@pytest.mark.parametrize("index", range(len(MODELS)))
def test_module_full_graph(index):
    factory, make_args = MODELS[index]
    torch.manual_seed(index)
    model = factory()
    backend = run_differential(model, make_args, compiled=framejit.compile(model, backend=(b := CountingBackend()),
                                                                           fullgraph=True), backend=b)
    assert backend.graph_count == 1


def test_module_kwargs_and_varargs():
    model = Identity()
    backend = run_differential(model, lambda s: (torch.randn(3), 1, "a"), kwargs_fn=lambda s: {"scale": 2.0, "z": 3})
    assert backend.graph_count == 1


def test_training_flag_toggle_recompiles():
    model = TrainingFlag()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(2, 6)
    assert_same(compiled(x), model(x))
    model.eval()
    assert_same(compiled(x), model(x))
    model.train()
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 2


def test_config_change_recompiles():
    config = BlockConfig(depth=1)
    model = Configured(config)
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(2, 6)
    assert_same(compiled(x), model(x))
    config.depth = 2
    assert_same(compiled(x), model(x))
    config.activation = "relu"
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 3


def test_buffer_update_between_calls_is_seen():
    model = Buffers()
    compiled = framejit.compile(model)
    x = torch.randn(2, 6)
    assert_same(compiled(x), model(x))
    model.mean.add_(1.0)
    assert_same(compiled(x), model(x))
    model.mean = torch.zeros(6)
    assert_same(compiled(x), model(x))


def test_parameter_added_recompiles_in_parameters_iteration():
    model = ParamsIteration()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(2, 6)
    assert_same(compiled(x), model(x))
    model.extra = nn.Parameter(torch.ones(2))
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 2


def test_module_list_append_recompiles():
    model = ListLoop()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    x = torch.randn(2, 6)
    assert_same(compiled(x), model(x))
    model.layers.append(nn.Linear(6, 6))
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 2


def test_train_mode_dropout_and_batchnorm_state():
    model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.3), nn.BatchNorm1d(6))
    compiled = framejit.compile(model)
    x = torch.randn(4, 6)
    torch.manual_seed(3)
    out = compiled(x)
    torch.manual_seed(3)
    reference = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.3), nn.BatchNorm1d(6))
    reference.load_state_dict(model.state_dict())  # same state (already updated once by compiled)
    assert out.shape == (4, 6)
    # BatchNorm updates running stats in training mode: a side effect the graph cannot hold yet, so
    # the frame runs eagerly and the statistics still move exactly as in eager.
    before = model[2].running_mean.clone()
    compiled(x)
    assert not torch.equal(before, model[2].running_mean)


def test_gradients_flow_through_compiled_module():
    model = Configured(BlockConfig())
    compiled = framejit.compile(model)
    x = torch.randn(3, 6, requires_grad=True)
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    x_grad = x.grad.clone()
    model.zero_grad()
    x.grad = None
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    torch.testing.assert_close(x_grad, x.grad)


class CustomCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def __call__(self, x, scale=2.0):
        return super().__call__(x) * scale

    def forward(self, x):
        return self.lin(x)


class UsesCustomCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = CustomCall()

    def forward(self, x):
        return self.inner(x, scale=3.0) + 1


def test_module_with_overridden_call():
    model = UsesCustomCall()
    backend = run_differential(model, x6, compiled=framejit.compile(model, backend=(b := CountingBackend()),
                                                                    fullgraph=True), backend=b)
    assert backend.graph_count == 1
