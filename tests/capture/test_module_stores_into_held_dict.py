"""Attribute stores on a module whose instance dict the trace holds, and register_buffer after them.

NOTE [Module stores into a held instance dict] (capture/side_effects.py). transformers' dynamic-NTK RoPE
(`rope_type="dynamic"`) stores `self.attention_scaling`, then calls `self.register_buffer(...)` (which reads
`"_buffers" not in self.__dict__`), then stores `self.max_seq_len_cached`: the read of the instance dict with a
store pending, and the store after it, were two graph breaks. A store nn.Module.__setattr__ files as a plain
`__dict__[name] = value` (a name in none of the module's tables) is made in the held dict too. Differential
over six calls that take both branches; the state the module is left in is compared too.
"""
import torch
import torch.nn as nn

import framejit
from tests.helpers import CountingBackend


class Rope(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(4.0), persistent=False)
        self.original = self.inv_freq
        self.cached = 8
        self.scaling = 1.0

    def forward(self, x):
        n = x.shape[-1]
        if n > self.cached:
            inv, self.scaling = self.original / (n / 8), 0.5
            self.register_buffer("inv_freq", inv, persistent=False)
            self.cached = n
        if n < 8 and self.cached > 8:
            self.register_buffer("inv_freq", self.original, persistent=False)
            self.cached = 8
        return (x[..., None] * self.inv_freq).sin() * self.scaling, len(self.__dict__), "cached" in self.__dict__


def _state(m):
    return (m.cached, m.scaling, m.inv_freq.tolist(), sorted(m._buffers), sorted(m._non_persistent_buffers_set),
            sorted(k for k in vars(m) if not k.startswith("_")))


def test_register_buffer_between_attribute_stores_is_captured():
    framejit.reset()
    eager_before = framejit.stats()["eager_frames"]  # process-wide: other tests' frames count too
    eager, compiled_module = Rope(), Rope()
    backend = CountingBackend()
    compiled = framejit.compile(compiled_module, backend=backend)
    per_call = []
    for i, n in enumerate([6, 6, 12, 14, 6, 7]):
        x = torch.randn(2, n, generator=torch.Generator().manual_seed(i))
        before = backend.graph_count
        (e, e_len, e_in), (g, g_len, g_in) = eager(x), compiled(x)
        per_call.append(backend.graph_count - before)
        assert torch.allclose(e, g) and (e_len, e_in) == (g_len, g_in), n
        assert _state(eager) == _state(compiled_module), n
    assert framejit.stats()["eager_frames"] == eager_before
    # one graph per new specialisation and none for the repeated call (stock torch.compile: [1, 0, 1, 1, 1, 1]);
    # a break at the instance-dict read and another at the store after register_buffer gave [1, 0, 2, 2, 1, 1]
    assert per_call == [1, 0, 1, 1, 1, 1], per_call


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("buf", torch.zeros(3))
        self.count = 0

    def forward(self, x):
        self.count = self.count + 1  # a plain store, pending when the dict is read
        present = "count" in self.__dict__, "buf" in self.__dict__, "lin" in self.__dict__
        self.buf = self.buf + x.sum(0)  # a buffer's name: filed in _buffers, not in the dict
        self.note = x.shape[0]  # a new plain attribute after the dict is held
        return self.lin(x) + self.buf, present, sorted(k for k in self.__dict__ if not k.startswith("_"))


def test_stores_routed_by_module_setattr_next_to_a_held_dict():
    framejit.reset()
    eager_before = framejit.stats()["eager_frames"]  # process-wide: other tests' frames count too
    eager, compiled_module = Holder(), Holder()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = framejit.compile(compiled_module, backend=CountingBackend())
    for n in (2, 2, 4):
        x = torch.randn(n, 3, generator=torch.Generator().manual_seed(n))
        e, g = eager(x), compiled(x)
        assert torch.allclose(e[0], g[0]) and e[1:] == g[1:], (e[1:], g[1:])
        assert (eager.count, eager.note, eager.buf.tolist(), sorted(eager._buffers)) == \
            (compiled_module.count, compiled_module.note, compiled_module.buf.tolist(), sorted(compiled_module._buffers))
    assert framejit.stats()["eager_frames"] == eager_before
