"""Compiled modules pickle (torch.save / torch.load, pickle) as their module does (NOTE [Pickled compiled
modules] in api.py): the loaded object is the compiled form of the loaded module, with the same compile
arguments, and computes what the eagerly pickled module computes."""
from __future__ import annotations

import io
import pickle

import pytest
import torch

import framejit

GRAPHS = []


def counting_backend(gm, example_inputs):
    """A module-level backend (picklable by reference) that records each graph it receives."""
    GRAPHS.append(gm)
    return gm.forward


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.arange(3.0))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.relu(self.lin(x)) + self.shift * self.calls


class Breaks(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        print("break")
        return y + 1


def _roundtrip_torch(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("roundtrip", [_roundtrip_torch, lambda o: pickle.loads(pickle.dumps(o))],
                         ids=["torch_save", "pickle"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_a_compiled_module_pickles_as_its_module(roundtrip, dynamic):
    torch.manual_seed(0)
    eager_mod = Net()
    compiled = framejit.compile(Net(), backend="eager", dynamic=dynamic)
    compiled.load_state_dict(eager_mod.state_dict())
    for n in (2, 5):  # the compiled module has entries before it is pickled
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), eager_mod(x), rtol=0, atol=0)

    eager_loaded = roundtrip(eager_mod)
    loaded = roundtrip(compiled)

    assert isinstance(loaded, Net) and getattr(type(loaded), "_framejit_compiled", False)
    assert type(loaded)._orig_mod is not type(compiled)._orig_mod
    assert loaded.calls == eager_loaded.calls == 2
    assert sorted(loaded.state_dict()) == sorted(eager_loaded.state_dict())
    assert all(p is not q for p, q in zip(loaded.parameters(), compiled.parameters()))
    for n in (3, 3, 6):  # fresh inputs, changing shapes; the module's own counter changes each call
        x = torch.randn(n, 4)
        torch.testing.assert_close(loaded(x), eager_loaded(x), rtol=0, atol=0)
    assert loaded.calls == eager_loaded.calls == 5
    with torch.no_grad():  # the loaded module has its own parameters: the original's are untouched
        loaded.lin.weight.add_(1.0)
    assert not torch.equal(loaded.lin.weight, compiled.lin.weight)


def test_the_compile_arguments_travel_with_the_pickle():
    GRAPHS.clear()
    compiled = framejit.compile(Breaks(), backend=counting_backend, fullgraph=False)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), Breaks()(x))
    before = len(GRAPHS)
    assert before >= 1
    loaded = pickle.loads(pickle.dumps(compiled))
    for n in (3, 4):
        x = torch.randn(n)
        torch.testing.assert_close(loaded(x), Breaks()(x), rtol=0, atol=0)
    assert len(GRAPHS) > before  # the loaded module compiles anew, through the pickled backend

    strict = pickle.loads(pickle.dumps(framejit.compile(Breaks(), backend=counting_backend, fullgraph=True)))
    with pytest.raises(framejit.Unsupported):
        strict(torch.randn(3))


def test_an_unpicklable_module_fails_as_it_does_eagerly():
    mod = Net()
    mod.fn = lambda t: t  # a lambda attribute: pickle cannot find it by name
    with pytest.raises(Exception) as eager_err:
        pickle.dumps(mod)
    with pytest.raises(Exception) as compiled_err:
        pickle.dumps(framejit.compile(mod, backend="eager"))
    assert type(compiled_err.value) is type(eager_err.value)
